"""The one module that knows verl's internals. A verl upgrade should only touch this file.

Extension points used (see docs/verl_integration.md):
- ``core_algos.register_adv_est``: our advantage estimators under their own names.
- ``core_algos.register_policy_loss``: ``skl_weighted_nll`` (SKL-SD's Eq. 1 as weighted self-imitation).
- ``agent_loop.register`` (in skl_verl.agent_loops) plus an agent-loop YAML so Ray workers,
  which do not share the driver's registry, can instantiate our loops by name.
- ``distillation.losses.register_distillation_loss``: SKL-RL's KL distillation (skl_reverse_kl,
  skl_forward_kl), see skl_verl.algorithms.distill.
- ``v1.register_trainer("skl_sync")``: a thin subclass of verl's synchronous trainer whose only
  change is that estimators flagged ``wants_sample_fields`` also receive the per-sample fields our
  agent loops attach (verl 0.9.1 passes only token_level_rewards, response_mask, config, index).
- Ray's ``runtime_env.worker_process_setup_hook`` runs ``register()`` in every Ray process.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from verl import DataProto
from verl.trainer.ppo import core_algos

from skl_verl import sample_fields as sf
from skl_verl.algorithms.group_advantage import group_codes, group_relative_advantages
from skl_verl.algorithms.skillrise import skillrise_advantages

logger = logging.getLogger(__name__)

SAMPLE_FIELDS_ATTR = "wants_sample_fields"
AGENT_LOOP_CONFIG = str(Path(__file__).parent / "config" / "agent_loops.yaml")


def wants_sample_fields(fn: Callable) -> Callable:
    setattr(fn, SAMPLE_FIELDS_ATTR, True)
    return fn


def _require_fields(name: str, sample_fields: dict[str, np.ndarray] | None, keys: tuple[str, ...]) -> None:
    if sample_fields is None:
        raise ValueError(
            f"advantage estimator {name!r} needs per-sample fields {keys}; verl's own compute_advantage does "
            "not pass them. Train with skl_verl.main (trainer.v1.trainer_mode=skl_sync) or call "
            "skl_verl.verl_glue.compute_advantage."
        )
    missing = [k for k in keys if k not in sample_fields]
    if missing:
        raise ValueError(f"estimator {name!r}: batch lacks per-sample fields {missing}; use an skl_verl agent loop")


def _outcome_scores(token_level_rewards: torch.Tensor) -> torch.Tensor:
    return token_level_rewards.sum(dim=-1)


def _to_tokens(advantages: torch.Tensor, returns: torch.Tensor, response_mask: torch.Tensor):
    mask = response_mask.to(torch.float32)
    return advantages.to(torch.float32)[:, None] * mask, returns.to(torch.float32)[:, None] * mask


@core_algos.register_adv_est("skillrise")
@wants_sample_fields
def skillrise_estimator(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    index: np.ndarray | None = None,
    sample_fields: dict[str, np.ndarray] | None = None,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SkillRise Eqs. 6–7. Options under ``algorithm.skillrise``: gamma (0.6), norm ('std'|'mean'),
    curate_weight (1.0), eps (1e-6)."""
    keys = (sf.TRAJECTORY_ID, sf.SEQUENCE_ID, sf.POSITION, sf.PHASE)
    _require_fields("skillrise", sample_fields, keys)
    from skl_verl.config_checks import estimator_options

    options = estimator_options(config, "skillrise")
    phase = np.asarray(sample_fields[sf.PHASE]).astype(str)
    bad = sorted(set(phase) - {"solve", "curate"})
    if bad:
        raise ValueError(f"skillrise estimator got phases {bad}; expected only 'solve' and 'curate'")
    position = torch.as_tensor(np.asarray(sample_fields[sf.POSITION]).astype(np.int64))
    is_curate = torch.as_tensor(phase == "curate")
    advantages, returns = skillrise_advantages(
        _outcome_scores(token_level_rewards),
        trial=group_codes(sample_fields[sf.TRAJECTORY_ID]),
        group=group_codes(sample_fields[sf.SEQUENCE_ID], sample_fields[sf.POSITION], phase),
        position=position,
        is_curate=is_curate,
        gamma=float(options["gamma"]),
        norm=options["norm"],
        curate_weight=float(options["curate_weight"]),
        eps=float(options["eps"]),
    )
    return _to_tokens(advantages, returns, response_mask)


