"""The one text-environment protocol every agent loop speaks.

A loop only ever calls ``reset``, ``step``, ``admissible_actions`` and, where
``supports_snapshot`` is true, ``get_state``/``set_state``; it never special-cases an env.
Invalid actions are reported as an observation with ``info["invalid_action"] = True``
(never an exception), because one bad model output must not kill a rollout.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


class EnvError(Exception):
    """Base class of every error an environment raises on misuse (not on bad actions)."""


class UnknownTaskError(EnvError, KeyError):
    """``reset`` was asked for a task id the environment does not have."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class EnvNotResetError(EnvError, RuntimeError):
    """``step``/``admissible_actions`` was called before ``reset`` or after the episode ended
    (``get_state`` only before ``reset``: a finished episode can still be snapshot)."""


class SnapshotNotSupportedError(EnvError, NotImplementedError):
    """The environment cannot save and restore its full state."""


class DependencyMissingError(EnvError, ImportError):
    """An optional dependency (an engine binary, a dataset) is not installed."""


class InvalidSnapshotError(EnvError, ValueError):
    """``set_state`` was given something that is not a snapshot this env can restore. The env is
    left exactly as it was: every ``set_state`` checks the whole snapshot before changing anything."""


def is_encodable_text(text: str) -> bool:
    """False for strings holding lone surrogates, which no request or JVM call can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def checked_snapshot(env_name: str, state: Any, fields: dict[str, type | tuple[type, ...]]) -> dict[str, Any]:
    """``state`` when it is a dict holding every one of ``fields`` with a value of the given type
    (``bool`` only where named: ``True`` is no step count); else InvalidSnapshotError naming the field."""
    if not isinstance(state, dict):
        raise InvalidSnapshotError(f"{env_name}: a snapshot is the dict get_state() returns, got {type(state).__name__}")
    missing = sorted(set(fields) - set(state))
    if missing:
        raise InvalidSnapshotError(f"{env_name}: snapshot lacks {missing}")
    for key, kind in fields.items():
        kinds = kind if isinstance(kind, tuple) else (kind,)
        value = state[key]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            expected = " or ".join(k.__name__ for k in kinds)
            raise InvalidSnapshotError(f"{env_name}: snapshot field {key!r} is {value!r:.80}, expected {expected}")
    return state


@dataclass(frozen=True)
class TaskSpec:
    """What a loop or a sequence builder may know about a task before playing it."""

    task_id: str
    family: str
    difficulty: float
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StepResult:
    observation: str
    reward: float
    done: bool
    info: dict[str, Any]

    @property
    def won(self) -> bool:
        return bool(self.info.get("won", False))

    @property
    def invalid_action(self) -> bool:
        return bool(self.info.get("invalid_action", False))


class TextEnv(abc.ABC):
    """A text environment. Subclasses set ``name`` and ``supports_snapshot``."""

    name: str = "text_env"
    supports_snapshot: bool = False

    def set_tasks(self, specs: list[TaskSpec], scope: str = "") -> None:
        """Declare the instance's tasks (once, in ``__init__``); ``tasks``/``task`` then serve them.
        ``scope`` is appended to unknown-task errors (e.g. "in split 'train'")."""
        self._specs = list(specs)
        self._spec_by_id = {spec.task_id: spec for spec in self._specs}
        if len(self._spec_by_id) != len(self._specs):
            raise ValueError(f"{self.name}: duplicate task ids")
        self._task_scope = f" {scope}" if scope else ""

    def tasks(self) -> list[TaskSpec]:
        """Every task this environment instance can be reset to."""
        if not hasattr(self, "_spec_by_id"):
            raise NotImplementedError(f"{type(self).__name__} must call set_tasks() in __init__ or override tasks()")
        return list(self._specs)

    @abc.abstractmethod
    def reset(self, task_id: str, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Start ``task_id``; return the first observation and info (with ``task``: TaskSpec).

        ``seed`` drives the env's own randomness for this episode (slips, opponents); ``None``
        makes the episode a fixed function of the task id. Deterministic envs ignore it.
        Raises UnknownTaskError for ids not in ``tasks()``.
        """

    @abc.abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply a text action. ``info`` always holds ``won`` and ``invalid_action``."""

    @abc.abstractmethod
    def admissible_actions(self) -> list[str]:
        """Actions that are valid in the current state, in a stable order."""

    def measure_difficulty(self, task_ids: Sequence[str] | None = None, processes: int | None = None) -> None:
        """Make the ``difficulty`` of ``task_ids`` (default: every task) known. Most envs know it when they
        are built; one whose measure is costly (ScienceWorld's gold paths) leaves it NaN until a dataset
        build that orders tasks by difficulty asks for it here."""

    def action_prompt(self) -> str | None:
        """A compact rendering of the admissible actions for prompts (e.g. verb templates plus the
        objects in view) for envs whose full list would not fit a turn; None (the default): prompts
        list ``admissible_actions()``."""
        return None

    def prompt_actions(self) -> str | list[str]:
        """What a prompt shows of the admissible actions: ``action_prompt()``, else ``admissible_actions()``.
        One method, so an env in a worker process answers it in one round trip (an agent loop asks after
        every observation)."""
        return self.action_prompt() or self.admissible_actions()

    @abc.abstractmethod
    def state_key(self) -> str:
        """A canonical key of the current state (knowledge tables are keyed by it)."""

    def get_state(self) -> Any:
        """An opaque snapshot from which ``set_state`` restores this exact state, RNG included."""
        raise SnapshotNotSupportedError(f"{self.name} cannot snapshot its state")

    def set_state(self, state: Any) -> None:
        raise SnapshotNotSupportedError(f"{self.name} cannot restore a snapshot")

    def task(self, task_id: str) -> TaskSpec:
        if not hasattr(self, "_spec_by_id"):
            raise NotImplementedError(f"{type(self).__name__} must call set_tasks() in __init__ or override task()")
        try:
            return self._spec_by_id[task_id]
        except (KeyError, TypeError):
            raise UnknownTaskError(f"{self.name}: unknown task id {task_id!r}{self._task_scope}") from None

    def close(self) -> None:
        """Release processes or files; the default has nothing to release."""
