"""SKL-SD Eq. 1 as the paper states it: clipped PG on D_base, λ1·PG on D_distill, λ2·SFT on D_reflect."""

import math

import numpy as np
import pytest
import torch

from skl_verl.skl.losses import (
    TERM_NONE,
    TERM_PG,
    TERM_SFT,
    decode_term_weights,
    encode_term_weights,
    skl_sd_objective,
    skl_sd_pg_advantages,
    skl_sd_terms,
)
from skl_verl.trainer.group_advantage import group_codes


def test_advantages_are_grpo_over_each_group_then_positive_filtered():
    phase = np.array(["base", "base", "base", "base", "distill", "distill", "reflect", "reflect"])
    task = np.array(["t"] * 8)
    scores = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.6, 0.0, 0.0, 0.0], dtype=torch.float64)
    keep = np.array([True, False, True, False, True, False, True, False])
    coeffs = skl_sd_pg_advantages(scores, phase, keep, group_codes(task, phase), lambda_distill=0.5, lambda_reflect=0.25)
    base_adv = 0.5 / math.sqrt(4 * 0.25 / 3)  # (1 - 0.5) / unbiased std of [1, 0, 1, 0]
    retry_adv = 0.3 / math.sqrt(2 * 0.09 / 1)  # (0.6 - 0.3) / std of [0.6, 0]
    expected = [base_adv, 0, base_adv, 0, 0.5 * retry_adv, 0, 0.25, 0]
    assert coeffs.tolist() == pytest.approx(expected, rel=1e-5)
    assert skl_sd_terms(phase, keep).tolist() == [TERM_PG, TERM_NONE, TERM_PG, TERM_NONE, TERM_PG, TERM_NONE, TERM_SFT, TERM_NONE]


def test_three_terms_match_a_hand_computed_loss():
    # rows: a kept base episode (A = 1), a kept retry (A = -0.8 after λ1), a kept reflection (λ2 = 0.25)
    new = torch.tensor([[-1.0, -0.5, -2.0], [-2.0, -0.1, -9.0], [-0.3, -0.7, -0.1]], requires_grad=True)
    old = torch.tensor([[-1.2, -0.5, -1.0], [-1.0, -0.2, -9.0], [-5.0, -5.0, -5.0]])
    advantages = torch.tensor([[1.0] * 3, [-0.8] * 3, [0.25] * 3])
    terms = torch.tensor([[TERM_PG] * 3, [TERM_PG] * 3, [TERM_SFT] * 3])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    parts = skl_sd_objective(new, old, advantages, terms, clip_low=0.2, clip_high=0.2)
    loss = parts["loss"]
    # base, token 0: r = e^0.2 = 1.221 > 1.2 and A > 0, so the clipped value -1.2 is kept; token 1: r = 1
    assert loss[0, 0].item() == pytest.approx(-1.2)
    assert loss[0, 1].item() == pytest.approx(-1.0)
    # retry, token 0: r = e^-1 = 0.368 < 0.8 and A < 0: max(0.8 * 0.368, 0.8 * 0.8) = 0.64 (clipped)
    assert loss[1, 0].item() == pytest.approx(0.64)
    # retry, token 1: r = e^0.1 = 1.105 inside the clip range: 0.8 * 1.105
    assert loss[1, 1].item() == pytest.approx(0.8 * math.exp(0.1), rel=1e-6)
    # reflection: -λ2 log π whatever the old log-probs (no ratio, no clipping)
    assert loss[2].tolist() == pytest.approx([0.25 * 0.3, 0.25 * 0.7, 0.25 * 0.1])
    assert parts["pg_clipped"].tolist() == [[True, False, False], [True, False, False], [False] * 3]
    total = loss[mask].sum() / mask.sum()
    hand = (-1.2 - 1.0 + 0.64 + 0.8 * math.exp(0.1) + 0.25 * (0.3 + 0.7 + 0.1)) / 7
    assert total.item() == pytest.approx(hand, rel=1e-6)
    total.backward()
    # the SFT gradient is exactly -λ2 / N per token; clipped PG tokens get none
    assert new.grad[2].tolist() == pytest.approx([-0.25 / 7] * 3)
    assert new.grad[0, 0].item() == 0.0 and new.grad[1, 0].item() == 0.0
    assert new.grad[0, 1].item() == pytest.approx(-1.0 / 7)


