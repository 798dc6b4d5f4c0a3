"""Work a recipe does on the driver once a step's rollouts are scored, before the next step's rollouts.

verl 0.9.1's trainer has no such hook; the ``skl_sync`` trainer runs every registered hook right after
its advantage step with the step's live rows, and logs the metrics they return. Knowledge Weaver admits
new knowledge-bank entries here: step j + 1's rollouts are submitted only after step j ends, so they
read the new bank.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verl import DataProto

StepHook = Callable[[DataProto, Any, int], dict[str, float]]
STEP_HOOKS: dict[str, StepHook] = {}


def register_step_hook(name: str) -> Callable[[StepHook], StepHook]:
    """Register ``fn(rows, config, global_step) -> metrics``; it decides from ``config`` whether the
    run is its recipe's (and returns ``{}`` when not)."""

    def decorate(fn: StepHook) -> StepHook:
        STEP_HOOKS[name] = fn
        return fn

    return decorate


def run_step_hooks(rows: DataProto, config: Any, global_step: int) -> dict[str, float]:
    metrics: dict[str, float] = {}
    for fn in STEP_HOOKS.values():
        metrics.update(fn(rows, config, global_step))
    return metrics
