"""State knowledge ``z_s`` and the experience buffer of Stateful Knowledge Learning (paper §2.2, §3.1, App. A).

* ``KnowledgeTable`` -- the natural-language knowledge ``z_s`` of each state, keyed by the env's
  canonical ``state_key()`` and versioned per epoch, so Algorithm 1 line 14 can read the prior
  belief ``z^{e-1}_{s_t}`` while epoch ``e`` writes ``ẑ^e_{s_t}``.
* ``Transition`` / ``ReplayBuffer`` -- the global experience buffer ``B`` of SKL-SD (Alg. 1 lines 1,
  6, 13): stores whole episodes and returns up to ``N`` partial rollouts ``τ^H_n(s_t)`` of horizon
  ``H`` that start at a visit of ``s_t``. The successor knowledge key ``s_{t+H}`` of a rollout is
  the ``next_state_key`` of its last transition.

Both persist as JSONL, written atomically (temp file in the same folder, fsync, ``os.replace``), so
a crash mid-save leaves the previous file intact. ``load(save(x)) == x`` exactly.

JSONL records
-------------
``KnowledgeTable``: one line per version, ``{"state_key": str, "epoch": int, "text": str}``, keys in
first-insertion order, versions in epoch order.

``ReplayBuffer``: one line per transition (``Transition.to_dict()``: ``episode_id, t, state_key,
observation, knowledge, action, reward, next_state_key, done, epoch``), episodes in insertion order,
transitions in time order.
"""

from __future__ import annotations

import bisect
import json
import os
import random
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

SCOPES = ("all", "last_epoch")


# --------------------------------------------------------------------------- helpers


def _check_key(state_key: Any, what: str = "state_key") -> str:
    if not isinstance(state_key, str):
        raise TypeError(f"{what} must be a str, got {type(state_key).__name__}")
    if not state_key:
        raise ValueError(f"{what} must be a non-empty string")
    return state_key


def _check_nonneg_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {value!r}")
    if value < 0:
        raise ValueError(f"{what} must be >= 0, got {value}")
    return value


