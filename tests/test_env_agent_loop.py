"""The env agent loop inside verl's real AgentLoopWorker, with a scripted policy forcing each case."""

import asyncio
import json

import numpy as np
import pytest
import torch
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
from verl.workers.rollout.replica import TokenOutput

from envs import ENV_CLASSES
from envs.frozenlake import FrozenLakeEnv
from skl_verl import sample_fields as sf
from skl_verl.cpu_trainer import compose_config
from skl_verl.data import env_rows, write_parquet

# Row 0: S then ice to the right; the goal is two steps down-right. No slip: outcomes are scripted.
OPEN_MAP = ["SFF", "FHF", "FFG"]
ENV_KWARGS = {"maps": [OPEN_MAP], "slip": [0.0, 0.0], "max_steps": 10}


class ScriptedClient:
    """Stand-in for the rollout server that replies with fixed texts (a scripted policy)."""

    def __init__(self, tokenizer, replies):
        self.tokenizer, self.replies, self.calls = tokenizer, list(replies), 0

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        text = self.replies[min(self.calls, len(self.replies) - 1)]
        self.calls += 1
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


def rollout(tmp_path, model_dir, replies, env_kwargs=ENV_KWARGS, overrides=(), env_name="frozenlake"):
    train = write_parquet(env_rows(env_name, env_kwargs), tmp_path / "train.parquet")
    config = compose_config(
        [f"actor_rollout_ref.model.path={model_dir}", f"data.train_files={train}", f"data.val_files={train}",
         "data.max_prompt_length=1024", "data.max_response_length=1024", *overrides]
    )
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    client = ScriptedClient(tokenizer, replies)
    worker = AgentLoopWorker(config, llm_client=client)
    dataset = RLHFDataset(data_files=train, tokenizer=tokenizer, config=config.data, processor=None)
    batch = DataProto.from_single_dict(collate_fn([dataset[0]]))
    batch.non_tensor_batch["uid"] = np.array(["u0"], dtype=object)
    return asyncio.run(worker.generate_sequences(batch)), tokenizer


def score(out):
    return out.batch["rm_scores"].sum(-1).item()


def test_scripted_win_gets_reward_and_masks_only_policy_tokens(tmp_path, tiny_model_dir):
    replies = ["<action>right</action>", "<action>right</action>", "<action>down</action>", "<action>down</action>"]
    out, tok = rollout(tmp_path, tiny_model_dir, replies)
    assert score(out) == pytest.approx(1.0)
    assert out.non_tensor_batch["skl_won"][0] is True or out.non_tensor_batch["skl_won"][0] == True  # noqa: E712
    assert out.non_tensor_batch["skl_turns"][0] == 4
    response, mask = out.batch["responses"][0], out.batch["response_mask"][0]
    policy_text = tok.decode(response[mask.bool()], skip_special_tokens=True)
    assert policy_text == "".join(replies)
    env_text = tok.decode(response[(mask == 0) & (out.batch["attention_mask"][0, -response.shape[0]:] == 1)])
    assert "row 0, column 1" in env_text and "<action>" not in env_text
    assert out.non_tensor_batch[sf.PHASE][0] == "act" and out.non_tensor_batch[sf.POSITION][0] == 0
    assert out.non_tensor_batch[sf.TRAJECTORY_ID][0] == "u0_0"


def test_bad_format_is_penalised_and_play_continues(tmp_path, tiny_model_dir):
    replies = ["I go right", "<action>teleport</action>", "<action>down</action>", "<action>down</action>",
               "<action>right</action>", "<action>right</action>"]
    out, _ = rollout(tmp_path, tiny_model_dir, replies)
    assert out.non_tensor_batch["skl_invalid_format_turns"][0] == 1
    assert out.non_tensor_batch["skl_invalid_action_turns"][0] == 1
    assert out.non_tensor_batch["skl_won"][0]
    assert score(out) == pytest.approx(1.0 - 0.1)


def test_falling_in_a_hole_scores_zero(tmp_path, tiny_model_dir):
    out, _ = rollout(tmp_path, tiny_model_dir, ["<action>down</action>", "<action>right</action>"])
    assert score(out) == 0.0 and not out.non_tensor_batch["skl_won"][0]
    assert out.non_tensor_batch["skl_turns"][0] == 2


def test_turn_limit_truncates(tmp_path, tiny_model_dir):
    out, _ = rollout(tmp_path, tiny_model_dir, ["no tags at all"], overrides=["data.max_response_length=8192"])
    assert out.non_tensor_batch["skl_truncated"][0]
    assert out.non_tensor_batch["skl_turns"][0] == 20
    assert score(out) == pytest.approx(-0.1 * 20)


class CrashingFrozenLake(FrozenLakeEnv):
    name = "crashing_frozenlake"

    def step(self, action):
        raise RuntimeError("simulator died")


def test_response_budget_truncates_before_turn_limit(tmp_path, tiny_model_dir):
    out, _ = rollout(tmp_path, tiny_model_dir, ["no tags at all"], overrides=["data.max_response_length=256"])
    assert out.non_tensor_batch["skl_truncated"][0]
    assert out.non_tensor_batch["skl_turns"][0] < 20
    assert int(out.batch["attention_mask"][0, -256:].sum()) <= 256


def test_crashing_env_yields_flagged_failed_sample_not_an_exception(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setitem(ENV_CLASSES, "crashing_frozenlake", f"{__name__}:CrashingFrozenLake")
    out, _ = rollout(tmp_path, tiny_model_dir, ["<action>down</action>"], env_name="crashing_frozenlake")
    assert "simulator died" in out.non_tensor_batch["skl_failed"][0]
    assert score(out) == 0.0


def test_missing_env_spec_is_a_clear_error(tmp_path, tiny_model_dir):
    from skl_verl.agent_loops.env_loop import parse_env_spec

    with pytest.raises(ValueError, match="env_spec"):
        parse_env_spec({"index": 0})
    assert parse_env_spec({"env_spec": json.dumps({"name": "x", "kwargs": {"a": 1}}), "task_id": 3}) == ("x", {"a": 1}, "3")
    with pytest.raises(ValueError, match="unknown task ids"):
        env_rows("frozenlake", ENV_KWARGS, task_ids=["nope"])
