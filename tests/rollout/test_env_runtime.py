"""The env runtime: envs in worker processes, every call guarded, failures flagged, nothing leaked."""

import asyncio
import os
import signal
import time

import pytest

from envs import ENV_CLASSES
from skl_verl.rollout.env_pool import EnvPool
from skl_verl.rollout.env_runtime import EnvCallFailed, EnvConfigError, EnvWorkerClient, guarded_call

OPEN_MAP = ["SFF", "FHF", "FFG"]
LAKE = {"maps": [OPEN_MAP], "slip": [0.0, 0.0], "max_steps": 10}
TASK = "frozenlake-s3-0000"
WIN = ["right", "right", "down", "down"]


@pytest.fixture(autouse=True)
def fault_env_classes(monkeypatch):
    monkeypatch.setitem(ENV_CLASSES, "faulty_frozenlake", "fault_envs:FaultyFrozenLake")
    monkeypatch.setitem(ENV_CLASSES, "none_reward_frozenlake", "fault_envs:NoneRewardFrozenLake")


def client(**fault):
    return EnvWorkerClient.for_env("faulty_frozenlake", {**LAKE, **fault})


def dies(pid, within_s=5.0):
    """The process is gone (or a zombie) within ``within_s``: a SIGKILL is delivered asynchronously, so a
    process killed a moment ago may still be running when the killer returns."""
    deadline = time.monotonic() + within_s
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead too
    except FileNotFoundError:
        return False


async def play(env, actions, timeout_s=5.0):
    """reset, then ``actions``, every env call guarded; everything the loop would have seen."""
    observation, _ = await guarded_call(env.reset, TASK, seed=0, timeout_s=timeout_s)
    seen = [observation, await guarded_call(env.admissible_actions, timeout_s=timeout_s)]
    for action in actions:
        result = await guarded_call(env.step, action, timeout_s=timeout_s)
        seen += [result, await guarded_call(env.state_key, timeout_s=timeout_s)]
        if result.done:
            break
        seen.append(await guarded_call(env.admissible_actions, timeout_s=timeout_s))
    return seen


REASONS = {
    "raise": "raised RuntimeError: injected fault in",
    "hang": "timed out after 1 s",
    "bad_result": "returned an invalid result",
    "system_exit": "raised SystemExit: 3",
    "process_exit": "lost its worker process (exit code 7)",
}


@pytest.mark.parametrize("call", ["reset", "step", "admissible_actions", "state_key"])
def test_a_fault_in_any_call_position_fails_that_call_kills_its_worker_and_a_fresh_worker_plays_on(call, tmp_path):
    async def main():
        reference = await play(client(), WIN)
        assert reference[-2].won
        for kind, reason in REASONS.items():
            env = client(fault_call=call, fault_kind=kind, fault_at=1 if call == "reset" else 2,
                         once_file=str(tmp_path / f"{call}-{kind}"))
            started = time.monotonic()
            with pytest.raises(EnvCallFailed) as failure:
                await play(env, WIN, timeout_s=1.0)
            assert failure.value.call.startswith(f"env.{call}("), str(failure.value)
            assert reason in str(failure.value), str(failure.value)
            assert time.monotonic() - started < 4.0
            assert env.worker_pid is None
            # The same client (a SkillRise lease going on to its next task) gets a fresh worker.
            assert await play(env, WIN) == reference
            assert env.workers_started == 2
            env.close()

    asyncio.run(main())


