"""State knowledge ``z_s`` and the experience buffer of Stateful Knowledge Learning (paper §2.2, §3.1, App. A).

* ``KnowledgeTable`` -- the natural-language knowledge ``z_s`` of each state, keyed by the env's
  canonical ``state_key()`` and versioned per epoch, so Algorithm 1 line 14 can read the prior
  belief ``z^{e-1}_{s_t}`` while epoch ``e`` writes ``ẑ^e_{s_t}``.
* ``Transition`` / ``ReplayBuffer`` -- the global experience buffer ``B`` of SKL-SD (Alg. 1 lines 1,
  6, 13): stores whole episodes and returns up to ``N`` partial rollouts ``τ^H_n(s_t)`` of horizon
  ``H`` that start at a visit of ``s_t``. The successor knowledge key ``s_{t+H}`` of a rollout is
  the ``next_state_key`` of its last transition.

Both persist as JSONL, written atomically (temp file in the same folder, fsync, ``os.replace``), so
a crash mid-save leaves the previous file intact; temp files that a killed writer left behind are
removed by the next save to the same path. ``load(save(x)) == x`` exactly.

JSONL files
-----------
Line 1 is a header, ``{"skl_verl": KIND, "format": 1, "records": N, "sha256": HEX}``: KIND is
``knowledge_table`` or ``replay_buffer``, N the number of record lines after it and HEX the SHA-256
of those lines' bytes. Every record line carries its position ``"n"`` (0, 1, ...). A load checks all
of it, so a file cut at a line boundary (or to nothing), lines duplicated, swapped or edited, and
invalid UTF-8 are errors naming the path and the line, never a silently smaller table.

``KnowledgeTable``: one line per version, ``{"n": int, "state_key": str, "epoch": int, "text": str}``,
keys in first-insertion order, versions in epoch order.

``ReplayBuffer``: one line per transition (``"n"`` plus ``Transition.to_dict()``: ``episode_id, t,
state_key, observation, knowledge, action, reward, next_state_key, done, epoch``), episodes in
insertion order, transitions in time order.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import random
import socket
import tempfile
import time
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


FORMAT_VERSION = 1
ORPHAN_AGE_S = 3600.0
"""A temp file whose writer cannot be identified is an orphan once it is this old."""


def atomic_write_jsonl(path: str | os.PathLike[str], records: Iterable[dict[str, Any]], kind: str) -> None:
    """Write a header and ``records`` as JSON lines to ``path`` atomically (format in the module doc).

    The lines go to a temp file in the target's folder, which is fsync'ed and then moved over
    ``path`` with ``os.replace``; if anything fails (serialisation included) the temp file is
    removed and the old ``path`` (if any) is left untouched. Temp files of earlier writers of
    ``path`` that were killed mid-save are removed first.
    """
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    _remove_orphaned_temp_files(folder, target.name)
    fd, tmp = tempfile.mkstemp(prefix=f"{_temp_prefix(target.name)}{socket.gethostname()}.{os.getpid()}.",
                               suffix=".tmp", dir=folder)
    try:
        body = "".join(json.dumps({"n": n, **record}, ensure_ascii=False) + "\n" for n, record in enumerate(records))
        data = body.encode("utf-8")
        header = {"skl_verl": kind, "format": FORMAT_VERSION, "records": body.count("\n"),
                  "sha256": hashlib.sha256(data).hexdigest()}
        with os.fdopen(fd, "wb") as handle:
            handle.write(json.dumps(header).encode("utf-8") + b"\n")
            handle.write(data)
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


def _temp_prefix(name: str) -> str:
    return f".{name}."


def _remove_orphaned_temp_files(folder: Path, name: str) -> None:
    """Temp files named ``.NAME.HOST.PID.XXXX.tmp`` whose writer (this host, that pid) is gone, and
    unattributable ones older than ``ORPHAN_AGE_S``. A live writer's file is never touched: it
    may be mid-save."""
    prefix = _temp_prefix(name)
    host = socket.gethostname()
    for candidate in folder.glob(f"{_glob_escape(prefix)}*.tmp"):
        owner = candidate.name[len(prefix) : -len(".tmp")].rsplit(".", 2)
        try:
            if len(owner) == 3 and owner[1].isdigit():
                if owner[0] != host or _process_alive(int(owner[1])):
                    continue
            elif time.time() - candidate.stat().st_mtime < ORPHAN_AGE_S:
                continue
            candidate.unlink()
        except FileNotFoundError:
            pass  # another save removed it first


def _glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def _read_jsonl(path: str | os.PathLike[str], kind: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record without ``n``) for each record of a file written by atomic_write_jsonl,
    checking the header, every position, the count and the checksum."""
    digest = hashlib.sha256()
    header: dict[str, Any] | None = None
    expected = 0
    with open(path, "rb") as handle:
        for lineno, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(
                    f"{path}:{lineno}: not valid UTF-8 (byte {raw[exc.start]:#04x} at column {exc.start + 1})"
                ) from None
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                where = "the header" if lineno == 1 else "a record"
                raise ValueError(f"{path}:{lineno}: {where} is not valid JSON ({exc.msg}); the file is damaged") from None
            if header is None:
                if not isinstance(record, dict) or record.get("skl_verl") != kind:
                    raise ValueError(f"{path}:1: not a {kind} file (no skl_verl header line)")
                if record.get("format") != FORMAT_VERSION:
                    raise ValueError(f"{path}:1: format {record.get('format')!r}; this skl-verl reads {FORMAT_VERSION}")
                header = record
                continue
            digest.update(raw)
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
            position = record.pop("n", None)
            if position != expected:
                raise ValueError(
                    f"{path}:{lineno}: holds record {position} where record {expected} belongs: "
                    "lines were duplicated, swapped or removed"
                )
            expected += 1
            yield lineno, record
    if header is None:
        raise ValueError(f"{path}: empty file (a save always writes a header line); it was truncated")
    if expected != header.get("records"):
        raise ValueError(
            f"{path}:{expected + 2}: the file ends after {expected} records, its header promises "
            f"{header.get('records')}; it was truncated"
        )
    if digest.hexdigest() != header.get("sha256"):
        raise ValueError(f"{path}: the records do not match the header's sha256; the file was edited or corrupted")


