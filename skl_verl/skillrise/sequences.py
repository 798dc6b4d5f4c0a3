"""Cross-task sequence construction (SkillRise §3.1).

Tasks are partitioned by env family, then each sequence greedily collects K *diverse* instances
of one family (far apart in difficulty, different variants where the env names them), and is
ordered easy→hard. Deterministic for a given seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

from envs import TaskSpec


@dataclass(frozen=True)
class TaskSequence:
    sequence_id: str
    family: str
    task_ids: tuple[str, ...]
    difficulties: tuple[float, ...]


def _distance(a: TaskSpec, b: TaskSpec) -> float:
    """How different two instances are: difficulty gap, plus 1 when their variants differ."""
    variant_a, variant_b = a.metadata.get("variant"), b.metadata.get("variant")
    return abs(a.difficulty - b.difficulty) + float(variant_a != variant_b)


def build_sequences(tasks: Sequence[TaskSpec], k: int, seed: int = 0) -> list[TaskSequence]:
    """Group ``tasks`` into sequences of ``k`` distinct instances of one family, easy→hard.

    Within a family (visited in seed-shuffled order), each sequence starts from the next unused
    task and repeatedly adds the unused task farthest (max-min ``_distance``) from those chosen;
    ties go to the earlier task in the shuffled order. Leftover tasks (fewer than k in a family)
    are not used. Sequence ids are ``<family>-<n>``.
    """
    if k < 1:
        raise ValueError(f"sequence length k must be >= 1, got {k}")
    ids = [t.task_id for t in tasks]
    if len(set(ids)) != len(ids):
        raise ValueError("task ids must be unique")
    by_family: dict[str, list[TaskSpec]] = {}
    for task in sorted(tasks, key=lambda t: t.task_id):
        by_family.setdefault(task.family, []).append(task)
    rng = random.Random(seed)
    sequences: list[TaskSequence] = []
    for family in sorted(by_family):
        pool = list(by_family[family])
        rng.shuffle(pool)
        number = 0
        while len(pool) >= k:
            chosen = [pool.pop(0)]
            while len(chosen) < k:
                best = max(range(len(pool)), key=lambda i: (min(_distance(pool[i], c) for c in chosen), -i))
                chosen.append(pool.pop(best))
            chosen.sort(key=lambda t: (t.difficulty, t.task_id))
            sequences.append(
                TaskSequence(
                    sequence_id=f"{family}-{number}",
                    family=family,
                    task_ids=tuple(t.task_id for t in chosen),
                    difficulties=tuple(float(t.difficulty) for t in chosen),
                )
            )
            number += 1
    return sequences


def retry_sequences(tasks: Sequence[TaskSpec], attempts: int) -> list[TaskSequence]:
    """Pass@k evaluation: each task repeated ``attempts`` times, carrying the document between tries."""
    if attempts < 1:
        raise ValueError("attempts must be >= 1")
    return [
        TaskSequence(f"retry-{t.task_id}", t.family, (t.task_id,) * attempts, (float(t.difficulty),) * attempts)
        for t in sorted(tasks, key=lambda t: t.task_id)
    ]