@core_algos.register_adv_est("skl_grpo")
@wants_sample_fields
def grouped_grpo_estimator(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    index: np.ndarray | None = None,
    sample_fields: dict[str, np.ndarray] | None = None,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO outcome advantages grouped by (sequence, position, phase) instead of by prompt uid, so
    loops that emit several samples per prompt (phases, knowledge turns) are compared like with like.
    Options under ``algorithm.skl_grpo``: norm ('std'|'mean'), eps."""
    keys = (sf.SEQUENCE_ID, sf.POSITION, sf.PHASE)
    _require_fields("skl_grpo", sample_fields, keys)
    from skl_verl.config_checks import estimator_options

    options = estimator_options(config, "skl_grpo")
    groups = group_codes(*(sample_fields[k] for k in keys))
    scores = _outcome_scores(token_level_rewards).to(torch.float64)
    advantages = group_relative_advantages(scores, groups, norm=options["norm"], eps=float(options["eps"]))
    return _to_tokens(advantages, scores, response_mask)


@core_algos.register_policy_loss("skl_weighted_nll")
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
    SFT term stays an SFT term on every mini-batch. Select with
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


def skl_sd_weights(phase: np.ndarray, keep: np.ndarray, lambda_distill: float, lambda_reflect: float) -> torch.Tensor:
    """SKL Eq. 1 as per-sample weights: L = PG(D_base) + λ1 PG(D_distill) + λ2 SFT(D_reflect).

    Every dataset is filtered to successes (self-imitation: negatives are discarded), so each
    kept sample's tokens get weight 1 (base), λ1 (distill) or λ2 (reflect) and the rest 0. With
    the ``skl_weighted_nll`` policy loss the objective is exactly Σ w·(−log π): PG with reward 1 on
    the two filtered PG terms and λ2-weighted SFT on D_reflect. (With verl's clipped ``vanilla``
    loss the gradient is the same at ratio 1; clipping then bounds later mini-batches.)
    """
    phase = np.asarray(phase).astype(str)
    unknown = sorted(set(phase) - set(SKL_SD_PHASES))
    if unknown:
        raise ValueError(f"skl_sd estimator got phases {unknown}; expected {SKL_SD_PHASES}")
    weight_of = {"base": 1.0, "distill": float(lambda_distill), "reflect": float(lambda_reflect)}
    weights = np.array([weight_of[p] for p in phase]) * np.asarray(keep, dtype=bool)
    return torch.as_tensor(weights, dtype=torch.float64)


@core_algos.register_adv_est("skl_sd")
@wants_sample_fields
def skl_sd_estimator(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    index: np.ndarray | None = None,
    sample_fields: dict[str, np.ndarray] | None = None,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SKL-SD Eq. 1. Options under ``algorithm.skl_sd``: lambda_distill (λ1), lambda_reflect (λ2)."""
    _require_fields("skl_sd", sample_fields, (sf.PHASE, sf.KEEP))
    from skl_verl.config_checks import estimator_options

    options = estimator_options(config, "skl_sd")
    weights = skl_sd_weights(sample_fields[sf.PHASE], sample_fields[sf.KEEP], **options)
    return _to_tokens(weights, _outcome_scores(token_level_rewards), response_mask)


@core_algos.register_adv_est("skl_rl")
@wants_sample_fields
def skl_rl_estimator(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    index: np.ndarray | None = None,
    sample_fields: dict[str, np.ndarray] | None = None,
    old_log_probs: torch.Tensor | None = None,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SKL-RL Eq. 4: GRPO on the interleaved traces (phase 'act', grouped per task) plus λ times
    the distillation term. Forward KL (Eq. 5): 'distill' samples (student context -> ẑ) get λ.
    Reverse KL (Eq. 6): each 'distill_teacher' probe scores the student's z under the teacher
    context; the z tokens of its trace get -λ·(log π_student − log π_teacher) per token (the
    k1-reward policy-gradient form), from the old log-probs; probes themselves get 0.
    Options under ``algorithm.skl_rl``: distill_coef (λ), norm ('std'|'mean'), eps."""
    _require_fields("skl_rl", sample_fields, (sf.TRAJECTORY_ID, sf.SEQUENCE_ID, sf.PHASE))
    from skl_verl.config_checks import estimator_options

    options = estimator_options(config, "skl_rl")
    coef = float(options["distill_coef"])
    phase = np.asarray(sample_fields[sf.PHASE]).astype(str)
    unknown_phases = sorted(set(phase) - {"act", "distill", "distill_teacher"})
    if unknown_phases:
        raise ValueError(f"skl_rl estimator got phases {unknown_phases}; expected 'act', 'distill', 'distill_teacher'")
    scores = _outcome_scores(token_level_rewards).to(torch.float64)
    is_trace = torch.as_tensor(phase == "act")
    grpo = group_relative_advantages(
        scores, group_codes(sample_fields[sf.SEQUENCE_ID], phase), norm=options["norm"], eps=float(options["eps"])
    )
    per_sample = torch.where(is_trace, grpo, torch.where(torch.as_tensor(phase == "distill"), coef, 0.0))
    advantages, returns = _to_tokens(per_sample, scores, response_mask)
    probes = np.flatnonzero(phase == "distill_teacher")
    if probes.size:
        if old_log_probs is None:
            raise ValueError("reverse-KL distillation needs the old log-probs of the batch (compute them first)")
        trace_row = {sample_fields[sf.TRAJECTORY_ID][i]: i for i in np.flatnonzero(phase == "act")}
        mask = response_mask.to(advantages.dtype)
        for j in probes:  # one per real step with a teacher probe; spans differ in length
            i = trace_row[sample_fields[sf.TRAJECTORY_ID][j]]
            start, end = (int(x) for x in sample_fields["skl_z_span"][j])
            end = min(end, advantages.shape[1])
            gap = old_log_probs[i, start:end] - old_log_probs[j, : end - start]
            advantages[i, start:end] -= coef * gap.to(advantages.dtype) * mask[i, start:end]
    return advantages, returns


def loss_term_metrics(data: DataProto) -> dict[str, float]:
    """Each weighted term of a phase-structured loss (SKL-SD Eq. 1) at the start of the update,
    from the old log-probs: ``loss/<phase>`` = -Σ w·log π / Σ kept tokens, plus sample counts."""
    phases = data.non_tensor_batch.get(sf.PHASE)
    if phases is None or "old_log_probs" not in data.batch.keys():
        return {}
    mask = data.batch["response_mask"].to(torch.float64)
    advantages = data.batch["advantages"].to(torch.float64)
    nll = -data.batch["old_log_probs"].to(torch.float64)
    metrics = {}
    phases = np.asarray(phases).astype(str)
    for phase in sorted(set(phases)):
        rows = torch.as_tensor(phases == phase)
        kept = rows[:, None] & (advantages != 0) & (mask > 0)
        metrics[f"loss_terms/{phase}_samples"] = float(rows.sum())
        metrics[f"loss_terms/{phase}_trained_samples"] = float(kept.any(dim=1).sum())
        tokens = kept.sum()
        metrics[f"loss_terms/{phase}_loss"] = float((advantages * nll)[kept].sum() / tokens) if tokens else 0.0
    return metrics


def compute_advantage(data: DataProto, algorithm_config: Any) -> DataProto:
    """Fill ``advantages``/``returns`` in ``data`` with the configured estimator.

    Our estimators get ``sample_fields`` from ``data.non_tensor_batch``, the old and reference
    log-probs when the batch has them, and only the live rows: a row whose response mask is all zero
    (verl's batch padding, a sample whose env failed before any turn) gets zero advantage and joins no
    group, no mean and no normalisation. Any other name goes to verl's own ``compute_advantage``
    unchanged (so ``grpo``, ``gae``, ... behave exactly as in verl).
    """
    from verl.trainer.ppo.ray_trainer import compute_advantage as verl_compute_advantage

    name = algorithm_config.get("adv_estimator") if hasattr(algorithm_config, "get") else algorithm_config.adv_estimator
    if "token_level_rewards" not in data.batch.keys():
        data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    fn = core_algos.get_adv_estimator_fn(name) if name in core_algos.ADV_ESTIMATOR_REGISTRY else None
    if fn is None or not getattr(fn, SAMPLE_FIELDS_ATTR, False):
        norm_by_std = algorithm_config.get("norm_adv_by_std_in_grpo", True)
        return verl_compute_advantage(data, adv_estimator=name, norm_adv_by_std_in_grpo=norm_by_std, config=algorithm_config)
    live = data.batch["response_mask"].bool().any(dim=1)
    rows = data if bool(live.all()) else data.select_idxs(live.numpy())
    optional = {"old_log_probs": "old_log_probs", "ref_log_probs": "ref_log_prob"}
    advantages, returns = fn(
        token_level_rewards=rows.batch["token_level_rewards"],
        response_mask=rows.batch["response_mask"],
        config=algorithm_config,
        index=rows.non_tensor_batch.get("uid"),
        sample_fields={k: v for k, v in rows.non_tensor_batch.items() if k.startswith("skl_")},
        **{arg: rows.batch[key] if key in rows.batch.keys() else None for arg, key in optional.items()},
    )
    data.batch["advantages"] = torch.zeros_like(data.batch["response_mask"], dtype=torch.float32)
    data.batch["returns"] = torch.zeros_like(data.batch["response_mask"], dtype=torch.float32)
    data.batch["advantages"][live] = advantages.to(torch.float32)
    data.batch["returns"][live] = returns.to(torch.float32)
    return data


def set_token_level_scores(data: DataProto) -> None:
    """``token_level_scores`` from each sample's own ``skl_score`` (else verl's ``rm_scores``).

    When a loop returns several outputs (SkillRise phases), verl's v1 worker gives all of them
    the last output's reward; the per-sample score our loops attach is the true one. The score
    sits on the last policy token (response_mask 1). Any KL-in-reward is applied afterwards.
    """
    scores = data.non_tensor_batch.get(sf.SCORE)
    if scores is None:
        data.batch["token_level_scores"] = data.batch["rm_scores"]
        return
    if any(s is None for s in scores):
        raise ValueError(f"some samples lack {sf.SCORE}; mixed agent loops in one batch are not supported")
    mask = data.batch["response_mask"]
    positions = torch.arange(mask.shape[1]).expand_as(mask)
    last = torch.where(mask.bool(), positions, torch.zeros_like(positions)).max(dim=1).values
    token_scores = torch.zeros(mask.shape, dtype=torch.float32)
    token_scores[torch.arange(mask.shape[0]), last] = torch.as_tensor(np.asarray(scores, dtype=np.float32))
    data.batch["token_level_scores"] = token_scores


def episode_metrics(non_tensor_batch: dict[str, np.ndarray]) -> dict[str, float]:
    """Per-episode env metrics our loops attach, reduced for verl's tracking (console, tensorboard)."""
    metrics: dict[str, float] = {}
    for key, label in (
        ("skl_won", "success_rate"),
        (sf.EPISODE_REWARD, "episode_reward/mean"),
        ("skl_turns", "turns/mean"),
        ("skl_invalid_format_turns", "invalid_format_turns/mean"),
        ("skl_invalid_action_turns", "invalid_action_turns/mean"),
        ("skl_truncated", "truncated_rate"),
        ("skl_simulated_steps", "simulated_steps/mean"),  # SKL-RL: simulated env steps per episode
    ):
        if key in non_tensor_batch:
            values = np.asarray([v for v in non_tensor_batch[key] if v is not None], dtype=np.float64)
            if values.size:
                metrics[f"env/{label}"] = float(values.mean())
    if "skl_failed" in non_tensor_batch:
        metrics["env/failed_samples"] = float(sum(bool(v) for v in non_tensor_batch["skl_failed"]))
    phases, positions, won = (non_tensor_batch.get(k) for k in (sf.PHASE, sf.POSITION, "skl_won"))
    if phases is not None and positions is not None and won is not None and len(set(positions)) > 1:
        by_slot: dict[tuple[str, int], list[float]] = {}
        for phase, position, w in zip(phases, positions, won):
            if w is not None:
                by_slot.setdefault((phase, int(position)), []).append(float(w))
        for (phase, position), values in sorted(by_slot.items()):
            metrics[f"env/{phase}_success_rate@{position}"] = float(np.mean(values))
    if "skl_curate_error" in non_tensor_batch and phases is not None:
        errors = [bool(e) for e, p in zip(non_tensor_batch["skl_curate_error"], phases) if p == "curate"]
        if errors:
            metrics["curate/error_rate"] = float(np.mean(errors))
            words = [w for w, p in zip(non_tensor_batch["skl_document_words"], phases) if p == "curate"]
            metrics["curate/document_words/mean"] = float(np.mean(words))
    return metrics


_REGISTERED = False


def register(with_trainer: bool = True) -> None:
    """Register every skl_verl piece into verl's registries in this process (idempotent).

    The estimators above registered themselves on import; this imports the agent loops and,
    with ``with_trainer``, the ``skl_sync`` trainer (which pulls in Ray and TransferQueue).
    """
    global _REGISTERED
    import skl_verl.agent_loops  # noqa: F401  (registers the loops)
    from skl_verl.algorithms.distill import register_with_verl as register_distillation_losses

    register_distillation_losses()

    if with_trainer and not _REGISTERED:
        _register_trainer()
        _REGISTERED = True


def _register_trainer() -> None:
    from tensordict import TensorDict
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch
    from verl.trainer.ppo.v1 import PPOTrainerSync, register_trainer
    from verl.trainer.ppo.v1.trainer_base import apply_kl_penalty, tq
    from verl.workers.utils.padding import response_to_nested

    @register_trainer("skl_sync")
    class SklPPOTrainerSync(PPOTrainerSync):
        """verl's synchronous trainer, changed only in the advantage step: it logs our per-episode
        ``env/*`` metrics, and estimators flagged ``wants_sample_fields`` get our per-sample fields (and
        old/reference log-probs), with verl's padding rows left out of estimators and metrics and
        ``rm_scores`` set to each sample's own score (verl gives every output of a multi-output loop
        the last one's reward, which its score/reward metrics would report)."""

        # verl branches on ``trainer_mode == "sync"`` (replay buffer, refill, checkpoints, prompt
        # submission); this trainer *is* the sync trainer, whatever name selected it.
        @property
        def trainer_mode(self) -> str:
            return "sync"

        @trainer_mode.setter
        def trainer_mode(self, _name: str) -> None:
            pass

        def _compute_advantage(self, batch, metrics):
            algorithm = self.config.algorithm
            real = np.array([not tag.get("is_padding", False) for tag in batch.tags], dtype=bool)
            fn = core_algos.ADV_ESTIMATOR_REGISTRY.get(algorithm.adv_estimator)
            if fn is None or not getattr(fn, SAMPLE_FIELDS_ATTR, False):
                batch = super()._compute_advantage(batch, metrics)
                fields = ["uid", "response_mask", "extra_fields"]
                data = batch_to_dataproto(tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields))
                metrics.update(episode_metrics(data.select_idxs(real).non_tensor_batch))
                return batch
            fields = ["uid", "response_mask", "rm_scores", "rollout_log_probs", "old_log_probs", "ref_log_prob", "extra_fields"]
            data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
            stored_mask = data["response_mask"]  # TransferQueue's (nested) layout, which write-back must follow
            data = batch_to_dataproto(data)
            rows = data.select_idxs(real)  # padding rows copy sample 0's fields: keep them out of every group
            set_token_level_scores(rows)
            if algorithm.use_kl_in_reward:
                rows, kl_metrics = apply_kl_penalty(rows, kl_ctrl=self.kl_ctrl_in_reward, kl_penalty=algorithm.kl_penalty)
                metrics.update(kl_metrics)
            else:
                rows.batch["token_level_rewards"] = rows.batch["token_level_scores"]
            # verl's rollout correction step, as in its own _compute_advantage (decoupled mode only).
            correction = algorithm.get("rollout_correction", None)
            correct = correction is not None and "rollout_log_probs" in rows.batch.keys() and not correction.get("bypass_mode", False)
            if correct:
                rows, is_metrics = compute_rollout_correction_and_add_to_batch(rows, correction)
                metrics.update(is_metrics)
            rows = compute_advantage(rows, algorithm)
            metrics.update(episode_metrics(rows.non_tensor_batch))
            metrics.update(loss_term_metrics(rows))

            written = ["advantages", "returns", "token_level_rewards", "rm_scores"]
            rows.batch["rm_scores"] = rows.batch["token_level_scores"]
            if correct:
                written.append("response_mask")
                if "rollout_is_weights" in rows.batch.keys():
                    written.append("rollout_is_weights")
            out = {}
            for name in written:
                full = torch.ones_like(data.batch["response_mask"], dtype=torch.float32) if name == "rollout_is_weights" else None
                full = torch.zeros_like(data.batch["response_mask"], dtype=rows.batch[name].dtype) if full is None else full
                full[torch.as_tensor(real)] = rows.batch[name]
                if name == "response_mask":
                    full[torch.as_tensor(~real)] = data.batch["response_mask"][torch.as_tensor(~real)]
                out[name] = response_to_nested(full, stored_mask) if stored_mask.is_nested else full
            return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=TensorDict(out, batch_size=len(batch)))


def batch_to_dataproto(data) -> DataProto:
    """A TransferQueue fetch (nested tensors, ``uid``, ``extra_fields``) as a padded ``DataProto`` whose
    non-tensor batch holds ``uid`` and one column per ``skl_*`` key of the samples' extra fields."""
    extras = list(data.pop("extra_fields").tolist())
    uid = np.array(data.pop("uid").tolist(), dtype=object)
    proto = DataProto(batch=data.to_padded_tensor())
    proto.non_tensor_batch["uid"] = uid
    for key in sorted({k for extra in extras for k in extra if k.startswith("skl_")}):
        column = np.empty(len(extras), dtype=object)
        column[:] = [extra.get(key) for extra in extras]
        proto.non_tensor_batch[key] = column
    return proto
