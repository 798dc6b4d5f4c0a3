"""Throughput of our text envs against the libraries they wrap, printed side by side.

Run from the repository root::

    python benchmarks/envs.py [--seconds S] [--repeats R] [--size N] [--maps K]

Rows (``ops/s``: environment steps per second, or snapshot+restore round trips per second):

* ``frozenlake step``: ``FrozenLakeEnv.step(text)`` against gymnasium's ``FrozenLake-v1`` on the
  same maps, once through ``gymnasium.make`` (with its default wrappers, ``TimeLimit(100)``
  included) and once on the bare ``env.unwrapped``. Every contender replays the same
  pre-generated random action indices (ours gets the text action, gymnasium the int), resets on
  the end of an episode and moves on to the next map; the slip is the default ``(1/3, 1/3)``,
  which is gymnasium's ``is_slippery=True``, and every episode is capped at 100 steps, so the
  dynamics and the episode mix match (the printed reward/step shows it). Resets are inside the
  timed loop for everyone.
* ``frozenlake snapshot+restore``: ``get_state()`` + ``set_state()`` against
  ``copy.deepcopy(env.unwrapped)`` (snapshot) + ``copy.deepcopy(snapshot)`` (restore, keeping the
  snapshot reusable as ``set_state`` does), and against a hand-written save/restore of the
  unwrapped env's ``s``, ``lastaction`` and RNG state (the cheapest thing that is still exact).
* ``chess step``: ``ChessPuzzlesEnv`` replaying the solution of every puzzle in the shipped
  sample (``envs/data/chess_puzzles_sample.csv``), one ``reset`` + solver moves in SAN per
  puzzle, against raw python-chess doing the same logical work: per reset, copy the start board
  and render its legal moves as SAN; per solver move, ``parse_san`` the solver's SAN, compare it
  with the expected move, push it, check for mate (the Lichess "any mate wins" rule), and unless
  the puzzle is over push the opponent's reply from the line and render the legal moves as SAN.
  Ours does that plus what makes it an env: the FEN, the ASCII board, the SAN of the move and of
  the reply, the info dict and the observation text.
* ``chess snapshot+restore``: ``get_state()`` + ``set_state()`` (plain data: root FEN and UCI move
  stack, replayed on restore) against ``board.copy()`` (snapshot) + ``snapshot.copy()``
  (restore), at every position a solver faces in the sample.

Timing: ``time.perf_counter`` around chunks of work (setup between chunks is not timed); each
measurement runs for about ``--seconds`` and the median of ``--repeats`` measurements is
reported; the contenders of a row take turns (A, B, A, B, ...) so machine drift hits all of
them alike. Nothing here asserts on timings; the numbers depend on the machine and its load.
The total run time is about ``10 * seconds * repeats`` plus a few seconds of setup (~55 s at the
defaults). To time a whole command from outside (wall time, peak memory), use a public tool
such as ``/usr/bin/time -v``.
"""

from __future__ import annotations

import argparse
import copy
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# This file is named envs.py: when it runs as a script its own folder comes first on sys.path and
# would shadow the ``envs`` package, so put the repository root there instead.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import chess  # noqa: E402
import gymnasium  # noqa: E402
import numpy as np  # noqa: E402

from envs.chess.data import load_puzzles  # noqa: E402
from envs.chess.env import ChessPuzzlesEnv  # noqa: E402
from envs.frozenlake import ACTIONS, FrozenLakeEnv  # noqa: E402

EPISODE_CAP = 100  # gymnasium's max_episode_steps for FrozenLake-v1; applied to every contender
N_ACTIONS = 1 << 16  # length of the pre-generated action sequence (replayed cyclically)
FL_CHUNK = 1000  # frozenlake steps per timed chunk
SNAP_CHUNK = 200  # snapshot+restore round trips per timed chunk


# --------------------------------------------------------------------------- harness


@dataclass
class Contender:
    """``chunk()`` does some work and returns how many ops it did; ``prepare()`` runs untimed before it."""

    label: str
    chunk: Callable[[], int]
    prepare: Callable[[], None] | None = None


def measure(contender: Contender, seconds: float) -> float:
    """Ops per second over timed chunks adding up to about ``seconds``."""
    timer = time.perf_counter
    elapsed = 0.0
    ops = 0
    while elapsed < seconds:
        if contender.prepare is not None:
            contender.prepare()
        t0 = timer()
        n = contender.chunk()
        elapsed += timer() - t0
        ops += n
    return ops / elapsed


