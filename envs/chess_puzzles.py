"""ChessPuzzles: Lichess-style tactical puzzles on python-chess (paper App. G.2).

The paper trains on a subset (rating < 1000) of the 10k-puzzle file of Google DeepMind's
searchless_chess project (``https://storage.googleapis.com/searchless_chess/data/puzzles.csv``,
fetch it with ``scripts/download_chess_puzzles.sh``), split into a train and a test set (``max_rating=1000``). The authors' scripts use ratings in
[0, 800] instead (``min_rating=0, max_rating=801``, ``AUTHORS_RATING_RANGE``). Without
a ``csv_path`` the env reads the small synthetic sample shipped in ``envs/data`` (see its README).

Puzzle CSV
----------
A header row is required; column names are case-sensitive, extra columns are ignored
(``Themes`` is kept as metadata when present). Every row needs ``PuzzleId`` (unique), ``Rating``
(a number), one *base position* and one *line*:

* base position: ``FEN`` (a FEN string), or ``PGN`` (a game in PGN movetext, with or without
  headers; the base position is the position at the end of its main line). When both are given
  the FEN is used and the PGN's final position must agree with it (placement, side to move,
  castling and en passant; move counters are not compared).
* line: ``Moves`` -- space-separated UCI moves, Lichess convention: the first move is the
  *opponent's setup move*, played from the base position; the solver faces the position after
  it; the remaining moves alternate solver, opponent, ..., and end with a solver move.
  Or, only where ``Moves`` is absent or empty, ``Solution`` -- space-separated UCI moves of the
  solver's line alone: the solver is to move *at the base position* (no setup move; the last
  PGN move, when there is one, is shown as the opponent's last move). When both are given,
  ``Solution`` must equal ``Moves`` without its first move.

So the accepted forms are (FEN + Moves) as in the Lichess puzzle database, (PGN + Moves) as in
searchless_chess' ``puzzles.csv``, and (FEN or PGN) + Solution. Every row is validated on load
(ids, ratings, positions, legality of every move of the line, a line that ends on a solver move);
a malformed row raises ``ValueError`` naming the file, the row number (1 = first data row), the
line number and the PuzzleId.

Episode
-------
``reset(puzzle_id, seed)`` sets up the position the solver faces (setup move already played). An
action is one move in SAN (``Nf3``, ``Rxf2``, ``c5``, ``O-O``, ``e8=Q``); UCI (``g1f3``) is
accepted too when it is a legal move. Surrounding whitespace, a leading move number (``12.``,
``12...``) and trailing annotations (``+``, ``#``, ``!``, ``?``) are ignored. An illegal or
unparseable action sets ``info["invalid_action"] = True``. In a game (``invalid_move_ends``, on by
default there) it loses the game: reward ``INVALID_MOVE_REWARD`` (-1.01), done, result ``loss``, as
the authors' SKL-RL loop ends a game with no valid move. In puzzle mode, or a game with
``invalid_move_ends=False``, it gives reward 0, not done, an unchanged board and an observation that
repeats the position with the legal moves.

Observations list the legal moves without check and mate marks (``Qxf7`` for ``Qxf7#``: a marked list
tells the solver which move mates) and at most ``MAX_SHOWN_MOVES`` (30) of them, the first in
python-chess's generation order, as the authors do; ``admissible_actions()`` holds all of them (sorted,
marks stripped) and ``action_prompt()`` points at the observation's list instead of repeating it.

``mode="puzzle"`` (the default) follows the puzzle line:

* legal move that is not the puzzle's move: reward -1, done, not won (with
  ``wrong_move_ends=False`` instead: reward 0, not done, board unchanged, ``info["wrong_move"]``);
* the puzzle's move, or any move that delivers checkmate (Lichess rule): if it was the solver's
  last move (or mates) reward +1, done, won; otherwise reward 0 and the env plays the opponent's
  reply from the puzzle line at once, so the next observation is the solver's next position.

``mode="game"`` (SKL-RL, paper App. G; the authors' ``ChessPuzzleEnv``) plays a game from the puzzle
position: every legal move is played, the game goes on after a move that is not the puzzle's, and
the opponent answers with ``opponent``: ``random`` (uniform over its legal moves, from the env's own
seeded generator), ``first_legal`` (python-chess's first generated legal move: the authors'
``fixed`` opponent), ``stockfish`` (the engine at ``stockfish_depth`` and, when given,
``stockfish_skill_level``) or ``puzzle_line`` (the line's reply while the solver has followed the
line, ``off_line_opponent`` after). The game ends on checkmate, stalemate, insufficient material
or a claimable draw (threefold repetition, fifty moves), as in the authors' env, or after
``max_steps`` solver moves (10, the authors' ``max_steps``), or on an invalid move (above). Reward:
+1 when the solver's side wins, -1 when it loses, 0 for a draw or the step limit (authors' rewards),
-1.01 for an invalid move; the first observation states these.

``info`` of every step holds ``won``, ``invalid_action``, ``wrong_move``, ``move`` (the SAN played
or None), ``expected_move`` (SAN of the puzzle's move at that point while it applies; None for an
invalid action or once a game has left the line), ``opponent_reply`` (SAN or None), ``fen`` (after
the step) and ``puzzle_id``; game mode adds ``on_line``, ``step_limit`` and ``result`` (``win``,
``loss``, ``draw`` or None while the game goes on).
``state_key()`` is the FEN without its half-move and full-move counters, so transpositions reached
at different move numbers share one key. ``get_state``/``set_state`` snapshot the exact position,
move history, place in the puzzle line and (game mode) the opponent's generator as plain
(picklable) data; the generator is numpy's PCG64 under ``rng_state``, the layout
``skl_verl.skl.simulation`` re-seeds per branch, so simulated branches meet independent random
opponents. ``get_state`` also works after the episode has ended. The validated file is cached per
process (path, mtime, size): the 10k-puzzle file takes a few seconds to validate.

Simulation (SKL-RL)
-------------------
``StockfishPolicy`` (optional Debian ``stockfish`` binary) and ``MixedBehaviourPolicy`` (the
engine's move with probability ``expert_rate``, a uniformly random other legal move otherwise;
the paper uses 1/2, 1/3, 1/6) choose moves from any board; ``simulate_from_state`` rolls such a
policy out in the env from a snapshot and restores the env afterwards. Any object with
``best_move(board) -> chess.Move`` can stand in for the engine.
"""

