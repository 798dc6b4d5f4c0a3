"""SKL-RL's distillation ablation as the authors ran it (issue 37 item 8): their teacher sequence (the trace with the
student's z where ẑ was), their student mask (z only), the distillation-only objective, its step size (λ·token mean
over z), and the recipe's settings. Hand-computed values throughout."""

from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from skl_verl.options import ConfigError
from skl_verl.skl.distillation import student_mask, trace_teacher
from skl_verl.skl.losses import SklRlOptions, skl_rl_estimator

# One move's window as a response: z (3 generated tokens + the turn's closing token, mask 0), the proposal request,
# the proposal, the simulator's results and the refine request, ẑ (2 + 1), the action request, the answer.
Z, PROPOSAL, Z_HAT, ANSWER = [101, 102, 103, 9], [201, 202], [301, 302, 9], [401, 402]
RESPONSE = Z + [5, 5] + PROPOSAL + [6, 6, 6] + Z_HAT + [7] + ANSWER
MASK = [1, 1, 1, 0] + [0, 0] + [1, 1] + [0, 0, 0] + [1, 1, 0] + [0] + [1, 1]
Z_SPAN, Z_HAT_SPAN = (0, 4), (11, 14)


def test_teacher_sequence_is_the_trace_with_z_in_z_hats_place():
    teacher, mask, z_start = trace_teacher(RESPONSE, MASK, Z_SPAN, Z_HAT_SPAN)
    assert teacher == [101, 102, 103, 9, 5, 5, 201, 202, 6, 6, 6, 101, 102, 103, 9, 7, 401, 402]
    assert z_start == 11 and teacher[z_start : z_start + 4] == Z
    # everything but the ẑ span is the trace's, token for token
    assert teacher[:11] == RESPONSE[:11] and teacher[15:] == RESPONSE[14:]
    assert mask == [0] * 11 + [1, 1, 1, 0] + [0, 0, 0]


def test_teacher_and_student_masks_count_the_same_tokens():
    _, teacher_mask, _ = trace_teacher(RESPONSE, MASK, Z_SPAN, Z_HAT_SPAN)
    student = student_mask(MASK, [Z_SPAN])
    assert student == [1, 1, 1] + [0] * 14  # the proposal, ẑ and the answer leave the student's loss
    assert sum(student) == sum(teacher_mask) == 3
    # window: episode, two steps in one sample: both z spans stay, nothing else
    assert student_mask([1, 1, 0, 1, 1, 0, 1], [(0, 2), (3, 5)]) == [1, 1, 0, 1, 1, 0, 0]
    assert student_mask([1, 1], []) == [0, 0]


@pytest.mark.parametrize("z, z_hat", [((11, 14), (0, 4)), ((0, 4), (3, 6)), ((0, 4), (11, 19))])
def test_teacher_needs_z_before_z_hat_inside_the_response(z, z_hat):
    with pytest.raises(ValueError, match="before ẑ"):
        trace_teacher(RESPONSE, MASK, z, z_hat)


def _batch(trace_mask):
    """Two games of one task (scores +1 and -1), one window each, and their teacher probes. z is the trace's first two
    tokens; the probe's z starts at token 3. Game a: log π_s(z) = (-1, -2) against the teacher's (-1.5, -1); game b:
    (-1, -1) under both."""
    fields = {
        "skl_trajectory_id": np.array(["a", "b", "a", "b"], dtype=object),
        "skl_sequence_id": np.array(["task"] * 4, dtype=object),
        "skl_position": np.array([0, 0, 0, 0], dtype=object),
        "skl_phase": np.array(["act", "act", "distill_teacher", "distill_teacher"], dtype=object),
        "skl_step_index": np.array([0, 0, 0, 0], dtype=object),
        "skl_z_span": np.array([None, None, [0, 2, 3], [0, 2, 3]], dtype=object),
    }
    probe_mask = [0, 0, 0, 1, 1, 0]
    mask = torch.tensor([trace_mask, trace_mask, probe_mask, probe_mask], dtype=torch.float32)
    rewards = torch.zeros(4, 6)
    rewards[0, 4], rewards[1, 4] = 1.0, -1.0
    old = torch.tensor([[-1.0, -2.0, -0.3, -0.4, -0.5, -0.6], [-1.0, -1.0, -0.3, -0.4, -0.5, -0.6],
                        [-9.0, -9.0, -9.0, -1.5, -1.0, -9.0], [-9.0, -9.0, -9.0, -1.0, -1.0, -9.0]])
    return rewards, mask, fields, old