def race(contenders: list[Contender], seconds: float, repeats: int) -> dict[str, float]:
    """Median ops/s per contender; a short warm-up each, then the repeats interleaved A, B, A, B, ..."""
    warmup = min(0.1, seconds / 4)
    for c in contenders:
        measure(c, warmup)
    runs: dict[str, list[float]] = {c.label: [] for c in contenders}
    for _ in range(repeats):
        for c in contenders:
            runs[c.label].append(measure(c, seconds))
    return {label: statistics.median(values) for label, values in runs.items()}


@dataclass
class Row:
    name: str
    ours: float
    baseline: float
    note: str


# --------------------------------------------------------------------------- frozenlake


def frozenlake_contenders(size: int, n_maps: int, seed: int = 0) -> tuple[list[Contender], dict[str, list[float]]]:
    ours_env = FrozenLakeEnv(size=size, num_tasks=n_maps, seed=seed, max_steps=EPISODE_CAP)
    task_ids = [t.task_id for t in ours_env.tasks()]
    maps = [list(t.metadata["map"]) for t in ours_env.tasks()]
    wrapped = [gymnasium.make("FrozenLake-v1", desc=m, is_slippery=True, max_episode_steps=EPISODE_CAP) for m in maps]
    bare = [gymnasium.make("FrozenLake-v1", desc=m, is_slippery=True).unwrapped for m in maps]
    for i, env in enumerate(wrapped + bare):
        env.reset(seed=seed + i)

    rng = np.random.default_rng(seed)
    action_ids = [int(a) for a in rng.integers(0, 4, size=N_ACTIONS)]
    action_texts = [ACTIONS[a] for a in action_ids]
    mask = N_ACTIONS - 1
    stats: dict[str, list[float]] = {}  # label -> [reward sum, steps]

    def ours_factory() -> Callable[[], int]:
        st = {"i": 0, "ep": 0, "reward": 0.0, "steps": 0}
        ours_env.reset(task_ids[0], seed=0)
        stats["ours"] = acc = [0.0, 0]

        def chunk() -> int:
            i, ep, total = st["i"], st["ep"], 0.0
            step, reset = ours_env.step, ours_env.reset
            for _ in range(FL_CHUNK):
                res = step(action_texts[i & mask])
                i += 1
                total += res.reward
                if res.done:  # goal, hole or the 100-step cap
                    ep += 1
                    reset(task_ids[ep % n_maps], seed=ep)
            st["i"], st["ep"] = i, ep
            acc[0] += total
            acc[1] += FL_CHUNK
            return FL_CHUNK

        return chunk

    def gym_factory(label: str, envs: list, capped_by_wrapper: bool) -> Callable[[], int]:
        st = {"i": 0, "ep": 0, "t": 0, "env": envs[0]}
        stats[label] = acc = [0.0, 0]

        def chunk() -> int:
            i, ep, t, env = st["i"], st["ep"], st["t"], st["env"]
            total = 0.0
            step = env.step
            for _ in range(FL_CHUNK):
                _, r, terminated, truncated, _ = step(action_ids[i & mask])
                i += 1
                t += 1
                total += r
                if terminated or truncated or (not capped_by_wrapper and t >= EPISODE_CAP):
                    ep += 1
                    t = 0
                    env = envs[ep % n_maps]
                    env.reset()
                    step = env.step
            st["i"], st["ep"], st["t"], st["env"] = i, ep, t, env
            acc[0] += total
            acc[1] += FL_CHUNK
            return FL_CHUNK

        return chunk

    contenders = [
        Contender("ours", ours_factory()),
        Contender("gym.make", gym_factory("gym.make", wrapped, capped_by_wrapper=True)),
        Contender("unwrapped", gym_factory("unwrapped", bare, capped_by_wrapper=False)),
    ]
    return contenders, stats


