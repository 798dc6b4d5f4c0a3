"""Step mode on the real engines: a 50-step ALFWorld episode (locally generated games) and a
ScienceWorld episode past 10 steps (its JVM), each step a sample with a 1,024-token action budget
and a prompt inside the recipe's prompt budget."""

import shutil

import pytest

from skl_verl.rollout.data import env_rows
from skl_verl.rollout import sample_fields as sf
from alfworld_games import load_generator
from loop_helpers import loop_options_override, rollout

BUDGET = ["data.max_prompt_length=4096", "data.max_response_length=1024"]


def prompt_lengths(out):
    width = out.batch["prompts"].shape[1]
    return out.batch["attention_mask"][:, :width].sum(dim=1).tolist()


@pytest.fixture(scope="module")
def alfworld_data(tmp_path_factory):
    pytest.importorskip("alfworld")
    out = tmp_path_factory.mktemp("alfworld_data")
    load_generator().make_games(out)
    return out


def test_alfworld_50_step_episode_in_step_mode(tmp_path, tiny_model_dir, alfworld_data):
    rows = env_rows("alfworld", {"data_dir": str(alfworld_data), "split": "train", "max_steps": 50})
    # step_history 15 as released; 50 policy turns (the recipe's are 10) to reach the env's 50-step cap
    loop = [loop_options_override(tmp_path, "step_alfworld", max_turns=50),
            "actor_rollout_ref.rollout.agent.default_agent_loop=step_alfworld"]
    replies = ["<action>look</action>"] * 60
    out, tok = rollout(tmp_path, tiny_model_dir, replies, env_name="alfworld", rows=rows, overrides=[*loop, *BUDGET])
    fields = out.non_tensor_batch
    assert len(out) == 50 and list(fields[sf.STEP_INDEX]) == list(range(50))  # the env's 50-step cap ended it
    assert set(fields["skl_turns"]) == {50} and not any(fields["skl_won"])
    assert max(prompt_lengths(out)) <= 4096
    last_prompt = tok.decode(out.batch["prompts"][-1], skip_special_tokens=True)
    assert "Your last 15 of 49 steps" in last_prompt and "49. look -> " in last_prompt and "Current observation (step 50)" in last_prompt


def test_sciworld_episode_gets_past_10_steps(tmp_path, tiny_model_dir):
    pytest.importorskip("scienceworld")
    if shutil.which("java") is None:
        pytest.skip("no java: the ScienceWorld JVM cannot start here")
    kwargs = {"task_names": ["find-living-thing"], "split": "train", "max_variations_per_task": 1, "max_steps": 12}
    rows = env_rows("sciworld", kwargs)
    loop = [loop_options_override(tmp_path, "step_alfworld", step_history=2, max_turns=30),
            "actor_rollout_ref.rollout.agent.default_agent_loop=step_alfworld"]
    out, tok = rollout(tmp_path, tiny_model_dir, ["<action>look around</action>"] * 20, env_name="sciworld", rows=rows,
                       overrides=[*loop, "data.max_prompt_length=10240", "data.max_response_length=1024"])
    assert len(out) == 12 and set(out.non_tensor_batch["skl_turns"]) == {12}
    assert max(prompt_lengths(out)) <= 10240
    assert "Your last 2 of 11 steps" in tok.decode(out.batch["prompts"][-1], skip_special_tokens=True)
