#!/usr/bin/env python
"""Generate the synthetic ChessPuzzles sample ``envs/data/chess_puzzles_sample.csv``, deterministically.

The real puzzle file (searchless_chess ``puzzles.csv``, Lichess puzzles) cannot be shipped or
fetched in CI, so the env's tests and smoke runs use puzzles made here with python-chess alone:

* random games from the start position (``random.Random(seed)``, moves drawn from the legal moves
  sorted by UCI, captures and checks drawn more often so that kings get exposed);
* at each position of a game (from ply 8 on) the side to move is the solver and the move that led
  there is the opponent's setup move; a position becomes
  - a mate-in-1 puzzle if exactly one legal move mates, or
  - a mate-in-2 puzzle if there is no mate in 1 and exactly one first move forces mate next move
    against every reply (checked exhaustively; only searched where the defending king has at most
    one free, unattacked neighbouring square, to keep generation fast); the opponent's reply stored is the first reply, in
    UCI order, after which the mate is unique (else the first reply), and the mate after it is the
    first mating move in UCI order (any mate is accepted by the env, the Lichess rule);
* one puzzle per game, until the requested counts are reached.

Columns: PuzzleId, Rating, PGN (the game up to FEN, SAN movetext), Solution (the solver's line,
UCI), FEN (position before the setup move), Moves (setup move + Solution, UCI), Themes.
Ratings are synthetic: mate-in-1 600-1099 and mate-in-2 950-1399 (uniform, own seeded RNG), so
that the paper's ``rating < 1000`` filter keeps part of the file.

Usage: python scripts/make_sample_chess_puzzles.py [--out PATH] [--seed 0] [--mate1 24] [--mate2 16]
"""

from __future__ import annotations

import argparse
import csv
import io
import random
import sys
from pathlib import Path

import chess

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "envs" / "data" / "chess_puzzles_sample.csv"
COLUMNS = ["PuzzleId", "Rating", "PGN", "Solution", "FEN", "Moves", "Themes"]
MIN_PLY = 8
MAX_PLIES = 200
MAX_GAMES = 20000


def gives_check_fast(board: chess.Board, move: chess.Move) -> bool:
    """``board.gives_check(move)`` from attack tables, without pushing the move.

    Castling and en passant fall back to python-chess; the generator verifies every accepted
    puzzle with python-chess alone (``verify``), so this only has to be fast and is tested equal.
    """
    piece_type = board.piece_type_at(move.from_square)
    if piece_type is None:
        return False
    if piece_type == chess.KING and abs(chess.square_file(move.from_square) - chess.square_file(move.to_square)) > 1:
        return board.gives_check(move)
    if piece_type == chess.PAWN and board.is_en_passant(move):
        return board.gives_check(move)
    king = board.king(not board.turn)
    if king is None:
        return False
    to_bb = chess.BB_SQUARES[move.to_square]
    occ = (board.occupied & ~chess.BB_SQUARES[move.from_square]) | to_bb
    moved = move.promotion or piece_type
    king_bb = chess.BB_SQUARES[king]
    to = move.to_square
    if moved == chess.PAWN:
        if chess.BB_PAWN_ATTACKS[board.turn][to] & king_bb:
            return True
    elif moved == chess.KNIGHT:
        if chess.BB_KNIGHT_ATTACKS[to] & king_bb:
            return True
    elif moved != chess.KING:
        if moved in (chess.BISHOP, chess.QUEEN) and chess.BB_DIAG_ATTACKS[to][chess.BB_DIAG_MASKS[to] & occ] & king_bb:
            return True
        if moved in (chess.ROOK, chess.QUEEN) and (
            chess.BB_RANK_ATTACKS[to][chess.BB_RANK_MASKS[to] & occ]
            | chess.BB_FILE_ATTACKS[to][chess.BB_FILE_MASKS[to] & occ]
        ) & king_bb:
            return True
    # discovered check by a slider of the mover (not the moved piece, not on the target square)
    ours = board.occupied_co[board.turn] & ~chess.BB_SQUARES[move.from_square] & ~to_bb
    diag = chess.BB_DIAG_ATTACKS[king][chess.BB_DIAG_MASKS[king] & occ]
    if diag & ours & (board.bishops | board.queens):
        return True
    ortho = chess.BB_RANK_ATTACKS[king][chess.BB_RANK_MASKS[king] & occ] | chess.BB_FILE_ATTACKS[king][
        chess.BB_FILE_MASKS[king] & occ
    ]
    return bool(ortho & ours & (board.rooks | board.queens))


def mating_moves(board: chess.Board) -> list[chess.Move]:
    """Legal moves that checkmate, sorted by UCI."""
    mates = []
    for move in board.legal_moves:
        if not gives_check_fast(board, move):
            continue
        board.push(move)
        if board.is_checkmate():
            mates.append(move)
        board.pop()
    return sorted(mates, key=lambda m: m.uci())


def forces_mate_in_2(board: chess.Board, first: chess.Move) -> bool:
    """After ``first`` every reply allows a mate in 1 (and there is at least one reply)."""
    board.push(first)
    try:
        if board.is_game_over():
            return False
        for reply in board.legal_moves:
            board.push(reply)
            try:
                if not any(True for _ in _mates_iter(board)):
                    return False
            finally:
                board.pop()
        return True
    finally:
        board.pop()


def _mates_iter(board: chess.Board):
    for move in board.legal_moves:
        if gives_check_fast(board, move):
            board.push(move)
            mate = board.is_checkmate()
            board.pop()
            if mate:
                yield move