from __future__ import annotations

import atexit
import csv
import dataclasses
import hashlib
import io
import math
import os
import random
import re
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

try:
    import chess
    import chess.engine
    import chess.pgn
except ImportError as exc:  # pragma: no cover - depends on the install
    from envs.base import DependencyMissingError

    raise DependencyMissingError(
        "envs.chess_puzzles needs python-chess: pip install chess"
    ) from exc

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

SAMPLE_CSV = Path(__file__).resolve().parent / "data" / "chess_puzzles_sample.csv"
PUZZLES_URL = "https://storage.googleapis.com/searchless_chess/data/puzzles.csv"
FAMILY = "chess_puzzles"


# --------------------------------------------------------------------------- puzzles and loading


@dataclass(frozen=True)
class ChessPuzzle:
    """One validated puzzle. ``base_fen`` is the position before ``setup_move`` (UCI, or None)."""

    puzzle_id: str
    rating: int
    base_fen: str
    setup_move: str | None
    solution: tuple[str, ...]
    themes: tuple[str, ...] = ()
    last_move: str | None = None  # "SAN (uci)" of the PGN's last move, shown when there is no setup move
    row: int = 0

    @property
    def n_solver_moves(self) -> int:
        return (len(self.solution) + 1) // 2

    def start_board(self) -> chess.Board:
        """The position the solver faces (setup move played)."""
        board = chess.Board(self.base_fen)
        if self.setup_move is not None:
            board.push(chess.Move.from_uci(self.setup_move))
        return board

    @property
    def start_fen(self) -> str:
        return self.start_board().fen()


def _split_moves(text: str) -> list[str]:
    return [tok for tok in text.replace(",", " ").split() if tok]


def _fen_core(fen: str) -> str:
    return " ".join(fen.split()[:4])


_PGN_SPECIAL = re.compile(r"[\[\]{}();%<>$]")
_PGN_MOVE_NUMBER = re.compile(r"^\d+\.+")
_PGN_RESULTS = {"1-0", "0-1", "1/2-1/2", "*"}


def _board_from_movetext(pgn_text: str) -> chess.Board | None:
    """Plain movetext ("1. e4 e5 2. Nf3", the common case, parsed fast and strictly).

    None when the text has headers, comments, variations or NAGs: the full PGN parser reads it.
    """
    if _PGN_SPECIAL.search(pgn_text):
        return None
    board = chess.Board()
    for token in pgn_text.split():
        token = _PGN_MOVE_NUMBER.sub("", token)
        if not token or token in _PGN_RESULTS:
            continue
        try:
            board.push_san(token)
        except ValueError:
            raise ValueError(
                f"move {token!r} (ply {len(board.move_stack) + 1}) is not a legal SAN move in {board.fen()!r}"
            ) from None
    return board


def _board_from_pgn(pgn_text: str) -> tuple[chess.Board, str | None]:
    """Final position of the PGN's main line and its last move ("SAN (uci)" or None)."""
    board = _board_from_movetext(pgn_text)
    if board is not None:
        if not board.move_stack:
            return board, None
        last = board.pop()
        san = board.san(last)
        board.push(last)
        return board, f"{san} ({last.uci()})"
    game = chess.pgn.read_game(io.StringIO(pgn_text))
    if game is None:
        raise ValueError("PGN holds no game")
    if game.errors:
        raise ValueError(f"PGN does not parse: {game.errors[0]}")
    end = game.end()
    board = end.board()
    last = f"{end.san()} ({end.move.uci()})" if end.move is not None else None
    return board, last


def _parse_row(values: dict[str, str], where: str) -> ChessPuzzle:
    def cell(name: str) -> str:
        value = values.get(name)
        return value.strip() if isinstance(value, str) else ""

    puzzle_id = cell("PuzzleId")
    if not puzzle_id:
        raise ValueError(f"{where}: empty PuzzleId")
    where = f"{where} (PuzzleId {puzzle_id!r})"

    rating_text = cell("Rating")
    try:
        rating_value = float(rating_text)
    except ValueError:
        raise ValueError(f"{where}: Rating {rating_text!r} is not a number") from None
    if not math.isfinite(rating_value):
        raise ValueError(f"{where}: Rating {rating_text!r} is not finite")
    rating = int(round(rating_value))

    fen_text, pgn_text = cell("FEN"), cell("PGN")
    if not fen_text and not pgn_text:
        raise ValueError(f"{where}: neither FEN nor PGN given")
    pgn_board: chess.Board | None = None
    pgn_last: str | None = None
    if pgn_text:
        try:
            pgn_board, pgn_last = _board_from_pgn(pgn_text)
        except ValueError as exc:
            raise ValueError(f"{where}: bad PGN: {exc}") from None
    if fen_text:
        try:
            board = chess.Board(fen_text)
        except ValueError as exc:
            raise ValueError(f"{where}: bad FEN {fen_text!r}: {exc}") from None
        if pgn_board is not None and _fen_core(pgn_board.fen()) != _fen_core(board.fen()):
            raise ValueError(
                f"{where}: FEN {fen_text!r} does not match the PGN's final position {pgn_board.fen()!r}"
            )
    else:
        assert pgn_board is not None
        board = pgn_board
    status = board.status()
    if status != chess.STATUS_VALID:
        raise ValueError(f"{where}: position {board.fen()!r} is not a valid chess position ({status!r})")

    moves_text, solution_text = cell("Moves"), cell("Solution")
    setup: str | None
    if moves_text:
        moves = _split_moves(moves_text)
        if len(moves) < 2:
            raise ValueError(f"{where}: Moves {moves_text!r} needs the setup move and at least one solver move")
        setup, line = moves[0], moves[1:]
        if solution_text and _split_moves(solution_text) != line:
            raise ValueError(
                f"{where}: Solution {solution_text!r} is not Moves {moves_text!r} without its first (setup) move"
            )
    elif solution_text:
        setup, line = None, _split_moves(solution_text)
    else:
        raise ValueError(f"{where}: neither Moves nor Solution given")
    if len(line) % 2 == 0:
        raise ValueError(
            f"{where}: the solution line {' '.join(line)!r} has {len(line)} moves; it must end on a solver move"
        )

    base_fen = board.fen()
    replay = board.copy(stack=False)
    full = ([setup] if setup else []) + line
    for index, uci in enumerate(full):
        role = "setup move" if (setup and index == 0) else f"solution move {index + (0 if setup else 1)}"
        try:
            move = chess.Move.from_uci(uci)
        except ValueError:
            raise ValueError(f"{where}: {role} {uci!r} is not a UCI move") from None
        if move not in replay.legal_moves:
            raise ValueError(f"{where}: {role} {uci!r} is illegal in {replay.fen()!r}")
        replay.push(move)
        if replay.is_game_over() and index < len(full) - 1:
            raise ValueError(f"{where}: the game is over after {role} {uci!r} but the line goes on")

    themes = tuple(cell("Themes").split())
    return ChessPuzzle(
        puzzle_id=puzzle_id,
        rating=rating,
        base_fen=base_fen,
        setup_move=setup,
        solution=tuple(line),
        themes=themes,
        last_move=None if setup else pgn_last,
    )