def test_results_that_break_the_protocol_are_failures(monkeypatch):
    async def main():
        for shape, reason in [("none_reward", "reward is None"), ("tuple", "returned tuple, not StepResult"),
                              ("none_info", "info is NoneType"), ("none_observation", "observation is NoneType"),
                              # Each lost the whole batch before (#24 item 4): OverflowError, TypeError, ValueError.
                              ("huge_reward", "0000000, not a float"),
                              ("lone_surrogate", "observation holds text no encoder takes (a lone surrogate)"),
                              ("won_array", "info['won'] is ndarray, not a bool")]:
            env = EnvWorkerClient.for_env("none_reward_frozenlake", {**LAKE, "shape": shape})
            with pytest.raises(EnvCallFailed, match="env.step.'right'. returned an invalid result") as failure:
                await play(env, WIN)
            assert reason in str(failure.value)
            env.close()
        env = client(fault_call="step", fault_kind="bad_result")
        with pytest.raises(EnvCallFailed, match="reward is nan, not finite"):
            await play(env, WIN)
        env.close()

    asyncio.run(main())


def test_a_step_that_outlives_its_timeout_never_moves_the_next_episode():
    """The zombie step of the issue: task 0's step times out but finishes later and moved the player
    of task 1. Here the worker running it is killed, so the next episode is untouched."""
    async def main():
        env = client(fault_call="step", fault_kind="slow_then_move", fault_at=1, hang_s=1.0)
        await guarded_call(env.reset, TASK, seed=0, timeout_s=5)
        with pytest.raises(EnvCallFailed, match="timed out after 0.3 s"):
            await guarded_call(env.step, "right", timeout_s=0.3)
        await guarded_call(env.reset, TASK, seed=0, timeout_s=5)
        start = await guarded_call(env.state_key, timeout_s=5)
        await asyncio.sleep(1.5)  # the abandoned step would have finished by now
        assert await guarded_call(env.state_key, timeout_s=5) == start
        env.close()

    asyncio.run(main())


def test_a_thread_that_outlives_its_timeout_is_refused_and_its_workers_killed():
    env = client()
    calls_after_timeout = []

    def slow_simulation(env):
        env.step("right")
        time.sleep(1.0)
        try:
            env.step("right")
        except EnvCallFailed as exc:
            calls_after_timeout.append(str(exc))

    async def main():
        await guarded_call(env.reset, TASK, seed=0, timeout_s=5)
        first = env.worker_pid
        with pytest.raises(EnvCallFailed, match=r"slow_simulation\(...\) timed out after 0.3 s"):
            await guarded_call(slow_simulation, env, timeout_s=0.3)
        assert dies(first)
        await guarded_call(env.reset, TASK, seed=0, timeout_s=5)  # the episode's next task, new worker
        start = await guarded_call(env.state_key, timeout_s=5)
        await asyncio.sleep(1.2)
        assert await guarded_call(env.state_key, timeout_s=5) == start
        assert calls_after_timeout and "refused" in calls_after_timeout[0]

    asyncio.run(main())
    env.close()


def test_an_env_error_inside_a_simulation_fails_the_call_but_a_policy_error_is_the_callers():
    env = client(fault_call="get_state", fault_kind="raise")

    def simulation(env):
        return env.get_state()

    def bad_policy(env):
        raise KeyError("policy bug")

    async def main():
        await guarded_call(env.reset, TASK, seed=0, timeout_s=5)
        with pytest.raises(KeyError):  # the env is fine: the caller decides (SKL-RL: "simulation unavailable")
            await guarded_call(bad_policy, env, timeout_s=5)
        with pytest.raises(EnvCallFailed, match=r"simulation\(...\) failed: env.get_state\(\) raised RuntimeError"):
            await guarded_call(simulation, env, timeout_s=5)

    asyncio.run(main())
    env.close()


def test_sync_calls_on_the_event_loop_thread_are_refused_and_allowed_elsewhere():
    env = client()

    async def main():
        await guarded_call(env.reset, TASK, seed=0, timeout_s=5)
        with pytest.raises(RuntimeError, match="would block the event loop"):
            env.state_key()

    asyncio.run(main())
    assert env.state_key().startswith("SFF/FHF/FFG")  # no loop running here
    assert env.position == (0, 0)  # a public attribute beyond the protocol, read from the worker
    env.close()


