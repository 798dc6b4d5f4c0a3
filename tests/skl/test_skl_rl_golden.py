"""Golden episodes for SKL-RL on chess (issue 22 items 1, 2, 6, 7, 8): a scripted policy plays puzzles
through verl's agent-loop worker (``skl_verl.trainer.inprocess_rollout``) and the registered ``skl_rl``
estimator; every expected value below is derived by hand from the positions.

backrank (6k1/5ppp/8/8/8/8/8/R3R1K1 w, opponent first_legal): Ra8 mates; Black answers Kf1 with Kh8.
  Move 1: proposal [Ra8, Kf1]. Branch 1: Ra8 mates at step 1 (no deeper node). Branch 2: Kf1 Kh8, then
          a branch node (understanding, then the move Ra8, mate): 3 simulated steps, 1 branch node.
          The real move is Kf1 (the game goes on), Black replies Kh8.
  Move 2: proposal [Ra8, Kf1]; Kf1 is no longer legal (the king stands on f1): one candidate, Ra8 mates
          at step 1: 1 simulated step, no branch node. The real move Ra8 mates: reward +1.
"""

import pytest
from verl.workers.rollout.replica import TokenOutput

from loop_helpers import advantage_step
from skl_verl.rollout.data import env_rows

ROWS = "PuzzleId,Rating,FEN,Solution\nbackrank,600,6k1/5ppp/8/8/8/8/8/R3R1K1 w - - 0 1,a1a8\n"
OPENING = "PuzzleId,Rating,FEN,Solution\nopening,900,rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1,e7e5\n"


def request_kind(last_user: str) -> str:
    """What a user turn asks the policy for, in either prompt set (``ours``, or the chess entries' ``chess_authors``):
    proposal, node_move, node_understanding, refine (ẑ), action, or z."""
    if "candidate actions in a simulator" in last_user or "You are now in a simulation" in last_user:
        return "proposal"
    if "this branch's next move" in last_user or "next move of this simulation line" in last_user:
        return "node_move"
    if "Simulation branch" in last_user or "Simulation line" in last_user:
        return "node_understanding"
    if "Simulated continuations" in last_user or "updated understanding" in last_user:
        return "refine"
    if "Based on your understanding" in last_user or "<answer>SAN</answer>" in last_user:
        return "action"
    return "z"


def listed_moves(prompt: str) -> list[str]:
    lists = [line.split(": ", 1)[1] for line in prompt.splitlines() if line.startswith("Legal moves (SAN")]
    return [m for m in lists[-1].split(", ") if m != "..."]


class GoldenChessPolicy:
    """Replies by the request it reads: z, proposals, branch understanding and move, ẑ, the real move.
    ``actions``/``proposal``/``branch_move`` None: the first listed move(s); ``padding`` lengthens z and ẑ.
    A 10-move game at the authors' caps, windowed, is tests/skl/test_skl_rl_windows.py."""

    def __init__(self, tokenizer, actions=None, proposal=None, branch_move=None, padding=""):
        self.tokenizer, self.actions, self.proposal, self.branch_move = tokenizer, list(actions or []), proposal, branch_move
        self.padding, self.moves, self.users = padding, 0, []

    def node_understanding(self) -> str:
        return "<knowledge>branch view</knowledge>"

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        prompt = self.tokenizer.decode(prompt_ids)
        last_user = prompt.rsplit("<|im_start|>user", 1)[-1]
        self.users.append(last_user)
        kind = request_kind(last_user)
        if kind == "proposal":
            self.proposed = self.proposal or listed_moves(prompt)[:3]  # the real state's list: the last one shown
            text = "".join(f"<move>{m}</move>" for m in self.proposed)
        elif kind == "node_understanding":
            text = self.node_understanding()
        elif kind == "node_move":
            text = f"<move>{self.branch_move or listed_moves(prompt)[0]}</move>"
        elif kind == "refine":
            text = f"<knowledge>refined {self.padding}</knowledge>"
        elif kind == "action":
            # By now the last list shown is a branch's: the real move is the first candidate proposed.
            text = f"<action>{self.actions[self.moves] if self.actions else self.proposed[0]}</action>"
            self.moves += 1
        else:
            text = f"<knowledge>z {self.padding}</knowledge>"
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        scored = {"prompt_logprobs": [[-1.0]] * len(prompt_ids)} if "prompt_logprobs" in sampling_params else {}
        return TokenOutput(token_ids=ids, log_probs=[-1.0] * len(ids), extra_fields={"global_steps": 0, **scored})