# --------------------------------------------------------------------------- knowledge table


class KnowledgeTable:
    """Versioned state knowledge: ``state_key -> [(epoch, text), ...]`` sorted by epoch.

    ``set(key, text, epoch)`` records the knowledge of ``key`` as of ``epoch`` (setting the same
    (key, epoch) again replaces that version); ``get(key, epoch)`` returns the latest version at or
    before ``epoch`` (``epoch=None``: the latest of all), or None when there is none.
    """

    FILE_KIND = "knowledge_table"

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
        atomic_write_jsonl(path, self.records(), self.FILE_KIND)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> KnowledgeTable:
        table = cls()
        for lineno, record in _read_jsonl(path, cls.FILE_KIND):
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

    FILE_KIND = "replay_buffer"

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
        atomic_write_jsonl(path, self.records(), self.FILE_KIND)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ReplayBuffer:
        buffer = cls()
        current: list[Transition] = []
        first_line = 0

        def flush() -> None:
            if current:
                try:
                    buffer.add_episode(current[0].episode_id, current, current[0].epoch)
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"{path}:{first_line}: bad episode starting here: {exc}") from None
                current.clear()

        for lineno, record in _read_jsonl(path, cls.FILE_KIND):
            try:
                tr = Transition.from_dict(record)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{path}:{lineno}: bad transition record: {exc}") from None
            if current and tr.episode_id != current[0].episode_id:
                flush()
            if not current:
                first_line = lineno
            current.append(tr)
        flush()
        return buffer


__all__ = ["SCOPES", "KnowledgeTable", "ReplayBuffer", "Transition", "atomic_write_jsonl"]
