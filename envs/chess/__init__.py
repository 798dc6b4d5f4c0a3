"""ChessPuzzles: Lichess-style tactical puzzles on python-chess (paper App. G.2), by concern.

* ``envs.chess.data``: the puzzle CSV (its accepted forms), validation, rating filter, train/test split;
* ``envs.chess.board``: one position as text and rules: reading a move, listing legal moves,
  drawing the board, the state key and a game's result;
* ``envs.chess.env``: ``ChessPuzzlesEnv``, registered as ``chess_puzzles`` (episodes, modes, rewards, snapshots);
* ``envs.chess.engines``: Stockfish (``StockfishPolicy``), the engine pool concurrent simulations share;
* ``envs.chess.policies``: behaviour policies for SKL-RL's simulations (``MixedBehaviourPolicy``).

SKL-RL rolls these policies out through ``skl_verl.skl.simulation.simulate_branches``, which
snapshots and restores the env (``get_state``/``set_state``).
"""

try:
    import chess  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the install
    from envs.base import DependencyMissingError

    # Checked once here so every chess module fails with an install hint, not a bare ImportError.
    raise DependencyMissingError("envs.chess needs python-chess: pip install chess") from exc