def atomic_write_jsonl(path: str | os.PathLike[str], records: Iterable[dict[str, Any]]) -> None:
    """Write ``records`` as JSON lines to ``path`` atomically.

    The lines go to a temp file in the target's folder, which is fsync'ed and then moved over
    ``path`` with ``os.replace``; if anything fails (serialisation included) the temp file is
    removed and the old ``path`` (if any) is left untouched.
    """
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False))
                handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        try:  # mkstemp makes the file 0600; keep the old file's mode, else the usual 0644
            mode = target.stat().st_mode & 0o777
        except FileNotFoundError:
            mode = 0o644
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _read_jsonl(path: str | os.PathLike[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    with open(path, encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not valid JSON: {exc}") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
            yield lineno, record


# --------------------------------------------------------------------------- knowledge table


class KnowledgeTable:
    """Versioned state knowledge: ``state_key -> [(epoch, text), ...]`` sorted by epoch.

    ``set(key, text, epoch)`` records the knowledge of ``key`` as of ``epoch`` (setting the same
    (key, epoch) again replaces that version); ``get(key, epoch)`` returns the latest version at or
    before ``epoch`` (``epoch=None``: the latest of all), or None when there is none.
    """

    def __init__(self) -> None:
        self._versions: dict[str, list[tuple[int, str]]] = {}

    def set(self, state_key: str, text: str, epoch: int) -> None:
        _check_key(state_key)
        if not isinstance(text, str):
            raise TypeError(f"knowledge text must be a str, got {type(text).__name__}")
        _check_nonneg_int(epoch, "epoch")
        versions = self._versions.setdefault(state_key, [])
        epochs = [e for e, _ in versions]
        i = bisect.bisect_left(epochs, epoch)
        if i < len(versions) and versions[i][0] == epoch:
            versions[i] = (epoch, text)
        else:
            versions.insert(i, (epoch, text))

    def get(self, state_key: str, epoch: int | None = None) -> str | None:
        _check_key(state_key)
        versions = self._versions.get(state_key)
        if not versions:
            return None
        if epoch is None:
            return versions[-1][1]
        _check_nonneg_int(epoch, "epoch")
        i = bisect.bisect_right(versions, epoch, key=lambda v: v[0])
        return versions[i - 1][1] if i else None

    def history(self, state_key: str) -> list[tuple[int, str]]:
        """Every version of ``state_key`` as ``(epoch, text)``, oldest first (empty if unknown)."""
        _check_key(state_key)
        return list(self._versions.get(state_key, ()))

    def keys(self) -> list[str]:
        """State keys in first-insertion order."""
        return list(self._versions)

    def snapshot(self, epoch: int | None = None) -> dict[str, str]:
        """``{state_key: text}`` as of ``epoch`` (keys without a version by then left out)."""
        out = {}
        for key in self._versions:
            text = self.get(key, epoch)
            if text is not None:
                out[key] = text
        return out

    @property
    def latest_epoch(self) -> int | None:
        return max((v[-1][0] for v in self._versions.values() if v), default=None)

    def __len__(self) -> int:
        return len(self._versions)

    def __contains__(self, state_key: object) -> bool:
        return state_key in self._versions

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KnowledgeTable):
            return NotImplemented
        return self._versions == other._versions

    def __repr__(self) -> str:
        n = sum(len(v) for v in self._versions.values())
        return f"KnowledgeTable({len(self)} states, {n} versions)"

    # -- persistence

    def records(self) -> Iterator[dict[str, Any]]:
        for key, versions in self._versions.items():
            for epoch, text in versions:
                yield {"state_key": key, "epoch": epoch, "text": text}

    def save(self, path: str | os.PathLike[str]) -> None:
        atomic_write_jsonl(path, self.records())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> KnowledgeTable:
        table = cls()
        for lineno, record in _read_jsonl(path):
            try:
                table.set(record["state_key"], record["text"], record["epoch"])
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"{path}:{lineno}: bad knowledge record: {exc!r}") from None
        return table


# --------------------------------------------------------------------------- transitions and buffer


@dataclass(frozen=True)
class Transition:
    """One real step ``s_t --(z_{s_t}, a_t)--> s_{t+1}`` of an episode."""

    episode_id: str
    t: int
    state_key: str
    observation: str
    knowledge: str | None
    action: str
    reward: float
    next_state_key: str
    done: bool
    epoch: int

    def __post_init__(self) -> None:
        _check_key(self.episode_id, "episode_id")
        _check_nonneg_int(self.t, "t")
        _check_key(self.state_key)
        _check_key(self.next_state_key, "next_state_key")
        for name in ("observation", "action"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"Transition.{name} must be a str, got {getattr(self, name)!r:.80}")
        if self.knowledge is not None and not isinstance(self.knowledge, str):
            raise TypeError(f"Transition.knowledge must be a str or None, got {self.knowledge!r:.80}")
        if isinstance(self.reward, bool) or not isinstance(self.reward, (int, float)):
            raise TypeError(f"Transition.reward must be a number, got {self.reward!r}")
        object.__setattr__(self, "reward", float(self.reward))
        if not isinstance(self.done, bool):
            raise TypeError(f"Transition.done must be a bool, got {self.done!r}")
        _check_nonneg_int(self.epoch, "epoch")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Transition:
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in record]
        if missing:
            raise ValueError(f"transition record lacks {missing}")
        return cls(**{n: record[n] for n in names})


@dataclass(frozen=True)
class _Episode:
    episode_id: str
    epoch: int
    transitions: tuple[Transition, ...]


