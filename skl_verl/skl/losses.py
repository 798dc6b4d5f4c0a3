"""SKL's losses and credit as verl estimators: SKL-SD Eq. 1 and SKL-RL Eq. 4 (with the KL
distillation credit of Eqs. 5-6).

SKL-SD Eq. 1, L = L_PG(D_base) + λ1·L_PG(D_distill) + λ2·L_SFT(D_reflect), is self-imitation: the paper
calls it "supervised learning over heuristically quality-filtered experience" that maximises the
probability of the first and second rollouts that hit the target. So every kept sample trains with a
positive coefficient (1 on D_base, λ1 on D_distill, λ2 on D_reflect), the samples the filter discarded
train nothing, and they leave the loss normaliser too (``skl_sd_kept_token_weights``): the step size
does not depend on how many samples the filter threw away. Two readings of the PG terms:
``objective: policy_gradient`` (default; clipped PG with those coefficients as advantages, estimator
``skl_sd`` + loss ``skl_sd_eq1``, SFT exact on D_reflect) and ``objective: weighted_nll`` (one weighted
NLL for all three terms, no ratio; loss ``skl_weighted_nll``). The default, ``objective: r3l_opmd``, is how the
authors ran SKL-SD in R3L's code: ``opmd_reweight_adv`` weights over each task's base episodes and retries
(``opmd_weights``) and the OPMD loss −A·log π / 2 (``skl_opmd``, no ratio)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
import torch
from verl.trainer.ppo import core_algos

from skl_verl.options import AtLeast, ConfigError, OneOf
from skl_verl.rollout import sample_fields as sf
from skl_verl.skl import fields as skl_fields
from skl_verl.trainer.estimators import NormOptions, outcome_scores, reference_rows, to_tokens, trial_units
from skl_verl.trainer.registry import require_fields
from skl_verl.trainer.group_advantage import advantages_against_reference, group_codes


def weighted_nll_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """SKL-SD Eq. 1 as weighted self-imitation: L = -Σ_t w_t log π(y_t), no ratio, no clipping.

    SKL-SD trains only on filtered successes ("self-distillation, or self-imitation": supervised
    learning over quality-filtered experience, §3.1), so the per-token weights w (1 for D_base, λ1
    for D_distill, λ2 for D_reflect, 0 elsewhere; estimator ``skl_sd``) arrive as advantages and
    the loss is their weighted negative log-likelihood. Unlike the clipped ``vanilla`` loss, the
    SFT term stays an SFT term on every mini-batch. ``rollout_is_weights`` carries the kept-token
    scaling (``skl_weighted_nll_token_weights``) that keeps discarded samples out of the normaliser. Select with
    ``actor_rollout_ref.actor.policy_loss.loss_mode=skl_weighted_nll``.
    """
    loss_mat = -advantages * log_prob
    if rollout_is_weights is not None:
        loss_mat = loss_mat * rollout_is_weights
    batch_info = getattr(config, "global_batch_info", None) or {}
    loss = core_algos.agg_loss(loss_mat=loss_mat, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **batch_info)
    mask = response_mask.bool()
    trained = mask & (advantages != 0)
    metrics = {
        "actor/ppo_kl": (old_log_prob - log_prob)[mask].mean().detach().item() if mask.any() else 0.0,
        "actor/weighted_nll_token_frac": (trained.sum() / mask.sum().clamp(min=1)).item(),
    }
    return loss, metrics


SKL_SD_PHASES = ("base", "distill", "reflect")


def _checked_phases(phase: np.ndarray) -> np.ndarray:
    phase = np.asarray(phase).astype(str)
    unknown = sorted(set(phase) - set(SKL_SD_PHASES))
    if unknown:
        raise ValueError(f"skl_sd estimator got phases {unknown}; expected {SKL_SD_PHASES}")
    return phase


def skl_sd_weights(phase: np.ndarray, keep: np.ndarray, lambda_distill: float, lambda_reflect: float) -> torch.Tensor:
    """Per-sample coefficients of SKL-SD Eq. 1, L = L_PG(D_base) + λ1·L_PG(D_distill) + λ2·L_SFT(D_reflect).

    Eq. 1 is self-imitation over filtered experience (§3.1), so the coefficient of a kept sample does
    not depend on the other samples of its task: 1 for a kept base episode (D_base), λ1 for a kept
    retry (D_distill), λ2 for a kept reflection (D_reflect), 0 for everything the filter discarded.
    (R3L's ``opmd_reweight_adv``, the code the paper builds on, likewise gives every success the fixed
    score 1.) The coefficient is the advantage of the clipped PG terms and the NLL weight of the SFT term.
    """
    phase = _checked_phases(phase)
    weight_of = {"base": 1.0, "distill": float(lambda_distill), "reflect": float(lambda_reflect)}
    weights = torch.as_tensor(np.array([weight_of[p] for p in phase], dtype=np.float64))
    return torch.where(torch.as_tensor(np.asarray(keep, dtype=bool)), weights, torch.zeros_like(weights))


TERM_NONE, TERM_PG, TERM_SFT = 0, 1, 2


def skl_sd_terms(phase: np.ndarray, keep: np.ndarray) -> torch.Tensor:
    """The Eq. 1 term of each sample: TERM_PG for kept base and distill samples (D_base, D_distill),
    TERM_SFT for kept reflections (D_reflect), TERM_NONE for everything the filter discarded."""
    phase = _checked_phases(phase)
    keep = torch.as_tensor(np.asarray(keep, dtype=bool))
    is_reflect = torch.as_tensor(phase == "reflect")
    terms = torch.where(is_reflect, TERM_SFT, TERM_PG)
    return torch.where(keep, terms, TERM_NONE).to(torch.int64)


def skl_sd_kept_token_weights(keep: np.ndarray, response_mask: torch.Tensor) -> torch.Tensor:
    """Per-token weights that take discarded samples out of the normaliser of Eq. 1's token mean.

    verl's ``token-mean`` divides the masked loss sum by every response token of the update batch,
    discarded samples included, so without this the step on the same kept data shrinks as the
    filter discards more (one kept row alone: −1.0 per token; with one discarded row of equal length
    beside it: −0.5). Kept tokens get n_all / n_kept (n counted over ``response_mask`` of the batch),
    discarded ones 0, so the token mean over the batch equals the token mean over the kept tokens.
    Exact when the update runs the batch as one mini-batch; with several, each mini-batch is scaled by
    the batch-wide kept fraction."""
    mask = response_mask.to(torch.float64)
    kept = torch.as_tensor(np.asarray(keep, dtype=bool))[:, None].to(mask.dtype) * mask
    kept_tokens = kept.sum()
    scale = mask.sum() / kept_tokens if kept_tokens > 0 else torch.zeros((), dtype=mask.dtype)
    return (kept * scale).to(torch.float32)


def skl_sd_objective(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    terms: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> dict[str, torch.Tensor]:
    """Per-token losses of SKL-SD Eq. 1.

    PG tokens (``terms == TERM_PG``, D_base and D_distill): the clipped surrogate
    max(−A·r, −A·clip(r, 1−clip_low, 1+clip_high)) with r = exp(log π − log π_old), as in GRPO.
    SFT tokens (``TERM_SFT``, D_reflect): −w·log π with w = ``advantages`` (λ2): a plain weighted NLL,
    no ratio and no clipping on any mini-batch. TERM_NONE tokens: 0.
    Returns ``loss`` (per token), the ``pg`` and ``sft`` masks and the ``pg_clipped`` mask.
    """
    pg = terms == TERM_PG
    sft = terms == TERM_SFT
    ratio = torch.exp(torch.where(pg, log_prob - old_log_prob, torch.zeros_like(log_prob)))
    surrogate = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    pg_loss = torch.maximum(surrogate, clipped)
    loss = torch.where(pg, pg_loss, torch.where(sft, -advantages * log_prob, torch.zeros_like(log_prob)))
    return {"loss": loss, "pg": pg, "sft": sft, "pg_clipped": pg & (clipped > surrogate)}


def encode_term_weights(terms: torch.Tensor, is_weights: torch.Tensor | None = None) -> torch.Tensor:
    """Per-token Eq. 1 terms carried to the policy loss in ``rollout_is_weights``.

    verl 0.9.1 hands a policy loss only old/new log-probs, advantages, the response mask and
    ``rollout_is_weights``. Importance weights are never negative, so the sign carries the term:
    w > 0 a PG token with IS weight w, w < 0 an SFT token with IS weight −w, w == 0 a token of no
    dataset (its loss is 0; keeping it out of the normaliser is ``skl_sd_kept_token_weights``' job).
    ``terms`` is per token; ``is_weights`` (verl's rollout correction, or the kept-token scaling)
    default to 1.
    """
    weights = torch.ones(terms.shape, dtype=torch.float32) if is_weights is None else is_weights.to(torch.float32).abs()
    sign = torch.where(terms == TERM_SFT, -1.0, torch.where(terms == TERM_PG, 1.0, 0.0))
    return weights * sign


def decode_term_weights(encoded: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(terms, IS weights) from ``encode_term_weights``' output."""
    terms = torch.where(encoded < 0, TERM_SFT, torch.where(encoded > 0, TERM_PG, TERM_NONE)).to(torch.int64)
    return terms, encoded.abs()


OBJECTIVE_LOSS_MODES = {"r3l_opmd": "skl_opmd", "policy_gradient": "skl_sd_eq1", "weighted_nll": "skl_weighted_nll"}
"""The policy loss each ``algorithm.skl_sd.objective`` needs (checked by ``skl_verl.main``)."""


def skl_sd_eq1_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """SKL-SD Eq. 1 as the paper states it: clipped PG on D_base, λ1·clipped PG on D_distill,
    λ2·SFT on D_reflect (``skl_sd_objective``), aggregated like verl's own losses. The term of each
    token arrives in ``rollout_is_weights`` (``encode_term_weights``), which the ``skl_sync`` trainer
    writes for this loss. Select with ``actor_rollout_ref.actor.policy_loss.loss_mode=skl_sd_eq1``
    and ``algorithm.skl_sd.objective=policy_gradient``."""
    if rollout_is_weights is None:
        raise ValueError(
            "policy loss skl_sd_eq1 needs the Eq. 1 term of every token, which the skl_sync trainer writes "
            "(trainer.v1.trainer_mode=skl_sync, algorithm.adv_estimator=skl_sd)"
        )
    terms, is_weights = decode_term_weights(rollout_is_weights)
    clip_low = config.clip_ratio_low if config is not None and config.clip_ratio_low is not None else 0.2
    clip_high = config.clip_ratio_high if config is not None and config.clip_ratio_high is not None else 0.2
    parts = skl_sd_objective(log_prob, old_log_prob, advantages, terms, clip_low=clip_low, clip_high=clip_high)
    batch_info = getattr(config, "global_batch_info", None) or {}
    loss = core_algos.agg_loss(
        loss_mat=parts["loss"] * is_weights, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **batch_info
    )
    mask = response_mask.bool()
    pg, sft = parts["pg"] & mask, parts["sft"] & mask
    metrics = {
        "actor/skl_sd_pg_loss": parts["loss"][pg].mean().detach().item() if pg.any() else 0.0,
        "actor/skl_sd_sft_loss": parts["loss"][sft].mean().detach().item() if sft.any() else 0.0,
        "actor/pg_clipfrac": (parts["pg_clipped"] & mask).sum().item() / max(int(pg.sum()), 1),
        "actor/ppo_kl": (old_log_prob - log_prob)[pg].mean().detach().item() if pg.any() else 0.0,
    }
    return loss, metrics


def skl_sd_term_weights(sample_fields: dict[str, np.ndarray], response_mask: torch.Tensor, is_weights: torch.Tensor | None) -> torch.Tensor:
    """The per-token Eq. 1 terms of a batch (from ``skl_phase`` and ``skl_keep``), encoded for ``skl_sd_eq1``,
    with the kept tokens scaled so discarded samples leave the normaliser (``skl_sd_kept_token_weights``)."""
    require_fields("skl_sd_eq1", sample_fields, (sf.PHASE, skl_fields.KEEP))
    keep = sample_fields[skl_fields.KEEP]
    terms = skl_sd_terms(sample_fields[sf.PHASE], keep)
    scaled = skl_sd_kept_token_weights(keep, response_mask)
    if is_weights is not None:
        scaled = scaled * is_weights.to(torch.float32).abs()
    return encode_term_weights(terms[:, None].expand(response_mask.shape), scaled)


def skl_weighted_nll_token_weights(sample_fields: dict[str, np.ndarray], response_mask: torch.Tensor, is_weights: torch.Tensor | None) -> torch.Tensor:
    """``rollout_is_weights`` for ``skl_weighted_nll``: the kept-token scaling (discarded samples out of the
    normaliser), times verl's rollout-correction weights when configured."""
    require_fields("skl_weighted_nll", sample_fields, (skl_fields.KEEP,))
    scaled = skl_sd_kept_token_weights(sample_fields[skl_fields.KEEP], response_mask)
    return scaled if is_weights is None else scaled * is_weights.to(torch.float32)


OPMD_TAU = 1.0
"""R3L's OPMD loss divides the token mean of −A·log π by 1 + τ; Trinity's default τ is 1 (opmd_policy_loss.py)."""


def opmd_weights(scores: torch.Tensor, phase: np.ndarray, keep: np.ndarray, task: np.ndarray,
                 lambda_reflect: float = 1.0) -> torch.Tensor:
    """Per-sample advantages of R3L's ``opmd_reweight_adv`` (Trinity ``opmd_advantage.py``), the weights the
    authors ran SKL-SD with. A task's base episodes and retries are one group (R3L's ``{task}_explore``: first
    and second rollouts); the baseline is the group's mean reward (0 for a group of one). With s = r − mean:
    r ≥ 1 (a full success) scores 1 whatever the mean; else s ≥ 0 (at or above the mean) scores 3·s; else s.
    A reflection is R3L's reflection experience, a group of one with reward 1: λ2 (default 1) when kept, 0
    otherwise."""
    phase = _checked_phases(phase)
    scores = torch.as_tensor(scores, dtype=torch.float64)
    weights = torch.zeros_like(scores)
    explore = np.flatnonzero(phase != "reflect")
    groups: dict[Any, list[int]] = {}
    for i in explore:
        groups.setdefault(task[i], []).append(int(i))
    for rows in groups.values():
        r = scores[rows]
        mean = r.mean() if len(rows) > 1 else torch.zeros((), dtype=r.dtype)
        s = r - mean
        weights[rows] = torch.where(r >= 1.0, torch.ones_like(r), torch.where(s >= 0, 3.0 * s, s))
    reflect = torch.as_tensor((phase == "reflect") & np.asarray(keep, dtype=bool))
    return torch.where(reflect, torch.full_like(weights, float(lambda_reflect)), weights)


def opmd_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """R3L's OPMD policy loss (Trinity ``opmd_policy_loss.py``): agg(−A·log π) / (1 + τ), τ = 1: no ratio, no
    clipping. ``rollout_is_weights`` carries the token weights of ``skl_opmd_token_weights`` (the reflections the
    filter dropped leave the normaliser). Select with ``actor_rollout_ref.actor.policy_loss.loss_mode=skl_opmd``
    and ``algorithm.skl_sd.objective=r3l_opmd`` (the default)."""
    loss_mat = -advantages * log_prob
    if rollout_is_weights is not None:
        loss_mat = loss_mat * rollout_is_weights
    batch_info = getattr(config, "global_batch_info", None) or {}
    loss = core_algos.agg_loss(loss_mat=loss_mat, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **batch_info)
    mask = response_mask.bool()
    metrics = {"actor/ppo_kl": (old_log_prob - log_prob)[mask].mean().detach().item() if mask.any() else 0.0}
    return loss / (1.0 + OPMD_TAU), metrics


def skl_opmd_token_weights(sample_fields: dict[str, np.ndarray], response_mask: torch.Tensor, is_weights: torch.Tensor | None) -> torch.Tensor:
    """``rollout_is_weights`` for ``skl_opmd``: every base episode and retry is an experience (R3L trains its
    failures too), a reflection only when kept (R3L adds no experience for the others), so dropped
    reflections leave the token-mean normaliser (``skl_sd_kept_token_weights``)."""
    require_fields("skl_opmd", sample_fields, (sf.PHASE, skl_fields.KEEP))
    phase = _checked_phases(sample_fields[sf.PHASE])
    trains = (phase != "reflect") | np.asarray(sample_fields[skl_fields.KEEP], dtype=bool)
    scaled = skl_sd_kept_token_weights(trains, response_mask)
    return scaled if is_weights is None else scaled * is_weights.to(torch.float32)


@dataclass(frozen=True)
class SklSdOptions:
    """``algorithm.skl_sd.*``: Eq. 1's reading and weights."""

    objective: Annotated[str, OneOf(*OBJECTIVE_LOSS_MODES)] = "r3l_opmd"
    """``r3l_opmd`` (default, as the authors ran SKL-SD in R3L's code): ``opmd_weights`` over each task's base
    episodes and retries, λ2 on kept reflections, loss ``skl_opmd``; ``policy_gradient``: coefficients 1/λ1/λ2 on kept samples as advantages of a clipped PG (SFT exact on
    D_reflect), loss ``skl_sd_eq1``; ``weighted_nll``: the same coefficients as weights of one NLL,
    ``skl_weighted_nll``."""
    lambda_distill: Annotated[float, AtLeast(0)] = 1.0
    """λ1 of Eq. 1, on D_distill (the retries; ``r3l_opmd`` weighs retries by ``opmd_weights`` instead)."""
    lambda_reflect: Annotated[float, AtLeast(0)] = 1.0
    """λ2 of Eq. 1, on D_reflect (the reflections; R3L's reflection experiences have advantage 1)."""


def skl_sd_estimator(token_level_rewards, response_mask, sample_fields, options, **_):
    """SKL-SD Eq. 1 (options: ``SklSdOptions``): ``r3l_opmd`` takes R3L's ``opmd_weights`` (the group of a base
    episode or retry is its task, ``skl_sequence_id``); the two self-imitation objectives take the same
    per-sample coefficients (``skl_sd_weights``) and differ in the policy loss that reads them."""
    scores = outcome_scores(token_level_rewards)
    if options.objective == "r3l_opmd":
        weights = opmd_weights(scores, sample_fields[sf.PHASE], sample_fields[skl_fields.KEEP],
                               np.asarray(sample_fields[sf.SEQUENCE_ID]), options.lambda_reflect)
        return to_tokens(weights, scores, response_mask)
    weights = skl_sd_weights(sample_fields[sf.PHASE], sample_fields[skl_fields.KEEP], options.lambda_distill, options.lambda_reflect)
    return to_tokens(weights, scores, response_mask)


def check_skl_sd_loss(config: Any, options: SklSdOptions, loop_entry: Any) -> None:
    """Each reading of Eq. 1 trains with its own policy loss."""
    loss_mode = config.actor_rollout_ref.actor.policy_loss.get("loss_mode", "vanilla")
    if loss_mode != OBJECTIVE_LOSS_MODES[options.objective]:
        raise ConfigError(
            f"algorithm.skl_sd.objective={options.objective} trains with its own policy loss, but "
            f"actor_rollout_ref.actor.policy_loss.loss_mode is {loss_mode!r}; set it, e.g. "
            f"actor_rollout_ref.actor.policy_loss.loss_mode={OBJECTIVE_LOSS_MODES[options.objective]}"
        )


SKL_RL_OBJECTIVES = ("grpo_distill", "distill_only")


@dataclass(frozen=True)
class SklRlOptions(NormOptions):
    """``algorithm.skl_rl.*`` (norm and eps: the GRPO advantages of Eq. 4)."""

    distill_coef: Annotated[float, AtLeast(0)] = 0.1
    """λ of Eq. 4, on the distillation term."""
    objective: Annotated[str, OneOf(*SKL_RL_OBJECTIVES)] = "grpo_distill"
    """``grpo_distill`` (Eq. 4): GRPO on the traces plus λ times the distillation term. ``distill_only``: the
    distillation term alone, as the authors' distillation script trains (``loss_mode=distillation`` skips the
    policy-gradient and the KL-to-reference terms): traces get no GRPO advantage, and the reverse-KL credit is a
    token mean over the traces' tokens (``trace_token_mean_scale``)."""


def reverse_kl_credit(student_log_probs: torch.Tensor, teacher_log_probs: torch.Tensor, coef: float) -> torch.Tensor:
    """Eq. 6's per-token credit on the student's sampled z tokens: −λ·(log π(z_t | s, H) − log π(z_t | τ^H_N, s, H)).

    As the advantage A of verl's surrogate −A·r (r = π/π_old, 1 at the policy that sampled z), its gradient is
    λ·(log π_s − log π_t)·∇log π_s: the gradient of the authors' sampled reverse-KL loss
    λ·log π_s·sg(log π_s − log π_t) (the k1 estimate used as a reward; the teacher gets no gradient)."""
    return -float(coef) * (student_log_probs - teacher_log_probs)


def trace_token_mean_scale(is_trace: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """n_all / n_trace: the factor that makes verl's token mean over every masked token of the batch a token mean
    over the traces' tokens alone.

    A teacher probe keeps its z tokens masked (the trainer passes old log-probs only for rows with a masked
    token), so without it the probes' tokens, trained at advantage 0, would sit in the normaliser too and halve
    the distillation step against the authors' token mean over the student's z tokens. Exact when the update
    runs the batch as one mini-batch (as ``skl_sd_kept_token_weights``); 1 when the batch has no trace token."""
    mask = response_mask.to(torch.float64)
    trace_tokens = mask[torch.as_tensor(is_trace, dtype=torch.bool)].sum()
    return mask.sum() / trace_tokens if trace_tokens > 0 else torch.ones((), dtype=mask.dtype)


def skl_rl_estimator(token_level_rewards, response_mask, sample_fields, options, old_log_probs=None, **_):
    """SKL-RL Eq. 4: GRPO on the interleaved traces (phase 'act', grouped per task) plus λ times
    the distillation term (``objective: distill_only``: the distillation term alone, traces at advantage 0).
    Forward KL (Eq. 5): 'distill' samples (student context -> ẑ) get λ.
    Reverse KL (Eq. 6): each 'distill_teacher' probe scores the student's z under the teacher
    context (its ``Z_SPAN``: z's start and end in the trace, z's start in the probe); the z tokens of its trace
    get ``reverse_kl_credit`` per token, from the old log-probs; probes themselves get 0.
    Options: ``SklRlOptions``."""
    coef = float(options.distill_coef)
    distill_only = options.objective == "distill_only"
    phase = np.asarray(sample_fields[sf.PHASE]).astype(str)
    unknown_phases = sorted(set(phase) - {"act", "distill", "distill_teacher"})
    if unknown_phases:
        raise ValueError(f"skl_rl estimator got phases {unknown_phases}; expected 'act', 'distill', 'distill_teacher'")
    scores = outcome_scores(token_level_rewards).to(torch.float64)
    is_trace = torch.as_tensor(phase == "act")
    # One reference row per trial (a game's first window): every window of a game gets the game's advantage,
    # and a game counts once in its group whatever its number of windows (one sample per game: as before).
    units, first = trial_units(sample_fields)
    grpo = advantages_against_reference(scores, group_codes(sample_fields[sf.SEQUENCE_ID], phase),
                                        reference_rows(first, len(units), "trials"), norm=options.norm, eps=float(options.eps))
    trace_advantage = torch.zeros_like(grpo) if distill_only else grpo
    per_sample = torch.where(is_trace, trace_advantage, torch.where(torch.as_tensor(phase == "distill"), coef, 0.0))
    advantages, returns = to_tokens(per_sample, scores, response_mask)
    probes = np.flatnonzero(phase == "distill_teacher")
    if probes.size:
        if old_log_probs is None:
            raise ValueError("reverse-KL distillation needs the old log-probs of the batch (compute them first)")
        scale = trace_token_mean_scale(is_trace, response_mask) if distill_only else 1.0
        # A probe scores the z of its trace's sample: the episode's, or its move's window (skl_step_index).
        windows = sample_fields.get(sf.STEP_INDEX, np.full(len(phase), None, dtype=object))
        trace_row = {(sample_fields[sf.TRAJECTORY_ID][i], windows[i] or 0): i for i in np.flatnonzero(phase == "act")}
        mask = response_mask.to(advantages.dtype)
        for j in probes:  # one per real step with a teacher probe; spans differ in length
            i = trace_row[(sample_fields[sf.TRAJECTORY_ID][j], windows[j] or 0)]
            # [start, end) of z in the trace's response; the probe's z starts after its teacher context.
            start, end, probe_start = (int(x) for x in sample_fields[skl_fields.Z_SPAN][j])
            end = min(end, advantages.shape[1], start + old_log_probs.shape[1] - probe_start)
            credit = reverse_kl_credit(old_log_probs[i, start:end], old_log_probs[j, probe_start : probe_start + end - start], coef)
            advantages[i, start:end] += scale * credit.to(advantages.dtype) * mask[i, start:end]
    return advantages, returns
