"""The chess puzzle file: parsing, validation, rating filter and a stable train/test split.

The paper trains on a subset (rating < 1000) of the 10k-puzzle file of Google DeepMind's
searchless_chess project (``PUZZLES_URL``, fetch it with ``scripts/download_chess_puzzles.sh``),
split into a train and a test set (``max_rating=1000``). The authors' scripts use ratings in
[0, 800] instead (``min_rating=0, max_rating=801``, ``AUTHORS_RATING_RANGE``). Without a
``csv_path`` the env reads the small synthetic sample shipped in ``envs/data`` (``SAMPLE_CSV``, see
its README).

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
(ids, ratings, positions, legality of every move of the line, a line that ends on a solver move).
A malformed row (or a repeated PuzzleId) is skipped and counted, and one warning names the count and the
first such row (file, row number with 1 = first data row, line number, PuzzleId, what is wrong):
``bad_rows="error"`` raises ``ValueError`` on it instead. A missing column, or a file without one good
row, is always an error. The validated file is cached per process (path, mtime, size): the
10k-puzzle file takes a few seconds to validate.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import logging
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import chess
import chess.pgn

from envs.base import DependencyMissingError
from envs.chess.board import fen_core

logger = logging.getLogger(__name__)

BAD_ROWS = ("skip", "error")

SAMPLE_CSV = Path(__file__).resolve().parent.parent / "data" / "chess_puzzles_sample.csv"
PUZZLES_URL = "https://storage.googleapis.com/searchless_chess/data/puzzles.csv"
AUTHORS_RATING_RANGE = (0, 801)
"""The authors' scripts keep ratings in [0, 800] (``min_rating=0, max_rating=801``: ratings are
integers and the filter keeps ``rating < max_rating``); the paper's text says rating < 1000."""


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
        if pgn_board is not None and fen_core(pgn_board.fen()) != fen_core(board.fen()):
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


def parse_puzzles(text: str, source: str = "<csv>", bad_rows: str = "skip") -> list[ChessPuzzle]:
    """Parse and validate puzzle CSV text (forms and ``bad_rows`` in the module docstring)."""
    if bad_rows not in BAD_ROWS:
        raise ValueError(f"bad_rows must be one of {BAD_ROWS}, got {bad_rows!r}")
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
    skipped: list[str] = []
    rows = 0
    for number, values in enumerate(reader, start=1):
        rows = number
        where = f"{source}: row {number} (line {reader.line_num})"
        try:
            if None in values:  # more cells than header columns
                raise ValueError(f"{where} (PuzzleId {values.get('PuzzleId')!r}): more cells than the header has columns")
            puzzle = _parse_row(values, where)
            if puzzle.puzzle_id in seen:
                raise ValueError(f"{where}: duplicate PuzzleId {puzzle.puzzle_id!r} (first in row {seen[puzzle.puzzle_id]})")
        except ValueError as exc:
            if bad_rows == "error":
                raise
            skipped.append(str(exc))
            continue
        seen[puzzle.puzzle_id] = number
        puzzles.append(dataclasses.replace(puzzle, row=number))
    if skipped:
        if not puzzles:
            raise ValueError(f"{source}: none of its {rows} rows is a valid puzzle; the first: {skipped[0]}")
        logger.warning("%s: skipped %d of %d rows that are not valid puzzles (bad_rows='error' stops instead); "
                       "the first: %s", source, len(skipped), rows, skipped[0])
    return puzzles


_LOAD_CACHE: dict[tuple[str, int, int, str], list[ChessPuzzle]] = {}


def load_puzzles(
    csv_path: str | os.PathLike[str] | None = None,
    *,
    max_rating: float | None = None,
    min_rating: float | None = None,
    bad_rows: str = "skip",
) -> list[ChessPuzzle]:
    """Load and validate a puzzle CSV (default: the shipped sample), keeping ``min_rating <= rating < max_rating``;
    ``bad_rows``: skip malformed rows with a warning, or stop with an error on the first."""
    path = Path(csv_path) if csv_path is not None else SAMPLE_CSV
    if not path.is_file():
        hint = " (fetch it with scripts/download_chess_puzzles.sh)" if csv_path is not None else ""
        raise DependencyMissingError(f"chess puzzle file {str(path)!r} not found{hint}")
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size, bad_rows)
    puzzles = _LOAD_CACHE.get(key)
    if puzzles is None:  # the 10k-puzzle file takes a few seconds to validate; parse it once per process
        puzzles = parse_puzzles(path.read_text(encoding="utf-8-sig"), source=str(path), bad_rows=bad_rows)
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


def head_split(puzzle_ids: Iterable[str], *, test_fraction: float = 0.2) -> tuple[list[str], list[str]]:
    """The authors' split (``train_val_ratio`` 0.2): test = the first ``int(test_fraction * N)`` ids in the given
    order (the rating-filtered file's), train = the rest, in order. Unlike ``train_test_split`` an id's side depends
    on the ids before it."""
    if not 0.0 <= test_fraction <= 1.0:
        raise ValueError(f"test_fraction must be in [0, 1], got {test_fraction}")
    ids = list(puzzle_ids)
    cut = int(test_fraction * len(ids))
    return ids[cut:], ids[:cut]