class ReplayBuffer:
    """The experience buffer ``B`` of SKL-SD: whole episodes, indexed by the state each step starts in.

    ``len(buffer)`` is the number of stored transitions; ``num_episodes`` the number of episodes.
    Lookups go through an index ``state_key -> [(episode index, t index), ...]`` (plus one per
    ``(epoch, state_key)`` for ``scope="last_epoch"``), so a query costs O(visits of that state).
    """

    def __init__(self) -> None:
        self._episodes: list[_Episode] = []
        self._episode_index: dict[str, int] = {}
        self._visits: dict[str, list[tuple[int, int]]] = {}
        self._visits_by_epoch: dict[tuple[int, str], list[tuple[int, int]]] = {}
        self._n_transitions = 0
        self._latest_epoch: int | None = None

    def add_episode(self, episode_id: str, transitions: Sequence[Transition], epoch: int) -> None:
        """Store one episode; ``transitions`` in time order (``t`` consecutive, each ``next_state_key``
        the following ``state_key``, only the last may be ``done``), all with this id and epoch."""
        _check_key(episode_id, "episode_id")
        _check_nonneg_int(epoch, "epoch")
        if episode_id in self._episode_index:
            raise ValueError(f"episode {episode_id!r} is already in the buffer")
        steps = tuple(transitions)
        if not steps:
            raise ValueError(f"episode {episode_id!r} has no transitions")
        for i, tr in enumerate(steps):
            if not isinstance(tr, Transition):
                raise TypeError(f"episode {episode_id!r}: item {i} is not a Transition: {tr!r:.80}")
            if tr.episode_id != episode_id or tr.epoch != epoch:
                raise ValueError(
                    f"episode {episode_id!r} (epoch {epoch}): transition {i} says episode "
                    f"{tr.episode_id!r}, epoch {tr.epoch}"
                )
            if i:
                prev = steps[i - 1]
                if tr.t != prev.t + 1:
                    raise ValueError(f"episode {episode_id!r}: t goes {prev.t} -> {tr.t}; not in time order")
                if prev.next_state_key != tr.state_key:
                    raise ValueError(
                        f"episode {episode_id!r}: step t={prev.t} ends in {prev.next_state_key!r} but "
                        f"step t={tr.t} starts in {tr.state_key!r}"
                    )
                if prev.done:
                    raise ValueError(f"episode {episode_id!r}: step t={prev.t} is done but is not the last step")
        ep_index = len(self._episodes)
        self._episodes.append(_Episode(episode_id, epoch, steps))
        self._episode_index[episode_id] = ep_index
        for pos, tr in enumerate(steps):
            self._visits.setdefault(tr.state_key, []).append((ep_index, pos))
            self._visits_by_epoch.setdefault((epoch, tr.state_key), []).append((ep_index, pos))
        self._n_transitions += len(steps)
        if self._latest_epoch is None or epoch > self._latest_epoch:
            self._latest_epoch = epoch

    def _visit_list(self, state_key: str, scope: str) -> list[tuple[int, int]]:
        _check_key(state_key)
        if scope == "all":
            return self._visits.get(state_key, [])
        if scope == "last_epoch":
            if self._latest_epoch is None:
                return []
            return self._visits_by_epoch.get((self._latest_epoch, state_key), [])
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")

    def visits(self, state_key: str, scope: str = "all") -> list[tuple[str, int]]:
        """``(episode_id, t)`` of every stored step that starts in ``state_key``, in insertion order."""
        return [
            (self._episodes[e].episode_id, self._episodes[e].transitions[p].t)
            for e, p in self._visit_list(state_key, scope)
        ]

    def partial_rollouts(
        self,
        state_key: str,
        n: int,
        horizon: int,
        scope: str = "all",
        rng: random.Random | int | None = None,
    ) -> list[list[Transition]]:
        """Up to ``n`` partial rollouts ``τ^H(s)`` starting at visits of ``state_key``.

        Each rollout is the ``horizon`` consecutive transitions from one visit (fewer when the
        episode ends first). Visits are sampled without replacement with ``rng`` (a
        ``random.Random`` or an int seed; None means seed 0, so the default is deterministic); with
        at most ``n`` visits all are returned. Rollouts come in buffer order (episode insertion
        order, then time). ``scope="last_epoch"`` only uses episodes of the latest stored epoch.
        """
        _check_nonneg_int(n, "n")
        _check_nonneg_int(horizon, "horizon")
        if horizon < 1:
            raise ValueError("horizon must be >= 1")
        visits = self._visit_list(state_key, scope)
        if len(visits) > n:
            if rng is None or isinstance(rng, int):
                rng = random.Random(0 if rng is None else rng)
            chosen = sorted(rng.sample(range(len(visits)), n))
            visits = [visits[i] for i in chosen]
        out = []
        for e, p in visits:
            steps = self._episodes[e].transitions
            out.append(list(steps[p : p + horizon]))
        return out

    def episode(self, episode_id: str) -> list[Transition]:
        try:
            return list(self._episodes[self._episode_index[episode_id]].transitions)
        except KeyError:
            raise KeyError(f"no episode {episode_id!r} in the buffer") from None

    def episode_ids(self) -> list[str]:
        return [ep.episode_id for ep in self._episodes]

    @property
    def num_episodes(self) -> int:
        return len(self._episodes)

    @property
    def latest_epoch(self) -> int | None:
        return self._latest_epoch

    def __len__(self) -> int:
        return self._n_transitions

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReplayBuffer):
            return NotImplemented
        return self._episodes == other._episodes

    def __repr__(self) -> str:
        return f"ReplayBuffer({self.num_episodes} episodes, {len(self)} transitions, {len(self._visits)} states)"

    # -- persistence

    def records(self) -> Iterator[dict[str, Any]]:
        for ep in self._episodes:
            for tr in ep.transitions:
                yield tr.to_dict()

    def save(self, path: str | os.PathLike[str]) -> None:
        atomic_write_jsonl(path, self.records())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ReplayBuffer:
        buffer = cls()
        current: list[Transition] = []

        def flush() -> None:
            if current:
                buffer.add_episode(current[0].episode_id, current, current[0].epoch)
                current.clear()

        for lineno, record in _read_jsonl(path):
            try:
                tr = Transition.from_dict(record)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{path}:{lineno}: bad transition record: {exc}") from None
            if current and tr.episode_id != current[0].episode_id:
                flush()
            current.append(tr)
        flush()
        return buffer


__all__ = ["SCOPES", "KnowledgeTable", "ReplayBuffer", "Transition", "atomic_write_jsonl"]
