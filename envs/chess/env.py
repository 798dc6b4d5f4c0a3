"""``ChessPuzzlesEnv`` (registered as ``chess_puzzles``): puzzles from ``envs.chess.data`` as text episodes.

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
tells the solver which move mates) and at most ``MAX_SHOWN_MOVES`` (30, ``envs.chess.board``) of
them, the first in python-chess's generation order, as the authors do; ``admissible_actions()``
holds all of them (sorted, marks stripped) and ``action_prompt()`` points at the observation's list
instead of repeating it.

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
invalid action or once a game has left the line), ``opponent_reply`` (SAN or None), ``opponent_uci`` (the same
move in UCI, or None), ``fen`` (after
the step) and ``puzzle_id``; game mode adds ``on_line``, ``step_limit`` and ``result`` (``win``,
``loss``, ``draw`` or None while the game goes on).
``state_key()`` is the FEN without its half-move and full-move counters, so transpositions reached
at different move numbers share one key. ``get_state``/``set_state`` snapshot the exact position,
move history, place in the puzzle line and (game mode) the opponent's generator as plain
(picklable) data; the generator is numpy's PCG64 under ``rng_state``, the layout
``skl_verl.skl.simulation`` re-seeds per branch, so simulated branches meet independent random
opponents. ``get_state`` also works after the episode has ended.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import Any

import chess
import numpy as np

from envs.base import (
    EnvNotResetError,
    InvalidSnapshotError,
    StepResult,
    TaskSpec,
    TextEnv,
    UnknownTaskError,
    checked_snapshot,
)
from envs.chess.board import (
    ACTION_PROMPT,
    ASK_FOR_MOVE,
    OPPONENT_REPLY,
    color_name,
    describe_position,
    game_result,
    legal_moves_san,
    parse_move,
    state_key_of,
    termination_text,
)
from envs.chess.data import SAMPLE_CSV, ChessPuzzle, head_split, load_puzzles, train_test_split
from envs.chess.engines import StockfishPolicy

FAMILY = "chess_puzzles"
MODES = ("puzzle", "game")
OPPONENTS = ("random", "first_legal", "stockfish", "puzzle_line")
SPLIT_MODES = ("hash", "head")
INVALID_MOVE_REWARD = -1.01
"""A game lost on an invalid move: the loss (-1) plus the format penalty 0.01 of the authors' SKL-RL
chess scripts (``act_action_format_penality=0.01``; their loop ends the game when no valid move is found)."""


class ChessPuzzlesEnv(TextEnv):
    """Chess puzzles as a text env; see the module docstring for modes, actions and rewards."""

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
        split_mode: str = "hash",
        mode: str = "puzzle",
        opponent: str = "random",
        off_line_opponent: str = "random",
        max_steps: int = 10,
        stockfish_path: str | None = None,
        stockfish_depth: int = 8,
        stockfish_skill_level: int | None = None,
        invalid_move_ends: bool | None = None,
        bad_rows: str = "skip",
    ) -> None:
        """``split`` in (None, "train", "test") keeps one side of the split of the rating-filtered puzzles:
        ``split_mode`` ``hash`` (``train_test_split``: an id's side from its hash, stable when the file changes) or
        ``head`` (``head_split``: test = the first ``test_fraction`` of the file, in its order, as the authors).
        ``opponent``, ``off_line_opponent``, ``max_steps``, ``invalid_move_ends``
        (None: on, the authors' rule) and the ``stockfish_*`` options belong to ``mode="game"``;
        ``wrong_move_ends`` to ``mode="puzzle"``."""
        if mode not in MODES:
            raise ValueError(f"{self.name}: mode must be one of {MODES}, got {mode!r}")
        if split_mode not in SPLIT_MODES:
            raise ValueError(f"{self.name}: split_mode must be one of {SPLIT_MODES}, got {split_mode!r}")
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
        puzzles = load_puzzles(csv_path, max_rating=max_rating, min_rating=min_rating, bad_rows=bad_rows)
        if split is not None:
            if split not in ("train", "test"):
                raise ValueError(f"split must be None, 'train' or 'test', got {split!r}")
            ids = [p.puzzle_id for p in puzzles]
            train, test = (head_split(ids, test_fraction=test_fraction) if split_mode == "head"
                           else train_test_split(ids, test_fraction=test_fraction, seed=split_seed))
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
            return f"Your moves left: {left}. {ASK_FOR_MOVE}"
        return ASK_FOR_MOVE

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
            "opponent_uci": None,
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
                    f"{san} is not the puzzle's move; try again.\n{describe_position(board)}\n{ASK_FOR_MOVE}"
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
            f"Correct: {san}. Opponent replied {reply_san} ({reply.uci()}).\n{describe_position(board)}\n{ASK_FOR_MOVE}"
        )
        return StepResult(
            observation, 0.0, False,
            self._info(move=san, expected_move=expected_san, opponent_reply=reply_san, opponent_uci=reply.uci()),
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
        reply_san = reply_uci = None
        if result is None:
            reply = self._opponent_move(board, puzzle)
            reply_san, reply_uci = board.san(reply), reply.uci()
            board.push(reply)
            self._follow_line(puzzle, reply)
            result = game_result(board, self._solver_color(puzzle))
        step_limit = result is None and self._steps >= self.max_steps
        self._done = result is not None or step_limit
        self._won = result == "win"
        reward = {"win": 1.0, "loss": -1.0}.get(result, 0.0)
        played = f"You played {san}."
        if reply_uci is not None:
            played += " " + OPPONENT_REPLY.format(uci=reply_uci)
        if result == "win":
            observation = f"{played} Checkmate: you won the game.\nFEN: {board.fen()}"
        elif result == "loss":
            observation = f"{played} Checkmate: you lost the game.\nFEN: {board.fen()}"
        elif result == "draw":
            observation = f"{played} The game is drawn ({termination_text(board)}).\nFEN: {board.fen()}"
        elif step_limit:
            observation = f"{played} The limit of {self.max_steps} moves is reached; the game ends undecided.\nFEN: {board.fen()}"
        else:
            observation = f"{played}\n{describe_position(board)}\n{self._ask()}"
        info = self._info(
            won=self._won, wrong_move=wrong, move=san, expected_move=expected_san, opponent_reply=reply_san,
            opponent_uci=reply_uci, step_limit=step_limit, result=result,
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