def parse_puzzles(text: str, source: str = "<csv>") -> list[ChessPuzzle]:
    """Parse and validate puzzle CSV text (forms in the module docstring)."""
    reader = csv.DictReader(io.StringIO(text))
    columns = set(reader.fieldnames or [])
    missing = [name for name in ("PuzzleId", "Rating") if name not in columns]
    if not columns & {"FEN", "PGN"}:
        missing.append("FEN or PGN")
    if not columns & {"Moves", "Solution"}:
        missing.append("Moves or Solution")
    if missing:
        raise ValueError(f"{source}: missing column(s) {', '.join(missing)}; header is {reader.fieldnames}")
    puzzles: list[ChessPuzzle] = []
    seen: dict[str, int] = {}
    for number, values in enumerate(reader, start=1):
        where = f"{source}: row {number} (line {reader.line_num})"
        if None in values:  # more cells than header columns
            raise ValueError(f"{where} (PuzzleId {values.get('PuzzleId')!r}): more cells than the header has columns")
        puzzle = _parse_row(values, where)
        if puzzle.puzzle_id in seen:
            raise ValueError(f"{where}: duplicate PuzzleId {puzzle.puzzle_id!r} (first in row {seen[puzzle.puzzle_id]})")
        seen[puzzle.puzzle_id] = number
        puzzles.append(dataclasses.replace(puzzle, row=number))
    return puzzles


_LOAD_CACHE: dict[tuple[str, int, int], list[ChessPuzzle]] = {}


def load_puzzles(
    csv_path: str | os.PathLike[str] | None = None,
    *,
    max_rating: float | None = None,
    min_rating: float | None = None,
) -> list[ChessPuzzle]:
    """Load and validate a puzzle CSV (default: the shipped sample), keeping ``min_rating <= rating < max_rating``."""
    path = Path(csv_path) if csv_path is not None else SAMPLE_CSV
    if not path.is_file():
        hint = " (fetch it with scripts/download_chess_puzzles.sh)" if csv_path is not None else ""
        raise DependencyMissingError(f"chess puzzle file {str(path)!r} not found{hint}")
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    puzzles = _LOAD_CACHE.get(key)
    if puzzles is None:  # the 10k-puzzle file takes a few seconds to validate; parse it once per process
        puzzles = parse_puzzles(path.read_text(encoding="utf-8-sig"), source=str(path))
        _LOAD_CACHE[key] = puzzles
    return filter_by_rating(puzzles, max_rating=max_rating, min_rating=min_rating)


def filter_by_rating(
    puzzles: Iterable[ChessPuzzle], *, max_rating: float | None = None, min_rating: float | None = None
) -> list[ChessPuzzle]:
    """Keep puzzles with ``min_rating <= rating < max_rating`` (the paper: rating < 1000)."""
    return [
        p
        for p in puzzles
        if (max_rating is None or p.rating < max_rating) and (min_rating is None or p.rating >= min_rating)
    ]


def split_fraction(puzzle_id: str, seed: int = 0) -> float:
    """A stable pseudo-random number in [0, 1) for ``puzzle_id`` (sha256, independent of other ids)."""
    digest = hashlib.sha256(f"{seed}:{puzzle_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def train_test_split(
    puzzle_ids: Iterable[str], *, test_fraction: float = 0.2, seed: int = 0
) -> tuple[list[str], list[str]]:
    """Deterministic split: an id is in test iff ``split_fraction(id, seed) < test_fraction``.

    Each id's side depends only on (id, seed, test_fraction), so adding or removing other puzzles
    never moves an id; the input order is kept within each side.
    """
    if not 0.0 <= test_fraction <= 1.0:
        raise ValueError(f"test_fraction must be in [0, 1], got {test_fraction}")
    train: list[str] = []
    test: list[str] = []
    for pid in puzzle_ids:
        (test if split_fraction(pid, seed) < test_fraction else train).append(pid)
    return train, test


# --------------------------------------------------------------------------- move parsing and text

_MOVE_NUMBER = re.compile(r"^\d+\s*\.+\s*")
_TRAILING = "+#!?"


