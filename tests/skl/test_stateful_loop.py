"""Two-stage stateful turns (knowledge, then action) inside verl's AgentLoopWorker."""

import json

import pytest

from envs import make_env
from skl_verl.rollout.data import env_rows
from loop_helpers import ENV_KWARGS, rollout

WIN = ["right", "right", "down", "down"]
LONG = ["data.max_response_length=4096"]  # the tiny tokenizer spends many tokens per turn


def stateful_rows(prefilled=None):
    rows = env_rows("frozenlake", ENV_KWARGS, agent_name="skl_stateful")
    if prefilled is not None:
        rows[0]["extra_info"]["prefilled_knowledge"] = json.dumps(prefilled)
    return rows


def interleave(knowledge, actions):
    replies = []
    for z, a in zip(knowledge, actions):
        if z is not None:
            replies.append(z)
        replies.append(f"<action>{a}</action>")
    return replies


def test_knowledge_then_action_every_step(tmp_path, tiny_model_dir):
    knowledge = [f"<knowledge>state {i}: the goal is down-right</knowledge>" for i in range(4)]
    out, tok = rollout(tmp_path, tiny_model_dir, interleave(knowledge, WIN), rows=stateful_rows(), overrides=LONG)
    assert out.batch["rm_scores"].sum().item() == pytest.approx(1.0)
    steps = out.non_tensor_batch["skl_knowledge_steps"][0]
    env = make_env("frozenlake", **ENV_KWARGS)
    env.reset(env.tasks()[0].task_id)
    assert [s.state_key for s in steps][0] == env.state_key()
    assert [s.knowledge for s in steps] == [f"state {i}: the goal is down-right" for i in range(4)]
    assert len({s.state_key for s in steps}) == 4 and not any(s.prefilled for s in steps)
    # Each step is a full transition for the replay buffer.
    assert [s.action for s in steps] == WIN
    assert [s.next_state_key for s in steps[:-1]] == [s.state_key for s in steps[1:]]
    assert [s.reward for s in steps] == [0.0, 0.0, 0.0, 1.0] and steps[-1].done
    mask = out.batch["response_mask"][0].bool()
    trained = tok.decode(out.batch["responses"][0][mask], skip_special_tokens=True)
    assert trained == "".join(interleave(knowledge, WIN))
    assert "Based on your understanding" not in trained


def test_missing_knowledge_tag_is_a_penalised_format_error(tmp_path, tiny_model_dir):
    knowledge = ["I have no idea"] + [f"<knowledge>k{i}</knowledge>" for i in range(3)]
    out, _ = rollout(tmp_path, tiny_model_dir, interleave(knowledge, WIN), rows=stateful_rows(), overrides=LONG)
    steps = out.non_tensor_batch["skl_knowledge_steps"][0]
    assert "no <knowledge>" in steps[0].knowledge_error and steps[1].knowledge_error == ""
    assert out.non_tensor_batch["skl_invalid_format_turns"][0] == 1
    assert out.batch["rm_scores"].sum().item() == pytest.approx(1.0 - 0.1)


def test_prefilled_knowledge_is_the_policys_own_trained_turn(tmp_path, tiny_model_dir):
    """SKL-SD's retry: ẑ stands where the policy writes its knowledge, as its own turn (response_mask 1),
    so a kept retry trains π to produce ẑ at that state, in the format used at test time."""
    env = make_env("frozenlake", **ENV_KWARGS)
    env.reset(env.tasks()[0].task_id)
    start_key = env.state_key()
    refined = "Moving right twice then down twice is safe; down first is the hole."
    knowledge = [None] + [f"<knowledge>k{i}</knowledge>" for i in range(1, 4)]
    out, tok = rollout(tmp_path, tiny_model_dir, interleave(knowledge, WIN), rows=stateful_rows({start_key: refined}), overrides=LONG)
    steps = out.non_tensor_batch["skl_knowledge_steps"][0]
    first = steps[0]
    assert (first.state_key, first.prefilled, first.knowledge_error, first.knowledge) == (start_key, True, "", refined)
    assert not any(s.prefilled for s in steps[1:])
    response, mask = out.batch["responses"][0], out.batch["response_mask"][0]
    assert f"<knowledge>{refined}</knowledge>" in tok.decode(response[mask.bool()], skip_special_tokens=True)
    assert refined not in tok.decode(response[mask == 0], skip_special_tokens=True)
    assert out.non_tensor_batch["skl_phase"][0] == "retry"
