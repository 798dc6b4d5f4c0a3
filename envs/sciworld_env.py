"""ScienceWorld (Wang et al., 2022) as a text environment, on the ``scienceworld`` PyPI package.

The package ships the simulator as a Scala jar (``scienceworld.jar``) and drives it through py4j;
it needs a Java runtime (``java`` on PATH, 11 or newer; ``openjdk-17-jre-headless`` on Debian).
Each ``SciWorldEnv`` instance starts ONE JVM in its constructor (about 2-3 s) and reuses it for
every episode; ``close()`` stops it (also called on garbage collection). Instances do not share a
JVM, so N parallel envs cost N JVMs (a few hundred MB each).

Tasks
-----
A task is a ``(task name, variation)`` pair. Task names are the package's 30 tasks
(``boil``, ``find-living-thing``, ...; ``task_names=`` filters them and also accepts the package's
ids such as ``"1-1"``). Variations come from the package's own split of each task
(``get_variations_train/dev/test``, i.e. ``getVariationsTrain/Dev/Test`` on the JVM side); with
``max_variations_per_task=N`` only the first N variations of the split, in the package's
(ascending) order, are kept. Task ids are ``"sciworld-<task name>-v<variation>"``.
``task_set="l0"`` selects the SkillRise authors' set instead (``envs.sciworld_l0``): 29 tasks (no
``use-thermometer``), ``split="train"`` their train variations and ``split="test"`` their *dev*
variations, in that set's fixed shuffled order (``max_variations_per_task`` keeps its first N).
``task_set="r3l"`` selects R3L's set (``examples/R3L/scienceworld/get_sciworld_data.py``, the code the SKL paper
reruns SKL-SD in): ``split="train"`` its 17 training task types, ``split="test"`` the 13
others, unseen in training; for both, variations ``0 .. int(count * 0.5) - 1`` by raw variation number, ``count``
being the package's own variation count of the task (``get_max_variations``, checked equal to R3L's table
``envs.sciworld_r3l``), not the package's train/dev/test variation lists: 2,294 train and 1,308 test tasks.

``TaskSpec``:

* ``family``: the task name (default, ``family_by="task"``) or the task's topic from the package's
  ``tasks.json`` (``family_by="topic"``: Matter, Measurement, Electricity, ...).
* ``difficulty``: the length of the package's gold action sequence for that variation under the
  env's simplification (``load(..., generateGoldPath=True)`` then ``get_gold_action_sequence()``).
  The paper orders ScienceWorld sequences "by task variation difficulty"; the package has no
  explicit difficulty label, and the number of actions its own solver needs is the measure used
  here. Caveats: the gold path is not guaranteed optimal, and the generator may pick a different
  but equivalent route on each call (the world itself is deterministic per variation); the
  length is measured once and cached. Generating a gold path takes 0.1-7 s per variation, so the
  constructor only reads the lengths from a JSON cache (``gold_cache_dir``; default
  ``$SKL_VERL_CACHE_DIR/sciworld`` or ``~/.cache/skl_verl/sciworld``; ``None`` disables it) and leaves
  the difficulty NaN where it is missing; a dataset build that orders tasks by difficulty calls
  ``measure_difficulty`` for the tasks it needs (parallel processes, progress and a time estimate on
  stderr; ``envs/sciworld_gold.py``). Env workers never measure. The full train split (about 3,600
  variations) takes about an hour of JVM time the first time, divided by the processes. Gold lengths run from 4 (lifespan
  tasks) to about 190 (inclined-plane friction); with the default ``max_steps=30`` many variations
  of the long tasks (boil, melt, grow-fruit, mendelian genetics, ...) cannot be finished, so raise
  ``max_steps`` or filter tasks by difficulty for those.
* ``metadata``: ``task_name``, ``task_num`` (the package id, e.g. ``"4-1"``), ``topic``,
  ``task_title``, ``variation``, ``split``, ``task_set``, ``package_split`` (the package split the
  variation belongs to), ``simplification``, ``gold_length``, ``max_steps``.

Episode
-------
``reset(task_id)`` loads the task and variation with the env's simplification string (default
``"easy"``, the package's shorthand for all its simplifications: teleport actions, self-watering
flower pots, containers and doors open, and no electrical actions - the simulator keeps the
electrical actions on the electrical tasks, which need them; ``""`` means none, or pass a
comma-separated list such as ``"openDoors,openContainers"``), resets the simulator and returns
``"<task description>\\n\\n<look around>"``. ``seed`` is ignored: ScienceWorld is deterministic
for a given task and variation.

``step(action)``:

* Reward: ScienceWorld scores an episode 0-100 (subgoal progress; 100 = task completed; a negative
  score = task failed, e.g. focusing on the wrong object). Let ``p = max(score, 0) / 100`` be the
  progress in [0, 1]. The step reward is the progress delta ``p_t - p_{t-1}``, starting from the
  progress the task already has right after reset (some tasks award a few points for the starting
  situation: ``find-living-thing`` starts at 8), so an action that changes nothing earns 0 and the
  sum of an episode's rewards is ``p_final - p_reset``: ``1 - p_reset`` for a win, ``-p_reset`` for
  a failure. Per-step rewards lie in [-1, 1] (negative when progress is lost). ``info["score"]`` is
  the raw score, ``info["progress"]`` is ``p``; ``reset``'s info has ``initial_score``. A loop that
  wants the final normalised score as its return reads ``info["progress"]`` at the end.
* ``done`` when the package reports completion, when the score is negative (failure; the package's
  own wrapper ends those episodes too), or after ``max_steps`` calls to ``step`` (``truncated``).
  ``won`` is ``score >= 100``.
* Invalid actions: the simulator answers ``"No known action matches that input."`` or
  ``"Unknown action. ..."``; these (and empty actions) are flagged ``info["invalid_action"] =
  True`` with reward 0, never raised. The meta-command ``reset task`` is refused the same way (it
  would restart the episode inside the simulator). Every call to ``step``, valid or not, counts
  toward ``max_steps``.
* Ambiguous inputs (e.g. ``open door`` with several doors) make the simulator answer ``"Ambiguous
  request: ..."`` with numbered choices; ``info["ambiguous"]`` is True, ``admissible_actions()``
  is then the choice numbers (``"0"``, ``"1"``, ...), and the next action must be one of them
  (sending one of the listed choice texts verbatim is mapped to its number).

``admissible_actions()`` is the package's valid action list
(``get_valid_action_object_combinations``) without ``reset task``, deduplicated. It can hold
hundreds of entries (439 on electrical tasks, mostly ``connect X to Y``), so it is capped at
``max_admissible`` (default 200): actions are grouped by their first word (the verb), each group
sorted, and the cap is filled round-robin across verbs, so every verb keeps some actions instead
of the alphabetical tail (``go``, ``look``, ``move``, ``pick``, ...) being cut; the result is
returned sorted. The ``admissible_truncated`` property tells how many were dropped at the last call.
The list is a hint: any action string can be sent.

``state_key()``: SHA-256 of the task id, the current score, the free ``look around`` and
``inventory`` texts (these do not advance the simulator) and, in an ambiguous prompt, its text.

Snapshot: not supported. The package has no save/restore of the simulator state.

Errors: a failing JVM call (py4j error, dead JVM) raises ``SciWorldJVMError`` (an ``EnvError``)
naming the call, task, variation and action; a missing package or Java raises
``DependencyMissingError``. After a JVM error, ``close()`` the env and build a new one.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
from itertools import groupby
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envs.base import (
    is_encodable_text,
    DependencyMissingError,
    EnvError,
    EnvNotResetError,
    StepResult,
    TaskSpec,
    TextEnv,
)

from envs import sciworld_gold
from envs.sciworld_l0 import L0_SPLITS, L0_TASK_ORDER, l0_index
from envs.sciworld_r3l import R3L_SPLITS, R3L_VARIATION_FRACTION, R3L_VARIATIONS, r3l_tasks

logger = logging.getLogger(__name__)

SPLITS: tuple[str, ...] = ("train", "dev", "test")
TASK_SETS: tuple[str, ...] = ("package", "l0", "r3l")
INVALID_PREFIXES: tuple[str, ...] = ("No known action matches that input.", "Unknown action.")
AMBIGUOUS_PREFIX = "Ambiguous request:"
BLOCKED_ACTIONS: frozenset[str] = frozenset({"reset task"})
_AMBIGUOUS_CHOICE = re.compile(r"^\s*(\d+):\s*(.+?)\s*$")


class SciWorldJVMError(EnvError, RuntimeError):
    """A call into the ScienceWorld JVM failed (py4j error or the JVM died)."""


def _import_scienceworld():
    try:
        import scienceworld  # noqa: F401
        from scienceworld import ScienceWorldEnv
        from scienceworld.constants import TASKS
        from scienceworld.utils import infer_task
    except ImportError as exc:
        raise DependencyMissingError(
            "sciworld: the 'scienceworld' package is not installed (pip install scienceworld; it also needs Java)"
        ) from exc
    return scienceworld, ScienceWorldEnv, TASKS, infer_task


def _py4j_errors() -> tuple[type[BaseException], ...]:
    try:
        from py4j.protocol import Py4JError
    except ImportError:  # pragma: no cover - py4j is a dependency of scienceworld
        return (OSError,)
    return (Py4JError, OSError)


ACTION_FORMATS = ("list", "templates")
"""How prompts show the admissible actions: every valid combination (capped by ``max_admissible``),
or verb templates plus objects (``action_prompt``)."""


def cap_actions(actions: Sequence[str], limit: int | None) -> tuple[list[str], int]:
    """Sorted, deduplicated ``actions``; at most ``limit`` of them, chosen round-robin over verbs.

    Returns ``(kept, number dropped)``. ``limit=None`` keeps all.
    """
    unique = sorted(set(actions))
    if limit is None or len(unique) <= limit:
        return unique, 0
    groups: dict[str, list[str]] = {}
    for action in unique:
        groups.setdefault(action.split(" ", 1)[0], []).append(action)
    queues = [groups[verb] for verb in sorted(groups)]
    kept: list[str] = []
    depth = 0
    while len(kept) < limit:
        for queue in queues:
            if depth < len(queue):
                kept.append(queue[depth])
                if len(kept) == limit:
                    break
        depth += 1
    return sorted(kept), len(unique) - len(kept)


class SciWorldEnv(TextEnv):
    """ScienceWorld tasks x variations behind the TextEnv protocol; see the module docstring."""

    name = "sciworld"
    supports_snapshot = False

    def __init__(
        self,
        task_names: Sequence[str] | None = None,
        split: str = "train",
        max_variations_per_task: int | None = None,
        task_set: str = "package",
        simplification: str = "easy",
        max_steps: int = 30,
        family_by: str = "task",
        max_admissible: int | None = 200,
        action_format: str = "list",
        gold_cache_dir: str | os.PathLike[str] | None = "default",
        jar_path: str | None = None,
    ) -> None:
        if task_set not in TASK_SETS:
            raise ValueError(f"task_set must be one of {TASK_SETS}, got {task_set!r}")
        splits = tuple(L0_SPLITS) if task_set == "l0" else R3L_SPLITS if task_set == "r3l" else SPLITS
        if split not in splits:
            raise ValueError(f"split must be one of {splits} with task_set={task_set!r}, got {split!r}")
        self.task_set = task_set
        if family_by not in ("task", "topic"):
            raise ValueError(f"family_by must be 'task' or 'topic', got {family_by!r}")
        if isinstance(max_steps, bool) or int(max_steps) != max_steps or max_steps < 1:
            raise ValueError(f"max_steps must be a positive int, got {max_steps!r}")
        if max_variations_per_task is not None and (
            isinstance(max_variations_per_task, bool) or int(max_variations_per_task) < 1
        ):
            raise ValueError(f"max_variations_per_task must be a positive int or None, got {max_variations_per_task!r}")
        if max_admissible is not None and (isinstance(max_admissible, bool) or int(max_admissible) < 1):
            raise ValueError(f"max_admissible must be a positive int or None, got {max_admissible!r}")
        if action_format not in ACTION_FORMATS:
            raise ValueError(f"action_format must be one of {ACTION_FORMATS}, got {action_format!r}")
        self.action_format = action_format
        self.split = split
        self.simplification = str(simplification or "")
        self.max_steps = int(max_steps)
        self.family_by = family_by
        self.max_admissible = None if max_admissible is None else int(max_admissible)
        if gold_cache_dir == "default":
            gold_cache_dir = sciworld_gold.default_cache_dir()
        self.gold_cache_dir = None if gold_cache_dir is None else Path(gold_cache_dir)
        # what a measuring worker process needs to build the same env (sciworld_gold.measure)
        self._construction = {"task_names": task_names, "split": split, "task_set": task_set,
                              "simplification": simplification, "max_steps": max_steps, "jar_path": jar_path}

        package, sw_class, task_table, infer_task = _import_scienceworld()
        self.package_version = getattr(package, "__version__", "unknown")
        selected = self._select_task_names(task_names, task_table, infer_task)  # before paying for a JVM
        self._errors = _py4j_errors()
        self._sw: Any = None
        self._closed = False
        self._reset_episode()
        try:
            # envStepLimit: our own max_steps governs; the package's limit only applies to its step().
            self._sw = sw_class("", serverPath=jar_path, envStepLimit=10**9)
        except FileNotFoundError as exc:
            raise DependencyMissingError(
                "sciworld: could not start the ScienceWorld JVM: no 'java' executable found "
                "(install a Java runtime, 11 or newer, e.g. Debian's openjdk-17-jre-headless)"
            ) from exc
        except Exception as exc:  # py4j raises plain Exceptions when the gateway does not come up
            raise SciWorldJVMError(f"sciworld: could not start the ScienceWorld JVM ({type(exc).__name__}: {exc})") from exc

        try:
            cap = None if max_variations_per_task is None else int(max_variations_per_task)
            self._build_tasks(selected, cap, task_table, infer_task)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ JVM access

    def _jvm(self, method: str, *args: Any, action: str | None = None) -> Any:
        """Call ``self._sw.<method>(*args)`` (dotted paths reach ``server``), wrapping JVM failures."""
        if self._closed or self._sw is None:
            raise SciWorldJVMError(f"sciworld: {method}: the env is closed")
        what = method
        try:
            fn: Any = self._sw
            for part in method.split("."):
                fn = getattr(fn, part)
            return fn(*args)
        except self._errors as exc:
            context = f"task={self._task_name!r}, variation={self._variation!r}"
            if action is not None:
                context += f", action={action!r}"
            raise SciWorldJVMError(f"sciworld: JVM call {what} failed ({context}): {type(exc).__name__}: {exc}") from exc

    def _load(self, task_name: str, variation: int, gold: bool) -> None:
        self._task_name, self._variation = task_name, variation
        self._jvm("load", task_name, variation, self.simplification, gold)

    # ------------------------------------------------------------------ tasks

    @staticmethod
    def _select_task_names(task_names, task_table, infer_task) -> list[str] | None:
        """Validate ``task_names`` against the package's task table; None means all tasks."""
        if task_names is None:
            return None
        if isinstance(task_names, str):
            task_names = [task_names]
        known = [infer_task(row["task_name"]) for row in task_table]
        selected: list[str] = []
        for raw in task_names:
            name = infer_task(str(raw))
            if name not in known:
                raise ValueError(f"sciworld: unknown ScienceWorld task {raw!r}; known: {sorted(known)}")
            if name not in selected:
                selected.append(name)
        if not selected:
            raise ValueError("sciworld: task_names selects no task")
        return selected

    def _build_tasks(self, selected, max_variations, task_table, infer_task) -> None:
        known = list(self._jvm("get_task_names"))
        info_by_name = {infer_task(row["task_name"]): row for row in task_table}
        if selected is None and self.task_set == "r3l":
            selected = r3l_tasks(self.split)
        elif selected is None:
            selected = [n for i, n in enumerate(known) if self.task_set == "package" or i in L0_TASK_ORDER]
        missing = [name for name in selected if name not in known]
        if missing:
            raise SciWorldJVMError(f"sciworld: the JVM does not know the tasks {missing}; it has {known}")
        if self.task_set == "l0":
            plan = self._l0_plan(known, selected, max_variations)
        elif self.task_set == "r3l":
            plan = self._r3l_plan(selected, max_variations)
        else:
            plan = []
            for name in selected:
                self._load(name, 0, gold=False)
                variations = sorted(int(v) for v in self._jvm(f"get_variations_{self.split}"))
                plan.extend((name, v) for v in variations[:max_variations])

        gold = sciworld_gold.read_cache(self._gold_cache_path())
        self._task_rows = {name: info_by_name.get(name, {}) for name, _ in plan}
        specs = [self._spec(name, variation, gold.get((name, variation))) for name, variation in plan]
        self.set_tasks(specs)
        self._task_name = self._variation = None

    def _spec(self, name: str, variation: int, gold_length: int | None) -> TaskSpec:
        """A task's spec; its difficulty is the gold length, NaN until measured (``measure_difficulty``)."""
        row = self._task_rows[name]
        return TaskSpec(
            task_id=f"sciworld-{name}-v{variation}",
            family=name if self.family_by == "task" else str(row.get("topic", name)),
            difficulty=float("nan") if gold_length is None else float(gold_length),
            metadata={
                "task_name": name,
                "task_num": row.get("task_id"),
                "topic": row.get("topic"),
                "task_title": row.get("task"),
                "variation": variation,
                "instance": {"task": name, "variation": variation},
                "split": self.split,
                "task_set": self.task_set,
                # r3l: raw variation numbers, from no package split
                "package_split": L0_SPLITS[self.split] if self.task_set == "l0" else None if self.task_set == "r3l" else self.split,
                "simplification": self.simplification,
                "gold_length": gold_length,
                "max_steps": self.max_steps,
            },
        )

    def measure_difficulty(self, task_ids: Sequence[str] | None = None, processes: int | None = None) -> None:
        """Measure the gold length (the difficulty) of ``task_ids`` (default: every task) where the cache
        lacks it, in ``processes`` worker processes (default: the machine's cores, at most 8), with progress
        on stderr; then cache it and update the specs. Ends any episode in progress."""
        wanted = self.tasks() if task_ids is None else [self.task(t) for t in task_ids]
        missing = sorted({(s.metadata["task_name"], s.metadata["variation"]) for s in wanted if s.metadata["gold_length"] is None})
        if not missing:
            return
        if processes is None:
            processes = min(os.cpu_count() or 1, 8, max(1, len(missing) // 10))
        lengths = sciworld_gold.measure(missing, lambda name, variation: len(self.gold_action_sequence_for(name, variation)),
                                        functools.partial(SciWorldEnv, **self._construction, gold_cache_dir=None),
                                        processes, self._gold_cache_path())
        self.set_tasks([self._spec(s.metadata["task_name"], s.metadata["variation"],
                                   lengths.get((s.metadata["task_name"], s.metadata["variation"]), s.metadata["gold_length"]))
                        for s in self.tasks()])

    def _gold_cache_path(self) -> Path | None:
        return sciworld_gold.cache_path(self.gold_cache_dir, self.package_version, self.simplification)

    def _l0_plan(self, known: list[str], selected: list[str], max_variations: int | None) -> list[tuple[str, int]]:
        """The L0 set's (task, variation) pairs of ``self.split`` for the ``selected`` tasks, in L0 order.
        The whole set is rebuilt (all 29 tasks' lists feed one shuffle stream) before filtering."""
        outside = [name for name in selected if known.index(name) not in L0_TASK_ORDER]
        if outside:
            raise ValueError(f"sciworld: task_set='l0' leaves out the tasks {outside}")

        def variations(task_index: int) -> tuple[list[int], list[int]]:
            self._load(known[task_index], 0, gold=False)
            return list(self._jvm("get_variations_train")), list(self._jvm("get_variations_dev"))

        pairs = [(known[t], v) for t, v in l0_index(variations)[self.split] if known[t] in selected]
        # each task's variations are contiguous in L0: cap each run, keeping L0's order
        return [pair for _, run in groupby(pairs, key=lambda pair: pair[0]) for pair in list(run)[:max_variations]]

    def _r3l_plan(self, selected: list[str], max_variations: int | None) -> list[tuple[str, int]]:
        """R3L's (task, variation) pairs of ``self.split`` for the ``selected`` tasks: variations 0 to
        int(count * 0.5) - 1 of each, ``count`` the package's own, which must be R3L's."""
        outside = [name for name in selected if name not in r3l_tasks(self.split)]
        if outside:
            raise ValueError(f"sciworld: task_set='r3l' split={self.split!r} leaves out the tasks {outside}")
        plan = []
        for name in selected:
            count = int(self._jvm("get_max_variations", name))
            if count != R3L_VARIATIONS[name]:
                raise SciWorldJVMError(f"sciworld: the package gives {name!r} {count} variations, R3L's table "
                                       f"{R3L_VARIATIONS[name]}: task_set='r3l' would not be R3L's tasks")
            plan.extend((name, v) for v in range(int(count * R3L_VARIATION_FRACTION))[:max_variations])
        return plan

    def gold_action_sequence_for(self, task_name: str, variation: int) -> list[str]:
        """The package's gold action sequence for a task variation under this env's simplification.

        Loads the task in the JVM, so it ends any episode in progress (call ``reset`` again after).
        """
        self._reset_episode()
        self._load(task_name, int(variation), gold=True)
        sequence = list(self._jvm("get_gold_action_sequence"))
        if not sequence or sequence[0].startswith("ERROR"):
            raise SciWorldJVMError(
                f"sciworld: no gold action sequence for task={task_name!r}, variation={variation}: {sequence[:1]}"
            )
        return sequence

    def gold_action_sequence(self, task_id: str) -> list[str]:
        """``gold_action_sequence_for`` by task id (ends any episode in progress)."""
        meta = self.task(task_id).metadata
        return self.gold_action_sequence_for(meta["task_name"], meta["variation"])


    # ------------------------------------------------------------------ episode

    def _reset_episode(self) -> None:
        self._task_id: str | None = None
        self._task_name: str | None = getattr(self, "_task_name", None)
        self._variation: int | None = getattr(self, "_variation", None)
        self._steps = 0
        self._score = 0
        self._progress = 0.0
        self._done = False
        self._won = False
        self._ambiguous: list[tuple[str, str]] | None = None
        self._ambiguous_text = ""
        self._last_truncated = 0

    def reset(self, task_id: str, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Load ``task_id`` and return ``"<task description>\\n\\n<look around>"``; ``seed`` is ignored."""
        spec = self.task(task_id)
        meta = spec.metadata
        self._reset_episode()
        self._load(meta["task_name"], meta["variation"], gold=False)
        look, _ = self._jvm("reset")
        description = str(self._jvm("get_task_description")).strip()
        self._score = int(round(100 * float(self._jvm("server.getScore"))))
        self._progress = max(self._score, 0) / 100.0
        self._task_id = task_id
        observation = f"{description}\n\n{str(look).strip()}"
        info = {
            "task": spec,
            "won": False,
            "invalid_action": False,
            "task_description": description,
            "score": self._score,
            "initial_score": self._score,
            "progress": self._progress,
            "steps": 0,
            "max_steps": self.max_steps,
        }
        return observation, info

    def _require_running(self, what: str) -> None:
        if self._task_id is None:
            raise EnvNotResetError(f"{self.name}: {what}() called before reset()")
        if self._done:
            raise EnvNotResetError(f"{self.name}: {what}() called after the episode ended; call reset()")

    def step(self, action: str) -> StepResult:
        self._require_running("step")
        text = str(action).strip()
        self._steps += 1
        info: dict[str, Any] = {"won": False, "invalid_action": False, "ambiguous": False}

        if self._ambiguous is not None:
            by_text = {choice.lower(): number for number, choice in self._ambiguous}
            text = by_text.get(text.lower(), text)
        self._ambiguous, self._ambiguous_text = None, ""

        if not text or text.lower() in BLOCKED_ACTIONS:
            observation = (
                "No action given." if not text else f"The action {text!r} is not allowed in this environment."
            )
            info["invalid_action"] = True
        elif not is_encodable_text(text):
            # py4j cannot send lone surrogates to the JVM and would report a dead simulator.
            observation = "The action holds characters that are not text; write it in plain words."
            info["invalid_action"] = True
        else:
            observation = str(self._jvm("server.step", text, action=text))
            stripped = observation.strip()
            if stripped.startswith(INVALID_PREFIXES):
                info["invalid_action"] = True
            elif stripped.startswith(AMBIGUOUS_PREFIX):
                choices = [m.groups() for m in map(_AMBIGUOUS_CHOICE.match, stripped.splitlines()[1:]) if m]
                if choices:
                    self._ambiguous = choices
                    self._ambiguous_text = stripped
                    info["ambiguous"] = True
                    info["choices"] = [choice for _, choice in choices]

        score = int(round(100 * float(self._jvm("server.getScore", action=text))))
        completed = bool(self._jvm("server.getCompleted", action=text))
        progress = max(score, 0) / 100.0
        reward = progress - self._progress
        self._score, self._progress = score, progress
        won = score >= 100
        failed = score < 0
        truncated = not (completed or won or failed) and self._steps >= self.max_steps
        done = completed or won or failed or truncated
        self._done, self._won = done, won
        if done:
            self._ambiguous, self._ambiguous_text = None, ""
        info.update(
            {
                "won": won,
                "failed": failed,
                "truncated": truncated,
                "score": score,
                "progress": progress,
                "steps": self._steps,
                "max_steps": self.max_steps,
                "task_id": self._task_id,
            }
        )
        return StepResult(observation=observation, reward=float(reward), done=done, info=info)

    def admissible_actions(self) -> list[str]:
        self._require_running("admissible_actions")
        if self._ambiguous is not None:
            self._last_truncated = 0
            return [number for number, _ in self._ambiguous]
        valid = self._jvm("get_valid_action_object_combinations")
        actions = [a.strip() for a in valid if a.strip() and a.strip().lower() not in BLOCKED_ACTIONS]
        kept, dropped = cap_actions(actions, self.max_admissible)
        self._last_truncated = dropped
        return kept

    def action_prompt(self) -> str | None:
        """``action_format="templates"``: the verb templates and the objects in reach (as the SkillRise
        authors render ScienceWorld: ~500 characters instead of ~2,000 for the full list). While the
        env waits for a choice number, prompts list the numbers instead."""
        self._require_running("action_prompt")
        if self.action_format == "list" or self._ambiguous is not None:
            return None
        templates = [t for t in self._jvm("get_possible_actions") if t.strip().lower() not in BLOCKED_ACTIONS]
        objects = sorted(set(self._jvm("get_possible_objects")))
        return (f"Action templates (replace each OBJ with one of the objects): {', '.join(templates)}\n"
                f"Objects: {', '.join(objects)}")

    @property
    def admissible_truncated(self) -> int:
        """How many valid actions the last ``admissible_actions()`` call left out."""
        return self._last_truncated

    def state_key(self) -> str:
        if self._task_id is None:
            raise EnvNotResetError(f"{self.name}: state_key() called before reset()")
        look = str(self._jvm("look"))
        inventory = str(self._jvm("inventory"))
        payload = "\x1f".join([self._task_id, str(self._score), look, inventory, self._ambiguous_text])
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Stop the JVM; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        sw, self._sw = self._sw, None
        self._task_id = None
        if sw is None:
            return
        try:
            sw.close()
        except Exception as exc:  # a JVM that already died cannot be shut down cleanly
            logger.debug("sciworld: error while closing the JVM: %s", exc)
        # the package's own __del__ would call close() again on a shut-down gateway
        try:
            sw.close = lambda: None  # type: ignore[method-assign]
        except Exception:  # pragma: no cover
            pass

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
