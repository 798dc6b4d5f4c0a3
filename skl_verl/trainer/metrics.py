"""Metrics our trainer step adds to verl's: per-episode env results and per-phase loss terms."""

from __future__ import annotations

import numpy as np
import torch
from verl import DataProto

from skl_verl.rollout import sample_fields as sf
from skl_verl.trainer.registry import EPISODE_METRICS


def loss_term_metrics(data: DataProto) -> dict[str, float]:
    """Each weighted term of a phase-structured loss (one term per phase) at the start of the update,
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


def episode_metrics(non_tensor_batch: dict[str, np.ndarray]) -> dict[str, float]:
    """Per-episode env metrics our loops attach, reduced for verl's tracking (console, tensorboard), and
    each recipe's registered episode metrics (``registry.register_episode_metrics``). In step mode every step sample repeats its episode's fields: only each episode's first step counts."""
    metrics: dict[str, float] = {}
    steps = non_tensor_batch.get(sf.STEP_INDEX)
    if steps is not None and any(step is not None for step in steps):
        first = np.array([step in (None, 0) for step in steps], dtype=bool)
        metrics["env/samples_per_episode"] = len(steps) / max(int(first.sum()), 1)
        non_tensor_batch = {key: np.asarray(values)[first] for key, values in non_tensor_batch.items()}
    for key, label in (
        (sf.WON, "success_rate"),
        (sf.EPISODE_REWARD, "episode_reward/mean"),
        (sf.TURNS, "turns/mean"),
        (sf.INVALID_FORMAT_TURNS, "invalid_format_turns/mean"),
        (sf.INVALID_ACTION_TURNS, "invalid_action_turns/mean"),
        (sf.TRUNCATED, "truncated_rate"),
    ):
        if key in non_tensor_batch:
            values = np.asarray([v for v in non_tensor_batch[key] if v is not None], dtype=np.float64)
            if values.size:
                metrics[f"env/{label}"] = float(values.mean())
    if sf.FAILED in non_tensor_batch:
        metrics["env/failed_samples"] = float(sum(bool(v) for v in non_tensor_batch[sf.FAILED]))
    phases, positions, won = (non_tensor_batch.get(k) for k in (sf.PHASE, sf.POSITION, sf.WON))
    if phases is not None and positions is not None and won is not None and len(set(positions)) > 1:
        by_slot: dict[tuple[str, int], list[float]] = {}
        for phase, position, w in zip(phases, positions, won):
            if w is not None:
                by_slot.setdefault((phase, int(position)), []).append(float(w))
        for (phase, position), values in sorted(by_slot.items()):
            metrics[f"env/{phase}_success_rate@{position}"] = float(np.mean(values))
    for recipe_metrics in EPISODE_METRICS.values():
        metrics.update(recipe_metrics(non_tensor_batch))
    return metrics
