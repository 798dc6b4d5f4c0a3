"""Slippery FrozenLake as a text environment, with a configurable (possibly asymmetric) slip.

Grid, tiles, action order and wall semantics are gymnasium's ``FrozenLake-v1``:

* tiles ``S`` (start), ``F`` (frozen), ``H`` (hole), ``G`` (goal); row 0 is the top row;
* actions ``left, down, right, up`` are gymnasium's actions 0..3;
* a move into the border keeps the player in place;
* reaching ``G`` gives reward 1 and ends the episode (won); falling into ``H`` gives 0 and ends it (lost).

Slip: ``slip=(p_left, p_right)``. The intended move happens with probability ``1 - p_left - p_right``;
with ``p_left`` the player slides to the direction 90 degrees counter-clockwise of the intended one
(the walker's left: up -> left, left -> down, down -> right, right -> up), with ``p_right`` to the one
90 degrees clockwise (the walker's right: up -> right, right -> down, down -> left, left -> up).
In gymnasium's action numbering, left-of(a) = (a + 1) % 4 and right-of(a) = (a - 1) % 4. The default
``(1/3, 1/3)`` is exactly gymnasium's ``is_slippery=True`` table; ``(0, 2/3)`` is the paper's variant.

Maps are generated with gymnasium's own ``generate_random_map(size, p, seed)`` (gymnasium is only
imported for that, so explicit ``maps=`` need no gymnasium). Map ``i`` of an env with seed ``s`` is
``generate_random_map(size, p_frozen, seed=map_seed)`` where ``map_seed`` is derived from ``(s, i)``
with ``numpy.random.SeedSequence`` and stored in the task's metadata; different env seeds therefore
give unrelated map sets (not shifted copies of one another).

Randomness: each ``reset(task_id)`` re-seeds the env's ``numpy.random.Generator`` (PCG64) from the env
seed and the task id, so an episode is a pure function of (env seed, task id, actions);
``reset(task_id, seed=k)`` uses ``k`` in place of the env seed (e.g. ``k`` = sample index for several
independent rollouts of one task).

Invalid actions: an action string that is not one of the four directions (after stripping whitespace
and lower-casing) returns an observation saying so, reward 0, ``done=False`` and
``info["invalid_action"]=True``. It does NOT consume a step, does not draw from the RNG and does not
change the position, so it cannot cause truncation; a loop that wants to bound invalid outputs must
count them itself.

Truncation: after ``max_steps`` valid moves without reaching G or H the episode ends with
``won=False`` and ``info["truncated"]=True`` (a move that lands on G or H on the last step counts as
reaching it). ``max_steps=None`` means no limit.

Snapshot (``get_state``): a plain dict, deep-copyable, picklable and JSON-serialisable::

    {"env": "frozenlake", "version": 1, "task_id": str, "map": "SFFF/FHFH/...",
     "slip": (p_left, p_right), "max_steps": int | None, "position": (row, col),
     "steps": int, "done": bool, "won": bool, "truncated": bool,
     "rng_state": <numpy PCG64 bit_generator.state dict>}

``set_state`` restores it exactly (RNG included), also into a fresh env instance built with the same
arguments; it raises UnknownTaskError for an unknown task id and ValueError if the snapshot's map,
slip or max_steps differ from this env's.
"""

from __future__ import annotations

import copy
import hashlib
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from envs.base import (
    DependencyMissingError,
    EnvNotResetError,
    InvalidSnapshotError,
    StepResult,
    TaskSpec,
    TextEnv,
    UnknownTaskError,
    checked_snapshot,
)

ACTIONS: tuple[str, ...] = ("left", "down", "right", "up")  # gymnasium's action order 0..3
_ACTION_INDEX: dict[str, int] = {name: i for i, name in enumerate(ACTIONS)}
_DELTAS: tuple[tuple[int, int], ...] = ((0, -1), (1, 0), (0, 1), (-1, 0))
_LEFT_OF: tuple[int, ...] = tuple((a + 1) % 4 for a in range(4))  # 90 deg counter-clockwise
_RIGHT_OF: tuple[int, ...] = tuple((a - 1) % 4 for a in range(4))  # 90 deg clockwise

_ONGOING, _GOAL, _HOLE = 0, 1, 2
_STATUS_WON, _STATUS_HOLE, _STATUS_TRUNCATED = 1, 2, 3
_SNAPSHOT_VERSION = 1
_SLIP_TOL = 1e-9
_BIT_GENERATORS = {"PCG64": np.random.PCG64, "PCG64DXSM": np.random.PCG64DXSM, "MT19937": np.random.MT19937,
                   "Philox": np.random.Philox, "SFC64": np.random.SFC64}


