"""SkillRise decoupled credit assignment (SkillRise §3.3, Eqs. 6–7)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np
import torch

from skl_verl.options import AtLeast, Between, OneOf
from skl_verl.rollout import sample_fields as sf
from skl_verl.trainer.estimators import (
    outcome_scores,
    reference_rows,
    row_groups,
    step_penalties,
    to_tokens,
    trial_units,
)
from skl_verl.trainer.group_advantage import (
    Normalisation,
    advantages_against_reference,
    group_codes,
    group_relative_advantages,
)

SOLVE_RETURNS = ("task", "discounted")


@dataclass(frozen=True)
class SkillRiseCreditOptions:
    """``algorithm.skillrise.*``: the options of Eqs. 6–7."""

    gamma: Annotated[float, Between(0, 1)] = 0.6
    """γ of Eq. 6, discounting later tasks' rewards in a curate sample's return (paper 0.6)."""
    norm: Annotated[str, OneOf("std", "mean")] = "std"
    """Eq. 7's group normalisation: divide by the group's std, or only subtract its mean."""
    curate_weight: Annotated[float, AtLeast(0)] = 1.0
    """A loss weight on curate advantages (1.0: the paper)."""
    eps: Annotated[float, AtLeast(0)] = 1e-6
    solve_return: Annotated[str, OneOf(*SOLVE_RETURNS)] = "task"
    """A solve sample's return: its own r_k (the paper), or discounted like a curate's (the LaMer baseline)."""


def skillrise_returns(
    scores: torch.Tensor,
    trial: torch.Tensor,
    position: torch.Tensor,
    is_curate: torch.Tensor,
    gamma: float,
    solve_return: str = "task",
) -> torch.Tensor:
    """Eq. 6: a solve sample at position k returns its own r_k; a curate sample at k returns
    sum_{j>k} gamma^(j-k) r_j over the solve rewards of the *same trial*, plus its own score
    (0, or the penalty for an unparseable document).

    ``solve_return="discounted"`` is LaMer's cross-episode return for the solve samples instead:
    r_k + sum_{j>k} gamma^(j-k) r_j (an attempt is also credited with what later attempts gained).

    Args:
        scores: (B,) each sample's own scalar score.
        trial: (B,) int ids; samples of one trial (one pass over a sequence) share an id.
        position: (B,) int task index k within the sequence, 0-based.
        is_curate: (B,) bool, True for curate samples.
        gamma: cross-task discount (paper 0.6).
        solve_return: "task" (SkillRise) or "discounted" (LaMer).
    A position with no solve sample in a trial (e.g. a failed env) contributes r_j = 0.
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    if solve_return not in SOLVE_RETURNS:
        raise ValueError(f"solve_return must be one of {SOLVE_RETURNS}, got {solve_return!r}")
    scores = scores.to(torch.float64)
    if scores.numel() == 0:
        return scores
    num_trials, num_positions = int(trial.max()) + 1, int(position.max()) + 1
    solve = ~is_curate
    solve_rewards = torch.zeros(num_trials, num_positions, dtype=torch.float64)
    solve_rewards.index_put_((trial[solve], position[solve]), scores[solve], accumulate=True)
    steps = torch.arange(num_positions)
    ahead = steps[:, None] - steps[None, :]  # ahead[j, k] = j - k
    discount = torch.where(ahead > 0, gamma ** ahead.clamp(min=0).to(torch.float64), torch.zeros((), dtype=torch.float64))
    future = solve_rewards @ discount  # future[t, k] = sum_{j>k} gamma^(j-k) r_{t,j}
    ahead_of_sample = future[trial, position]
    solve_returns = scores + ahead_of_sample if solve_return == "discounted" else scores
    return torch.where(is_curate, scores + ahead_of_sample, solve_returns)


def skillrise_advantages(
    scores: torch.Tensor,
    trial: torch.Tensor,
    group: torch.Tensor,
    position: torch.Tensor,
    is_curate: torch.Tensor,
    gamma: float = 0.6,
    norm: Normalisation = "std",
    curate_weight: float = 1.0,
    eps: float = 1e-6,
    solve_return: str = "task",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 7: group-relative advantages over the N trials sharing (sequence, position, phase).

    ``group`` must already encode (sequence, position, phase) so that solve and curate samples
    never baseline each other. ``curate_weight`` scales curate advantages (a loss weight on the
    curate phase; 1.0 is the paper). Returns (advantages, returns), each (B,).
    """
    returns = skillrise_returns(scores, trial, position, is_curate, gamma, solve_return)
    advantages = group_relative_advantages(returns, group, norm=norm, eps=eps)
    advantages = torch.where(is_curate, advantages * curate_weight, advantages)
    return advantages, returns


def skillrise_estimator(token_level_rewards, response_mask, sample_fields, options, **_):
    """SkillRise Eqs. 6–7 on episode or step samples, as the released trainer applies them: each trial
    phase's return (Eq. 6, from one score per trial phase) minus the sample's own format penalty is the
    sample's score; a group's mean (and std) are over one score per trial, its first step's (released:
    each trial's first row in the batch, which is its first step on an unshuffled batch); every sample is
    normalised with them (Eq. 7). Options: ``SkillRiseCreditOptions``."""
    phase = np.asarray(sample_fields[sf.PHASE]).astype(str)
    bad = sorted(set(phase) - {"solve", "curate"})
    if bad:
        raise ValueError(f"skillrise estimator got phases {bad}; expected only 'solve' and 'curate'")
    units, first = trial_units(sample_fields)
    rows = first.numpy()
    is_curate = torch.as_tensor(phase == "curate")
    unit_returns = skillrise_returns(
        outcome_scores(token_level_rewards).to(torch.float64)[first],
        trial=group_codes(np.asarray(sample_fields[sf.TRAJECTORY_ID])[rows]),
        position=torch.as_tensor(np.asarray(sample_fields[sf.POSITION])[rows].astype(np.int64)),
        is_curate=is_curate[first],
        gamma=float(options.gamma),
        solve_return=options.solve_return,
    )
    scores = unit_returns[units] - step_penalties(sample_fields, len(units))
    reference = reference_rows(first, len(units), "trials")
    advantages = advantages_against_reference(scores, row_groups(sample_fields), reference, norm=options.norm, eps=float(options.eps))
    advantages = torch.where(is_curate, advantages * float(options.curate_weight), advantages)
    return to_tokens(advantages, unit_returns[units], response_mask)
