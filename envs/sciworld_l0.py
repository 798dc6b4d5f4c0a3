"""The ScienceWorld task set the SkillRise authors train and evaluate on ("L0").

Their loader (``agent_system/environments/skillrise_sciworld/env_manager.py``) reads a file
``variations_idx/L0_idx.json`` of ``[task index, variation]`` pairs, ``{"train": [...], "test":
[...]}``, that their code does not ship. A public generator of that file (in the verl-agent family the
authors build on) writes it from the ``scienceworld`` package alone:

* 29 of the package's 30 tasks, indexed in ``get_task_names()`` order and visited in the order
  ``L0_TASK_ORDER``; index 29 (``use-thermometer``) is left out. The authors' released training groups
  (``data/groups/skillrise_sciworld_K3.jsonl``) use task indices 0-28 only, which agrees.
* ``train``: each task's package *train* variations; ``test``: each task's package *dev* variations
  (not its test variations).
* One ``random.Random(42)`` stream shuffles, task by task, the train list and then the dev list, so
  both lists come out in a fixed, reproducible order. The order matters: the authors' validation
  draws row ``i``'s task by position in the ``test`` list (``skl_verl.skillrise.held_out``).

``l0_index`` rebuilds that file from a function that reports a task's variations, so the result can be
checked without a JVM and the env can build it from the package it runs.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

# The generator's task visiting order (package task indices). Its first 19 are the tasks it calls
# "train" tasks and the last 10 its out-of-distribution ones; L0 uses all 29 for both splits.
L0_TASK_ORDER: tuple[int, ...] = (
    0, 22, 9, 20, 25, 26, 27, 5, 6, 7, 10, 2, 3, 17, 19, 12, 14, 15, 23,
    1, 21, 28, 8, 11, 4, 18, 13, 16, 24,
)
L0_SHUFFLE_SEED = 42
L0_SPLITS: dict[str, str] = {"train": "train", "test": "dev"}
"""L0 split -> the package split whose variations it holds."""


def l0_index(variations: Callable[[int], tuple[Sequence[int], Sequence[int]]]) -> dict[str, list[tuple[int, int]]]:
    """``{"train": [(task index, variation), ...], "test": [...]}`` in the generator's order.

    ``variations(task_index)`` returns that task's package ``(train, dev)`` variation lists, in the
    package's order (``get_variations_train()``, ``get_variations_dev()``).
    """
    rng = random.Random(L0_SHUFFLE_SEED)
    index: dict[str, list[tuple[int, int]]] = {"train": [], "test": []}
    for task_index in L0_TASK_ORDER:
        train, dev = (list(v) for v in variations(task_index))
        rng.shuffle(train)  # the train list consumes the stream before the dev list, task by task
        rng.shuffle(dev)
        index["train"].extend((task_index, int(v)) for v in train)
        index["test"].extend((task_index, int(v)) for v in dev)
    return index