def mate_in_2_line(board: chess.Board) -> list[chess.Move] | None:
    """[first, reply, mate] if the side to move has a unique forced mate in 2 (and no mate in 1)."""
    firsts = [m for m in sorted(board.legal_moves, key=lambda m: m.uci()) if forces_mate_in_2(board, m)]
    if len(firsts) != 1:
        return None
    first = firsts[0]
    board.push(first)
    chosen: list[chess.Move] | None = None
    for reply in sorted(board.legal_moves, key=lambda m: m.uci()):
        board.push(reply)
        mates = mating_moves(board)
        board.pop()
        if len(mates) == 1:
            chosen = [reply, mates[0]]
            break
        if chosen is None:
            chosen = [reply, mates[0]]
    board.pop()
    assert chosen is not None
    return [first, *chosen]


def king_escapes(board: chess.Board) -> int:
    """Squares next to the defending king that are free of its own pieces and not attacked by the solver.

    A cheap filter: mate in 2 is only searched where this is at most 1 (a cramped king).
    """
    king = board.king(not board.turn)
    assert king is not None
    own = board.occupied_co[not board.turn]
    return sum(
        1
        for sq in chess.SquareSet(chess.BB_KING_ATTACKS[king] & ~own)
        if not board.is_attacked_by(board.turn, sq)
    )


def verify(board: chess.Board, line: list[chess.Move]) -> bool:
    """Re-check a found line with python-chess only (no fast paths): it mates, and it is unique.

    Mate in 1: exactly one legal move mates. Mate in 2: no mate in 1, and exactly one first move
    after which every reply allows a mate (and the stored reply and mate are legal and mate).
    """
    work = board.copy()

    def mates(b: chess.Board) -> list[chess.Move]:
        found = []
        for m in list(b.legal_moves):
            b.push(m)
            if b.is_checkmate():
                found.append(m)
            b.pop()
        return found

    if len(line) == 1:
        return mates(work) == line
    if mates(work):
        return False
    forcing = []
    for first in list(work.legal_moves):
        work.push(first)
        replies = list(work.legal_moves)
        ok = bool(replies) and not work.is_game_over()
        for reply in replies if ok else []:
            work.push(reply)
            ok = bool(mates(work))
            work.pop()
            if not ok:
                break
        work.pop()
        if ok:
            forcing.append(first)
    if forcing != line[:1]:
        return False
    for move in line:
        if move not in work.legal_moves:
            return False
        work.push(move)
    return work.is_checkmate()


def random_move(board: chess.Board, rng: random.Random) -> chess.Move:
    moves = sorted(board.legal_moves, key=lambda m: m.uci())
    forcing = [m for m in moves if board.is_capture(m) or board.gives_check(m)]
    if forcing and rng.random() < 0.5:
        return rng.choice(forcing)
    return rng.choice(moves)


def generate(seed: int = 0, n_mate1: int = 24, n_mate2: int = 16, limit: int | None = None) -> list[dict[str, str]]:
    """The sample rows (dicts keyed by COLUMNS), mate-in-1 and mate-in-2 interleaved as found.

    ``limit`` stops after that many rows; while neither count is reached the rows are a prefix
    of the full output (the tests regenerate a prefix and compare it with the shipped file).
    """
    rng = random.Random(seed)
    rating_rng = random.Random(f"chess-puzzle-ratings-{seed}")
    rows: list[dict[str, str]] = []
    found = {1: 0, 2: 0}
    want = {1: n_mate1, 2: n_mate2}
    for _ in range(MAX_GAMES):
        if (found[1] >= want[1] and found[2] >= want[2]) or (limit is not None and len(rows) >= limit):
            return rows
        board = chess.Board()
        for ply in range(MAX_PLIES):
            if board.is_game_over():
                break
            if ply >= MIN_PLY:
                line: list[chess.Move] | None = None
                depth = 0
                mates = mating_moves(board)
                if len(mates) == 1 and found[1] < want[1]:
                    line, depth = mates, 1
                elif not mates and found[2] < want[2] and king_escapes(board) <= 1:
                    line = mate_in_2_line(board)
                    depth = 2
                if line is not None and verify(board, line):
                    found[depth] += 1
                    rows.append(_row(board, line, depth, len(rows) + 1, rating_rng))
                    break
            board.push(random_move(board, rng))
    if found[1] < want[1] or found[2] < want[2]:
        raise RuntimeError(f"found only {found} puzzles in {MAX_GAMES} games")
    return rows


def _row(board: chess.Board, line: list[chess.Move], depth: int, number: int, rating_rng: random.Random) -> dict[str, str]:
    setup = board.peek()
    before = board.copy()
    before.pop()
    history = before.move_stack
    pgn = chess.Board().variation_san(history)
    rating = 600 + rating_rng.randrange(500) if depth == 1 else 950 + rating_rng.randrange(450)
    solution = " ".join(m.uci() for m in line)
    return {
        "PuzzleId": f"syn{number:03d}",
        "Rating": str(rating),
        "PGN": pgn,
        "Solution": solution,
        "FEN": before.fen(),
        "Moves": f"{setup.uci()} {solution}",
        "Themes": f"mate mateIn{depth} {'oneMove' if depth == 1 else 'short'} synthetic",
    }


def to_csv(rows: list[dict[str, str]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mate1", type=int, default=24)
    parser.add_argument("--mate2", type=int, default=16)
    args = parser.parse_args(argv)
    rows = generate(args.seed, args.mate1, args.mate2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(to_csv(rows), encoding="utf-8")
    below = sum(int(r["Rating"]) < 1000 for r in rows)
    print(f"wrote {len(rows)} puzzles ({below} rated < 1000) to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
