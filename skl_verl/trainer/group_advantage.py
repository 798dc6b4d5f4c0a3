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
    """A_i = (R_i - mean_g) / (std_g + eps) (``norm="std"``) or R_i - mean_g (``"mean"``).

    std is the unbiased sample std, as in verl's ``grpo``. A group with a single sample has no
    baseline to compare against, so its advantage is 0 (verl's ``grpo`` would pass the raw
    score through instead). Groups whose returns are all equal get 0 as well.
    """
    if norm not in ("std", "mean"):
        raise ValueError(f"norm must be 'std' or 'mean', got {norm!r}")
    returns, counts, sums = _group_sums(returns, groups)
    means = sums / counts.clamp(min=1)
    deviation = returns - means[groups]
    advantages = deviation
    if norm == "std":
        sq = torch.zeros(len(counts), dtype=torch.float64).index_add_(0, groups, deviation**2)
        std = (sq / (counts - 1).clamp(min=1)).sqrt()
        # A group whose returns are all equal has std 0: its advantages are 0 even with eps = 0.
        spread = std[groups] > 0
        advantages = torch.where(spread, deviation / torch.where(spread, std[groups] + eps, 1.0), 0.0)
    return torch.where(counts[groups] > 1, advantages, torch.zeros_like(advantages))


def leave_one_out_advantages(returns: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """RLOO (Ahmadian et al., 2024): A_i = R_i - mean_{j != i in g} R_j = n_g/(n_g - 1) * (R_i - mean_g).

    Each sample's baseline is the mean of the other samples of its group; a single-sample group has
    no other sample, so its advantage is 0."""
    returns, counts, sums = _group_sums(returns, groups)
    counts, sums = counts[groups], sums[groups]
    others = (sums - returns) / (counts - 1).clamp(min=1)
    return torch.where(counts > 1, returns - others, torch.zeros_like(returns))


def _group_sums(returns: torch.Tensor, groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(returns as float64, samples per group, sum of returns per group), for dense group ids."""
    if returns.shape != groups.shape or returns.dim() != 1:
        raise ValueError(f"returns {tuple(returns.shape)} and groups {tuple(groups.shape)} must be equal 1-D shapes")
    returns = returns.to(torch.float64)
    num_groups = int(groups.max()) + 1 if groups.numel() else 0
    counts = torch.bincount(groups, minlength=num_groups).to(torch.float64)
    return returns, counts, torch.zeros(num_groups, dtype=torch.float64).index_add_(0, groups, returns)


def first_rows(units: torch.Tensor) -> torch.Tensor:
    """For dense unit ids (e.g. ``group_codes(trial, position, phase)``), the first row of every unit.

    Step mode emits one sample per env step, all carrying their trial phase's score: estimators
    compute on ``first_rows`` (one row per trial phase) and broadcast back with ``values[units]``, so
    a trial with 40 steps weighs in its group exactly as one with 3."""
    num_units = int(units.max()) + 1 if units.numel() else 0
    rows = torch.arange(units.numel(), dtype=torch.long)
    return torch.full((num_units,), units.numel(), dtype=torch.long).scatter_reduce(0, units, rows, reduce="amin")
