"""LaMer's credit (Jiang et al. 2025, "Meta-RL for LLM agents", github.com/mlbio-epfl/LaMer) as the
``lamer`` estimator, for the LaMer baseline of SkillRise's Tables 1-2.

It follows LaMer's public code at these paths (HEAD of the mirrored repository):

* ``agent_system/multi_turn_rollout/metarl_rollout_loop.py`` (``credit_assignment``): one backward pass
  over a trial's play steps across all its attempts. Inside an attempt a step's return is
  ``r_t + step_gamma * G_{t+1}``; an attempt's last step continues into the next attempt's first step
  with ``traj_gamma`` instead (``G = r + traj_gamma * G_next_attempt_first_step``). A reflection row
  gets the return of the first step of the attempt it precedes. A play row's episode score is its
  attempt's summed reward; a reflection row's is 0.
* ``verl/trainer/ppo/ray_trainer.py`` (``apply_invalid_action_penalty``): the format penalty is
  subtracted from a row's score (``token_level_scores``) before any normalisation; the discounted
  step returns are not penalised.
* ``verl/trainer/ppo/core_gigpo.py`` (``compute_gigpo_outcome_advantage``): GiGPO with
  ``uid`` = one group per task over all its trials and attempts. The episode part normalises each
  row's score against every row of the task group (``compute_mean_std_cross_all_data=True``: steps
  and reflections alike, so a longer attempt weighs more); the step part normalises step returns
  within (task, anchor observation) groups, every reflection of a task sharing the anchor
  ``'reflection'`` (``agent_system/environments/*/env_manager.py``, ``reflect``). ``mean_norm``
  subtracts the mean, ``mean_std_norm`` also divides by the unbiased std + eps. A task group of one
  row keeps its raw score (mean 0, std 1); a step group of one row gets 0. A = A^E + w * A^S.
* ``examples/*/lamer_*_qwen3_4b.sh``: ``mode=mean_norm``, ``step_gamma=0.95``, ``traj_gamma=0.6``,
  ``step_advantage_w=1.0``, ``invalid_action_penalty_coef=0.5``.

Our rows: ``skl_position`` is the attempt, phase ``solve`` a play step (``skl_step_index``,
``skl_step_reward``, ``skl_anchor_state``), phase ``curate`` the reflection written after attempt k
(it precedes attempt k + 1), ``skl_sequence_id`` the task. Not reproduced: LaMer's ``adjust_batch``
copies rows to pad the batch to a divisible size, which also enters its group means.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Mapping

import numpy as np
import torch

from skl_verl.options import AtLeast, Between, OneOf
from skl_verl.rollout import sample_fields as sf
from skl_verl.trainer.estimators import penalised_scores, require_step_samples, to_tokens
from skl_verl.trainer.group_advantage import Normalisation, group_codes, group_relative_advantages


@dataclass(frozen=True)
class LamerCreditOptions:
    """``algorithm.lamer.*`` (defaults: LaMer's run scripts)."""

    step_gamma: Annotated[float, Between(0, 1)] = 0.95
    """Discount between consecutive steps of one attempt (LaMer ``step_gamma``)."""
    attempt_gamma: Annotated[float, Between(0, 1)] = 0.6
    """Discount from an attempt's last step to the next attempt's first step (LaMer ``traj_gamma``)."""
    norm: Annotated[str, OneOf("mean", "std")] = "mean"
    """``mean``: subtract the group mean (LaMer ``mean_norm``); ``std``: also divide by the std (``mean_std_norm``)."""
    step_advantage_weight: Annotated[float, AtLeast(0)] = 1.0
    """w in A = A^E + w * A^S (LaMer ``step_advantage_w``)."""
    eps: Annotated[float, AtLeast(0)] = 1e-6


LAMER_FIELDS = (sf.TRAJECTORY_ID, sf.SEQUENCE_ID, sf.POSITION, sf.PHASE, sf.STEP_INDEX, sf.ANCHOR_STATE, sf.STEP_REWARD)


def cross_attempt_returns(
    trial: torch.Tensor,
    attempt: torch.Tensor,
    step_index: torch.Tensor,
    step_reward: torch.Tensor,
    is_reflection: torch.Tensor,
    step_gamma: float,
    attempt_gamma: float,
) -> torch.Tensor:
    """Each row's discounted return, LaMer's ``credit_assignment`` without its Python loop.

    A trial's play steps are laid out in play order (attempt, then step) as columns of a
    (trials x columns) table; the discount from column c to c + 1 is ``step_gamma`` inside an attempt
    and ``attempt_gamma`` where an attempt ends. ``G[c] = sum_{s >= c} prod_{u=c}^{s-1} d[u] * r[s]``,
    with the products taken by ``cumprod`` (exact for any gamma in [0, 1], zeros included). A reflection
    row written after attempt k returns G at the first step of attempt k + 1 (0 if none was played).
    ``step_index``/``step_reward`` are ignored on reflection rows.
    """
    for name, gamma in (("step_gamma", step_gamma), ("attempt_gamma", attempt_gamma)):
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {gamma}")
    returns = torch.zeros(trial.shape, dtype=torch.float64)
    play = ~is_reflection
    if not bool(play.any()):
        return returns
    num_trials = int(trial.max()) + 1
    num_attempts = int(attempt.max()) + 2  # one spare attempt: a reflection may precede an unplayed one
    steps = torch.zeros(num_trials, num_attempts, dtype=torch.long).index_put_(
        (trial[play], attempt[play]), torch.ones_like(trial[play]), accumulate=True
    )
    max_index = torch.full((num_trials * num_attempts,), -1, dtype=torch.long).scatter_reduce(
        0, (trial * num_attempts + attempt)[play], step_index[play], reduce="amax"
    ).view(num_trials, num_attempts)
    if int(step_index[play].min()) < 0 or not torch.equal(max_index + 1, steps):
        raise ValueError(f"each attempt's play rows must carry {sf.STEP_INDEX} 0..n-1, once each (one sample per env step)")
    offsets = torch.cumsum(steps, dim=1) - steps  # first column of each attempt
    width = int(steps.sum(dim=1).max())
    column = offsets[trial[play], attempt[play]] + step_index[play]
    rewards = torch.zeros(num_trials, width, dtype=torch.float64).index_put_((trial[play], column), step_reward[play].to(torch.float64))
    # d[t, c]: the discount from column c to c + 1; attempt_gamma where column c ends its attempt.
    ends_attempt = torch.zeros(num_trials, width + 1, dtype=torch.bool)
    attempt_ends = (offsets + steps - 1).clamp(min=0)
    ends_attempt.scatter_(1, torch.where(steps > 0, attempt_ends, width), True)
    discount = torch.where(ends_attempt[:, :width], attempt_gamma, step_gamma).to(torch.float64)
    # prod_{u=c}^{s-1} d[u] for s > c: cumprod of d over u >= c, shifted by one column.
    upper = torch.arange(width)[None, :] >= torch.arange(width)[:, None]  # [c, u] = u >= c
    chain = torch.where(upper[None], discount[:, None, :], torch.ones((), dtype=torch.float64)).cumprod(dim=2)
    weights = torch.cat([torch.ones(num_trials, width, 1, dtype=torch.float64), chain[:, :, :-1]], dim=2)
    weights = torch.where(upper[None], weights, torch.zeros((), dtype=torch.float64))
    table = torch.einsum("tcs,ts->tc", weights, rewards)  # G[t, c]
    returns[play] = table[trial[play], column]
    # A reflection after attempt k returns G at attempt k + 1's first column (0 when it has no steps).
    reflection = is_reflection
    next_attempt = attempt[reflection] + 1
    first_column = offsets[trial[reflection], next_attempt].clamp(max=max(width - 1, 0))
    played_next = steps[trial[reflection], next_attempt] > 0
    returns[reflection] = torch.where(played_next, table[trial[reflection], first_column], torch.zeros((), dtype=torch.float64))
    return returns


def lamer_advantages(
    row_scores: torch.Tensor,
    task: torch.Tensor,
    step_group: torch.Tensor,
    step_returns: torch.Tensor,
    norm: Normalisation = "mean",
    step_advantage_weight: float = 1.0,
    eps: float = 1e-6,
) -> torch.Tensor:
    """A = A^E + w * A^S per row. A^E: ``row_scores`` (penalty already subtracted) against every row of
    its ``task`` group, a one-row group keeping its raw score as in LaMer's ``episode_norm_reward``;
    A^S: ``step_returns`` within ``step_group`` (dense ids of task x anchor), 0 for a one-row group."""
    if step_advantage_weight < 0:
        raise ValueError(f"step_advantage_weight must be >= 0, got {step_advantage_weight}")
    scores = row_scores.to(torch.float64)
    episode = group_relative_advantages(scores, task, norm=norm, eps=eps)
    alone = torch.bincount(task)[task] == 1
    episode = torch.where(alone, scores / (1.0 + eps) if norm == "std" else scores, episode)
    step = group_relative_advantages(step_returns, step_group, norm=norm, eps=eps)
    return episode + step_advantage_weight * step


def _column(sample_fields: Mapping[str, np.ndarray], key: str, rows: np.ndarray, fill: Any) -> np.ndarray:
    values = np.asarray(sample_fields[key], dtype=object)
    missing = np.array([v is None for v in values])
    if bool((missing & rows).any()):
        raise ValueError(f"estimator 'lamer': some play-step samples lack {key}; LaMer needs one sample per env step "
                         "(an agent loop with sample_granularity: step)")
    values[missing] = fill
    return values


def lamer_estimator(token_level_rewards, response_mask, sample_fields, options, **_):
    """LaMer's GiGPO-with-attempts credit on our step samples and reflections (module docstring).
    Options: ``LamerCreditOptions``."""
    phase = np.asarray(sample_fields[sf.PHASE]).astype(str)
    unknown = sorted(set(phase) - {"solve", "curate"})
    if unknown:
        raise ValueError(f"estimator 'lamer' got phases {unknown}; expected 'solve' (play steps) and 'curate' (reflections)")
    is_reflection = phase == "curate"
    play = ~is_reflection
    step_index = _column(sample_fields, sf.STEP_INDEX, play, 0).astype(np.int64)
    step_reward = _column(sample_fields, sf.STEP_REWARD, play, 0.0).astype(np.float64)
    anchor = _column(sample_fields, sf.ANCHOR_STATE, play, "").astype(str)
    task = group_codes(np.asarray(sample_fields[sf.SEQUENCE_ID]))
    returns = cross_attempt_returns(
        trial=group_codes(np.asarray(sample_fields[sf.TRAJECTORY_ID])),
        attempt=torch.as_tensor(np.asarray(sample_fields[sf.POSITION]).astype(np.int64)),
        step_index=torch.as_tensor(step_index),
        step_reward=torch.as_tensor(step_reward),
        is_reflection=torch.as_tensor(is_reflection),
        step_gamma=float(options.step_gamma),
        attempt_gamma=float(options.attempt_gamma),
    )
    # Every reflection of a task shares one anchor; the phase column keeps it apart from any env state.
    step_group = group_codes(np.asarray(sample_fields[sf.SEQUENCE_ID]), is_reflection, np.where(is_reflection, "", anchor))
    row_scores = penalised_scores(token_level_rewards, sample_fields)
    advantages = lamer_advantages(row_scores, task, step_group, returns, norm=options.norm,
                                  step_advantage_weight=float(options.step_advantage_weight), eps=float(options.eps))
    return to_tokens(advantages, returns, response_mask)


def check_lamer_loop(config: Any, options: LamerCreditOptions, loop_entry: Mapping[str, Any]) -> None:
    """LaMer scores env steps: its loop must emit one sample per step."""
    require_step_samples(config, loop_entry, "credits env steps", "lamer_alfworld")
