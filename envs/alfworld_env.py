"""ALFWorld, TextWorld version (Shridhar et al., 2020), on the real ``alfworld`` / TextWorld engine.

The SkillRise paper evaluates on ALFWorld's text version over its six task families. This env plays
ALFWorld's own game files with ALFWorld's own engine stack, exactly as ``alfworld``'s
``AlfredTWEnv`` builds it: TextWorld's ``PddlEnv`` (PDDL state + Fast Downward, via the
``fast-downward-textworld`` library) wrapped by ``alfworld``'s ``AlfredDemangler`` (object names such
as ``apple 1``) and ``AlfredInfos``, with ``textworld.EnvInfos(admissible_commands=True, won=True)``.
Only the agent-loop protocol of ``envs.base`` is added on top.

Install: ``alfworld==0.4.2`` (with ``textworld==1.7.0``; ``fast-downward-textworld`` and ``jericho``
have no wheels and build from source with cmake/make/g++; fast-downward's ``setup.py`` runs the
``python`` found on ``PATH``, so put the environment's ``bin`` first on ``PATH`` while installing).

Data
----
ALFWorld's games come from ``alfworld-download`` (needs the internet), which fills
``$ALFWORLD_DATA`` (default ``~/.cache/alfworld``)::

    $ALFWORLD_DATA/json_2.1.1/{train,valid_seen,valid_unseen}/<task_dir>/<trial_dir>/
        traj_data.json  game.tw-pddl  [initial_state.pddl]

``AlfWorldEnv(data_dir=..., split=...)`` reads ``data_dir`` (else ``$ALFWORLD_DATA``, else
``~/.cache/alfworld``); ``data_dir`` may also be the ``json_2.1.1`` folder itself. Games are
collected as ``AlfredTWEnv.collect_game_files`` does: every folder holding ``traj_data.json`` and
``game.tw-pddl`` whose ``task_type`` is one of the six families, skipping ``movable``/``Sliced``
folders (unsupported by ALFWorld) and games whose ``solvable`` flag is not true. A missing or empty
split raises ``DependencyMissingError`` telling to run ``alfworld-download``.
``scripts/make_alfworld_games.py`` writes small games in this layout for offline tests.

Tasks
-----
One task per game; ``task_id`` is the game folder relative to the split folder
(``<task_type>-<Object>-<mrecep>-<Parent>-<scene>/trial_T...``), tasks sorted by id. ``family`` is
the paper's name: ``Pick`` (pick_and_place_simple), ``Look`` (look_at_obj_in_light), ``Clean``
(pick_clean_then_place_in_recep), ``Heat`` (pick_heat_then_place_in_recep), ``Cool``
(pick_cool_then_place_in_recep), ``Pick2`` (pick_two_obj_and_place).

``difficulty`` = expert plan length, in text commands, chosen by ``difficulty=``:

* ``"walkthrough"`` (default): the length of the expert walkthrough stored in ``game.tw-pddl``
  (``alfworld-generate`` writes it; counts every command, ``open`` included);
* ``"high_pddl"``: the number of ALFRED high-level subgoals in ``traj_data.json``
  ``plan.high_pddl``, the final ``NoOp`` not counted (constant within most families: Pick = 4);
* ``"low_actions"``: ``len(plan.low_actions)``, ALFRED's low-level THOR actions (navigation included).

A game lacking the chosen field falls back to ``high_pddl``; ``metadata["difficulty_source"]``
says which one was used. ``metadata`` also holds ``family``, ``task_type``, ``goal`` (the text after
"Your task is to:"), ``plan_length`` (= difficulty), ``walkthrough_len``, ``high_pddl_len``,
``low_actions_len``, ``num_receptacles``, ``pddl_params``, ``scene``, ``split`` and ``game_file``.
The index of a split is built once per process (it parses every game file) and shared by instances.

Episode
-------
``reset(task_id)`` loads the game and returns the engine's intro text (room, receptacles and
``Your task is to: ...``). The engine is deterministic, so ``seed`` is ignored. ``step(action)``:

* matching is whitespace- and case-insensitive against the admissible commands;
* an action that is not admissible (``admissible_actions()``) is not sent to the engine: the
  observation is ALFWorld's own answer to it, ``"Nothing happens."``, the state is unchanged and
  ``info["invalid_action"]`` is True (never an exception);
* reward is 1.0 on the step that wins (``info["won"]``), else 0.0; the episode ends on a win or
  after ``max_steps`` steps (default 50, invalid steps included, as ALFWorld's
  ``max_episode_steps``), the latter with ``info["truncated"]``. ALFWorld has no losing state.

``admissible_actions()`` is the engine's sorted admissible-command list, without ``help`` unless
``hide_help=False`` (``help`` prints the command list and is then invalid when hidden).

``state_key()``: ALFWorld's true state is the PDDL fact set the engine holds, and it is cheap to
read, so by default (``state_key_mode="facts"``) the key is ``alfworld:<task_id>:<sha1 of the sorted
positive facts>`` (TextWorld's path-dependent ``not_*`` bookkeeping facts left out). It is canonical:
two paths to the same world state share it (``look``/``examine``/``inventory`` do change it, through
the domain's ``checked`` facts). ``state_key_mode="observation"`` keys on the last observation text
instead (``alfworld:<task_id>:obs:<sha1>``), which merges different states that read alike.

Snapshots: TextWorld's ``PddlEnv`` has no ``copy()`` and keeps the planning state inside the
Fast Downward C library, so there is no save/restore: ``supports_snapshot = False``. (The engine is
deterministic, so a caller can rebuild a state by ``reset`` + replaying the actions.)

Engine errors (an unreadable game file, a PDDL parse error, a crash in the engine) raise
``AlfWorldEngineError`` (an ``EnvError``) naming the task, the action and the game file; the env
must then be reset before it is stepped again.

Threads: TextWorld parses grammar text with module-global parsers (on load and on every step) and
Fast Downward's translator keeps module globals and overwrites ``sys.argv``; none of it is
thread-safe. So every engine call in a process holds one process-wide lock (and ``sys.argv`` is
restored): instances may be used from different threads (one instance from one thread at a time),
but their engine work runs one call at a time. It is pure Python, so threads would not run it in
parallel anyway; agent loops run every env in its own worker process (``skl_verl/rollout/env_runtime.py``),
so their episodes do run in parallel. Each instance loads its own copy
of Fast Downward's C library (``fast_downward.load_lib``). A valid step costs about 0.1 s, a reset
0.3-0.7 s on the small test games (an invalid action costs nothing: it never reaches the engine).

``expert_plan()`` (not part of the protocol) asks Fast Downward for an optimal plan from the
current state.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sys
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.base import (
    DependencyMissingError,
    EnvError,
    EnvNotResetError,
    StepResult,
    TaskSpec,
    TextEnv,
)

logger = logging.getLogger(__name__)

DATASET_DIRNAME = "json_2.1.1"
SPLITS: tuple[str, ...] = ("train", "valid_seen", "valid_unseen")
DEFAULT_DATA_DIR = "~/.cache/alfworld"  # alfworld.info's default for $ALFWORLD_DATA
# ALFRED task_type -> the family name used by the paper (and verl-agent / GiGPO tables).
FAMILIES: dict[str, str] = {
    "pick_and_place_simple": "Pick",
    "look_at_obj_in_light": "Look",
    "pick_clean_then_place_in_recep": "Clean",
    "pick_heat_then_place_in_recep": "Heat",
    "pick_cool_then_place_in_recep": "Cool",
    "pick_two_obj_and_place": "Pick2",
}
STALE_GAME = "no_solvable_flag"
"""Why a game is skipped when its game.tw-pddl predates the ``solvable`` flag (a stale download)."""


DIFFICULTY_SOURCES: tuple[str, ...] = ("walkthrough", "high_pddl", "low_actions")
STATE_KEY_MODES: tuple[str, ...] = ("facts", "observation")
NOTHING_HAPPENS = "Nothing happens."  # PddlEnv's answer to a command that is not admissible
INSTALL_HINT = (
    "install with PATH=<venv>/bin:$PATH pip install alfworld==0.4.2 (it brings textworld 1.7.0 and builds "
    "fast-downward-textworld and jericho from source: cmake, make and a C++ compiler are needed, and "
    "fast-downward's setup.py runs the `python` found on PATH)"
)

_GOAL_RE = re.compile(r"Your task is to: (.*?)\.?\"")
_RECEPTACLE_RE = re.compile(r"\s-\s+receptacle\b")
# Every engine call in a process is serialised: TextWorld parses grammar text with module-global
# tatsu parsers (on load AND on every step) and fast_downward's translator keeps module globals and
# overwrites sys.argv, none of it thread-safe (concurrent use fails with tatsu "pop from empty list").
_ENGINE_LOCK = threading.Lock()
_INDEX_LOCK = threading.Lock()
_INDEX_CACHE: dict[str, tuple[tuple["_Game", ...], dict[str, int]]] = {}


class AlfWorldEngineError(EnvError, RuntimeError):
    """The TextWorld/Fast Downward engine failed while loading a game or applying a command."""

    def __init__(self, message: str, *, task_id: str | None = None, action: str | None = None,
                 game_file: str | None = None) -> None:
        super().__init__(message)
        self.task_id = task_id
        self.action = action
        self.game_file = game_file


@dataclass(frozen=True)
class _Game:
    """What the index keeps of one game (no full JSON)."""

    task_id: str
    game_file: str
    task_type: str
    goal: str
    walkthrough_len: int | None
    high_pddl_len: int | None
    low_actions_len: int | None
    num_receptacles: int
    pddl_params: dict[str, Any]
    scene: dict[str, Any]


# ------------------------------------------------------------------------------------ dependencies


def _import_engine() -> tuple[Any, Any, Any, Any]:
    """(textworld, PddlEnv, AlfredDemangler, AlfredInfos), or DependencyMissingError."""
    try:
        import fast_downward  # noqa: F401  (textworld.envs.pddl only flags its absence at use)
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
        from textworld.envs import PddlEnv
    except ImportError as exc:
        raise DependencyMissingError(
            f"envs.alfworld_env needs the alfworld TextWorld engine ({exc}); {INSTALL_HINT}"
        ) from exc
    return textworld, PddlEnv, AlfredDemangler, AlfredInfos


@contextmanager
def _engine_guard() -> Iterator[None]:
    """Hold the process-wide engine lock and restore the ``sys.argv`` Fast Downward overwrites."""
    with _ENGINE_LOCK:
        saved = list(sys.argv)
        try:
            yield
        finally:
            sys.argv[:] = saved


# ------------------------------------------------------------------------------------ data index


def resolve_split_dir(data_dir: str | os.PathLike | None, split: str) -> Path:
    """The folder holding ``split``'s games, or DependencyMissingError saying to run alfworld-download."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    source = "data_dir" if data_dir is not None else "$ALFWORLD_DATA" if os.environ.get("ALFWORLD_DATA") else "default"
    root = Path(os.path.expanduser(os.fspath(data_dir or os.environ.get("ALFWORLD_DATA") or DEFAULT_DATA_DIR)))
    candidates = [root / DATASET_DIRNAME / split, root / split]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    raise DependencyMissingError(
        f"ALFWorld data not found: no {split!r} split under {str(root)!r} ({source}; looked for "
        f"{', '.join(repr(str(c)) for c in candidates)}). Run `alfworld-download` (it fills $ALFWORLD_DATA, "
        f"default {DEFAULT_DATA_DIR}) or pass data_dir= / set ALFWORLD_DATA to a folder with "
        f"{DATASET_DIRNAME}/<split>/.../game.tw-pddl files; offline, scripts/make_alfworld_games.py writes "
        "a few test games in that layout."
    )


