"""The frozen executor on FrozenLake with a scripted model: guidance and memory in its prompt, the
command it names played, and env faults ending the episode as failed."""

import asyncio

from transformers import AutoTokenizer
from verl.workers.rollout.replica import TokenOutput

from envs import ENV_CLASSES, make_env
from skl_verl.knowledge_weaver.executor import (
    FrozenExecutor,
    chosen_command,
    task_description,
)

LAKE = {"maps": [["SFF", "FHF", "FFG"]], "slip": [0.0, 0.0], "max_steps": 10}
TASK = "frozenlake-s3-0000"


class ScriptedModel:
    """Replies with the next of ``replies`` and keeps every prompt it was sent."""

    def __init__(self, tokenizer, replies):
        self.tokenizer, self.replies, self.prompts = tokenizer, list(replies), []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        assert sampling_params["temperature"] == 0.0  # the executor is frozen and greedy
        self.prompts.append(self.tokenizer.decode(prompt_ids))
        ids = self.tokenizer(self.replies.pop(0), add_special_tokens=False)["input_ids"]
        return TokenOutput(token_ids=ids, log_probs=[0.0] * len(ids))


def play(model_dir, replies, env=None, guidance="Go right along the top row, then down.", **options):
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = ScriptedModel(tokenizer, replies)
    executor = FrozenExecutor(model, tokenizer, **options)
    episode = asyncio.run(executor.play(env or make_env("frozenlake", **LAKE), TASK, guidance, seed=0))
    return episode, model


def test_the_executor_follows_its_replies_to_a_win_with_guidance_and_memory_in_the_prompt(tiny_model_dir):
    replies = [f"Thought: as the guidance says.\nAction: {a}" for a in ("right", "RIGHT", "down", "down")]
    episode, model = play(tiny_model_dir, replies, memory_steps=2)
    assert episode.won and episode.status == "won" and [s.action for s in episode.steps] == ["right", "right", "down", "down"]
    assert all("Go right along the top row, then down." in p for p in model.prompts)
    assert "Recent steps" not in model.prompts[0] and "Memory step 2" in model.prompts[3] and "Memory step 3" not in model.prompts[3]
    assert "- down\n- left\n- right\n- up" in model.prompts[0]  # admissible commands, sorted
    assert episode.task_text.startswith("FrozenLake 3x3") and f"Task: {episode.task_text}" in model.prompts[0]


def test_the_task_text_is_the_goal_or_instruction_else_the_first_observation():
    assert task_description({"goal": "put a mug in the sink", "task": object()}, "You are in a room.") == "put a mug in the sink"
    assert task_description({"instruction_text": "buy a red mug"}, "WebShop page") == "buy a red mug"
    assert task_description({"task": object()}, "FrozenLake 3x3") == "FrozenLake 3x3"


def test_replies_without_a_valid_action_are_played_and_marked():
    assert chosen_command("Thought: hmm\nAction:  Right ", ["left", "right"]) == ("right", False)
    assert chosen_command("Action: fly", ["left", "right"]) == ("fly", True)
    assert chosen_command("I would go\nnorth", ["left", "look"]) == ("look", True)
    assert chosen_command("I would go\nnorth", ["left"]) == ("north", True)


def test_step_cap_and_env_failure_end_the_episode(tiny_model_dir, monkeypatch):
    episode, _ = play(tiny_model_dir, ["Action: left"] * 3, max_steps=3)
    assert episode.status == "max_steps" and len(episode.steps) == 3 and not episode.won

    monkeypatch.setitem(ENV_CLASSES, "faulty_frozenlake", "rollout.fault_envs:FaultyFrozenLake")  # tests/rollout/fault_envs.py
    env = make_env("faulty_frozenlake", fault_call="step", fault_kind="raise", fault_at=2, **LAKE)
    episode, _ = play(tiny_model_dir, ["Action: right"] * 3, env=env)
    assert episode.status.startswith("failed: env.step('right') raised RuntimeError") and len(episode.steps) == 1
