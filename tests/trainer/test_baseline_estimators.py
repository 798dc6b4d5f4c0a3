"""SkillRise Table 1's RLOO and PPO baselines on step samples: ``skl_rloo`` and ``skl_gae``, against
hand-computed numbers and verl's own GAE."""

import numpy as np
import pytest
import torch
from verl.trainer.ppo import core_algos

from skl_verl.rollout import sample_fields as sf
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from skl_verl.trainer.group_advantage import leave_one_out_advantages

TOKENS = 3


def column(values):
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def step_batch(steps):
    """steps: (task, trial, trial score, own format penalty) per step sample."""
    fields = {
        sf.SEQUENCE_ID: column([s[0] for s in steps]),
        sf.TRAJECTORY_ID: column([s[1] for s in steps]),
        sf.POSITION: column([0] * len(steps)),
        sf.PHASE: column(["act"] * len(steps)),
        sf.STEP_PENALTY: column([s[3] for s in steps]),
    }
    rewards = torch.zeros(len(steps), TOKENS)
    rewards[:, -1] = torch.tensor([s[2] for s in steps])
    return rewards, torch.ones(len(steps), TOKENS), fields


def test_leave_one_out_by_hand():
    returns = torch.tensor([1.0, 0.0, 0.0, 1.0, 5.0, 3.0, 7.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 2, 2])
    # Group 0: a 1 is compared with (0 + 0 + 1) / 3, a 0 with (1 + 0 + 1) / 3; a lone sample gets 0.
    expected = [2 / 3, -2 / 3, -2 / 3, 2 / 3, 0.0, -4.0, 4.0]
    assert leave_one_out_advantages(returns, groups).tolist() == pytest.approx(expected)


RLOO_STEPS = [  # task A: trial a1 won (10) in three steps, a2 and a3 lost; task B: two trials, one step each
    ("A", "a1", 10.0, 0.0), ("A", "a1", 10.0, 0.5), ("A", "a1", 10.0, 0.0),
    ("A", "a2", 0.0, 0.0), ("A", "a3", 0.0, 0.5),
    ("B", "b1", 4.0, 0.0), ("B", "b2", 2.0, 0.0),
]


def test_rloo_counts_every_step_row_with_its_penalty_as_released():
    rewards, mask, fields = step_batch(RLOO_STEPS)
    advantages, _ = get_adv_estimator_fn("skl_rloo")(rewards, mask, config={}, sample_fields=fields)
    # A's penalised rows: 10, 9.5, 10, 0, -0.5 (sum 29); each minus the mean of the other four.
    expected = [10 - 19 / 4, 9.5 - 19.5 / 4, 10 - 19 / 4, 0 - 29 / 4, -0.5 - 29.5 / 4, 4.0 - 2.0, 2.0 - 4.0]
    assert advantages[:, 0].tolist() == pytest.approx(expected)
    assert torch.equal(advantages, advantages[:, :1].expand(-1, TOKENS))


def test_rloo_counting_trials_compares_with_the_other_trials_first_steps():
    rewards, mask, fields = step_batch(RLOO_STEPS)
    advantages, _ = get_adv_estimator_fn("skl_rloo")(rewards, mask, config={"skl_rloo": {"count": "trials"}}, sample_fields=fields)
    # Trials' first rows: a1 10, a2 0, a3 -0.5. a1's rows vs (0 - 0.5)/2; a2 vs (10 - 0.5)/2; a3 vs (10 + 0)/2.
    expected = [10.25, 9.75, 10.25, -4.75, -5.5, 2.0, -2.0]
    assert advantages[:, 0].tolist() == pytest.approx(expected)


def test_gae_without_penalties_is_verls_gae():
    rewards, mask, fields = step_batch([("A", "a1", 10.0, 0.0), ("A", "a1", 10.0, 0.0), ("A", "a2", 0.0, 0.0)])
    mask[2, 0] = 0  # a shorter response
    values = torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.5, 4.0], [0.0, 1.0, -1.0]])
    algorithm = {"gamma": 0.9, "lam": 0.8}
    ours = get_adv_estimator_fn("skl_gae")(rewards, mask, config=algorithm, sample_fields=fields, values=values)
    verls = core_algos.compute_gae_advantage_return(rewards, values, mask, gamma=0.9, lam=0.8)
    for a, b in zip(ours, verls):
        assert torch.allclose(a, b)


def test_gae_puts_each_steps_own_reward_on_its_last_token_by_hand():
    rewards, mask, fields = step_batch([("A", "a1", 10.0, 0.0), ("A", "a1", 10.0, 0.5)])
    mask[1, 2] = 0  # the second sample's last policy token is its second
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 6.0, 0.0]])
    rewards[1] = torch.tensor([0.0, 10.0, 0.0])  # the score sits on the last policy token
    advantages, returns = get_adv_estimator_fn("skl_gae")(rewards, mask, sample_fields=fields, values=values,
                                             config={"gamma": 1.0, "lam": 1.0})
    # gamma = lam = 1: the return of every token is the sample's reward, the advantage reward - V,
    # then whitened over the batch's policy tokens (verl's masked_whiten, unbiased variance).
    raw = torch.tensor([10 - 1.0, 10 - 2.0, 10 - 3.0, 9.5 - 4.0, 9.5 - 6.0])
    whitened = (raw - raw.mean()) / torch.sqrt(raw.var(unbiased=True) + 1e-8)
    assert advantages[mask.bool()].tolist() == pytest.approx(whitened.tolist(), abs=1e-5)
    assert returns[mask.bool()].tolist() == pytest.approx([10.0, 10.0, 10.0, 9.5, 9.5])


def test_gae_without_the_critic_is_refused():
    rewards, mask, fields = step_batch([("A", "a1", 1.0, 0.0)])
    with pytest.raises(ValueError, match="critic.enable"):
        get_adv_estimator_fn("skl_gae")(rewards, mask, config={}, sample_fields=fields)
