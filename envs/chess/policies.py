"""Behaviour policies that pick a chess move from any board, for SKL-RL's localized simulations.

A policy maps a board to a move in SAN; ``skl_verl.skl.simulation.BoardPolicy`` adapts it to
``simulate_branches``, which rolls it out in ``ChessPuzzlesEnv`` from a snapshot and restores the env.
"""

from __future__ import annotations

import random

import chess

from envs.chess.engines import MoveEngine, StockfishPolicy


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