def test_a_misconfigured_env_stops_the_run_instead_of_flagging_samples():
    env = client(fault_kind="no such kind")

    async def main():
        with pytest.raises(EnvConfigError, match="could not build the env .ValueError: fault_call"):
            await guarded_call(env.reset, TASK, timeout_s=5)

    asyncio.run(main())
    with pytest.raises(ValueError, match="unknown environment"):
        EnvWorkerClient.for_env("no_such_env", {})


def test_killing_a_worker_kills_the_envs_own_processes_and_close_survives_a_hanging_close():
    async def main():
        env = client(spawn_child=True, fault_call="step", fault_kind="hang")
        await guarded_call(env.reset, TASK, seed=0, timeout_s=5)
        child = await env.call("getattr", "child_pid", timeout_s=5)
        assert alive(child)
        with pytest.raises(EnvCallFailed):
            await guarded_call(env.step, "right", timeout_s=0.3)
        assert dies(child)  # like a JVM or a Stockfish engine: gone with its worker

        env = client(spawn_child=True, fault_call="close", fault_kind="hang")
        await guarded_call(env.reset, TASK, seed=0, timeout_s=5)
        worker, child = env.worker_pid, await env.call("getattr", "child_pid", timeout_s=5)
        return env, worker, child

    env, worker, child = asyncio.run(main())
    started = time.monotonic()
    env.close()
    assert time.monotonic() - started < 8.0
    assert dies(worker) and dies(child)


def test_an_env_child_in_its_own_session_dies_with_its_worker():
    """A child that started its own session is out of the worker's process group: killed as a descendant."""
    async def main():
        env = client(spawn_child="own_session", fault_call="step", fault_kind="hang")
        await guarded_call(env.reset, TASK, seed=0, timeout_s=5)
        child = await env.call("getattr", "child_pid", timeout_s=5)
        assert alive(child) and os.getpgid(child) != env.worker_pid
        with pytest.raises(EnvCallFailed):
            await guarded_call(env.step, "right", timeout_s=0.3)
        return child

    assert dies(asyncio.run(main()))


def test_a_worker_that_exits_on_its_own_stays_unreaped_until_its_group_is_killed():
    """The worker's pid is its process-group id: reaping it before ``killpg`` would let that pid be
    recycled by an unrelated process (another run's Ray worker) which the kill would then hit."""
    async def main():
        env = client(spawn_child=True, fault_call="step", fault_kind="process_exit")
        await guarded_call(env.reset, TASK, seed=0, timeout_s=5)
        worker, child = env._worker, await env.call("getattr", "child_pid", timeout_s=5)
        assert worker.exit_status() is None
        worker.conn.send((-1, "step", ("right",), {}))  # outside the client: nothing reaps or kills yet
        assert worker.exit_status(timeout_s=5) == 7
        assert os.path.exists(f"/proc/{worker.pid}") and alive(child)  # a zombie holds the pid; the env's child runs
        with pytest.raises(EnvCallFailed, match=r"exit code 7"):
            await guarded_call(env.step, "right", timeout_s=5)
        return worker, child

    worker, child = asyncio.run(main())
    assert dies(child) and not os.path.exists(f"/proc/{worker.pid}")


def test_a_worker_killed_between_calls_fails_the_next_call_naming_it():
    """Replaced silently, the fresh, never-reset env answered ``state_key`` and the failure surfaced later as
    "step before reset" (#24 item 8). The call after the loss fails; the one after that starts afresh."""
    async def main():
        env = client()
        await guarded_call(env.reset, TASK, seed=0, timeout_s=5)
        os.kill(env.worker_pid, signal.SIGKILL)
        assert env._worker.exit_status(timeout_s=5) == -signal.SIGKILL
        with pytest.raises(EnvCallFailed, match=r"state_key\(\) lost its worker process between calls \(killed by signal 9\)"):
            await guarded_call(env.state_key, timeout_s=5)
        await guarded_call(env.reset, TASK, seed=0, timeout_s=5)  # a new episode on a fresh worker
        assert await guarded_call(env.state_key, timeout_s=5)
        env.close()

    asyncio.run(main())