def _read_game(split_dir: Path, folder: Path) -> tuple[_Game | None, str]:
    """Index one game folder: (game, "") or (None, why it is skipped)."""
    rel = folder.relative_to(split_dir).as_posix()
    if "movable" in rel or "Sliced" in rel:  # as AlfredTWEnv: not supported by ALFWorld
        return None, "movable_or_sliced"
    game_file = folder / "game.tw-pddl"
    if not game_file.is_file():
        return None, "no_game_file"
    try:
        traj = json.loads((folder / "traj_data.json").read_text())
        game = json.loads(game_file.read_text())
    except (OSError, ValueError) as exc:
        logger.warning("alfworld: skipping unreadable game %s: %s", folder, exc)
        return None, "unreadable"
    task_type = traj.get("task_type")
    if task_type not in FAMILIES:
        return None, "other_task_type"
    if "solvable" not in game:  # AlfredTWEnv skips these too; they come from an older download
        return None, STALE_GAME
    if game.get("solvable") is not True:
        return None, "not_solvable"
    match = _GOAL_RE.search(game.get("grammar", ""))
    plan = traj.get("plan") or {}
    high = plan.get("high_pddl")
    high_len = None
    if isinstance(high, list):
        high_len = sum(1 for sub in high if ((sub or {}).get("discrete_action") or {}).get("action") != "NoOp")
    low = plan.get("low_actions")
    walk = game.get("walkthrough")
    scene = traj.get("scene") or {}
    return _Game(
        task_id=rel,
        game_file=str(game_file),
        task_type=task_type,
        goal=match.group(1) if match else "",
        walkthrough_len=len(walk) if isinstance(walk, list) and walk else None,
        high_pddl_len=high_len,
        low_actions_len=len(low) if isinstance(low, list) else None,
        num_receptacles=len(_RECEPTACLE_RE.findall(game.get("pddl_problem", ""))),
        pddl_params=dict(traj.get("pddl_params") or {}),
        scene={k: scene[k] for k in ("floor_plan", "scene_num") if k in scene},
    ), ""