def test_distill_only_gives_every_token_but_z_advantage_zero():
    rewards, mask, fields, old = _batch([1, 1, 0, 1, 1, 0])  # a trace trained on z and two more tokens
    adv, _ = skl_rl_estimator(rewards, mask, fields, SklRlOptions(objective="distill_only", distill_coef=1.0), old)
    # credit -λ·(log π_s − log π_t) = (-0.5, 1.0) on game a's z, times n_all / n_trace = 12 / 8 (the probes' 4
    # masked tokens leave the token mean); game b's z has no gap; no GRPO term, probes never trained
    expected = torch.zeros(4, 6)
    expected[0, :2] = torch.tensor([-0.75, 1.5])
    torch.testing.assert_close(adv, expected)
    # Ours (Eq. 4): the same games carry their GRPO advantage ±1/std(+1, -1) = ±0.7071 on every trained token, and
    # the credit unscaled on z
    adv, _ = skl_rl_estimator(rewards, mask, fields, SklRlOptions(objective="grpo_distill", distill_coef=1.0), old)
    g = 2 ** -0.5
    torch.testing.assert_close(adv[0], torch.tensor([g - 0.5, g + 1.0, 0.0, g, g, 0.0]))
    torch.testing.assert_close(adv[1], torch.tensor([-g, -g, 0.0, -g, -g, 0.0]))


def test_distill_only_steps_as_the_authors_token_mean_over_z():
    """The authors' loss, λ·mean over the student's z tokens of log π_s·sg(log π_s − log π_t), has gradient
    (0.5, -1.0) / 4 = (0.125, -0.25) on game a's z (4 z tokens in the batch, game b's gap 0). verl's clipped
    surrogate on our advantages, over the whole batch (traces and probes, 8 masked tokens), gives the same."""
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla

    rewards, mask, fields, old = _batch([1, 1, 0, 0, 0, 0])  # the student mask: z only
    adv, _ = skl_rl_estimator(rewards, mask, fields, SklRlOptions(objective="distill_only", distill_coef=1.0), old)
    torch.testing.assert_close(adv[0, :2], torch.tensor([-1.0, 2.0]))  # (-0.5, 1.0) × 8 / 4
    log_prob = old.clone().requires_grad_(True)
    config = OmegaConf.create({"clip_ratio": 0.2, "clip_ratio_low": None, "clip_ratio_high": None, "clip_ratio_c": 3.0,
                               "global_batch_info": {}})
    loss, _ = compute_policy_loss_vanilla(old, log_prob, adv, mask, loss_agg_mode="token-mean", config=config)[:2]
    loss.backward()
    expected = torch.zeros(4, 6)
    expected[0, :2] = torch.tensor([0.125, -0.25])
    torch.testing.assert_close(log_prob.grad, expected)


def test_a_mismatched_distillation_setting_stops_the_run():
    from skl_verl.skl.rl_loop import check_distillation

    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"agent": {"default_agent_loop": "skl_rl_chess_distill"}}}})
    authors = OmegaConf.create({"distill_kind": "reverse_trace", "distill_interval": 1})
    check_distillation(config, SklRlOptions(objective="distill_only"), authors)
    with pytest.raises(ConfigError, match="'skl_rl_chess_distill' distils .*objective=distill_only"):  # z alone by GRPO
        check_distillation(config, SklRlOptions(objective="grpo_distill"), authors)
    with pytest.raises(ConfigError, match="emits none"):  # nothing would train
        check_distillation(config, SklRlOptions(objective="distill_only"), OmegaConf.create({}))


def test_the_distillation_config_is_the_authors_script():
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from skl_verl.trainer.entry import prepare_config
    from skl_verl.trainer.loop_checks import loop_settings
    from skl_verl.trainer.registry import AGENT_LOOPS, estimator_options

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "skl_rl"
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(recipe / "config"), version_base=None):
        config = prepare_config(compose(config_name="skl_rl_chess_distill"))
    options = estimator_options(config.algorithm, "skl_rl")
    assert (options.objective, options.distill_coef) == ("distill_only", 1.0)
    assert not config.actor_rollout_ref.actor.use_kl_loss and not config.algorithm.use_kl_in_reward
    loop = loop_settings(AGENT_LOOPS[config.actor_rollout_ref.rollout.agent.default_agent_loop])
    assert (loop["distill_kind"], loop["distill_interval"], loop["max_turns"]) == ("reverse_trace", 1, 10)
    assert (loop["simulations"], loop["horizon"], loop["simulation_policy"]) == (3, 1, "self")
    script = (recipe / "run_chess.sh").read_text()
    assert 'then OPPONENT=${OPPONENT:-first_legal}' in script and "MAX_STEPS=${MAX_STEPS:-10}\n" in script


