"""One chess position as text and as rules: reading a move, listing and showing the legal moves,
drawing the board, the position's state key and a game's result (what ``ChessPuzzlesEnv``'s
observations and rewards are made of; its module docstring states the rules they follow)."""

from __future__ import annotations

import re

import chess


def fen_core(fen: str) -> str:
    """Placement, side to move, castling and en passant: a FEN without its move counters."""
    return " ".join(fen.split()[:4])


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


ASK_FOR_MOVE = "Reply with one move in SAN, e.g. Nf3, Rxf2, c5."
OPPONENT_REPLY = "Opponent replied {uci}."
"""How a game's observation names the opponent's reply: in UCI, never with a check or mate mark (``e7e5``,
``e7e8q``), as the authors' simulator results print it (``str(chess.Move)``)."""
OPPONENT_REPLY_SENTENCE = re.compile(r" ?Opponent replied [a-h][1-8][a-h][1-8][qrbn]?\.")
"""``OPPONENT_REPLY`` as it appears in an observation (a loop that keeps the reply off the real turn drops it)."""
ACTION_PROMPT = "Admissible actions: the legal moves listed above (any legal move in SAN; a check or mate mark is optional)."


def state_key_of(board: chess.Board) -> str:
    """Placement, side to move, castling rights and en passant square: the FEN without its move
    counters, so one position reached at different move numbers is one state."""
    return fen_core(board.fen())


def game_result(board: chess.Board, solver: chess.Color) -> str | None:
    """``win``/``loss`` (checkmate for/against ``solver``), ``draw`` (stalemate, insufficient material,
    claimable threefold repetition or fifty moves: the authors' termination rule) or None (game on)."""
    outcome = board.outcome(claim_draw=True)
    if outcome is None:
        return None
    if outcome.winner is None:
        return "draw"
    return "win" if outcome.winner == solver else "loss"


def termination_text(board: chess.Board) -> str:
    outcome = board.outcome(claim_draw=True)
    return outcome.termination.name.lower().replace("_", " ") if outcome is not None else "game on"
