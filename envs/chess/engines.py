"""Stockfish for chess behaviour policies and game opponents (the optional Debian ``stockfish`` binary).

``StockfishPolicy`` searches one board at a time through UCI; ``StockfishPool`` (one process-wide
``STOCKFISH_POOL``) and ``PooledStockfish`` give every move search an engine of its own, so
concurrent simulations in one process never share an engine. Any object with
``best_move(board) -> chess.Move`` (``MoveEngine``) can stand in for the engine.
"""

from __future__ import annotations

import atexit
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

import chess
import chess.engine

from envs.base import DependencyMissingError


class MoveEngine(Protocol):
    def best_move(self, board: chess.Board) -> chess.Move: ...


_STOCKFISH_PATHS = ("/usr/games/stockfish", "/usr/bin/stockfish", "/usr/local/bin/stockfish")


def find_stockfish(path: str | os.PathLike[str] | None = None) -> str:
    """The stockfish binary: ``path`` if given, else ``$STOCKFISH_PATH``, PATH, /usr/games/stockfish."""
    hint = "install it (Debian/Ubuntu: apt-get install stockfish) or pass the binary's path"
    if path is not None:
        candidate = os.fspath(path)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
        raise DependencyMissingError(f"stockfish binary {candidate!r} not found or not executable; {hint}")
    env_path = os.environ.get("STOCKFISH_PATH")
    for candidate in [env_path, shutil.which("stockfish"), *_STOCKFISH_PATHS]:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise DependencyMissingError(f"stockfish binary not found on PATH or in /usr/games; {hint}")


class StockfishPolicy:
    """Stockfish via UCI (``chess.engine.SimpleEngine``); ``best_move(board)`` searches to ``depth``.

    The binary is located on construction (``DependencyMissingError`` if absent) and started on
    first use; call ``close()`` or use it as a context manager.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        depth: int | None = 12,
        time_limit: float | None = None,
        nodes: int | None = None,
        threads: int = 1,
        hash_mb: int = 16,
        skill_level: int | None = None,
    ) -> None:
        if depth is None and time_limit is None and nodes is None:
            raise ValueError("give at least one of depth, time_limit, nodes")
        self.path = find_stockfish(path)
        self.limit = chess.engine.Limit(depth=depth, time=time_limit, nodes=nodes)
        self.options = {"Threads": threads, "Hash": hash_mb}
        if skill_level is not None:  # UCI "Skill Level" 0..20 weakens the engine (a game opponent at a level)
            self.options["Skill Level"] = skill_level
        self._engine: chess.engine.SimpleEngine | None = None

    def _started(self) -> chess.engine.SimpleEngine:
        if self._engine is None:
            try:
                self._engine = chess.engine.SimpleEngine.popen_uci(self.path)
            except (OSError, chess.engine.EngineError) as exc:
                raise DependencyMissingError(f"could not start stockfish at {self.path!r}: {exc}") from exc
            self._engine.configure(self.options)
        return self._engine

    def best_move(self, board: chess.Board) -> chess.Move:
        if board.is_game_over():
            raise ValueError(f"no move in a finished game: {board.fen()}")
        result = self._started().play(board, self.limit)
        if result.move is None:
            raise RuntimeError(f"stockfish returned no move for {board.fen()}")
        return result.move

    def __call__(self, board: chess.Board) -> str:
        return board.san(self.best_move(board))

    def close(self) -> None:
        """Quit the engine process (killed if it does not answer)."""
        engine, self._engine = self._engine, None
        if engine is not None:
            try:
                engine.quit()
            except BaseException:  # noqa: BLE001 - a dead or stuck engine: end its process anyway
                engine.close()

    def __enter__(self) -> StockfishPolicy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StockfishPool:
    """Stockfish engines for concurrent users (parallel simulations in one process).

    A python-chess UCI engine runs one command at a time: a second ``play`` on a shared engine cancels
    the first (``CancelledError``). So every user checks an engine out for its own use (``engine()``);
    a healthy engine goes back for reuse (at most ``max_idle`` kept per binary), one that raised is
    quit; ``close()`` quits the idle ones (and runs at exit). An engine whose user never comes back (a
    simulation thread stuck past its timeout) is simply never reused."""

    def __init__(self, max_idle: int = 32) -> None:
        self.max_idle = max_idle
        self._idle: dict[str, list[StockfishPolicy]] = {}
        self._lock = threading.Lock()
        self.started = 0

    @contextmanager
    def engine(self, path: str | os.PathLike[str] | None = None) -> Iterator[StockfishPolicy]:
        binary = find_stockfish(path)
        with self._lock:
            idle = self._idle.setdefault(binary, [])
            engine = idle.pop() if idle else None
        if engine is None:
            engine = StockfishPolicy(binary)
            self.started += 1
        healthy = False
        try:
            yield engine
            healthy = True
        finally:
            with self._lock:
                keep = healthy and len(self._idle[binary]) < self.max_idle
                if keep:
                    self._idle[binary].append(engine)
            if not keep:
                engine.close()

    def idle_count(self) -> int:
        with self._lock:
            return sum(len(engines) for engines in self._idle.values())

    def close(self) -> None:
        with self._lock:
            engines = [e for idle in self._idle.values() for e in idle]
            self._idle.clear()
        for engine in engines:
            engine.close()


STOCKFISH_POOL = StockfishPool()
atexit.register(STOCKFISH_POOL.close)


class PooledStockfish:
    """A ``MoveEngine`` that checks an engine out of ``pool`` for each move, so any number of
    simulations can share it (each move gets an engine of its own)."""

    def __init__(self, path: str | os.PathLike[str] | None = None, pool: StockfishPool = STOCKFISH_POOL) -> None:
        self.path = find_stockfish(path)  # a missing binary fails here, at configuration time
        self.pool = pool

    def best_move(self, board: chess.Board) -> chess.Move:
        with self.pool.engine(self.path) as engine:
            return engine.best_move(board)