def test_the_loop_emits_the_authors_teacher_and_student(tmp_path, tiny_model_dir):
    """Through the SKL-RL loop (scripted replies, one window per move): each probe is its window with the student's
    z where ẑ was, the window trains z alone, and the estimator credits z with -λ·scale·(log π_s − log π_t)."""
    from transformers import AutoTokenizer

    from loop_helpers import advantage_step, packaged_loops
    from skl_verl.rollout.data import env_rows, write_parquet
    from skl_verl.trainer.inprocess_rollout import AgentRollout, compose_config
    from test_skl_rl_loop import SLIPPERY, ThreeStagePolicy

    loops = packaged_loops()
    for entry in loops:
        if entry.name == "skl_rl":
            entry.update(distill_interval=1, distill_kind="reverse_trace", window="move", max_turns=2)
    OmegaConf.save(loops, tmp_path / "loops.yaml")
    train = write_parquet(env_rows("frozenlake", SLIPPERY), tmp_path / "rl.parquet")
    config = compose_config([
        f"actor_rollout_ref.model.path={tiny_model_dir}", f"data.train_files={train}", f"data.val_files={train}",
        "data.max_prompt_length=2048", "data.max_response_length=6144",
        "actor_rollout_ref.rollout.agent.default_agent_loop=skl_rl", "algorithm.adv_estimator=skl_rl",
        "+algorithm.skl_rl.distill_coef=1.0", "+algorithm.skl_rl.objective=distill_only",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={tmp_path / 'loops.yaml'}",
    ])
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    rollout = AgentRollout(config, ThreeStagePolicy(tok), tok, train)
    data = rollout.rollout(next(rollout.batches(1)), step=1, n=2)
    fields, phases = data.non_tensor_batch, list(data.non_tensor_batch["skl_phase"])
    assert phases.count("act") >= 4 and phases.count("distill_teacher") == phases.count("act")  # 2 games x 2 moves
    responses, mask = data.batch["responses"], data.batch["response_mask"]
    text = lambda row, keep: tok.decode(responses[row][keep], skip_special_tokens=False)
    real = data.batch["attention_mask"][:, -responses.shape[1]:].bool()
    trace_of = {(fields["skl_trajectory_id"][i], fields["skl_step_index"][i]): i for i, p in enumerate(phases) if p == "act"}
    z, z_hat = "<knowledge>first impression</knowledge>", "<knowledge>refined: the ice slips sideways</knowledge>"
    for j, phase in enumerate(phases):
        if phase != "distill_teacher":
            continue
        i = trace_of[(fields["skl_trajectory_id"][j], fields["skl_step_index"][j])]
        assert torch.equal(data.batch["prompts"][i], data.batch["prompts"][j])
        trace_text = text(i, real[i])
        assert trace_text.count(z_hat) == 1
        assert text(j, real[j]) == trace_text.replace(z_hat, z)
        # both masks hold z alone: the student's where it was written, the teacher's where ẑ was
        assert text(i, mask[i].bool()) == text(j, mask[j].bool()) == z + tok.eos_token
    advantage_step(data, config, tiny_model_dir)
    adv, lp = data.batch["advantages"], data.batch["old_log_probs"]
    scale = mask.sum() / mask[torch.as_tensor(np.array(phases) == "act")].sum()
    assert scale.item() == pytest.approx(2.0)
    for j, phase in enumerate(phases):
        if phase != "distill_teacher":
            assert adv[j][~mask[j].bool()].abs().sum() == 0  # no token outside z is trained
            continue
        assert adv[j].abs().sum() == 0
        i = trace_of[(fields["skl_trajectory_id"][j], fields["skl_step_index"][j])]
        start, end, probe_start = fields["skl_z_span"][j]
        expected = -scale * (lp[i, start:end] - lp[j, probe_start : probe_start + end - start]) * mask[i, start:end]
        torch.testing.assert_close(adv[i, start:end], expected.float(), atol=1e-5, rtol=1e-5)