def parse_move(board: chess.Board, action: str) -> chess.Move | None:
    """A legal move from SAN (or UCI) text, tolerant of annotations; None if there is none."""
    if not isinstance(action, str):
        return None
    text = _MOVE_NUMBER.sub("", action.strip()).strip().rstrip(_TRAILING).strip()
    if not text or any(ch.isspace() for ch in text):
        return None
    candidates = [text]
    if text[:1] in "0o" and text[1:2] == "-":  # 0-0 / o-o castling spellings
        candidates.append(text.upper().replace("0", "O"))
    for candidate in candidates:
        try:
            move = board.parse_san(candidate)
        except ValueError:
            continue
        if move and move in board.legal_moves:
            return move
    try:
        move = chess.Move.from_uci(text.lower())
    except ValueError:
        return None
    return move if move and move in board.legal_moves else None


MAX_SHOWN_MOVES = 30
"""Observations list at most this many legal moves (the authors' ``max_legal_action_n``)."""


def clean_san(board: chess.Board, move: chess.Move) -> str:
    """SAN without its check or mate mark: a listed ``Qxf7#`` would tell the solver which move mates
    (the authors strip the same marks, ``san_move_leak_symbol``). ``parse_move`` accepts both spellings."""
    return board.san(move).rstrip("+#")


def legal_moves_san(board: chess.Board) -> list[str]:
    """Every legal move in SAN without check/mate marks, sorted (the admissible actions)."""
    return sorted(clean_san(board, move) for move in board.legal_moves)


def shown_moves_text(board: chess.Board, limit: int = MAX_SHOWN_MOVES) -> str:
    """The legal-move line of an observation: marks stripped, at most ``limit`` moves. Which ones is the
    authors' rule: the first ``limit`` in python-chess's generation order, then ``...``; every legal
    move stays playable (the authors match a reply against all of them, not the shown ones)."""
    moves = [clean_san(board, move) for move in board.legal_moves]
    if len(moves) <= limit:
        return f"Legal moves (SAN): {', '.join(moves)}"
    return (f"Legal moves (SAN, {limit} of {len(moves)} shown; any legal move is accepted): "
            f"{', '.join(moves[:limit])}, ...")


def color_name(color: chess.Color) -> str:
    return "White" if color == chess.WHITE else "Black"


def board_ascii(board: chess.Board) -> str:
    """The board with rank and file labels, White at the bottom."""
    rows = []
    for rank in range(7, -1, -1):
        cells = []
        for file in range(8):
            piece = board.piece_at(chess.square(file, rank))
            cells.append(piece.symbol() if piece else ".")
        rows.append(f"{rank + 1} | {' '.join(cells)}")
    rows.append("  +----------------")
    rows.append("    a b c d e f g h")
    return "\n".join(rows)


def describe_position(board: chess.Board) -> str:
    side = color_name(board.turn)
    return (
        f"FEN: {board.fen()}\n"
        f"Board (White at the bottom; uppercase = White, lowercase = Black, '.' = empty):\n"
        f"{board_ascii(board)}\n"
        f"Side to move: {side}{' (in check)' if board.is_check() else ''}\n"
        f"{shown_moves_text(board)}"
    )


_ASK = "Reply with one move in SAN, e.g. Nf3, Rxf2, c5."
ACTION_PROMPT = "Admissible actions: the legal moves listed above (any legal move in SAN; a check or mate mark is optional)."


# --------------------------------------------------------------------------- the environment


MODES = ("puzzle", "game")
OPPONENTS = ("random", "first_legal", "stockfish", "puzzle_line")
INVALID_MOVE_REWARD = -1.01
"""A game lost on an invalid move: the loss (-1) plus the format penalty 0.01 of the authors' SKL-RL
chess scripts (``act_action_format_penality=0.01``; their loop ends the game when no valid move is found)."""
AUTHORS_RATING_RANGE = (0, 801)
"""The authors' scripts keep ratings in [0, 800] (``min_rating=0, max_rating=801``: ratings are
integers and the filter keeps ``rating < max_rating``); the paper's text says rating < 1000."""


def state_key_of(board: chess.Board) -> str:
    """Placement, side to move, castling rights and en passant square: the FEN without its move
    counters, so one position reached at different move numbers is one state."""
    return _fen_core(board.fen())