def _generator_from_state(env_name: str, rng_state: dict[str, Any]) -> np.random.Generator:
    """A new generator in ``rng_state`` (numpy copies the values; the snapshot stays intact)."""
    kind = _BIT_GENERATORS.get(rng_state.get("bit_generator"))
    if kind is None:
        raise InvalidSnapshotError(
            f"{env_name}: snapshot rng_state names bit generator {rng_state.get('bit_generator')!r:.40}; "
            f"known: {sorted(_BIT_GENERATORS)}"
        )
    bit_generator = kind(0)
    try:
        bit_generator.state = rng_state
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise InvalidSnapshotError(f"{env_name}: snapshot rng_state is not a {kind.__name__} state: {exc}") from None
    return np.random.Generator(bit_generator)


def _validate_slip(slip: Sequence[float]) -> tuple[float, float, float]:
    """Return ``(p_intended, p_left, p_right)`` for ``slip=(p_left, p_right)`` or raise ValueError."""
    try:
        p_left, p_right = (float(x) for x in slip)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"slip must be a pair (p_left, p_right) of probabilities, got {slip!r}") from exc
    for label, p in (("p_left", p_left), ("p_right", p_right)):
        if not (0.0 <= p <= 1.0):  # also rejects NaN
            raise ValueError(f"slip {label} must be a probability in [0, 1], got {p!r} (slip={slip!r})")
    if p_left + p_right > 1.0 + _SLIP_TOL:
        raise ValueError(
            f"slip probabilities must sum to at most 1 (p_left + p_right = {p_left + p_right!r}, slip={slip!r}); "
            "the intended move gets 1 - p_left - p_right"
        )
    p_intended = 1.0 - p_left - p_right
    if p_intended < _SLIP_TOL:
        p_intended = 0.0
    return p_intended, p_left, p_right


def slip_direction_probs(slip: Sequence[float] = (1 / 3, 1 / 3)) -> dict[str, dict[str, float]]:
    """``{intended action: {actual direction: probability}}`` for a slip pair, zero entries left out.

    For the default ``(1/3, 1/3)`` this is gymnasium's ``is_slippery=True`` rule (each of the
    intended direction and its two perpendiculars with 1/3); for symmetric ``(q, q)`` it is
    gymnasium's ``success_rate = 1 - 2q``.
    """
    p_int, p_left, p_right = _validate_slip(slip)
    out: dict[str, dict[str, float]] = {}
    for a, name in enumerate(ACTIONS):
        dist: dict[str, float] = {}
        for d, p in ((a, p_int), (_LEFT_OF[a], p_left), (_RIGHT_OF[a], p_right)):
            if p > 0.0:
                dist[ACTIONS[d]] = dist.get(ACTIONS[d], 0.0) + p
        out[name] = dist
    return out


def shortest_path_length(rows: Sequence[str]) -> int | None:
    """Fewest moves from S to the nearest G over non-hole tiles (BFS); None if G is unreachable."""
    nrow, ncol = len(rows), len(rows[0])
    start = next((r, c) for r in range(nrow) for c in range(ncol) if rows[r][c] == "S")
    dist = {start: 0}
    queue = deque([start])
    while queue:
        r, c = queue.popleft()
        if rows[r][c] == "G":
            return dist[(r, c)]
        for dr, dc in _DELTAS:
            nr, nc = r + dr, c + dc
            if 0 <= nr < nrow and 0 <= nc < ncol and rows[nr][nc] != "H" and (nr, nc) not in dist:
                dist[(nr, nc)] = dist[(r, c)] + 1
                queue.append((nr, nc))
    return None


def _normalise_map(raw: Any, index: int) -> tuple[str, ...]:
    if isinstance(raw, str):
        raise ValueError(f"map {index}: expected a list of row strings, got a single string {raw!r}")
    rows = tuple(row if isinstance(row, str) else "".join(row) for row in raw)
    if not rows or not rows[0]:
        raise ValueError(f"map {index}: empty map")
    if any(len(row) != len(rows[0]) for row in rows):
        raise ValueError(f"map {index}: rows have different lengths: {list(rows)!r}")
    bad = {ch for row in rows for ch in row} - set("SFHG")
    if bad:
        raise ValueError(f"map {index}: unknown tiles {sorted(bad)!r}; allowed are S, F, H, G")
    n_start = sum(row.count("S") for row in rows)
    if n_start != 1:
        raise ValueError(f"map {index}: needs exactly one S tile, found {n_start}")
    if shortest_path_length(rows) is None:
        raise ValueError(f"map {index}: no path from S to a G tile avoiding holes: {list(rows)!r}")
    return rows


