"""Step mode (``sample_granularity: step``): one sample per policy turn, each with its own prompt
(task, recent steps, current observation) and a per-action budget, all carrying the trial's fields."""

import pytest

from skl_verl.rollout import sample_fields as sf
from loop_helpers import ENV_KWARGS, loop_options_override, rollout

WIN = ["<action>right</action>", "<action>right</action>", "<action>down</action>", "<action>down</action>"]


def decode_rows(out, tok, key):
    rows = []
    for i in range(len(out)):
        ids = out.batch[key][i][out.batch["attention_mask"][i, : out.batch[key].shape[1]].bool()] if key == "prompts" else \
            out.batch[key][i][out.batch["response_mask"][i].bool()]
        rows.append(tok.decode(ids, skip_special_tokens=True))
    return rows


def test_each_turn_is_a_sample_with_its_own_prompt_and_the_trial_fields(tmp_path, tiny_model_dir):
    replies = ["I go right", *WIN]  # one unparseable reply, then a win in 4 moves
    override = loop_options_override(tmp_path, sample_granularity="step", step_history=2, reward_fn="scaled_success")
    out, tok = rollout(tmp_path, tiny_model_dir, replies, overrides=[override])
    fields = out.non_tensor_batch
    assert len(out) == 5 and list(fields[sf.STEP_INDEX]) == [0, 1, 2, 3, 4]
    assert set(fields[sf.TRAJECTORY_ID]) == {"u0_0"} and set(fields[sf.PHASE]) == {"act"}
    # Every step sample carries the trial's score (10 * won, no format penalty); the bad reply pays
    # its own penalty, on its own sample only.
    assert list(fields[sf.SCORE]) == [10.0] * 5
    assert list(fields[sf.STEP_PENALTY]) == [0.1, 0.0, 0.0, 0.0, 0.0]
    # GiGPO's inputs: the state each step acted from (the bad reply left the agent where it was)
    # and what each step added to the score (10 on the winning move).
    anchors = list(fields[sf.ANCHOR_STATE])
    assert anchors[0] == anchors[1] and len(set(anchors[1:])) == 4
    assert list(fields[sf.STEP_REWARD]) == [0.0, 0.0, 0.0, 0.0, 10.0]
    assert all(fields["skl_won"]) and list(fields["skl_turns"]) == [5] * 5
    # The whole response is the policy's reply: nothing of the env is in it.
    assert decode_rows(out, tok, "responses") == replies
    assert out.batch["response_mask"].sum(dim=1).tolist() == [len(tok(r, add_special_tokens=False)["input_ids"]) + 1 for r in replies]
    prompts = decode_rows(out, tok, "prompts")
    assert "Your last" not in prompts[0] and "Admissible actions" in prompts[0]
    # Step 4 (index 3) shows the task as first observed, its last 2 steps and the current state.
    assert "Task (as first observed)" in prompts[3] and "Your last 2 of 3 steps" in prompts[3]
    assert "2. right -> " in prompts[3] and "3. right -> " in prompts[3] and "1. (no valid action)" not in prompts[3]
    assert "Current observation (step 4)" in prompts[3]


def test_a_state_key_failure_flags_the_episode_and_keeps_the_steps_before_it(tmp_path, tiny_model_dir, monkeypatch):
    from envs import ENV_CLASSES

    monkeypatch.setitem(ENV_CLASSES, "faulty_frozenlake", "fault_envs:FaultyFrozenLake")
    override = loop_options_override(tmp_path, sample_granularity="step", reward_fn="scaled_success")
    env_kwargs = {**ENV_KWARGS, "fault_call": "state_key", "fault_kind": "raise", "fault_at": 3}
    out, _ = rollout(tmp_path, tiny_model_dir, WIN, env_kwargs=env_kwargs, env_name="faulty_frozenlake", overrides=[override])
    fields = out.non_tensor_batch
    # The third anchor lookup fails: two steps acted, then the env worker is gone and the trial is flagged.
    assert len(out) == 2 and not any(fields["skl_won"])
    assert all(f.startswith("env.state_key() raised RuntimeError: injected fault") for f in fields["skl_failed"])
    assert list(fields[sf.SCORE]) == [0.0, 0.0] and len(set(fields[sf.ANCHOR_STATE])) == 2