def index_split(split_dir: str | os.PathLike) -> tuple[tuple[_Game, ...], dict[str, int]]:
    """(games sorted by task id, counts of skipped folders by reason); cached per process."""
    split_dir = Path(split_dir).resolve()
    key = str(split_dir)
    with _INDEX_LOCK:
        cached = _INDEX_CACHE.get(key)
        if cached is not None:
            return cached
        games: list[_Game] = []
        skipped: Counter[str] = Counter()
        for root, _dirs, files in os.walk(split_dir):
            if "traj_data.json" not in files:
                continue
            game, why = _read_game(split_dir, Path(root))
            if game is None:
                skipped[why] += 1
            else:
                games.append(game)
        games.sort(key=lambda g: g.task_id)
        result = (tuple(games), dict(skipped))
        if games:  # an empty split may be filled later (alfworld-download): do not remember it
            _INDEX_CACHE[key] = result
        return result


def _normalise_families(families: Iterable[str] | str | None) -> set[str] | None:
    if families is None:
        return None
    if isinstance(families, str):
        families = [families]
    by_name = {name.lower(): task_type for task_type, name in FAMILIES.items()}
    wanted = set()
    for fam in families:
        task_type = fam if fam in FAMILIES else by_name.get(str(fam).lower())
        if task_type is None:
            raise ValueError(f"unknown ALFWorld family {fam!r}; use one of {sorted(FAMILIES.values())} "
                             f"or {sorted(FAMILIES)}")
        wanted.add(task_type)
    return wanted


