"""R3L's episode rules on SKL-SD's loops (issue 37 item 10), through verl's agent-loop worker and the shipped
entries: a format error ends the episode (WebShop -0.1, ScienceWorld 0), WebShop ends after 2 identical actions
(next/prev/search exempt) at -0.1, ScienceWorld after 3 at 0, and ScienceWorld's return is the highest score
seen / 100. The WebShop stand-in (tests/webshop_standin.py) and the real ScienceWorld JVM."""

import pytest
from verl.workers.rollout.replica import TokenOutput

from test_skl_sd_golden import (SCIWORLD_KWARGS, SCIWORLD_TASK, needs_sciworld, play_recipe_entry,  # noqa: F401
                                webshop_url)

WEBSHOP_KWARGS = {"split": "train", "split_convention": "verl_agent", "max_steps": 15}


class ScriptedReplies:
    """Knowledge where asked (stateful loops); the ``actions`` in order as action replies, an item starting
    "UNTAGGED " sent as is, without the tag."""

    def __init__(self, tokenizer, actions):
        self.tokenizer, self.actions, self.sent = tokenizer, list(actions), 0

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        last_user = self.tokenizer.decode(prompt_ids).rsplit("<|im_start|>user", 1)[-1]
        if "write your understanding of this state" not in last_user:  # an action request (every turn of a plain loop)
            action = self.actions[min(self.sent, len(self.actions) - 1)]
            self.sent += 1
            text = action if action.startswith("UNTAGGED ") else f"<action>{action}</action>"
        else:
            text = "<knowledge>the goal decides the next step</knowledge>"
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return TokenOutput(token_ids=ids, log_probs=[-1.0] * len(ids))


def play(tmp_path, model_dir, entry, env, kwargs, task, actions, response_length=6144, **entry_options):
    tmp_path.mkdir(parents=True, exist_ok=True)
    data, _, policy = play_recipe_entry(tmp_path, model_dir, entry, env, kwargs, task,
                                        lambda tok: ScriptedReplies(tok, actions), response_length=response_length,
                                        entry_options=entry_options, estimator="grpo")
    fields = data.non_tensor_batch
    return int(fields["skl_turns"][0]), float(fields["skl_episode_reward"][0]), float(data.batch["rm_scores"][0].sum())


@pytest.mark.parametrize("entry", ["skl_stateful_webshop", "skl_sd_grpo_webshop"])
def test_webshop_untagged_action_ends_the_episode_at_minus_0_1(tmp_path, tiny_model_dir, webshop_url, entry, monkeypatch):
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    actions = ["search[coffee table]", "click[b000000cc1]", "UNTAGGED buy it", "click[buy now]"]
    turns, ret, score = play(tmp_path, tiny_model_dir, entry, "webshop", {"server_url": webshop_url, **WEBSHOP_KWARGS},
                             "webshop-500", actions)
    assert (turns, ret, score) == (3, pytest.approx(-0.1), pytest.approx(-0.1))


def test_webshop_two_identical_clicks_end_at_minus_0_1_but_two_searches_do_not(tmp_path, tiny_model_dir, webshop_url, monkeypatch):
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    kwargs = {"server_url": webshop_url, **WEBSHOP_KWARGS}
    clicks = ["search[coffee table]", "click[b000000cc1]", "click[b000000cc1]", "click[buy now]"]
    assert play(tmp_path / "a", tiny_model_dir, "skl_stateful_webshop", "webshop", kwargs, "webshop-500", clicks) == (
        3, pytest.approx(-0.1), pytest.approx(-0.1))
    searches = ["search[coffee table]", "search[coffee table]", "click[b000000cc1]", "click[buy now]"]
    assert play(tmp_path / "b", tiny_model_dir, "skl_stateful_webshop", "webshop", kwargs, "webshop-500", searches) == (
        4, pytest.approx(1.0), pytest.approx(1.0))


@needs_sciworld
def test_sciworld_rules(tmp_path, tiny_model_dir, long_window, monkeypatch):
    """find-living-thing scores 8 at reset. Three "look around" end at the third at 0 (not 0.08); an untagged
    reply at the second step ends it at 0; the package's gold path returns the best score 100 / 100 = 1.0
    (the progress gained, the old return, was 0.92), and under R3L's own computation its largest step gain."""
    from envs.sciworld_env import SciWorldEnv

    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    model = long_window(tiny_model_dir)
    run = lambda name, actions: play(tmp_path / name, model, "skl_stateful_sciworld", "sciworld", SCIWORLD_KWARGS,  # noqa: E731
                                     SCIWORLD_TASK, actions, response_length=32768)
    assert run("repeat", ["look around"] * 5) == (3, 0.0, 0.0)
    assert run("untagged", ["look around", "UNTAGGED look around", "look around"]) == (2, 0.0, 0.0)
    env = SciWorldEnv(**SCIWORLD_KWARGS)
    try:
        gold = env.gold_action_sequence(SCIWORLD_TASK)
        env.reset(SCIWORLD_TASK)
        scores = [env.step(action).info["score"] for action in gold]
    finally:
        env.close()
    turns, ret, score = run("gold", gold)
    assert (turns, ret, score) == (len(gold), pytest.approx(1.0), pytest.approx(1.0))
    # R3L's own computation (episode_return: max_step_gain): the largest step gain, the first counted from 0, so
    # the reset's 8 points are the first step's; the finished task returns that gain, well below 1
    gains = [after - before for before, after in zip([0] + scores, scores)]
    assert scores[-1] == 100 and 0 < max(gains) < 100
    gained = play(tmp_path / "gold_gain", model, "skl_stateful_sciworld", "sciworld", SCIWORLD_KWARGS, SCIWORLD_TASK,
                  gold, response_length=32768, episode_return="max_step_gain")
    assert gained[:2] == (len(gold), pytest.approx(max(gains) / 100))
