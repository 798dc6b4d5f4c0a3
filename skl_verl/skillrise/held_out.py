"""Which held-out tasks SkillRise is evaluated on: each env's split, and how the tasks are drawn from it.

The authors evaluate inside their training runs (their verl-agent fork, ``examples/skillrise_*/*.sh``:
``env.seed=0``, ``data.val_batch_size=128``); the validation envs are built with seed
``env.seed + 1000`` and each validation plays 128 rows, each row one task retried up to K times.

* ALFWorld (``agent_system/environments/skillrise_alfworld/{env_manager,envs}.py``,
  ``env.alfworld.eval_dataset=eval_in_distribution``, i.e. ``json_2.1.1/valid_seen``): 128 env workers,
  worker ``i`` seeded ``1000 + i``; TextWorld's batch env (``textworld/gym/envs/textworld_batch.py``,
  ``seed``) shuffles the split's game list with ``numpy.random.RandomState(seed)`` and ``reset`` plays the
  next game of that order. So row ``i`` plays the first game of the list shuffled under seed ``1000 + i``:
  128 independent draws, *with* replacement across rows (a game can come up twice).
* WebShop (``skillrise_webshop/envs.py``, ``reset``) and ScienceWorld (``skillrise_sciworld/envs.py``,
  ``reset``): ``numpy.random.RandomState(1000).choice(<size of the test list>, 128, replace=False)``: 128
  distinct positions in the test list (WebShop goals 0-499; ScienceWorld the L0 set's test list).

The validation envs live for the whole run and a validation plays one batch (``val_data_size`` =
``data.val_batch_size`` = 128: one ``reset`` of each env), so every validation moves these generators on:
ALFWorld's rows play the next game of their order (TextWorld's ``shuffled_cycle``: the order, then the same
generator reshuffles it for each further pass), WebShop and ScienceWorld draw the next ``choice`` of the same
``RandomState``. They validate before training and every 5 steps (``trainer.val_before_train=True``,
``trainer.test_freq=5``), so the validation after step ``s`` is draw ``s // 5`` and the one after step 150 the
31st (``validation=30``). ``released_draw(..., validation=v)`` is draw ``v``. ``--seed`` plays the part of
``env.seed`` (0 in every released script). The draw is over the env's task list in the env's own order:
ALFWorld's is sorted by task id here, where the authors' is the order ``os.walk`` lists the split's
folders (file-system dependent), so the same seed can pick other ALFWorld games than theirs did.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from envs import TaskSpec

VALIDATION_SEED_OFFSET = 1000
"""The authors' validation envs are seeded ``env.seed + 1000``."""

RELEASED_TEST_FREQ = 5
"""The released runs validate before training and then every 5 steps: the validation after step ``s`` is draw
``s // 5``."""
RELEASED_LAST_VALIDATION = 150 // RELEASED_TEST_FREQ
"""The draw of the released runs' last validation, after step 150 (the 31st draw)."""

HELD_OUT_ENV_KWARGS: dict[str, dict[str, Any]] = {
    "alfworld": {"split": "valid_seen"},  # eval_in_distribution
    "webshop": {"split": "test", "split_convention": "verl_agent"},  # goals 0-499
    "sciworld": {"split": "test", "task_set": "l0"},  # L0's test list: dev variations of 29 tasks
}
"""The released held-out split of each paper env; ``--env-kwargs`` entries override them."""

PER_ROW_SHUFFLE_ENVS = frozenset({"alfworld"})
"""Envs whose released validation gives every row its own seeded shuffle (draws with replacement);
every other env draws distinct tasks with one seeded generator, as WebShop and ScienceWorld do."""

SAMPLES = ("released", "stratified")


def held_out_env_kwargs(env: str, env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``env_kwargs`` over the env's released held-out split (unchanged for envs without one)."""
    return {**HELD_OUT_ENV_KWARGS.get(env, {}), **env_kwargs}


def released_draw(env: str, tasks: Sequence[TaskSpec], n: int, seed: int = 0, validation: int = 0) -> list[TaskSpec]:
    """The ``n`` tasks the authors' validation number ``validation`` plays (0: the one before training), one
    per row, in row order.

    ``tasks`` in the env's order. ALFWorld: row ``i``'s generator ``RandomState(seed + 1000 + i)`` shuffles
    ``tasks``; validation ``v`` takes position ``v`` of that order, and each full pass reshuffles the order
    with the same generator, so tasks may repeat across rows. Other envs: validation ``v`` takes the first
    ``n`` of the ``v + 1``-th ``permutation(len(tasks))`` of ``RandomState(seed + 1000)``, which is numpy's
    ``choice(len(tasks), n, replace=False)``; all tasks, once each, when ``n`` exceeds their number (where
    the authors' numpy call would fail).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if validation < 0:
        raise ValueError(f"validation must be >= 0 (0: the one before training), got {validation}")
    if not tasks:
        raise ValueError("no tasks to draw from")
    base = seed + VALIDATION_SEED_OFFSET
    if base < 0 or base + n > 2**32:
        raise ValueError(f"seed {seed}: the released draw seeds numpy with seed + {VALIDATION_SEED_OFFSET} + row, "
                         f"which must lie in [0, 2**32)")
    if env in PER_ROW_SHUFFLE_ENVS:
        passes, position = divmod(validation, len(tasks))
        drawn = []
        for row in range(n):
            order = list(range(len(tasks)))
            rng = np.random.RandomState(base + row)
            for _ in range(passes + 1):  # the seeding shuffle, then one reshuffle per finished pass
                rng.shuffle(order)
            drawn.append(tasks[order[position]])
        return drawn
    rng = np.random.RandomState(base)
    for _ in range(validation):  # the earlier validations' draws
        rng.permutation(len(tasks))
    return [tasks[i] for i in rng.permutation(len(tasks))[:n]]


def distinct(tasks: Sequence[TaskSpec]) -> list[TaskSpec]:
    """``tasks`` without repeats, first occurrences in order."""
    first: dict[str, TaskSpec] = {}
    for task in tasks:
        first.setdefault(task.task_id, task)
    return list(first.values())