class _CompiledMap:
    """Per-map precomputed tables: next state per (state, actual direction), tile kind per state."""

    __slots__ = ("rows", "nrow", "ncol", "start", "next_state", "kind", "key_prefix", "obs_cache")

    def __init__(self, rows: tuple[str, ...]) -> None:
        self.rows = rows
        self.nrow, self.ncol = nrow, ncol = len(rows), len(rows[0])
        flat = "".join(rows)
        self.start = flat.index("S")
        self.kind = tuple(_GOAL if ch == "G" else _HOLE if ch == "H" else _ONGOING for ch in flat)
        table = []
        for s in range(nrow * ncol):
            r, c = divmod(s, ncol)
            nexts = []
            for dr, dc in _DELTAS:  # a move into the border keeps the player in place
                nr, nc = min(max(r + dr, 0), nrow - 1), min(max(c + dc, 0), ncol - 1)
                nexts.append(nr * ncol + nc)
            table.append(tuple(nexts))
        self.next_state = tuple(table)
        self.key_prefix = "/".join(rows) + "|"
        self.obs_cache: dict[tuple[int, int], str] = {}


class FrozenLakeEnv(TextEnv):
    """Slippery FrozenLake with text actions ``left/down/right/up``; see the module docstring."""

    name = "frozenlake"
    supports_snapshot = True

    def __init__(
        self,
        size: int = 4,
        p_frozen: float = 0.8,
        num_tasks: int = 100,
        seed: int = 0,
        slip: Sequence[float] = (1 / 3, 1 / 3),
        max_steps: int | None = 20,
        maps: Sequence[Sequence[str]] | None = None,
    ) -> None:
        """Build ``num_tasks`` random ``size`` x ``size`` maps (or use ``maps``; ``num_tasks``,
        ``size`` and ``p_frozen`` are then ignored). ``seed`` (a non-negative int) drives both map
        generation and each episode's slip RNG."""
        self._p_intended, p_left, p_right = _validate_slip(slip)
        self.slip: tuple[float, float] = (p_left, p_right)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        self.seed = int(seed)
        if max_steps is not None and (isinstance(max_steps, bool) or int(max_steps) != max_steps or max_steps < 1):
            raise ValueError(f"max_steps must be a positive int or None, got {max_steps!r}")
        self.max_steps = None if max_steps is None else int(max_steps)
        # sampling thresholds on u ~ U[0, 1): intended if u < t_int, left if u < t_left, else right
        self._t_int = self._p_intended
        self._t_left = float("inf") if p_right == 0.0 else self._p_intended + p_left

        specs: list[TaskSpec] = []
        compiled: list[_CompiledMap] = []
        if maps is not None:
            if len(maps) == 0:
                raise ValueError("maps must hold at least one map")
            for i, raw in enumerate(maps):
                rows = _normalise_map(raw, i)
                specs.append(self._make_spec(i, rows, map_seed=None, p_frozen=None))
                compiled.append(_CompiledMap(rows))
        else:
            if isinstance(size, bool) or int(size) != size or size < 2:
                raise ValueError(f"size must be an int >= 2, got {size!r}")
            if not (0.0 < p_frozen <= 1.0):
                raise ValueError(f"p_frozen must be in (0, 1], got {p_frozen!r}")
            if isinstance(num_tasks, bool) or int(num_tasks) != num_tasks or num_tasks < 1:
                raise ValueError(f"num_tasks must be a positive int, got {num_tasks!r}")
            generate_random_map = _import_generate_random_map()
            for i in range(int(num_tasks)):
                map_seed = self.map_seed(self.seed, i)
                rows = tuple(generate_random_map(size=int(size), p=float(p_frozen), seed=map_seed))
                specs.append(self._make_spec(i, rows, map_seed=map_seed, p_frozen=float(p_frozen)))
                compiled.append(_CompiledMap(rows))
        self.set_tasks(specs)
        self._map_by_id = {spec.task_id: m for spec, m in zip(specs, compiled)}

        # episode state
        self._task_id: str | None = None
        self._map: _CompiledMap | None = None
        self._state = 0
        self._steps = 0
        self._done = False
        self._won = False
        self._truncated = False
        self._rng = np.random.Generator(np.random.PCG64(0))

    # ------------------------------------------------------------------ tasks

    @staticmethod
    def map_seed(seed: int, index: int) -> int:
        """The seed passed to gymnasium's ``generate_random_map`` for map ``index`` of env ``seed``."""
        return int(np.random.SeedSequence([int(seed), int(index)]).generate_state(1, dtype=np.uint32)[0])

    def _make_spec(self, index: int, rows: tuple[str, ...], map_seed: int | None, p_frozen: float | None) -> TaskSpec:
        nrow, ncol = len(rows), len(rows[0])
        size_tag = f"{nrow}" if nrow == ncol else f"{nrow}x{ncol}"
        path = shortest_path_length(rows)
        return TaskSpec(
            task_id=f"frozenlake-s{size_tag}-{index:04d}",
            family="frozenlake",
            difficulty=float(path),
            metadata={
                "map": list(rows),
                "nrow": nrow,
                "ncol": ncol,
                "slip": self.slip,
                "shortest_path": path,
                "map_seed": map_seed,
                "p_frozen": p_frozen,
                "max_steps": self.max_steps,
            },
        )


    def _compiled(self, task_id: str) -> _CompiledMap:
        try:
            return self._map_by_id[task_id]
        except (KeyError, TypeError):
            raise UnknownTaskError(f"{self.name}: unknown task id {task_id!r}") from None

    # ------------------------------------------------------------------ episode

    def _episode_rng(self, task_id: str, seed: int) -> np.random.Generator:
        digest = hashlib.blake2b(task_id.encode("utf-8"), digest_size=16).digest()
        words = [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), *words])))

    def reset(self, task_id: str, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Start ``task_id`` at its S tile; ``seed`` (optional) replaces the env seed for the slip RNG."""
        compiled = self._compiled(task_id)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
            raise ValueError(f"reset seed must be a non-negative int, got {seed!r}")
        self._rng = self._episode_rng(task_id, self.seed if seed is None else int(seed))
        self._task_id = task_id
        self._map = compiled
        self._state = compiled.start
        self._steps = 0
        self._done = self._won = self._truncated = False
        info = {
            "task": self._spec_by_id[task_id],
            "won": False,
            "invalid_action": False,
            "position": divmod(compiled.start, compiled.ncol),
            "steps": 0,
            "max_steps": self.max_steps,
        }
        return self._observation(_ONGOING), info

    def step(self, action: str) -> StepResult:
        m = self._map
        if m is None or self._done:
            raise EnvNotResetError(
                f"{self.name}: step() called " + ("before reset()" if m is None else "after the episode ended")
            )
        a = _ACTION_INDEX.get(action) if isinstance(action, str) else None
        if a is None:
            if isinstance(action, str):
                a = _ACTION_INDEX.get(action.strip().lower())
            if a is None:
                return self._invalid(action)

        u = self._rng.random()
        if u < self._t_int:
            d = a
        elif u < self._t_left:
            d = _LEFT_OF[a]
        else:
            d = _RIGHT_OF[a]
        s = m.next_state[self._state][d]
        self._state = s
        self._steps += 1
        kind = m.kind[s]
        reward = 0.0
        truncated = False
        if kind == _GOAL:
            reward = 1.0
            self._done = self._won = True
            status = _STATUS_WON
        elif kind == _HOLE:
            self._done = True
            status = _STATUS_HOLE
        elif self.max_steps is not None and self._steps >= self.max_steps:
            self._done = self._truncated = truncated = True
            status = _STATUS_TRUNCATED
        else:
            status = _ONGOING
        info = {
            "won": self._won,
            "invalid_action": False,
            "intended": ACTIONS[a],
            "actual": ACTIONS[d],
            "slipped": d != a,
            "position": divmod(s, m.ncol),
            "steps": self._steps,
            "truncated": truncated,
        }
        return StepResult(self._observation(status), reward, self._done, info)

    def _invalid(self, action: Any) -> StepResult:
        m = self._map
        assert m is not None
        shown = action if isinstance(action, str) else repr(action)
        if len(shown) > 40:
            shown = shown[:37] + "..."
        observation = (
            f"Invalid action {shown!r}. Valid actions: {', '.join(ACTIONS)}. Nothing happened.\n"
            + self._observation(_ONGOING)
        )
        info = {
            "won": False,
            "invalid_action": True,
            "intended": None,
            "actual": None,
            "slipped": False,
            "position": divmod(self._state, m.ncol),
            "steps": self._steps,
            "truncated": False,
        }
        return StepResult(observation, 0.0, False, info)

    def admissible_actions(self) -> list[str]:
        if self._map is None or self._done:
            raise EnvNotResetError(
                f"{self.name}: admissible_actions() called "
                + ("before reset()" if self._map is None else "after the episode ended")
            )
        return list(ACTIONS)

    def state_key(self) -> str:
        m = self._map
        if m is None:
            raise EnvNotResetError(f"{self.name}: state_key() called before reset()")
        r, c = divmod(self._state, m.ncol)
        return f"{m.key_prefix}{r},{c}"

    @property
    def position(self) -> tuple[int, int]:
        if self._map is None:
            raise EnvNotResetError(f"{self.name}: no position before reset()")
        return divmod(self._state, self._map.ncol)

    # ------------------------------------------------------------------ rendering

    def _observation(self, status: int) -> str:
        m = self._map
        assert m is not None
        key = (self._state, status)
        obs = m.obs_cache.get(key)
        if obs is None:
            obs = self._render(m, self._state, status)
            m.obs_cache[key] = obs
        return obs

    def _render(self, m: _CompiledMap, state: int, status: int) -> str:
        r, c = divmod(state, m.ncol)
        grid = [row if i != r else row[:c] + "P" + row[c + 1 :] for i, row in enumerate(m.rows)]
        header = (
            f"FrozenLake {m.nrow}x{m.ncol} (row 0 is the top). "
            "P = you, S = start, F = frozen ice, H = hole, G = goal."
        )
        where = f"row {r}, column {c}"
        if status == _STATUS_WON:
            sentence = f"You reached the goal at {where}. You won!"
        elif status == _STATUS_HOLE:
            sentence = f"You fell into the hole at {where}. Game over."
        elif status == _STATUS_TRUNCATED:
            sentence = f"You are at {where} and the step limit ({self.max_steps}) is used up. Game over."
        else:
            # a deterministic lake (slip 0, 0) must not tell the model that it may slide
            slippery = "; the ice is slippery, so you may slide sideways" if self._p_intended < 1.0 else ""
            sentence = f"You are at {where}. Reach G without stepping on an H{slippery}. Actions: {', '.join(ACTIONS)}."
        return "\n".join([header, *grid, sentence])

    # ------------------------------------------------------------------ snapshots

    def get_state(self) -> dict[str, Any]:
        """Snapshot of the current episode (also allowed after it ended); see the module docstring."""
        m = self._map
        if m is None:
            raise EnvNotResetError(f"{self.name}: get_state() called before reset()")
        return {
            "env": self.name,
            "version": _SNAPSHOT_VERSION,
            "task_id": self._task_id,
            "map": "/".join(m.rows),
            "slip": self.slip,
            "max_steps": self.max_steps,
            "position": divmod(self._state, m.ncol),
            "steps": self._steps,
            "done": self._done,
            "won": self._won,
            "truncated": self._truncated,
            "rng_state": copy.deepcopy(self._rng.bit_generator.state),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a ``get_state`` snapshot; a rejected one raises and changes nothing."""
        number = (int, float)
        checked_snapshot(self.name, state, {
            "env": str, "version": int, "task_id": str, "map": str, "slip": (list, tuple), "max_steps": (int, type(None)),
            "position": (list, tuple), "steps": int, "done": bool, "won": bool, "truncated": bool, "rng_state": dict,
        })
        if state["env"] != self.name or state["version"] != _SNAPSHOT_VERSION:
            raise InvalidSnapshotError(
                f"{self.name}: not a version-{_SNAPSHOT_VERSION} {self.name} snapshot: {state!r:.200}"
            )
        task_id = state["task_id"]
        m = self._compiled(task_id)
        if state["map"] != "/".join(m.rows):
            raise InvalidSnapshotError(f"{self.name}: snapshot map {state['map']!r} differs from task {task_id!r}'s map")
        slip = tuple(state["slip"])
        if len(slip) != 2 or not all(isinstance(p, number) and not isinstance(p, bool) for p in slip):
            raise InvalidSnapshotError(f"{self.name}: snapshot slip {state['slip']!r:.80} is not two probabilities")
        if slip != self.slip or state["max_steps"] != self.max_steps:
            raise InvalidSnapshotError(
                f"{self.name}: snapshot was taken with slip={slip}, max_steps={state['max_steps']}; "
                f"this env has slip={self.slip}, max_steps={self.max_steps}"
            )
        position = tuple(state["position"])
        if len(position) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in position):
            raise InvalidSnapshotError(f"{self.name}: snapshot position {state['position']!r:.80} is not (row, column)")
        r, c = position
        if not (0 <= r < m.nrow and 0 <= c < m.ncol):
            raise InvalidSnapshotError(f"{self.name}: snapshot position {(r, c)} is off the {m.nrow}x{m.ncol} map")
        if state["steps"] < 0 or (self.max_steps is not None and state["steps"] > self.max_steps):
            raise InvalidSnapshotError(f"{self.name}: snapshot steps={state['steps']} outside [0, {self.max_steps}]")
        rng = _generator_from_state(self.name, state["rng_state"])
        self._rng = rng
        self._task_id = task_id
        self._map = m
        self._state = r * m.ncol + c
        self._steps = state["steps"]
        self._done = state["done"]
        self._won = state["won"]
        self._truncated = state["truncated"]

    # ------------------------------------------------------------------ exact dynamics

    def transition_probs(
        self, position: tuple[int, int], action: str | int, task_id: str | None = None
    ) -> dict[tuple[int, int], float]:
        """Exact next-position distribution for ``action`` at ``position`` (zero entries left out).

        ``task_id`` defaults to the current episode's task. As in gymnasium's table, G and H tiles
        are absorbing: from them every action stays put with probability 1.
        """
        if task_id is None:
            if self._task_id is None:
                raise EnvNotResetError(f"{self.name}: transition_probs() needs task_id before reset()")
            task_id = self._task_id
        m = self._compiled(task_id)
        a = action if isinstance(action, int) else _ACTION_INDEX.get(str(action).strip().lower())
        if a is None or not 0 <= a < 4:
            raise ValueError(f"unknown action {action!r}; valid: {list(ACTIONS)}")
        r, c = position
        s = r * m.ncol + c
        if m.kind[s] != _ONGOING:
            return {(r, c): 1.0}
        out: dict[tuple[int, int], float] = {}
        p_left, p_right = self.slip
        for d, p in ((a, self._p_intended), (_LEFT_OF[a], p_left), (_RIGHT_OF[a], p_right)):
            if p > 0.0:
                nxt = divmod(m.next_state[s][d], m.ncol)
                out[nxt] = out.get(nxt, 0.0) + p
        return out

    def transition_table(self, task_id: str | None = None) -> dict[int, dict[int, list[tuple[float, int, float, bool]]]]:
        """The task's dynamics in gymnasium's ``env.unwrapped.P`` format:
        ``P[state][action] = [(prob, next_state, reward, terminated), ...]``, states ``row * ncol + col``."""
        if task_id is None:
            if self._task_id is None:
                raise EnvNotResetError(f"{self.name}: transition_table() needs task_id before reset()")
            task_id = self._task_id
        m = self._compiled(task_id)
        table: dict[int, dict[int, list[tuple[float, int, float, bool]]]] = {}
        for s in range(m.nrow * m.ncol):
            table[s] = {}
            for a in range(4):
                entries = []
                for (r, c), p in self.transition_probs(divmod(s, m.ncol), a, task_id).items():
                    ns = r * m.ncol + c
                    if m.kind[s] != _ONGOING:
                        entries.append((p, ns, 0.0, True))
                    else:
                        entries.append((p, ns, 1.0 if m.kind[ns] == _GOAL else 0.0, m.kind[ns] != _ONGOING))
                table[s][a] = entries
        return table

    def gymnasium_env(self, task_id: str, **kwargs: Any) -> Any:
        """gymnasium's own FrozenLakeEnv on this task's map with the same (symmetric) slip, for comparisons."""
        p_left, p_right = self.slip
        if abs(p_left - p_right) > _SLIP_TOL:
            raise ValueError(f"gymnasium only has symmetric slip; this env has slip={self.slip}")
        try:
            from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLake
        except ImportError as exc:
            raise DependencyMissingError("gymnasium is needed for gymnasium_env()") from exc
        rows = list(self._compiled(task_id).rows)
        return GymFrozenLake(desc=rows, is_slippery=True, success_rate=self._p_intended, **kwargs)


def _import_generate_random_map():
    try:
        from gymnasium.envs.toy_text.frozen_lake import generate_random_map
    except ImportError as exc:
        raise DependencyMissingError(
            "frozenlake: random maps are generated with gymnasium's generate_random_map; "
            "install gymnasium or pass explicit maps="
        ) from exc
    return generate_random_map