def chess_rollout(tmp_path, model_dir, csv_text, env_kwargs, loop, loop_options, overrides, policy_class=None,
                  validate=False, **policy):
    """One rollout (n=1, training step 1) of the agent loop ``loop`` on the puzzles in ``csv_text`` (``validate``: as
    verl's validation plays it, with the rollout's ``val_kwargs``)."""
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer

    from loop_helpers import packaged_loops
    from skl_verl.rollout.data import write_parquet
    from skl_verl.trainer.inprocess_rollout import AgentRollout, compose_config

    tmp_path.mkdir(parents=True, exist_ok=True)
    loops = packaged_loops()
    for entry in loops:
        if entry.name == loop:
            entry.update(loop_options)
    OmegaConf.save(loops, tmp_path / "loops.yaml")
    csv = tmp_path / "puzzles.csv"
    csv.write_text(csv_text)
    train = write_parquet(env_rows("chess_puzzles", {"csv_path": str(csv), "mode": "game", **env_kwargs}), tmp_path / "t.parquet")
    config = compose_config([
        f"actor_rollout_ref.model.path={model_dir}", f"data.train_files={train}", f"data.val_files={train}",
        f"actor_rollout_ref.rollout.agent.default_agent_loop={loop}", "algorithm.adv_estimator=skl_rl",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={tmp_path / 'loops.yaml'}", *overrides,
    ])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    client = (policy_class or GoldenChessPolicy)(tokenizer, **policy)
    rollout = AgentRollout(config, client, tokenizer, train)
    batch = next(rollout.batches(len(rollout.dataset), shuffle=False))
    return rollout.rollout(batch, step=1, n=1, validate=validate), config, tokenizer, client


def unpadded(data, i):
    """(prompt ids, response ids, response mask) of row ``i`` without verl's padding."""
    attention = data.batch["attention_mask"][i].bool()
    width = data.batch["prompts"].shape[1]
    prompt = data.batch["prompts"][i][attention[:width]].tolist()
    live = attention[width:]
    return prompt, data.batch["responses"][i][live].tolist(), data.batch["response_mask"][i][live].tolist()


def test_backrank_win_with_branch_understanding_and_forward_distillation_on_the_sampled_context(tmp_path, tiny_model_dir):
    data, config, tok, policy = chess_rollout(
        tmp_path, tiny_model_dir, ROWS, {"opponent": "first_legal"}, "skl_rl",
        {"simulations": 2, "horizon": 2, "distill_interval": 1},
        ["data.max_prompt_length=1024", "data.max_response_length=16384", "+algorithm.skl_rl.distill_coef=0.25"],
        actions=["Kf1", "Ra8"], proposal=["Ra8", "Kf1"], branch_move="Ra8")
    fields = data.non_tensor_batch
    phases = list(fields["skl_phase"])
    assert phases == ["act", "distill", "distill"]
    steps = fields["skl_knowledge_steps"][0]
    # Rewards (item 2's win): Kf1 goes on at 0, Ra8 mates at +1.
    assert [(s.action, s.reward, s.done) for s in steps] == [("Kf1", 0.0, False), ("Ra8", 1.0, True)]
    assert data.batch["rm_scores"][0].sum().item() == pytest.approx(1.0)
    # Item 8: understanding at every branch node past the root (hand count: 1 at move 1, none at move 2).
    assert [s.root_candidates for s in steps] == [["Ra8", "Kf1"], ["Ra8"]]
    assert [s.simulated_steps for s in steps] == [3, 1] and [s.simulated_wins for s in steps] == [2, 1]
    assert list(fields["skl_branch_understandings"][0]) == [["branch view"], []]
    branch_requests = [u for u in policy.users if "Simulation branch" in u]
    assert len(branch_requests) == 1 and "it began with Kf1" in branch_requests[0] and "<knowledge>" in branch_requests[0]
    # Item 1: every list shown holds at most 30 moves and no check or mate mark.
    for text in policy.users:
        for line in text.splitlines():
            if line.startswith("Legal moves"):
                shown = line.split("): ", 1)[1].split(", ")
                assert "+" not in line and "#" not in line and len(shown) <= 31, line
    # Item 7: each distillation sample trains ẑ on exactly the context z was sampled in, prompt + history,
    # even where that context is longer than rollout.prompt_length (1,024 here).
    trace_prompt, trace_response, _ = unpadded(data, 0)
    stream = trace_prompt + trace_response
    assert steps[1].context_tokens > 1024, "the second move's context must exceed prompt_length for this check"
    for row, step in zip((1, 2), steps):
        prompt, response, mask = unpadded(data, row)
        history = len(response) - sum(mask)
        assert mask == [0] * history + [1] * sum(mask)
        assert prompt + response[:history] == stream[: step.context_tokens]
        assert tok.decode(response[history:], skip_special_tokens=True) == "<knowledge>refined</knowledge>"
    advantage_step(data, config)
    adv, mask = data.batch["advantages"], data.batch["response_mask"].bool()
    for row in (1, 2):
        assert adv[row][mask[row]].eq(0.25).all() and adv[row][~mask[row]].eq(0).all()


def test_invalid_move_ends_the_game_at_minus_1_01(tmp_path, tiny_model_dir):
    """Item 2: an illegal move sent to the env loses at once, -1 - 0.01."""
    data, *_ = chess_rollout(tmp_path, tiny_model_dir, ROWS, {"opponent": "first_legal"}, "skl_rl",
                             {"simulations": 1, "horizon": 1}, ["data.max_prompt_length=2048", "data.max_response_length=16384"],
                             actions=["Qh9"], proposal=["Kf1"])
    steps = data.non_tensor_batch["skl_knowledge_steps"][0]
    # The env refused the move (no transition recorded) and ended the game; the episode scores -1.01.
    assert len(steps) == 1 and steps[0].done and steps[0].action is None
    assert data.batch["rm_scores"][0].sum().item() == pytest.approx(-1.01)