def test_dropped_tokens_contribute_nothing():
    new = torch.tensor([[-1.0, -2.0]])
    parts = skl_sd_objective(new, new, torch.tensor([[3.0, 3.0]]), torch.tensor([[TERM_NONE, TERM_NONE]]))
    assert parts["loss"].tolist() == [[0.0, 0.0]]


def test_term_weights_round_trip_through_is_weights():
    terms = torch.tensor([[TERM_PG, TERM_SFT, TERM_NONE]])
    encoded = encode_term_weights(terms, torch.tensor([[0.5, 2.0, 1.0]]))
    assert encoded.tolist() == [[0.5, -2.0, 0.0]]
    decoded_terms, weights = decode_term_weights(encoded)
    assert decoded_terms.tolist() == terms.tolist() and weights.tolist() == [[0.5, 2.0, 0.0]]
    assert encode_term_weights(terms).tolist() == [[1.0, -1.0, 0.0]]


def test_registered_loss_and_term_weights_give_the_hand_computed_value():
    from types import SimpleNamespace

    from verl.trainer.ppo import core_algos

    from skl_verl.trainer.registry import TERM_WEIGHT_FNS

    new = torch.tensor([[-1.0, -0.5], [-0.3, -0.7], [-2.0, -2.0]])
    old = torch.tensor([[-1.2, -0.5], [-5.0, -5.0], [-1.0, -1.0]])
    advantages = torch.tensor([[1.0, 1.0], [0.25, 0.25], [0.0, 0.0]])
    mask = torch.ones(3, 2, dtype=torch.bool)
    fields = {"skl_phase": np.array(["base", "reflect", "base"]), "skl_keep": np.array([True, True, False])}
    weights = TERM_WEIGHT_FNS["skl_sd_eq1"](fields, mask, None)
    assert weights.tolist() == [[1.0, 1.0], [-1.0, -1.0], [0.0, 0.0]]
    config = SimpleNamespace(clip_ratio_low=0.2, clip_ratio_high=0.2, global_batch_info={})
    loss, metrics = core_algos.get_policy_loss_fn("skl_sd_eq1")(old, new, advantages, mask, "token-mean", config, weights)
    hand = (-1.2 - 1.0 + 0.25 * (0.3 + 0.7)) / 6  # the dropped base row counts in verl's token mean
    assert loss.item() == pytest.approx(hand, rel=1e-6)
    assert metrics["actor/skl_sd_pg_loss"] == pytest.approx(-1.1)
    assert metrics["actor/skl_sd_sft_loss"] == pytest.approx(0.125)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="skl_sync"):
        core_algos.get_policy_loss_fn("skl_sd_eq1")(old, new, advantages, mask, "token-mean", config, None)


@pytest.mark.parametrize("objective", ["policy_gradient", "weighted_nll"])
def test_estimator_objectives(objective):
    from omegaconf import OmegaConf
    from verl.trainer.ppo import core_algos

    rewards = torch.zeros(4, 3)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 1.0, 0.0])
    mask = torch.ones(4, 3)
    fields = {
        "skl_phase": np.array(["base"] * 4), "skl_keep": np.array([True, False, True, False]),
        "skl_sequence_id": np.array(["t"] * 4),
    }
    config = OmegaConf.create({"skl_sd": {"objective": objective, "lambda_distill": 0.5, "lambda_reflect": 0.25}})
    advantages, _ = core_algos.get_adv_estimator_fn("skl_sd")(rewards, mask, config=config, sample_fields=fields)
    kept = 0.5 / math.sqrt(1 / 3) if objective == "policy_gradient" else 1.0
    assert advantages[:, 0].tolist() == pytest.approx([kept, 0.0, kept, 0.0], rel=1e-5)