def frozenlake_snapshot_contenders(size: int, seed: int = 0) -> list[Contender]:
    ours_env = FrozenLakeEnv(size=size, num_tasks=1, seed=seed, max_steps=EPISODE_CAP)
    task_id = ours_env.tasks()[0].task_id
    rows = list(ours_env.tasks()[0].metadata["map"])
    ours_env.reset(task_id, seed=seed)
    gym_env = gymnasium.make("FrozenLake-v1", desc=rows, is_slippery=True).unwrapped
    gym_env.reset(seed=seed)
    # a few moves in, so the snapshot is of a mid-episode state (any state costs the same here)
    for a in (2, 1):
        if ours_env.step(ACTIONS[a]).done:
            ours_env.reset(task_id, seed=seed)
        if gym_env.step(a)[2]:
            gym_env.reset()

    def ours() -> int:
        get, put = ours_env.get_state, ours_env.set_state
        for _ in range(SNAP_CHUNK):
            put(get())
        return SNAP_CHUNK

    holder = {"env": gym_env}

    def deep() -> int:
        env = holder["env"]
        deepcopy = copy.deepcopy
        for _ in range(SNAP_CHUNK):
            snap = deepcopy(env)
            env = deepcopy(snap)
        holder["env"] = env
        return SNAP_CHUNK

    def manual() -> int:
        env = gym_env
        bitgen = env.np_random.bit_generator
        for _ in range(SNAP_CHUNK):
            snap = (env.s, env.lastaction, bitgen.state)  # .state returns a fresh dict
            env.s, env.lastaction = snap[0], snap[1]
            bitgen.state = snap[2]
        return SNAP_CHUNK

    return [Contender("ours", ours), Contender("deepcopy", deep), Contender("manual", manual)]


# --------------------------------------------------------------------------- chess


@dataclass
class _Replay:
    puzzle_id: str
    start: chess.Board  # the position the solver faces, setup move on the stack
    solver_san: list[str]  # the solver's moves in SAN, in order
    expected: list[chess.Move]  # the solver's moves
    replies: list[chess.Move | None]  # the opponent's reply after each solver move (None after the last)


def _legal_san(board: chess.Board) -> list[str]:
    return sorted(board.san(m) for m in board.legal_moves)


def chess_replays() -> list[_Replay]:
    replays = []
    for p in load_puzzles():
        board = p.start_board()
        moves = [chess.Move.from_uci(u) for u in p.solution]
        solver_san, expected, replies = [], [], []
        for k in range(0, len(moves), 2):
            solver_san.append(board.san(moves[k]))
            expected.append(moves[k])
            board.push(moves[k])
            reply = moves[k + 1] if k + 1 < len(moves) else None
            replies.append(reply)
            if reply is not None:
                board.push(reply)
        replays.append(_Replay(p.puzzle_id, p.start_board(), solver_san, expected, replies))
    return replays


def chess_contenders(replays: list[_Replay]) -> list[Contender]:
    env = ChessPuzzlesEnv()
    # not a timing check: the replay must actually solve every puzzle, or the row measures nothing
    for r in replays:
        env.reset(r.puzzle_id)
        results = [env.step(san) for san in r.solver_san]
        if not (results[-1].won and all(not x.invalid_action for x in results)):
            raise RuntimeError(f"replaying {r.puzzle_id} did not solve it: {results[-1].observation}")

    n = len(replays)
    ours_pos = {"k": 0}

    def ours() -> int:  # one puzzle per chunk: reset + every solver move
        r = replays[ours_pos["k"] % n]
        ours_pos["k"] += 1
        env.reset(r.puzzle_id)
        step = env.step
        for san in r.solver_san:
            step(san)
        return len(r.solver_san)

    raw_pos = {"k": 0}

    def raw() -> int:
        r = replays[raw_pos["k"] % n]
        raw_pos["k"] += 1
        board = r.start.copy()
        _legal_san(board)  # the first observation's legal moves
        for san, expected, reply in zip(r.solver_san, r.expected, r.replies):
            move = board.parse_san(san)
            board.push(move)
            solved = move == expected or board.is_checkmate()
            if not solved:
                raise RuntimeError("raw replay went off the line")
            if reply is None:
                break
            board.push(reply)
            _legal_san(board)
        return len(r.solver_san)

    return [Contender("ours", ours), Contender("raw", raw)]


def chess_snapshot_contenders(replays: list[_Replay]) -> list[Contender]:
    # every position a solver faces: (env snapshot to set up from, the same board)
    env = ChessPuzzlesEnv()
    positions: list[tuple[dict, chess.Board]] = []
    for r in replays:
        env.reset(r.puzzle_id)
        for san in r.solver_san:
            positions.append((env.get_state(), env.board))
            if env.step(san).done:
                break
    n = len(positions)
    ours_pos = {"k": 0}
    raw_pos = {"k": 0, "board": positions[0][1]}

    def ours_prepare() -> None:
        env.set_state(positions[ours_pos["k"] % n][0])
        ours_pos["k"] += 1

    def ours() -> int:
        get, put = env.get_state, env.set_state
        for _ in range(SNAP_CHUNK):
            put(get())
        return SNAP_CHUNK

    def raw_prepare() -> None:
        raw_pos["board"] = positions[raw_pos["k"] % n][1].copy()
        raw_pos["k"] += 1

    def raw() -> int:
        board = raw_pos["board"]
        for _ in range(SNAP_CHUNK):
            snap = board.copy()
            board = snap.copy()
        raw_pos["board"] = board
        return SNAP_CHUNK

    return [Contender("ours", ours, ours_prepare), Contender("raw", raw, raw_prepare)]


