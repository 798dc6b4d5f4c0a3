"""SKL-SD's knowledge is not cut (issue 37 item 9), and its data are R3L's (item 4).

R3L caps a turn at 512 tokens on WebShop and 16,384 on ScienceWorld (R3L_workflow.py:40), its reflection at 4,096,
and shows the reflection the whole trajectory. On ScienceWorld a 700-token knowledge turn (over the old 512 cap
every SKL-SD entry had) keeps its closing tag, so it is no format error, which would end the episode (item 10);
C_t shows a 1,000-character state whole; the run scripts default to R3L's splits.
"""

import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from verl.workers.rollout.replica import TokenOutput

from skl_verl.skl import prompts
from skl_verl.skl.knowledge import Transition
from test_skl_sd_golden import SCIWORLD_KWARGS, SCIWORLD_TASK, needs_sciworld, play_recipe_entry

ROOT = Path(__file__).resolve().parents[2]
KNOWLEDGE_TOKENS = 700


class CappedScientist:
    """A server that honours ``max_tokens`` as vLLM does (the reply cut there, no eos): a 700-token
    ``<knowledge>`` reply wherever knowledge is asked, the package's gold path as actions."""

    def __init__(self, tokenizer, gold):
        self.tokenizer, self.gold, self.moves = tokenizer, gold, 0
        words = []
        while len(self.encode(f"<knowledge>{' '.join(words)}</knowledge>")) < KNOWLEDGE_TOKENS:
            words.append(f"fact{len(words) % 50}")
        self.knowledge, self.caps = " ".join(words), []

    def encode(self, text):
        return self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        last_user = self.tokenizer.decode(prompt_ids).rsplit("<|im_start|>user", 1)[-1]
        if "write your understanding of this state" in last_user:
            ids = self.encode(f"<knowledge>{self.knowledge}</knowledge>")
            self.caps.append(sampling_params["max_tokens"])
        else:
            ids = self.encode(f"<action>{self.gold[min(self.moves, len(self.gold) - 1)]}</action>")
            self.moves += 1
        ids = ids[: sampling_params.get("max_tokens", len(ids))]
        return TokenOutput(token_ids=ids, log_probs=[-1.0] * len(ids))


@needs_sciworld
def test_a_700_token_knowledge_turn_keeps_its_closing_tag_on_sciworld(tmp_path, tiny_model_dir, long_window, monkeypatch):
    from envs.sciworld_env import SciWorldEnv

    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    env = SciWorldEnv(**SCIWORLD_KWARGS)
    try:
        gold = env.gold_action_sequence(SCIWORLD_TASK)
    finally:
        env.close()
    # The shipped skl_sd_sciworld entry, R3L's episode budget (16,384 response tokens); the base wins on the gold
    # path, so nothing is bootstrapped.
    data, _, policy = play_recipe_entry(tmp_path, long_window(tiny_model_dir), "skl_sd_sciworld", "sciworld",
                                        SCIWORLD_KWARGS, SCIWORLD_TASK, lambda tok: CappedScientist(tok, gold),
                                        response_length=16384)
    assert len(policy.encode(f"<knowledge>{policy.knowledge}</knowledge>")) >= KNOWLEDGE_TOKENS
    fields = data.non_tensor_batch
    steps = fields["skl_knowledge_steps"][0]
    assert list(fields["skl_phase"]) == ["base"]
    assert policy.caps and all(cap >= KNOWLEDGE_TOKENS for cap in policy.caps)
    # Every knowledge turn read whole: no format error, the episode played to the win (old cap: ended at step 1, 0).
    assert [s.knowledge for s in steps] == [policy.knowledge] * len(gold)
    assert not any(s.knowledge_error for s in steps)
    assert [s.action for s in steps] == gold and float(fields["skl_episode_reward"][0]) == pytest.approx(1.0)


def test_render_rollouts_shows_a_1000_character_state_whole_by_default():
    state, knowledge = " ".join(["room"] * 199) + " end!!", " ".join(["know"] * 99) + " last!"
    assert len(state) == 1000 and len(knowledge) == 500
    rollout = [Transition(episode_id="e", t=0, state_key="s0", observation="start", knowledge=None, action="go",
                          reward=0.0, next_state_key="s1", done=False, epoch=0),
               Transition(episode_id="e", t=1, state_key="s1", observation=state, knowledge=knowledge, action="look",
                          reward=0.0, next_state_key="s2", done=False, epoch=0)]
    text = prompts.render_rollouts([rollout] * 4, horizon=1)
    assert text.count(f"State after 1 step: {state}\n") == 4 and text.count(f"Knowledge held there: {knowledge}") == 4
    # The loop options cut them only when set.
    cut = prompts.render_rollouts([rollout], horizon=1, max_state_chars=400, max_knowledge_chars=300)
    assert state not in cut and f"State after 1 step: {state[:397]}..." in cut and f"{knowledge[:297]}..." in cut


def test_sd_loops_cap_turns_and_reflections_as_r3l():
    loops = {e.name: e for e in OmegaConf.load(ROOT / "skl_verl/skl/agent_loops.yaml")}
    for env, cap in (("webshop", 512), ("sciworld", 16384)):
        for name in (f"skl_sd_{env}", f"skl_stateful_{env}", f"skl_sd_grpo_{env}"):
            assert loops[name].max_tokens_per_turn == cap and "max_knowledge_tokens" not in loops[name], name
            assert "reflect_state_chars" not in loops[name] and "reflect_knowledge_chars" not in loops[name], name
    from skl_verl.options import declared_options
    from skl_verl.skl.sd_loop import SklSdAgentLoop

    options = declared_options(SklSdAgentLoop)
    assert options["reflect_state_chars"].default is None and options["reflect_knowledge_chars"].default is None
    assert options["max_reflection_tokens"].default == 4096


def test_run_scripts_default_to_r3l_splits():
    webshop = (ROOT / "recipes/skl_sd/run_webshop.sh").read_text()
    assert re.search(r"^SPLIT_CONVENTION=\$\{SPLIT_CONVENTION:-r3l\}$", webshop, re.M)
    # both datasets (train, test) carry the split convention: one build_train_val, two env kwargs
    assert webshop.count("$SPLIT,") == 2 and webshop.count("build_train_val ") == 1
    sciworld = (ROOT / "recipes/skl_sd/run_sciworld.sh").read_text()
    assert re.search(r"^TASK_SET=\$\{TASK_SET:-r3l\}$", sciworld, re.M)
    assert '\\"task_set\\": \\"$TASK_SET\\"' in sciworld