def _normalise(text: str) -> str:
    return " ".join(text.split()).lower()


# ------------------------------------------------------------------------------------ environment


class AlfWorldEnv(TextEnv):
    """ALFWorld text games on the real engine; see the module docstring."""

    name = "alfworld"
    supports_snapshot = False

    def __init__(
        self,
        data_dir: str | os.PathLike | None = None,
        split: str = "train",
        families: Iterable[str] | str | None = None,
        max_tasks: int | None = None,
        max_steps: int | None = 50,
        difficulty: str = "walkthrough",
        state_key_mode: str = "facts",
        hide_help: bool = True,
    ) -> None:
        """``families`` keeps only those families (paper names or task_type names); ``max_tasks``
        keeps the first tasks in id order after that filter."""
        if max_steps is not None and (isinstance(max_steps, bool) or int(max_steps) != max_steps or max_steps < 1):
            raise ValueError(f"max_steps must be a positive int or None, got {max_steps!r}")
        if max_tasks is not None and (isinstance(max_tasks, bool) or int(max_tasks) != max_tasks or max_tasks < 1):
            raise ValueError(f"max_tasks must be a positive int or None, got {max_tasks!r}")
        if difficulty not in DIFFICULTY_SOURCES:
            raise ValueError(f"difficulty must be one of {DIFFICULTY_SOURCES}, got {difficulty!r}")
        if state_key_mode not in STATE_KEY_MODES:
            raise ValueError(f"state_key_mode must be one of {STATE_KEY_MODES}, got {state_key_mode!r}")
        self.max_steps = None if max_steps is None else int(max_steps)
        self.split = split
        self.difficulty = difficulty
        self.state_key_mode = state_key_mode
        self.hide_help = bool(hide_help)
        wanted = _normalise_families(families)

        _import_engine()  # fail fast, before scanning data, when the engine is not installed
        self.split_dir = resolve_split_dir(data_dir, split)
        games, skipped = index_split(self.split_dir)
        self.skipped: dict[str, int] = dict(skipped)
        if not games:
            raise DependencyMissingError(
                f"no playable ALFWorld games under {str(self.split_dir)!r} (skipped: {self.skipped or 'none found'}); "
                "run `alfworld-download -f` (-f replaces files an older download left: without it they stay) "
                "and `alfworld-generate` if game.tw-pddl files are missing"
            )
        if self.skipped.get(STALE_GAME):
            logger.warning(
                "alfworld: %d games under %s have no 'solvable' flag (an older download) and are skipped; "
                "`alfworld-download -f` replaces them (alfworld issue #98: 132 instead of 134 valid_unseen games)",
                self.skipped[STALE_GAME], self.split_dir)
        if wanted is not None:
            games = tuple(g for g in games if g.task_type in wanted)
        if max_tasks is not None:
            games = games[: int(max_tasks)]
        self._games: dict[str, _Game] = {g.task_id: g for g in games}
        self.set_tasks([self._make_spec(g) for g in games], scope=f"in split {self.split!r}")

        self._engine: Any = None
        self._loaded_game: str | None = None
        self._clear_episode()

    # ------------------------------------------------------------------ tasks

    def _make_spec(self, game: _Game) -> TaskSpec:
        lengths = {"walkthrough": game.walkthrough_len, "high_pddl": game.high_pddl_len,
                   "low_actions": game.low_actions_len or None}
        source = self.difficulty if lengths[self.difficulty] is not None else "high_pddl"
        value = lengths[source]
        if value is None:
            source, value = "none", 0
        return TaskSpec(
            task_id=game.task_id,
            family=FAMILIES[game.task_type],
            difficulty=float(value),
            metadata={
                "family": FAMILIES[game.task_type],
                "task_type": game.task_type,
                "goal": game.goal,
                "plan_length": value,
                "difficulty_source": source,
                "walkthrough_len": game.walkthrough_len,
                "high_pddl_len": game.high_pddl_len,
                "low_actions_len": game.low_actions_len,
                "num_receptacles": game.num_receptacles,
                "pddl_params": dict(game.pddl_params),
                "scene": dict(game.scene),
                # What makes two games the same instance (SkillRise sequences avoid repeating one):
                # the task folder (trials of one folder share object, receptacle and scene), and those.
                "instance": {
                    "task_folder": str(Path(game.task_id).parent),
                    "object": game.pddl_params.get("object_target"),
                    "receptacle": game.pddl_params.get("parent_target"),
                    "scene": game.scene.get("floor_plan"),
                },
                "split": self.split,
                "game_file": game.game_file,
            },
        )


    def walkthrough(self, task_id: str) -> list[str] | None:
        """The expert walkthrough stored in the task's game file (None when it has none)."""
        game = self._games[self.task(task_id).task_id]
        walk = json.loads(Path(game.game_file).read_text()).get("walkthrough")
        return list(walk) if isinstance(walk, list) and walk else None

    # ------------------------------------------------------------------ episode

    def _clear_episode(self) -> None:
        self._task_id: str | None = None
        self._game_state: Any = None
        self._observation = ""
        self._steps = 0
        self._done = False
        self._won = False

    def _engine_env(self) -> Any:
        if self._engine is None:
            textworld, PddlEnv, AlfredDemangler, AlfredInfos = _import_engine()
            infos = textworld.EnvInfos(admissible_commands=True, won=True, extras=["gamefile"])
            try:
                self._engine = AlfredInfos(AlfredDemangler(PddlEnv(infos), shuffle=False))
            except Exception as exc:  # e.g. libdownward.so missing or not loadable
                raise DependencyMissingError(
                    f"could not start the TextWorld PDDL engine: {exc}; {INSTALL_HINT}"
                ) from exc
            self._loaded_game = None
        return self._engine

    def reset(self, task_id: str, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Load ``task_id``'s game and return its intro; ``seed`` is ignored (deterministic engine)."""
        spec = self.task(task_id)
        game = self._games[spec.task_id]
        engine = self._engine_env()
        self._clear_episode()
        with _engine_guard():
            try:
                if self._loaded_game != game.game_file:
                    self._loaded_game = None
                    engine.load(game.game_file)
                    self._loaded_game = game.game_file
                state = engine.reset()
            except (Exception, SystemExit) as exc:  # fast_downward may sys.exit() on bad PDDL
                self._loaded_game = None
                raise AlfWorldEngineError(
                    f"{self.name}: reset({task_id!r}) failed in the TextWorld engine for game "
                    f"{game.game_file}: {type(exc).__name__}: {exc}",
                    task_id=task_id, game_file=game.game_file,
                ) from exc
        self._task_id = spec.task_id
        self._game_state = state
        self._observation = str(state.feedback)
        info = {
            "task": spec,
            "won": False,
            "invalid_action": False,
            "steps": 0,
            "max_steps": self.max_steps,
            "goal": game.goal,
            "game_file": game.game_file,
        }
        return self._observation, info

    def _require_episode(self, what: str, allow_done: bool = False) -> None:
        if self._game_state is None:
            raise EnvNotResetError(f"{self.name}: {what} called before reset()")
        if self._done and not allow_done:
            raise EnvNotResetError(f"{self.name}: {what} called after the episode ended")

    def _admissible(self) -> list[str]:
        commands = list(self._game_state["admissible_commands"] or [])
        if self.hide_help:
            commands = [c for c in commands if c != "help"]
        return commands

    def step(self, action: str) -> StepResult:
        self._require_episode("step()")
        commands = {_normalise(c): c for c in self._admissible()}
        command = commands.get(_normalise(action)) if isinstance(action, str) else None
        self._steps += 1
        if command is None:
            self._observation = NOTHING_HAPPENS
            invalid = True
        else:
            invalid = False
            try:
                with _engine_guard():
                    state, _score, _done = self._engine.step(command)
            except (Exception, SystemExit) as exc:
                task_id, game_file = self._task_id, self._loaded_game
                self._clear_episode()
                self._loaded_game = None
                raise AlfWorldEngineError(
                    f"{self.name}: step({command!r}) failed in the TextWorld engine (task {task_id!r}, "
                    f"game {game_file}): {type(exc).__name__}: {exc}",
                    task_id=task_id, action=command, game_file=game_file,
                ) from exc
            self._game_state = state
            self._observation = str(state.feedback)
            self._won = bool(state["won"])
        truncated = not self._won and self.max_steps is not None and self._steps >= self.max_steps
        self._done = self._won or truncated
        info = {
            "won": self._won,
            "invalid_action": invalid,
            "steps": self._steps,
            "truncated": truncated,
        }
        return StepResult(self._observation, 1.0 if self._won else 0.0, self._done, info)

    def admissible_actions(self) -> list[str]:
        self._require_episode("admissible_actions()")
        return self._admissible()

    def state_key(self) -> str:
        self._require_episode("state_key()", allow_done=True)
        if self.state_key_mode == "observation":
            digest = hashlib.sha1(self._observation.encode("utf-8")).hexdigest()
            return f"alfworld:{self._task_id}:obs:{digest}"
        # Closed world: the positive facts are the state. TextWorld also keeps "not_*" facts for
        # effects it has applied, which depend on the path taken; derived axioms are dropped too.
        facts = sorted(
            str(fact) for fact in self._game_state["_facts"]
            if not fact.name.startswith(("not_", "new-axiom@"))
        )
        digest = hashlib.sha1("\n".join(facts).encode("utf-8")).hexdigest()
        return f"alfworld:{self._task_id}:{digest}"

    @property
    def steps(self) -> int:
        return self._steps

    def expert_plan(self) -> list[str]:
        """Fast Downward's optimal command sequence from the current state (``[]`` if none).

        Not part of the TextEnv protocol: an oracle for tests, data generation or simulation."""
        self._require_episode("expert_plan()", allow_done=True)
        pddl_env = self._engine.unwrapped
        try:
            with _engine_guard():
                return list(pddl_env._pddl_state.replan(pddl_env._entity_infos))
        except (Exception, SystemExit) as exc:
            raise AlfWorldEngineError(f"{self.name}: the planner failed on task {self._task_id!r}: {exc}",
                                      task_id=self._task_id, game_file=self._loaded_game) from exc

    def close(self) -> None:
        """Drop the engine. Fast Downward's library copy is not dlclose()d: a timed-out call may still
        be running in another thread, and unmapping the library under it would crash the process."""
        self._engine = None
        self._loaded_game = None
        self._clear_episode()