# --------------------------------------------------------------------------- main


def _fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def print_table(rows: list[Row]) -> None:
    headers = ("name", "ours ops/s", "baseline ops/s", "ratio (ours/baseline)")
    cells = [(r.name, _fmt_rate(r.ours), _fmt_rate(r.baseline), f"{r.ours / r.baseline:.2f}x") for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]

    def line(values: tuple[str, ...]) -> str:
        return " | ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(values, widths)))

    print(line(headers))
    print("-+-".join("-" * w for w in widths))
    for c in cells:
        print(line(c))
    print()
    for r in rows:
        print(f"- {r.name}: {r.note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one timed measurement (default 1.0)")
    parser.add_argument(
        "--repeats", type=int, default=5, help="measurements per contender; the median is shown (default 5)"
    )
    parser.add_argument("--size", type=int, default=4, help="FrozenLake map size (default 4)")
    parser.add_argument("--maps", type=int, default=8, help="number of FrozenLake maps cycled through (default 8)")
    parser.add_argument("--quick", action="store_true", help="seconds, not minutes: tiny sizes, one repeat; checks it runs (CI)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.repeats, args.maps = 0.05, 1, 2
    if args.seconds <= 0 or args.repeats < 1 or args.size < 2 or args.maps < 1:
        parser.error("need --seconds > 0, --repeats >= 1, --size >= 2, --maps >= 1")

    started = time.perf_counter()
    print(
        f"python {platform.python_version()}, gymnasium {gymnasium.__version__}, python-chess {chess.__version__}, "
        f"numpy {np.__version__}; {args.repeats} x {args.seconds:g} s per contender, median shown"
    )
    rows: list[Row] = []

    fl, fl_stats = frozenlake_contenders(args.size, args.maps)
    res = race(fl, args.seconds, args.repeats)
    rps = {label: (acc[0] / acc[1] if acc[1] else float("nan")) for label, acc in fl_stats.items()}
    same = (
        f"{args.maps} random {args.size}x{args.size} maps, same action sequence, slip 1/3-1/3, {EPISODE_CAP}-step cap, "
        f"resets timed; reward/step ours {rps['ours']:.4f}, gym.make {rps['gym.make']:.4f}, "
        f"unwrapped {rps['unwrapped']:.4f}"
    )
    rows.append(Row("frozenlake step vs gym.make", res["ours"], res["gym.make"],
                    "FrozenLakeEnv.step(text) vs gymnasium.make('FrozenLake-v1').step(int), wrappers included; "
                    + same))
    rows.append(Row("frozenlake step vs unwrapped", res["ours"], res["unwrapped"],
                    "the same ours figure vs gymnasium's bare env (env.unwrapped.step), i.e. without wrapper overhead"))

    res = race(frozenlake_snapshot_contenders(args.size), args.seconds, args.repeats)
    rows.append(Row("frozenlake snapshot+restore vs deepcopy", res["ours"], res["deepcopy"],
                    "get_state()+set_state() vs copy.deepcopy(env.unwrapped) + copy.deepcopy(snapshot)"))
    rows.append(Row("frozenlake snapshot+restore vs manual", res["ours"], res["manual"],
                    "the same ours figure vs saving/restoring the unwrapped env's s, lastaction and "
                    "np_random.bit_generator.state by hand"))

    replays = chess_replays()
    n_moves = sum(len(r.solver_san) for r in replays)
    res = race(chess_contenders(replays), args.seconds, args.repeats)
    rows.append(Row("chess step (puzzle replay)", res["ours"], res["raw"],
                    f"ChessPuzzlesEnv reset+step(SAN) vs raw python-chess (board copy + legal SAN per reset; "
                    f"parse_san, compare with expected, push, is_checkmate, push reply, legal SAN per step) over "
                    f"the {len(replays)} sample puzzles ({n_moves} solver moves); ops = solver moves, resets timed"))

    res = race(chess_snapshot_contenders(replays), args.seconds, args.repeats)
    rows.append(Row("chess snapshot+restore", res["ours"], res["raw"],
                    "get_state()+set_state() (root FEN + UCI stack, replayed) vs board.copy() + snapshot.copy(), "
                    "at every position a solver faces in the sample"))

    print()
    print_table(rows)
    print(f"\ntotal {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