def test_pool_reuses_workers_and_recycles_them_after_max_leases():
    pool = EnvPool(max_leases=2)

    async def lease_and_play():
        with pool.lease("faulty_frozenlake", LAKE) as env:
            await play(env, WIN)
            return env, env.worker_pid

    first, pid1 = asyncio.run(lease_and_play())
    second, pid2 = asyncio.run(lease_and_play())
    assert second is first and pid2 == pid1
    third, pid3 = asyncio.run(lease_and_play())
    assert third is not first and pid3 != pid1
    deadline = time.monotonic() + 10
    while alive(pid1) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert dies(pid1)
    pool.close()
    assert dies(pid3)


def test_episodes_in_separate_workers_run_in_parallel():
    envs = [client(fault_call="step", fault_kind="slow_then_move", fault_at=1, hang_s=1.0) for _ in range(4)]

    async def one(env):
        await guarded_call(env.reset, TASK, seed=0, timeout_s=10)
        return await guarded_call(env.step, "right", timeout_s=10)

    async def main():
        for env in envs:  # start the workers first
            await guarded_call(env.reset, TASK, timeout_s=30)
        return await asyncio.gather(*(one(env) for env in envs))

    results = asyncio.run(main())
    assert all(r.info["position"] == (0, 1) for r in results)
    # parallel: every worker was still asleep when the last one started sleeping (an order, not a timing)
    starts, ends = zip(*(r.info["slept"] for r in results))
    assert max(starts) < min(ends), f"the four sleeps did not overlap: {sorted(zip(starts, ends))}"
    for env in envs:
        env.close()


def test_reading_an_attribute_the_env_lacks_is_an_attribute_error_not_a_failure():
    env = client()
    env.tasks()
    pid = env.worker_pid
    assert getattr(env, "done", "absent") == "absent"
    assert env.worker_pid == pid
    env.close()


def test_a_cancelled_error_raised_inside_a_simulation_is_a_failure_not_a_cancellation():
    """python-chess raised CancelledError in simulations sharing one engine; it escaped as if the
    episode itself had been cancelled. Now it is a failed call."""
    def simulation():
        raise asyncio.CancelledError("engine command cancelled")

    def exiting():
        raise SystemExit(2)

    async def main():
        with pytest.raises(EnvCallFailed, match=r"simulation\(...\) raised CancelledError"):
            await guarded_call(simulation, timeout_s=5)
        with pytest.raises(EnvCallFailed, match=r"exiting\(...\) raised SystemExit: 2"):
            await guarded_call(exiting, timeout_s=5)

    asyncio.run(main())


def test_an_env_in_this_process_is_guarded_too():
    from fault_envs import FaultyFrozenLake

    async def main():
        env = FaultyFrozenLake(fault_call="step", fault_kind="system_exit", **LAKE)
        await guarded_call(env.reset, TASK, timeout_s=5)
        with pytest.raises(EnvCallFailed, match=r"env.step\('right'\) raised SystemExit: 3"):
            await guarded_call(env.step, "right", timeout_s=5)
        env = FaultyFrozenLake(fault_call="step", fault_kind="bad_result", **LAKE)
        await guarded_call(env.reset, TASK, timeout_s=5)
        with pytest.raises(EnvCallFailed, match="reward is nan, not finite"):
            await guarded_call(env.step, "right", timeout_s=5)

    asyncio.run(main())


def test_worker_memory_counts_the_envs_own_processes():
    env = client(spawn_child=True)
    env.tasks()
    alone = client()
    alone.tasks()
    assert env.rss_mb() > alone.rss_mb() > 10  # the child `sleep` adds its pages
    env.close()
    alone.close()
