"""Fault injection through verl's AgentLoopWorker: one batch holds an env fault of every kind in every
call position (plain, stateful and SKL-RL loops); each faulty sample is flagged with reward 0 and says
which call failed and why, and every other sample is identical to the same batch played fault-free."""

import re

from omegaconf import OmegaConf
from verl.workers.rollout.replica import TokenOutput

from envs import ENV_CLASSES
from skl_verl.rollout.data import env_rows, write_parquet
from skl_verl.trainer.inprocess_rollout import AgentRollout, compose_config
from loop_helpers import packaged_loops

LAKE = {"maps": [["SFF", "FHF", "FFG"]], "slip": [0.0, 0.0], "max_steps": 10}
KINDS = ("raise", "hang", "bad_result", "system_exit", "process_exit")
REASONS = {
    "raise": "raised RuntimeError: injected fault in",
    "hang": "timed out after 2 s",
    "bad_result": "returned an invalid result",
    "system_exit": "raised SystemExit: 3",
    "process_exit": "lost its worker process (exit code 7)",
}
# (agent loop, faulty call, the call the failure names). SKL-RL's self-simulation restores snapshots through
# guarded calls of its own, so a snapshot fault names the env call itself. A loop asks for what a prompt
# shows of the actions in one call, ``prompt_actions`` (it calls ``admissible_actions`` in the worker).
POSITIONS = [
    ("skl_env", "reset", "env.reset("),
    ("skl_env", "step", "env.step("),
    ("skl_env", "admissible_actions", "env.prompt_actions("),
    ("skl_stateful", "state_key", "env.state_key("),
    ("skl_rl", "get_state", "env.get_state("),
    ("skl_rl", "set_state", "env.set_state("),
]
HEALTHY = [("skl_env", "h1"), ("skl_stateful", "h2"), ("skl_rl", "h3")]


class PositionPolicy:
    """A scripted policy whose reply depends only on its prompt: knowledge when asked for it, else
    the move towards the goal from the position the last observation states."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        prompt = self.tokenizer.decode(prompt_ids)
        last_user = prompt.rsplit("<|im_start|>user", 1)[-1]
        if "<knowledge>...</knowledge>" in last_user:
            text = "<knowledge>the goal is down and to the right</knowledge>"
        elif "<move>...</move>" in last_user:  # SKL-RL's simulation: propose both, or pick a branch's next move
            text = "<move>right</move><move>down</move>"
        else:
            # The real position is in the last user turn that is not about a simulation branch.
            real = [turn for turn in prompt.split("<|im_start|>user") if "Branch" not in turn and "<move>" not in turn]
            row, column = map(int, re.findall(r"You are at row (\d+), column (\d+)", "".join(real))[-1])
            text = "<action>right</action>" if column < 2 else "<action>down</action>"
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), extra_fields={"global_steps": 0})


def rows(faulty: bool, once_dir):
    out = []
    for loop, call, _ in POSITIONS:
        for kind in KINDS:
            if call == "set_state" and kind == "bad_result":
                continue  # set_state returns nothing to check
            fault = {"fault_call": call, "fault_kind": kind if faulty else "none",
                     "fault_at": 1 if call == "reset" else 2, "hang_s": 30.0,
                     "once_file": str(once_dir / f"{loop}-{call}-{kind}")}
            out += env_rows("faulty_frozenlake", {**LAKE, **fault}, agent_name=loop)
    for loop, tag in HEALTHY:
        out += env_rows("faulty_frozenlake", {**LAKE, "fault_kind": "none", "once_file": tag}, agent_name=loop)
    return out


def play(tmp_path, model_dir, faulty):
    from transformers import AutoTokenizer

    loops = OmegaConf.to_container(packaged_loops())
    for entry in loops:
        if entry["name"] in ("skl_env", "skl_stateful", "skl_rl"):
            entry["env_step_timeout_s"] = 2.0
        if entry["name"] == "skl_rl":  # branches act without an understanding turn: PositionPolicy only moves
            entry["branch_understanding"] = False
    OmegaConf.save(OmegaConf.create(loops), tmp_path / "loops.yaml")
    data = write_parquet(rows(faulty, tmp_path), tmp_path / "rows.parquet")
    config = compose_config([
        f"actor_rollout_ref.model.path={model_dir}", f"data.train_files={data}", f"data.val_files={data}",
        "data.max_prompt_length=1024", "data.max_response_length=8192",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={tmp_path / 'loops.yaml'}",
    ])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rollout = AgentRollout(config, PositionPolicy(tokenizer), tokenizer, data)
    batch = next(rollout.batches(len(rollout.dataset), shuffle=False))
    return rollout.rollout(batch, step=1, n=1)


def by_row(out):
    """Per dataset row: its samples' (tokens, score, fields) in order."""
    samples = {}
    fields = ("skl_failed", "skl_won", "skl_turns", "skl_phase", "skl_truncated")
    for i, uid in enumerate(out.non_tensor_batch["uid"]):
        index = uid.rsplit("-", 1)[1]  # AgentRollout's uids: step<k>-<row>
        tokens = out.batch["input_ids"][i][out.batch["attention_mask"][i].bool()].tolist()
        record = (tokens, float(out.batch["rm_scores"][i].sum()), {f: out.non_tensor_batch[f][i] for f in fields})
        samples.setdefault(int(index), []).append(record)
    return samples


def test_every_env_fault_flags_only_its_own_sample(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setitem(ENV_CLASSES, "faulty_frozenlake", "fault_envs:FaultyFrozenLake")
    (tmp_path / "clean").mkdir()
    (tmp_path / "faulty").mkdir()
    clean = by_row(play(tmp_path / "clean", tiny_model_dir, faulty=False))
    faulty = by_row(play(tmp_path / "faulty", tiny_model_dir, faulty=True))
    cases = [(loop, call, named, kind) for loop, call, named in POSITIONS for kind in KINDS
             if not (call == "set_state" and kind == "bad_result")]
    assert len(faulty) == len(clean) == len(cases) + len(HEALTHY)
    assert all(s[2]["skl_failed"] == "" and s[2]["skl_won"] for samples in clean.values() for s in samples)
    for index, (loop, call, named, kind) in enumerate(cases):
        episode = faulty[index][0]  # the episode sample (SKL-RL adds none here: no distillation)
        failure = episode[2]["skl_failed"]
        assert failure.startswith(named) and episode[1] == 0.0, (loop, call, kind, failure)
        assert REASONS[kind] in failure, (loop, call, kind, failure)
        if kind == "raise":  # the env's own error names the faulty method, whichever call reached it
            assert f"injected fault in {call}" in failure, (loop, call, failure)
    for index in range(len(cases), len(cases) + len(HEALTHY)):
        assert faulty[index] == clean[index]
