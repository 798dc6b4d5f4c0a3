"""SKL-RL simulations running concurrently, each on its own env worker, with real Stockfish moves:
every simulation succeeds (no shared engine, no cancelled searches) and no engine outlives its pool."""

import asyncio
import os

import pytest

from envs.chess.engines import STOCKFISH_POOL
from skl_verl.rollout.env_runtime import EnvWorkerClient, guarded_call
from skl_verl.skl import rl_loop
from skl_verl.skl.simulation import simulate_branches

STOCKFISH = "/usr/games/stockfish"
CONCURRENT = 12


def stockfish_pids():
    pids = set()
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if handle.read().split(b"\0")[0].endswith(b"stockfish"):
                    pids.add(int(pid))
        except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
            pass
    return pids


@pytest.mark.skipif(not os.access(STOCKFISH, os.X_OK), reason="stockfish is not installed (apt-get install stockfish)")
def test_concurrent_simulations_with_stockfish_all_succeed_and_close_their_engines():
    STOCKFISH_POOL.close()
    started, before = STOCKFISH_POOL.started, stockfish_pids()
    envs = [EnvWorkerClient.for_env("chess_puzzles", {}) for _ in range(CONCURRENT)]

    async def simulate(env, i):
        task = (await env.call("tasks", timeout_s=60))[i].task_id
        await guarded_call(env.reset, task, seed=i, timeout_s=60)
        policy = rl_loop.behaviour_policy("expert_mix", seed=i, expert_rate=1.0, engine_path=STOCKFISH)
        root = await guarded_call(env.state_key, timeout_s=60)
        branches = await guarded_call(simulate_branches, env, policy, 2, 2, i, timeout_s=60)
        assert await guarded_call(env.state_key, timeout_s=60) == root  # restored
        return branches

    async def main():
        return await asyncio.gather(*(simulate(env, i) for i, env in enumerate(envs)))

    results = asyncio.run(main())
    assert all(len(branches) == 2 and all(b.steps for b in branches) for branches in results)
    engines = STOCKFISH_POOL.started - started
    assert 1 <= engines <= CONCURRENT and STOCKFISH_POOL.idle_count() == engines
    STOCKFISH_POOL.close()
    for env in envs:
        env.close()
    assert stockfish_pids() - before == set()