def test_step_mode_metrics_count_each_episode_once(tmp_path, tiny_model_dir):
    from skl_verl.trainer.metrics import episode_metrics

    override = loop_options_override(tmp_path, sample_granularity="step")
    out, _ = rollout(tmp_path, tiny_model_dir, WIN, overrides=[override])
    metrics = episode_metrics(out.non_tensor_batch)
    assert metrics["env/turns/mean"] == 4 and metrics["env/success_rate"] == 1.0
    assert metrics["env/samples_per_episode"] == 4


def test_per_action_budget_is_the_response_length(tmp_path, tiny_model_dir):
    # Two ~40-token replies would end an episode-mode sample with a 64-token budget after one turn; in
    # step mode every turn gets the whole budget again.
    long_reply = "thinking " * 6 + "<action>right</action>"
    replies = [long_reply, long_reply, "<action>down</action>", "<action>down</action>"]
    override = loop_options_override(tmp_path, sample_granularity="step")
    out, tok = rollout(tmp_path, tiny_model_dir, replies, overrides=[override, "data.max_response_length=64"])
    assert 32 < len(tok(long_reply)["input_ids"]) < 64
    assert len(out) == 4 and all(out.non_tensor_batch["skl_won"])
    episode_mode, _ = rollout(tmp_path, tiny_model_dir, replies, overrides=["data.max_response_length=64"])
    assert episode_mode.non_tensor_batch["skl_truncated"][0] and not episode_mode.non_tensor_batch["skl_won"][0]


def test_stateful_loops_refuse_step_mode(tmp_path, tiny_model_dir):
    override = loop_options_override(tmp_path, "skl_stateful", sample_granularity="step")
    with pytest.raises(Exception, match="play episode samples only"):
        rollout(tmp_path, tiny_model_dir, WIN, overrides=[override, "actor_rollout_ref.rollout.agent.default_agent_loop=skl_stateful"])


def test_an_unparseable_replys_tail_is_still_a_move_within_the_turn_cap(tmp_path, tiny_model_dir):
    """The released projections send an unparseable reply's last characters to the env (ALFWorld and
    ScienceWorld 30, WebShop 20): it is penalised, yet it moves, and it uses up one of max_turns."""
    replies = ["so I go right", "<action>right</action>", "<action>down</action>", "<action>down</action>"]
    override = loop_options_override(tmp_path, sample_granularity="step", max_turns=4, unparseable_reply_tail=5,
                                     invalid_format_penalty=0.5, reward_fn="scaled_success")
    out, tok = rollout(tmp_path, tiny_model_dir, replies, overrides=[override])
    fields = out.non_tensor_batch
    # "right" (the reply's last 5 characters) moved the agent: four turns reach the goal.
    assert len(out) == 4 and all(fields["skl_won"]) and list(fields["skl_turns"]) == [4] * 4
    assert list(fields[sf.STEP_PENALTY]) == [0.5, 0.0, 0.0, 0.0]
    assert len(set(fields[sf.ANCHOR_STATE])) == 4  # every turn acted from a new cell
    assert "1. right -> " in decode_rows(out, tok, "prompts")[2]  # the history shows the move the tail made
    # Without the tail the first turn does not move: one cell behind the plan, "down" drops into the hole.
    plain = loop_options_override(tmp_path, sample_granularity="step", max_turns=4, reward_fn="scaled_success")
    out, _ = rollout(tmp_path, tiny_model_dir, replies, overrides=[plain])
    assert len(out) == 3 and not any(out.non_tensor_batch["skl_won"])
