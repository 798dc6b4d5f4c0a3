"""Cost of SKL-RL's localized parallel simulation per real step, against a plain step.

Run from the repository root::

    python benchmarks/skl_simulation.py [--repeats R] [--episodes K] [--n N] [--horizons 2 3]

For every (env, N, H) row the same real episodes are played twice, taking turns (plain, SKL,
plain, SKL, ...) so machine drift hits both alike:

* plain: ``env.step(real action)`` only;
* SKL:   ``simulate_branches(env, policy, N, H)`` -- snapshot (``get_state``), N branches of up to H
  steps each (restore the root or a reseeded copy of it, ask the behaviour policy, ``step``),
  restore the root -- and then the same ``env.step(real action)``.

Reported per real step (median over ``--repeats`` measurements): µs of a plain step, µs of an SKL
step, their ratio, the simulated steps actually taken (branches stop early at a terminal state, so
this is at most N·H) and the nominal ``1 + N·H`` a simulator that cost exactly one step per step
would give. Resets are outside the timed region.

Workloads:

* FrozenLake: 4x4 and 8x8 random maps, slip (1/3, 1/3), ``max_steps=100``; real actions are
  pre-drawn uniformly random directions (an episode runs until G, a hole or the step limit); the
  behaviour policy is ``RandomPolicy`` (uniform over ``admissible_actions()``).
* ChessPuzzles: the 40 shipped sample puzzles (``--chess-rounds`` passes); the real actions replay each puzzle's solution (SAN);
  the behaviour policy is ``MixedBehaviourPolicy(1/3)`` over a STAND-IN engine (first legal move
  in UCI order, no Stockfish), wrapped in ``BoardPolicy`` -- so the numbers are the simulation
  machinery's own cost; a real engine adds its search time per simulated move on top.

No assertions: the numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

# benchmarks/envs.py would shadow the ``envs`` package when this runs as a script from this
# folder: put the repository root first instead.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import chess  # noqa: E402

from envs.chess.env import ChessPuzzlesEnv  # noqa: E402
from envs.chess.policies import MixedBehaviourPolicy  # noqa: E402
from envs.frozenlake import ACTIONS, FrozenLakeEnv  # noqa: E402
from skl_verl.skl.simulation import BoardPolicy, RandomPolicy, simulate_branches  # noqa: E402


class FirstLegalMoveStandInEngine:
    """BENCHMARK STAND-IN for Stockfish: the first legal move in UCI order (no search)."""

    def best_move(self, board: chess.Board) -> chess.Move:
        return min(board.legal_moves, key=lambda m: m.uci())


Episode = tuple[str, int | None, list[str]]  # task id, reset seed, real actions


def _frozenlake_workload(size: int, episodes: int) -> tuple[FrozenLakeEnv, list[Episode]]:
    env = FrozenLakeEnv(size=size, num_tasks=min(episodes, 50), seed=0, slip=(1 / 3, 1 / 3), max_steps=100)
    rng = random.Random(0)
    tasks = env.tasks()
    work = []
    for k in range(episodes):
        task_id = tasks[k % len(tasks)].task_id
        env.reset(task_id, seed=k)
        actions = []
        while True:  # pre-play so that both modes replay exactly the same real actions
            action = rng.choice(ACTIONS)
            actions.append(action)
            if env.step(action).done:
                break
        work.append((task_id, k, actions))
    return env, work


def _chess_workload(rounds: int) -> tuple[ChessPuzzlesEnv, list[Episode]]:
    env = ChessPuzzlesEnv()
    work = []
    for spec in env.tasks() * rounds:
        puzzle = env.puzzle(spec.task_id)
        board = puzzle.start_board()
        sans = []
        for i, uci in enumerate(puzzle.solution):
            move = chess.Move.from_uci(uci)
            if i % 2 == 0:
                sans.append(board.san(move))
            board.push(move)
        work.append((spec.task_id, None, sans))
    return env, work


def _measure(env, work: list[Episode], simulate: Callable | None) -> tuple[float, int, int]:
    """Seconds spent in the real steps (plus simulations), real steps, simulated steps."""
    total = 0.0
    real = simulated = 0
    perf = time.perf_counter
    for task_id, seed, actions in work:
        env.reset(task_id, seed=seed)
        if simulate is None:
            t0 = perf()
            for action in actions:
                env.step(action)
            total += perf() - t0
        else:
            t0 = perf()
            for action in actions:
                branches = simulate(env)
                simulated += sum(len(b.steps) for b in branches)
                env.step(action)
            total += perf() - t0
        real += len(actions)
    return total, real, simulated


def bench_row(name: str, env, work: list[Episode], policy, n: int, horizon: int, repeats: int) -> dict:
    def simulate(e):
        return simulate_branches(e, policy, n, horizon, seed=0)

    _measure(env, work[:5], None)  # warm caches (observation cache, imports)
    _measure(env, work[:5], simulate)
    plain, skl, sims = [], [], []
    for _ in range(repeats):
        t, real, _ = _measure(env, work, None)
        plain.append(t / real)
        t, real, simulated = _measure(env, work, simulate)
        skl.append(t / real)
        sims.append(simulated / real)
    p, s = statistics.median(plain), statistics.median(skl)
    return {
        "env": name,
        "N": n,
        "H": horizon,
        "real_steps": real,
        "plain_us": p * 1e6,
        "skl_us": s * 1e6,
        "ratio": s / p,
        "sim_steps": statistics.median(sims),
        "nominal": 1 + n * horizon,
    }


def components(name: str, env, work: list[Episode], repeats: int) -> str:
    """Median µs of ``get_state``, ``set_state`` and one ``step`` at the first real state of each episode."""
    roots = []
    for task_id, seed, actions in work[:40]:
        env.reset(task_id, seed=seed)
        roots.append((env.get_state(), actions[0]))
    perf = time.perf_counter
    get_t, set_t, step_t = [], [], []
    for _ in range(repeats):
        t0 = perf()
        for snap, _ in roots:
            env.set_state(snap)
        t1 = perf()
        for _ in roots:
            env.get_state()
        t2 = perf()
        for snap, action in roots:
            env.set_state(snap)
            env.step(action)
        t3 = perf()
        k = len(roots)
        set_t.append((t1 - t0) / k)
        get_t.append((t2 - t1) / k)
        step_t.append((t3 - t2) / k - (t1 - t0) / k)
    med = lambda xs: statistics.median(xs) * 1e6  # noqa: E731
    return f"{name:<16} get_state {med(get_t):8.2f} µs   set_state {med(set_t):8.2f} µs   step {med(step_t):8.2f} µs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--episodes", type=int, default=300, help="FrozenLake episodes per measurement")
    parser.add_argument("--chess-rounds", type=int, default=4, help="passes over the 40 sample puzzles per measurement")
    parser.add_argument("--n", type=int, default=3)
    parser.add_argument("--horizons", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--quick", action="store_true", help="seconds, not minutes: tiny sizes, one repeat; checks it runs (CI)")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.episodes, args.chess_rounds, args.horizons = 1, 10, 1, [2]

    print(f"python {platform.python_version()} on {platform.machine()} ({platform.processor() or 'cpu'}); "
          f"median of {args.repeats} repeats; times per REAL step")
    rows, parts = [], []
    for size in (4, 8):
        env, work = _frozenlake_workload(size, args.episodes)
        for h in args.horizons:
            rows.append(bench_row(f"frozenlake {size}x{size}", env, work, RandomPolicy(0), args.n, h, args.repeats))
        parts.append(components(f"frozenlake {size}x{size}", env, work, args.repeats))
    env, work = _chess_workload(args.chess_rounds)
    for h in args.horizons:
        policy = BoardPolicy(MixedBehaviourPolicy(1 / 3, seed=0, engine=FirstLegalMoveStandInEngine()))
        rows.append(bench_row("chess_puzzles", env, work, policy, args.n, h, args.repeats))
    parts.append(components("chess_puzzles", env, work, args.repeats))

    header = f"{'env':<16} {'N':>2} {'H':>2} {'real steps':>10} {'plain µs':>9} {'SKL µs':>9} {'ratio':>7} {'sim steps':>9} {'1+N·H':>6}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['env']:<16} {r['N']:>2} {r['H']:>2} {r['real_steps']:>10} {r['plain_us']:>9.2f} {r['skl_us']:>9.2f} "
            f"{r['ratio']:>6.1f}x {r['sim_steps']:>9.2f} {r['nominal']:>6}"
        )
    print()
    print("components (one simulation = 1 get_state + N+1 set_state + the simulated steps and policy calls):")
    for line in parts:
        print("  " + line)
    print("ratio = (snapshot + simulated steps + restores + real step) / plain real step; "
          "'sim steps' = simulated steps actually taken per real step (<= N·H: branches stop at terminal states).")


if __name__ == "__main__":
    main()
