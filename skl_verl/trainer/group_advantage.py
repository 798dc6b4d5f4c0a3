"""Group-relative advantages, vectorised (no Python loop over samples)."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

Normalisation = Literal["std", "mean"]


def group_codes(*keys: np.ndarray) -> torch.Tensor:
    """Dense int64 group ids for samples that agree on every key (strings, ints, anything hashable)."""
    if not keys:
        raise ValueError("group_codes needs at least one key array")
    columns = []
    for key in keys:
        _, inverse = np.unique(np.asarray(key).astype(str), return_inverse=True)
        columns.append(inverse.reshape(-1))
    _, codes = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
    return torch.as_tensor(codes.reshape(-1), dtype=torch.long)


def group_relative_advantages(
    returns: torch.Tensor, groups: torch.Tensor, norm: Normalisation = "std", eps: float = 1e-6
) -> torch.Tensor:
    """A_i = (R_i - mean_g) / (std_g + eps) (``norm="std"``) or R_i - mean_g (``"mean"``), every sample
    counting in its group's statistics (``advantages_against_reference`` with all rows as reference).

    std is the unbiased sample std, as in verl's ``grpo``. A group with a single sample has no
    baseline to compare against, so its advantage is 0 (verl's ``grpo`` would pass the raw
    score through instead). Groups whose returns are all equal get 0 as well.
    """
    return advantages_against_reference(returns, groups, torch.ones_like(groups, dtype=torch.bool), norm=norm, eps=eps)


def advantages_against_reference(
    scores: torch.Tensor, groups: torch.Tensor, reference: torch.Tensor, norm: Normalisation = "std", eps: float = 1e-6
) -> torch.Tensor:
    """A_i = (s_i - mean_g) / (std_g + eps) or s_i - mean_g, where mean_g and the unbiased std_g are
    taken over the ``reference`` rows of group g only (e.g. one row per trial) and every row of g is
    normalised with them.

    A group with at most one reference row gets 0 (no baseline). Where the reference scores are all
    equal (std 0), a row is only mean-centred: dividing by eps would turn a row that differs from
    them (a format penalty) into a 1e6-sized advantage.
    """
    if norm not in ("std", "mean"):
        raise ValueError(f"norm must be 'std' or 'mean', got {norm!r}")
    if reference.shape != groups.shape or reference.dtype != torch.bool:
        raise ValueError("reference must be a bool mask shaped like groups")
    scores = scores.to(torch.float64)
    _, counts, sums = _group_sums(scores[reference], groups[reference], num_groups=_num_groups(groups))
    means = sums / counts.clamp(min=1)
    deviation = scores - means[groups]
    advantages = deviation
    if norm == "std":
        ref_deviation = deviation[reference]
        sq = torch.zeros(len(counts), dtype=torch.float64).index_add_(0, groups[reference], ref_deviation**2)
        std = (sq / (counts - 1).clamp(min=1)).sqrt()[groups]
        spread = std > 0
        advantages = torch.where(spread, deviation / torch.where(spread, std + eps, 1.0), deviation)
    return torch.where(counts[groups] > 1, advantages, torch.zeros_like(advantages))


def leave_one_out_advantages(
    scores: torch.Tensor, groups: torch.Tensor, reference: torch.Tensor | None = None, own_reference: torch.Tensor | None = None
) -> torch.Tensor:
    """RLOO (Ahmadian et al., 2024): A_i = s_i - mean of the group's other reference scores.

    With every row as reference (the default) that is s_i - mean_{j != i} s_j = n_g/(n_g - 1) (s_i - mean_g).
    With one reference row per trial (``reference``), ``own_reference`` gives each row its own trial's
    reference score, which is left out of its baseline. A group with one reference score has no other
    score to compare against, so its advantage is 0."""
    scores = scores.to(torch.float64)
    if reference is None:
        reference, own_reference = torch.ones_like(groups, dtype=torch.bool), scores
    if own_reference is None:
        raise ValueError("leave_one_out_advantages: a reference mask needs own_reference (each row's trial's score)")
    _, counts, sums = _group_sums(scores[reference], groups[reference], num_groups=_num_groups(groups))
    counts, sums = counts[groups], sums[groups]
    others = (sums - own_reference.to(torch.float64)) / (counts - 1).clamp(min=1)
    return torch.where(counts > 1, scores - others, torch.zeros_like(scores))


def _num_groups(groups: torch.Tensor) -> int:
    return int(groups.max()) + 1 if groups.numel() else 0


def _group_sums(
    returns: torch.Tensor, groups: torch.Tensor, num_groups: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(returns as float64, samples per group, sum of returns per group), for dense group ids."""
    if returns.shape != groups.shape or returns.dim() != 1:
        raise ValueError(f"returns {tuple(returns.shape)} and groups {tuple(groups.shape)} must be equal 1-D shapes")
    returns = returns.to(torch.float64)
    num_groups = _num_groups(groups) if num_groups is None else num_groups
    counts = torch.bincount(groups, minlength=num_groups).to(torch.float64)
    return returns, counts, torch.zeros(num_groups, dtype=torch.float64).index_add_(0, groups, returns)


def first_rows(units: torch.Tensor, order: torch.Tensor | None = None) -> torch.Tensor:
    """For dense unit ids (e.g. ``group_codes(trial, position, phase)``), the first row of every unit:
    the one with the smallest ``order`` (e.g. its env step index), ties and ``order=None`` broken by
    batch position, so the choice does not depend on how verl reorders the batch when ``order`` is given.

    Step mode emits one sample per env step, all carrying their trial phase's score: estimators
    that count trials compute on ``first_rows`` (one row per trial phase) and broadcast back with
    ``values[units]``, so a trial with 40 steps weighs in its group exactly as one with 3."""
    num_units = _num_groups(units)
    rows = torch.arange(units.numel(), dtype=torch.long)
    key = rows if order is None else order.to(torch.long) * max(units.numel(), 1) + rows
    smallest = torch.full((num_units,), torch.iinfo(torch.long).max, dtype=torch.long).scatter_reduce(0, units, key, reduce="amin")
    return smallest % max(units.numel(), 1) if order is not None else smallest
