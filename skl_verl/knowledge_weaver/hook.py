"""Knowledge Weaver's end of step j, on the driver (a step hook, ``registry.register_step_hook``): admit the step's best new
entries into bank(j + 1) (design §1.2 step 12; ``state.select_admissions``), fix which singleton
episodes join the pool of step j + 1, and log the step's ``kw/*`` metrics."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from verl import DataProto

from skl_verl.knowledge_weaver.pool import PoolStore
from skl_verl.knowledge_weaver.settings import kw_settings
from skl_verl.knowledge_weaver.state import (
    BankStore,
    Candidate,
    select_admissions,
    update_types,
)
from skl_verl.knowledge_weaver import fields as kwf
from skl_verl.rollout import sample_fields as sf


def _mean(values: list[Any]) -> float | None:
    kept = [float(v) for v in values if v is not None]
    return float(np.mean(kept)) if kept else None


def kw_step_metrics(fields: dict[str, np.ndarray], bank_size: int, admitted: int) -> dict[str, float]:
    valid = [bool(v) for v in fields[kwf.VALID]]
    slots = fields[kwf.SLOT]
    runs_per_group: dict[int, int] = {}
    for slot, runs, ok in zip(slots, fields[kwf.BANK_ONLY_RUNS], valid):
        if ok:
            runs_per_group[int(slot)] = runs_per_group.get(int(slot), 0) + int(runs)
    metrics = {
        "kw/valid_rate": float(np.mean(valid)),
        "kw/reward": float(np.mean([float(s) for s in fields[sf.SCORE]])),
        "kw/executor_episodes": float(sum(int(v) for v in fields[kwf.EXECUTOR_EPISODES])),
        "kw/bank_size": float(bank_size),
        "kw/admitted": float(admitted),
    }
    if runs_per_group:
        metrics["kw/bank_only_runs_per_group"] = float(np.mean(list(runs_per_group.values())))
    for field, label in kwf.MEAN_METRICS.items():
        value = _mean(list(fields[field]))
        if value is not None:
            metrics[f"kw/{label}"] = value
    return metrics


def finalize_kw_step(rows: DataProto, config: Any, global_step: int) -> dict[str, float]:
    """bank(j + 1) = bank(j) + the admitted candidates (a replayed step writes it again), and the pool
    index of step j. Runs only for the knowledge_weaver estimator."""
    if config.algorithm.adv_estimator != "knowledge_weaver":
        return {}
    settings = kw_settings(config)
    fields = rows.non_tensor_batch
    steps = {int(s) for s in fields[kwf.STEP]}
    if steps != {global_step - 1}:
        raise ValueError(f"trainer step {global_step} scored candidates of kw steps {sorted(steps)}; the KW dataset must "
                         "hold one block of rows per step, in order (data.shuffle=false)")
    step = global_step - 1
    store = BankStore(settings.state_dir)
    bank = store.bank(step)
    candidates = [
        Candidate(int(c), str(t), str(e or ""), bool(v), float(m) if m is not None else 0.0, float(s) if s is not None else 0.0)
        for c, t, e, v, m, s in zip(fields[kwf.CANDIDATE], fields[kwf.TASK_TYPE], fields[kwf.ENTRY],
                                    fields[kwf.VALID], fields[kwf.MSR], fields[kwf.SR])
    ]
    admitted = []
    if settings.bank["enabled"]:
        options = settings.bank
        types = None
        if options["per_type"]:
            types = update_types(json.loads(fields[kwf.TYPES][0]), options["seed"], step,
                                 warmup_steps=options["warmup_steps"], warmup_count=options["warmup_types"],
                                 later_count=options["later_types"])
        admitted = select_admissions(candidates, bank, types, casefold=options["casefold"])
    entries = store.finalize_step(step, admitted)
    pool = PoolStore(settings.state_dir, settings.pool["initial"], settings.pool["use_previous_step"])
    pool.finalize(step, [str(t) for t, v in zip(fields[sf.TRAJECTORY_ID], fields[kwf.VALID]) if v])
    return kw_step_metrics(fields, len(entries), len(admitted))