class ChessPuzzlesEnv(TextEnv):
    """Chess puzzles as a text env; see the module docstring for CSV forms, modes, actions and rewards."""

    name = "chess_puzzles"
    supports_snapshot = True

    def __init__(
        self,
        csv_path: str | os.PathLike[str] | None = None,
        max_rating: float | None = None,
        min_rating: float | None = None,
        puzzle_ids: Sequence[str] | None = None,
        wrong_move_ends: bool = True,
        split: str | None = None,
        test_fraction: float = 0.2,
        split_seed: int = 0,
        mode: str = "puzzle",
        opponent: str = "random",
        off_line_opponent: str = "random",
        max_steps: int = 10,
        stockfish_path: str | None = None,
        stockfish_depth: int = 8,
        stockfish_skill_level: int | None = None,
        invalid_move_ends: bool | None = None,
    ) -> None:
        """``split`` in (None, "train", "test") keeps one side of ``train_test_split`` (after the
        rating filter). ``opponent``, ``off_line_opponent``, ``max_steps``, ``invalid_move_ends``
        (None: on, the authors' rule) and the ``stockfish_*`` options belong to ``mode="game"``;
        ``wrong_move_ends`` to ``mode="puzzle"``."""
        if mode not in MODES:
            raise ValueError(f"{self.name}: mode must be one of {MODES}, got {mode!r}")
        if opponent not in OPPONENTS:
            raise ValueError(f"{self.name}: opponent must be one of {OPPONENTS}, got {opponent!r}")
        if off_line_opponent not in OPPONENTS or off_line_opponent == "puzzle_line":
            raise ValueError(
                f"{self.name}: off_line_opponent must be one of {OPPONENTS[:3]} (it answers once the game "
                f"has left the puzzle line), got {off_line_opponent!r}"
            )
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"{self.name}: max_steps must be an int >= 1, got {max_steps!r}")
        if mode == "game" and not wrong_move_ends:
            raise ValueError(f"{self.name}: wrong_move_ends=False belongs to mode='puzzle'; a game always goes on")
        if invalid_move_ends is not None and not isinstance(invalid_move_ends, bool):
            raise ValueError(f"{self.name}: invalid_move_ends must be true, false or null, got {invalid_move_ends!r}")
        if mode == "puzzle" and invalid_move_ends:
            raise ValueError(f"{self.name}: invalid_move_ends belongs to mode='game'; a puzzle answers an invalid move and waits")
        # A game ends on an invalid move unless told otherwise (the authors' rule); a puzzle never does.
        self.invalid_move_ends = mode == "game" and invalid_move_ends is not False
        if stockfish_skill_level is not None and not (
            isinstance(stockfish_skill_level, int) and 0 <= stockfish_skill_level <= 20
        ):
            raise ValueError(f"{self.name}: stockfish_skill_level must be an int in [0, 20], got {stockfish_skill_level!r}")
        puzzles = load_puzzles(csv_path, max_rating=max_rating, min_rating=min_rating)
        if split is not None:
            if split not in ("train", "test"):
                raise ValueError(f"split must be None, 'train' or 'test', got {split!r}")
            train, test = train_test_split(
                [p.puzzle_id for p in puzzles], test_fraction=test_fraction, seed=split_seed
            )
            keep = set(train if split == "train" else test)
            puzzles = [p for p in puzzles if p.puzzle_id in keep]
        if puzzle_ids is not None:
            by_id = {p.puzzle_id: p for p in puzzles}
            unknown = [pid for pid in puzzle_ids if pid not in by_id]
            if unknown:
                raise UnknownTaskError(
                    f"{self.name}: puzzle id(s) {unknown} not in the file or excluded by the filters"
                )
            puzzles = [by_id[pid] for pid in dict.fromkeys(puzzle_ids)]
        self.csv_path = str(csv_path) if csv_path is not None else str(SAMPLE_CSV)
        self.wrong_move_ends = wrong_move_ends
        self.mode, self.opponent, self.off_line_opponent, self.max_steps = mode, opponent, off_line_opponent, max_steps
        self._engine: StockfishPolicy | None = None
        if mode == "game" and "stockfish" in (opponent, off_line_opponent):
            # Located now (a missing binary is a clear error at construction), started on first use.
            self._engine = StockfishPolicy(stockfish_path, depth=stockfish_depth, skill_level=stockfish_skill_level)
        self._puzzles: dict[str, ChessPuzzle] = {p.puzzle_id: p for p in puzzles}
        self._specs = {p.puzzle_id: self._spec(p) for p in puzzles}
        self._puzzle: ChessPuzzle | None = None
        self._board: chess.Board | None = None
        self._index = 0  # index into puzzle.solution of the solver's next move (while on the line)
        self._done = False
        self._won = False
        self._steps = 0  # game mode: solver moves played
        self._on_line = True  # game mode: every solver move so far was the line's
        self._forfeited = False  # game mode: lost on an invalid move (invalid_move_ends)
        self._rng: np.random.Generator | None = None  # game mode: the opponent's random moves

    # -- tasks

    def _spec(self, puzzle: ChessPuzzle) -> TaskSpec:
        start = puzzle.start_board()
        return TaskSpec(
            task_id=puzzle.puzzle_id,
            family=FAMILY,
            difficulty=float(puzzle.rating),
            metadata={
                "rating": puzzle.rating,
                "n_solver_moves": puzzle.n_solver_moves,
                "fen": start.fen(),
                "puzzle_fen": puzzle.base_fen,
                "setup_move": puzzle.setup_move,
                "solver_color": color_name(start.turn).lower(),
                "themes": list(puzzle.themes),
            },
        )

    def tasks(self) -> list[TaskSpec]:
        return list(self._specs.values())

    def task(self, task_id: str) -> TaskSpec:
        self.puzzle(task_id)
        return self._specs[task_id]

    def puzzle(self, task_id: str) -> ChessPuzzle:
        try:
            return self._puzzles[task_id]
        except (KeyError, TypeError):  # TypeError: an unhashable id such as a list
            raise UnknownTaskError(f"{self.name}: unknown task id {task_id!r:.80}") from None

    # -- episode

    def reset(self, task_id: str, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """``seed`` seeds the game-mode opponent's random moves (None: a seed derived from the puzzle
        id, so a replay is exact); a puzzle-mode episode has no randomness."""
        puzzle = self.puzzle(task_id)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ValueError(f"{self.name}: seed must be a non-negative int or None, got {seed!r}")
        self._puzzle = puzzle
        self._board = puzzle.start_board()
        self._index = 0
        self._done = False
        self._won = False
        self._steps = 0
        self._on_line = True
        self._forfeited = False
        self._rng = None
        if self.mode == "game":
            start_seed = seed if seed is not None else int.from_bytes(hashlib.sha256(puzzle.puzzle_id.encode()).digest()[:8], "little")
            self._rng = np.random.Generator(np.random.PCG64(start_seed))
        board = self._board
        if puzzle.setup_move is not None:
            last = board.peek()
            before = board.copy()
            before.pop()
            last_text = f"{before.san(last)} ({last.uci()})"
        elif puzzle.last_move is not None:
            last_text = puzzle.last_move
        else:
            last_text = None
        if self.mode == "game":
            # The rewards this env gives, stated as they are (issue 22: the prompt said "anything else 0").
            invalid = (f"; an illegal or unreadable move loses the game at {INVALID_MOVE_REWARD:g}" if self.invalid_move_ends
                       else "; an illegal or unreadable move is refused and you move again")
            header = (
                f"Chess game from puzzle {puzzle.puzzle_id}. You play {color_name(board.turn)}; checkmate the "
                f"opponent within {self.max_steps} of your moves. Rewards: +1 if you checkmate the opponent, "
                f"-1 if you are checkmated, 0 for a draw or when your moves run out{invalid}."
            )
        else:
            header = f"Chess puzzle {puzzle.puzzle_id}. You play {color_name(board.turn)}; find the best move."
        lines = [header]
        if last_text:
            lines.append(f"Opponent's last move: {last_text}.")
        lines += [describe_position(board), self._ask()]
        info = {
            "task": self._specs[task_id],
            "fen": board.fen(),
            "won": False,
            "invalid_action": False,
            "puzzle_id": puzzle.puzzle_id,
        }
        return "\n".join(lines), info

    def _ask(self) -> str:
        if self.mode == "game":
            left = self.max_steps - self._steps
            return f"Your moves left: {left}. {_ASK}"
        return _ASK

    def _require_active(self) -> tuple[ChessPuzzle, chess.Board]:
        if self._puzzle is None or self._board is None:
            raise EnvNotResetError(f"{self.name}: call reset() first")
        if self._done:
            raise EnvNotResetError(f"{self.name}: the episode has ended; call reset()")
        return self._puzzle, self._board

    def _info(self, **extra: Any) -> dict[str, Any]:
        assert self._puzzle is not None and self._board is not None
        info: dict[str, Any] = {
            "won": False,
            "invalid_action": False,
            "wrong_move": False,
            "move": None,
            "expected_move": None,
            "opponent_reply": None,
            "fen": self._board.fen(),
            "puzzle_id": self._puzzle.puzzle_id,
        }
        if self.mode == "game":
            info.update(on_line=self._on_line, step_limit=False, result=None)
        info.update(extra)
        return info

    def step(self, action: str) -> StepResult:
        puzzle, board = self._require_active()
        move = parse_move(board, action)
        if move is None:
            shown = action if isinstance(action, str) else repr(action)
            if self.invalid_move_ends:
                self._done = self._forfeited = True
                observation = (f"Invalid action {shown!r}: not a legal move in this position. You lose the game."
                               f"\nFEN: {board.fen()}")
                return StepResult(observation, INVALID_MOVE_REWARD, True, self._info(invalid_action=True, result="loss"))
            observation = (
                f"Invalid action {shown!r}: not a legal move in this position. The position is unchanged.\n"
                f"{describe_position(board)}\n{self._ask()}"
            )
            return StepResult(observation, 0.0, False, self._info(invalid_action=True))
        if self.mode == "game":
            return self._step_game(puzzle, board, move)
        return self._step_puzzle(puzzle, board, move)

    def _step_puzzle(self, puzzle: ChessPuzzle, board: chess.Board, move: chess.Move) -> StepResult:
        expected = chess.Move.from_uci(puzzle.solution[self._index])
        expected_san = board.san(expected)
        san = board.san(move)
        board.push(move)
        mates = board.is_checkmate()
        if move != expected and not mates:
            if not self.wrong_move_ends:
                board.pop()
                observation = (
                    f"{san} is not the puzzle's move; try again.\n{describe_position(board)}\n{_ASK}"
                )
                return StepResult(
                    observation, 0.0, False, self._info(wrong_move=True, move=san, expected_move=expected_san)
                )
            self._done = True
            observation = f"{san} is not the puzzle's move. Puzzle failed.\nFEN: {board.fen()}"
            return StepResult(
                observation, -1.0, True, self._info(wrong_move=True, move=san, expected_move=expected_san)
            )

        if mates or self._index + 1 >= len(puzzle.solution):
            self._done = True
            self._won = True
            self._index = len(puzzle.solution)
            suffix = " (checkmate)" if mates else ""
            observation = f"Correct: {san}{suffix}. Puzzle solved.\nFEN: {board.fen()}"
            return StepResult(observation, 1.0, True, self._info(won=True, move=san, expected_move=expected_san))

        reply = chess.Move.from_uci(puzzle.solution[self._index + 1])
        reply_san = board.san(reply)
        board.push(reply)
        self._index += 2
        observation = (
            f"Correct: {san}. Opponent replied {reply_san} ({reply.uci()}).\n{describe_position(board)}\n{_ASK}"
        )
        return StepResult(
            observation, 0.0, False, self._info(move=san, expected_move=expected_san, opponent_reply=reply_san)
        )

    def _follow_line(self, puzzle: ChessPuzzle, move: chess.Move) -> None:
        """Advance the place in the puzzle line if ``move`` is the line's next move; else leave it."""
        if self._on_line and self._index < len(puzzle.solution) and move.uci() == puzzle.solution[self._index]:
            self._index += 1
        elif self._index < len(puzzle.solution):
            self._on_line = False

    def _step_game(self, puzzle: ChessPuzzle, board: chess.Board, move: chess.Move) -> StepResult:
        line_applies = self._on_line and self._index < len(puzzle.solution)
        expected_san = board.san(chess.Move.from_uci(puzzle.solution[self._index])) if line_applies else None
        san = board.san(move)
        board.push(move)
        self._steps += 1
        self._follow_line(puzzle, move)
        wrong = line_applies and not self._on_line
        result = game_result(board, self._solver_color(puzzle))
        reply_san = None
        if result is None:
            reply = self._opponent_move(board, puzzle)
            reply_san = board.san(reply)
            board.push(reply)
            self._follow_line(puzzle, reply)
            result = game_result(board, self._solver_color(puzzle))
        step_limit = result is None and self._steps >= self.max_steps
        self._done = result is not None or step_limit
        self._won = result == "win"
        reward = {"win": 1.0, "loss": -1.0}.get(result, 0.0)
        played = f"You played {san}."
        if reply_san is not None:
            played += f" Opponent replied {reply_san}."
        if result == "win":
            observation = f"{played} Checkmate: you won the game.\nFEN: {board.fen()}"
        elif result == "loss":
            observation = f"{played} Checkmate: you lost the game.\nFEN: {board.fen()}"
        elif result == "draw":
            observation = f"{played} The game is drawn ({_termination_text(board)}).\nFEN: {board.fen()}"
        elif step_limit:
            observation = f"{played} The limit of {self.max_steps} moves is reached; the game ends undecided.\nFEN: {board.fen()}"
        else:
            observation = f"{played}\n{describe_position(board)}\n{self._ask()}"
        info = self._info(
            won=self._won, wrong_move=wrong, move=san, expected_move=expected_san, opponent_reply=reply_san,
            step_limit=step_limit, result=result,
        )
        return StepResult(observation, reward, self._done, info)

    def _solver_color(self, puzzle: ChessPuzzle) -> chess.Color:
        return puzzle.start_board().turn

    def _opponent_move(self, board: chess.Board, puzzle: ChessPuzzle) -> chess.Move:
        kind = self.opponent
        if kind == "puzzle_line":
            if self._on_line and self._index < len(puzzle.solution):
                return chess.Move.from_uci(puzzle.solution[self._index])
            kind = self.off_line_opponent
        if kind == "random":
            assert self._rng is not None
            legal = sorted(board.legal_moves, key=lambda m: m.uci())
            return legal[int(self._rng.integers(len(legal)))]
        if kind == "first_legal":
            return next(iter(board.legal_moves))
        assert self._engine is not None
        return self._engine.best_move(board)

    def admissible_actions(self) -> list[str]:
        _, board = self._require_active()
        return legal_moves_san(board)

    def action_prompt(self) -> str | None:
        """Points at the observation's own move list: rendering ``admissible_actions()`` after it would
        show every legal move again, past the 30 the observation shows."""
        self._require_active()
        return ACTION_PROMPT

    def state_key(self) -> str:
        if self._board is None:
            raise EnvNotResetError(f"{self.name}: call reset() first")
        return state_key_of(self._board)

    @property
    def board(self) -> chess.Board:
        """A copy of the current board (with its move stack)."""
        if self._board is None:
            raise EnvNotResetError(f"{self.name}: call reset() first")
        return self._board.copy()

    @property
    def done(self) -> bool:
        return self._done

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()

    # -- snapshots

    def get_state(self) -> dict[str, Any]:
        """Plain data: puzzle id, root FEN, UCI move stack, line index, done, won; game mode adds
        ``mode``, ``steps``, ``on_line`` and the opponent generator's ``rng_state``."""
        if self._puzzle is None or self._board is None:
            raise EnvNotResetError(f"{self.name}: call reset() first")
        state = {
            "puzzle_id": self._puzzle.puzzle_id,
            "root_fen": self._board.root().fen(),
            "moves": [m.uci() for m in self._board.move_stack],
            "index": self._index,
            "done": self._done,
            "won": self._won,
        }
        if self.mode == "game":
            assert self._rng is not None
            state.update(mode="game", steps=self._steps, on_line=self._on_line, forfeited=self._forfeited,
                         rng_state=self._rng.bit_generator.state)
        return state

    def set_state(self, state: Any) -> None:
        """Restore a ``get_state`` snapshot. Everything is checked against the puzzle before anything
        changes, so a rejected snapshot raises here, not at the next step, and changes nothing."""
        if self.mode == "game":
            self._set_game_state(state)
            return
        checked_snapshot(self.name, state, {
            "puzzle_id": str, "root_fen": str, "moves": list, "index": int, "done": bool, "won": bool,
        })
        puzzle = self.puzzle(state["puzzle_id"])
        index, done, won, moves = state["index"], state["done"], state["won"], state["moves"]
        start = puzzle.start_board()
        start_moves = [m.uci() for m in start.move_stack]
        if state["root_fen"] != start.root().fen():
            raise InvalidSnapshotError(f"{self.name}: snapshot root_fen is not puzzle {puzzle.puzzle_id!r}'s position")
        line = start_moves + list(puzzle.solution[:index])
        if won and not done:
            raise InvalidSnapshotError(f"{self.name}: snapshot is won but not done")
        if not done:
            consistent = index % 2 == 0 and index < len(puzzle.solution) and moves == line
        elif won:
            consistent = index == len(puzzle.solution) and moves[: len(start_moves)] == start_moves
        else:
            consistent = index % 2 == 0 and index < len(puzzle.solution) and moves[:-1] == line and len(moves) == len(line) + 1
        if not consistent:
            raise InvalidSnapshotError(
                f"{self.name}: snapshot index={index} (done={done}, won={won}) does not match its moves "
                f"{moves!r:.120} for puzzle {puzzle.puzzle_id!r} (solution {len(puzzle.solution)} moves)"
            )
        board = self._replay(state["root_fen"], moves)
        self._puzzle, self._board = puzzle, board
        self._index, self._done, self._won = index, done, won

    def _replay(self, root_fen: str, moves: list[Any]) -> chess.Board:
        board = chess.Board(root_fen)
        try:
            for uci in moves:
                move = chess.Move.from_uci(uci)
                if not board.is_legal(move):
                    raise ValueError(f"illegal move {uci}")
                board.push(move)
        except (TypeError, ValueError, AttributeError) as exc:
            raise InvalidSnapshotError(f"{self.name}: snapshot moves do not replay: {exc}") from None
        return board

    def _set_game_state(self, state: Any) -> None:
        checked_snapshot(self.name, state, {
            "puzzle_id": str, "root_fen": str, "moves": list, "index": int, "done": bool, "won": bool,
            "mode": str, "steps": int, "on_line": bool, "forfeited": bool, "rng_state": dict,
        })
        if state["mode"] != "game":
            raise InvalidSnapshotError(f"{self.name}: snapshot of mode {state['mode']!r} given to a mode='game' env")
        puzzle = self.puzzle(state["puzzle_id"])
        start = puzzle.start_board()
        start_moves = [m.uci() for m in start.move_stack]
        if state["root_fen"] != start.root().fen():
            raise InvalidSnapshotError(f"{self.name}: snapshot root_fen is not puzzle {puzzle.puzzle_id!r}'s position")
        moves = state["moves"]
        if moves[: len(start_moves)] != start_moves:
            raise InvalidSnapshotError(f"{self.name}: snapshot moves do not start with puzzle {puzzle.puzzle_id!r}'s setup")
        board = self._replay(state["root_fen"], moves)
        played = moves[len(start_moves):]
        index = 0
        while index < min(len(played), len(puzzle.solution)) and played[index] == puzzle.solution[index]:
            index += 1
        on_line = index == len(played) or index == len(puzzle.solution)
        steps = (len(played) + 1) // 2
        result = game_result(board, start.turn)
        if result is None and len(played) % 2:
            raise InvalidSnapshotError(f"{self.name}: snapshot ends on a solver move but the game goes on (no opponent reply)")
        forfeited = state["forfeited"]
        if forfeited and result is not None:
            raise InvalidSnapshotError(f"{self.name}: snapshot is forfeited (lost on an invalid move) but its game is over ({result})")
        done = result is not None or steps >= self.max_steps or forfeited
        expected = {"index": index, "on_line": on_line, "steps": steps, "done": done, "won": result == "win"}
        wrong = {k: state[k] for k, v in expected.items() if state[k] != v}
        if wrong:
            raise InvalidSnapshotError(
                f"{self.name}: snapshot fields {wrong} do not match its moves (expected {expected}; max_steps={self.max_steps})"
            )
        rng = np.random.Generator(np.random.PCG64())
        try:
            rng.bit_generator.state = state["rng_state"]
        except (TypeError, ValueError, KeyError) as exc:
            raise InvalidSnapshotError(f"{self.name}: snapshot rng_state is not a PCG64 state: {exc}") from None
        self._puzzle, self._board, self._rng = puzzle, board, rng
        self._index, self._on_line, self._steps, self._done, self._won = index, on_line, steps, done, result == "win"
        self._forfeited = forfeited


def game_result(board: chess.Board, solver: chess.Color) -> str | None:
    """``win``/``loss`` (checkmate for/against ``solver``), ``draw`` (stalemate, insufficient material,
    claimable threefold repetition or fifty moves: the authors' termination rule) or None (game on)."""
    outcome = board.outcome(claim_draw=True)
    if outcome is None:
        return None
    if outcome.winner is None:
        return "draw"
    return "win" if outcome.winner == solver else "loss"


def _termination_text(board: chess.Board) -> str:
    outcome = board.outcome(claim_draw=True)
    return outcome.termination.name.lower().replace("_", " ") if outcome is not None else "game on"


# --------------------------------------------------------------------------- policies for simulation


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


class MixedBehaviourPolicy:
    """The engine's move with probability ``expert_rate``, else a uniformly random *other* legal move.

    (When the engine's move is the only legal move it is played.) ``last_was_expert`` tells which
    branch the last call took. Deterministic for a given ``seed`` and sequence of boards.
    """

    def __init__(self, expert_rate: float, seed: int | None = 0, engine: MoveEngine | None = None) -> None:
        if not isinstance(expert_rate, (int, float)) or not 0.0 <= float(expert_rate) <= 1.0:
            raise ValueError(f"expert_rate must be in [0, 1], got {expert_rate!r}")
        if engine is None:
            engine = StockfishPolicy()
        if not callable(getattr(engine, "best_move", None)):
            raise TypeError("engine needs a best_move(board) -> chess.Move method")
        self.expert_rate = float(expert_rate)
        self.engine = engine
        self.rng = random.Random(seed)
        self.last_was_expert: bool | None = None

    def choose_move(self, board: chess.Board) -> chess.Move:
        legal = sorted(board.legal_moves, key=lambda m: m.uci())
        if not legal:
            raise ValueError(f"no legal move in {board.fen()}")
        expert = self.engine.best_move(board)
        if expert not in board.legal_moves:
            raise ValueError(f"engine proposed illegal move {expert} in {board.fen()}")
        others = [m for m in legal if m != expert]
        if self.rng.random() < self.expert_rate or not others:
            self.last_was_expert = True
            return expert
        self.last_was_expert = False
        return self.rng.choice(others)

    def __call__(self, board: chess.Board) -> str:
        return board.san(self.choose_move(board))


@dataclass
class SimulatedStep:
    state_key: str
    action: str
    reward: float
    done: bool
    won: bool
    observation: str
    info: dict[str, Any] = field(default_factory=dict)


def simulate_from_state(
    env: ChessPuzzlesEnv,
    policy: Callable[[chess.Board], str],
    horizon: int,
    state: dict[str, Any] | None = None,
) -> list[SimulatedStep]:
    """Roll ``policy`` (board -> SAN) out for up to ``horizon`` moves from ``state`` (default: now).

    The env's own state is restored afterwards, so this can run in the middle of an episode.
    """
    saved = env.get_state()
    trace: list[SimulatedStep] = []
    try:
        if state is not None:
            env.set_state(state)
        for _ in range(horizon):
            if env.done:
                break
            key = env.state_key()
            action = policy(env.board)
            result = env.step(action)
            trace.append(SimulatedStep(key, action, result.reward, result.done, result.won, result.observation, result.info))
    finally:
        env.set_state(saved)
    return trace


__all__ = [
    "AUTHORS_RATING_RANGE",
    "ChessPuzzle",
    "ChessPuzzlesEnv",
    "MixedBehaviourPolicy",
    "MODES",
    "MoveEngine",
    "OPPONENTS",
    "PooledStockfish",
    "STOCKFISH_POOL",
    "StockfishPool",
    "PUZZLES_URL",
    "SAMPLE_CSV",
    "SimulatedStep",
    "StockfishPolicy",
    "filter_by_rating",
    "find_stockfish",
    "load_puzzles",
    "parse_move",
    "parse_puzzles",
    "simulate_from_state",
    "split_fraction",
    "state_key_of",
    "game_result",
    "train_test_split",
]
