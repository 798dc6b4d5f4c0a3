"""R3L's ScienceWorld task set (shiweijiezero/R3L ``examples/R3L/scienceworld/get_sciworld_data.py``, the code the
SKL paper reruns SKL-SD in), read by ``SciWorldEnv(task_set="r3l")``: 17 task types for training, the 13 others for
testing, the first half of each type's raw variation numbers for both."""

from __future__ import annotations

R3L_SPLITS: tuple[str, ...] = ("train", "test")
# R3L's task_variations table (get_sciworld_data.py:11-42): the variation counts its split was cut from. The env
# reads the package's own counts and refuses a package whose counts differ, which would be another task set.
R3L_VARIATIONS: dict[str, int] = {
    "boil": 30, "melt": 30, "freeze": 30, "change-the-state-of-matter-of": 30, "use-thermometer": 540,
    "measure-melting-point-known-substance": 436, "measure-melting-point-unknown-substance": 300,
    "power-component": 20, "power-component-renewable-vs-nonrenewable-energy": 20, "test-conductivity": 900,
    "test-conductivity-of-unknown-substances": 600, "find-living-thing": 300, "find-non-living-thing": 300,
    "find-plant": 300, "find-animal": 300, "grow-plant": 126, "grow-fruit": 126, "chemistry-mix": 32,
    "chemistry-mix-paint-secondary-color": 36, "chemistry-mix-paint-tertiary-color": 36,
    "lifespan-longest-lived": 125, "lifespan-shortest-lived": 125, "lifespan-longest-lived-then-shortest-lived": 125,
    "identify-life-stages-1": 14, "identify-life-stages-2": 10, "inclined-plane-determine-angle": 168,
    "inclined-plane-friction-named-surfaces": 1386, "inclined-plane-friction-unnamed-surfaces": 162,
    "mendelian-genetics-known-plant": 120, "mendelian-genetics-unknown-plant": 480,
}
# R3L's training task types (get_sciworld_data.py:113-131); its test set is the 13 others.
R3L_TRAIN_TASKS: tuple[str, ...] = (
    "boil", "melt", "change-the-state-of-matter-of", "use-thermometer", "measure-melting-point-known-substance",
    "power-component", "test-conductivity", "find-living-thing", "find-plant", "grow-plant", "chemistry-mix",
    "chemistry-mix-paint-secondary-color", "lifespan-shortest-lived", "identify-life-stages-2",
    "inclined-plane-determine-angle", "inclined-plane-friction-named-surfaces", "mendelian-genetics-known-plant",
)
R3L_VARIATION_FRACTION = 0.5
"""The share of each task's variations R3L keeps, from variation 0 (``create_dataset_files(..., percentage=0.5)``;
the function's default 0.6 is not what it ran)."""


def r3l_tasks(split: str) -> list[str]:
    """R3L's task types of ``split``: its 17 training types, or the 13 others for ``test``."""
    return list(R3L_TRAIN_TASKS) if split == "train" else [n for n in R3L_VARIATIONS if n not in R3L_TRAIN_TASKS]
