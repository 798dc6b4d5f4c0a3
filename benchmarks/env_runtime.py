"""The env runtime (``skl_verl/rollout/env_runtime.py``) against direct calls, ratios from one run.

Run from the repository root (ALFWorld, ScienceWorld and Stockfish parts are skipped when missing)::

    python benchmarks/env_runtime.py [--rounds R] [--seconds S] [--ray]

Rows:

* ``alfworld episodes/s``: expert walkthroughs (stored in each game file) replayed on the ALFWorld games
  ``scripts/make_alfworld_games.py`` generates (10 small games, written to a temp dir), ``--rounds``
  times each. ``raw engine, serial`` is alfworld's own engine stack (``AlfredInfos(AlfredDemangler(
  PddlEnv))``, what ``AlfredTWEnv`` builds) driven in one process, one episode after another: load the
  game, reset, every walkthrough command. ``runtime, W workers`` plays the same episodes through
  ``EnvWorkerClient``s as an agent loop does (``reset``, ``admissible_actions`` after every
  observation, ``step``), ``W`` episodes at a time from one asyncio loop, each env in its own worker
  process; workers are started and warmed (one episode) before the clock starts. The ratio is against
  the serial raw engine: with 2 workers it is bounded by the cores the machine really gives.
* ``per-step overhead``: the same calls made directly on an env in this process against through the
  runtime (one worker, awaited from asyncio), per call: FrozenLake (``step`` + ``admissible_actions``
  of the quickstart map, a random walk), ALFWorld (walkthrough steps, ``step`` + ``admissible_actions``)
  and ScienceWorld (gold action sequence of one task, ``step`` + ``admissible_actions``).
* ``webshop purchase``: the stock WebShop ``done()`` (it ``rich``-prints every session it has seen, then
  renders the done page) at 100 and 2,000 sessions, against the same view after our launcher's
  ``bound_session_state``. The real site (Flask, Lucene, product data) cannot run here: this is the stock
  view's session bookkeeping with WebShop-shaped goal dicts and rich's printer, writing to /dev/null.
* ``--ray``: start and call latency of a Ray actor holding a FrozenLake env, for the choice of engine.

Timing: ``time.perf_counter``; medians of ``--repeats`` where repeated. The machine's load shifts every
number (2 shared cores here); nothing asserts on timings.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(_ROOT))
sys.path.insert(0, str(_ROOT / "tests"))
os.environ["PYTHONPATH"] = os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])

from envs import make_env  # noqa: E402
from skl_verl.rollout.env_runtime import EnvWorkerClient, guarded_call  # noqa: E402
from benchmarks._measure import cpu_seconds, row  # noqa: E402

TIMEOUT_S = 120.0


# ------------------------------------------------------------------------------------ ALFWorld


def alfworld_games(out: Path) -> list[tuple[str, list[str]]]:
    """(task id, walkthrough) of every generated game."""
    from alfworld_games import load_generator

    load_generator().make_games(out)
    env = make_env("alfworld", data_dir=str(out), split="train")
    try:
        return [(t.task_id, env.walkthrough(t.task_id)) for t in env.tasks()]
    finally:
        env.close()


def raw_engine_episodes(data_dir: Path, episodes: list[tuple[str, list[str]]]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) for the episodes on alfworld's engine stack, serially, in this process."""
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    from textworld.envs import PddlEnv

    split = data_dir / "json_2.1.1" / "train"
    engine = AlfredInfos(AlfredDemangler(PddlEnv(textworld.EnvInfos(admissible_commands=True, won=True,
                                                                    extras=["gamefile"])), shuffle=False))
    argv = list(sys.argv)
    cpu = cpu_seconds([])
    started = time.perf_counter()
    for task_id, walkthrough in episodes:
        engine.load(str(split / task_id / "game.tw-pddl"))
        state = engine.reset()
        for command in walkthrough:
            state, _, _ = engine.step(command)
        assert state["won"], task_id
    elapsed = time.perf_counter() - started
    sys.argv[:] = argv  # fast_downward overwrites it
    return elapsed, cpu_seconds([]) - cpu


async def runtime_episodes(clients: list[EnvWorkerClient], episodes: list[tuple[str, list[str]]]) -> float:
    queue = list(reversed(episodes))

    async def worker(env: EnvWorkerClient) -> None:
        while queue:
            task_id, walkthrough = queue.pop()
            await guarded_call(env.reset, task_id, timeout_s=TIMEOUT_S)
            await guarded_call(env.admissible_actions, timeout_s=TIMEOUT_S)
            for command in walkthrough:
                result = await guarded_call(env.step, command, timeout_s=TIMEOUT_S)
                if result.done:
                    assert result.won, task_id
                    break
                await guarded_call(env.admissible_actions, timeout_s=TIMEOUT_S)

    started = time.perf_counter()
    await asyncio.gather(*(worker(env) for env in clients))
    return time.perf_counter() - started


def alfworld_section(rounds: int) -> None:
    try:
        import alfworld  # noqa: F401
    except ImportError:
        row("alfworld", "skipped", "alfworld is not installed")
        return
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        started = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            games = alfworld_games(data_dir)
        print(f"(generated {len(games)} ALFWorld games in {time.perf_counter() - started:.0f} s)")
        episodes = games * rounds
        steps = sum(len(w) for _, w in episodes)
        raw_s, raw_cpu = raw_engine_episodes(data_dir, episodes)
        raw_rate = len(episodes) / raw_s
        row("alfworld raw engine, serial", f"{raw_rate:.2f} eps/s",
            f"{len(episodes)} episodes, {steps} steps; CPU {1e3 * raw_cpu / steps:.1f} ms/step")
        kwargs = {"data_dir": str(data_dir), "split": "train"}
        for workers in (1, 2, 4):
            clients = [EnvWorkerClient.for_env("alfworld", kwargs) for _ in range(workers)]
            start = time.perf_counter()
            asyncio.run(runtime_episodes(clients, games[:workers]))  # start + warm every worker
            warm = time.perf_counter() - start
            pids = [env.worker_pid for env in clients]
            cpu = cpu_seconds(pids)
            elapsed = asyncio.run(runtime_episodes(clients, episodes))
            used = cpu_seconds(pids) - cpu
            rate = len(episodes) / elapsed
            row(f"alfworld runtime, {workers} worker{'s' if workers > 1 else ''}", f"{rate:.2f} eps/s",
                f"{rate / raw_rate:.2f}x serial raw engine; CPU {1e3 * used / steps:.1f} ms/step "
                f"(+{100 * (used - raw_cpu) / raw_cpu:.0f}%), workers started+warmed in {warm:.1f} s, "
                f"{statistics.mean(env.rss_mb() for env in clients):.0f} MB RSS each")
            for env in clients:
                env.close()
        alfworld_overhead(data_dir, games)


async def timed_calls(calls) -> float:
    started = time.perf_counter()
    for fn, args in calls:
        await guarded_call(fn, *args, timeout_s=TIMEOUT_S)
    return time.perf_counter() - started


def direct_vs_runtime(label: str, name: str, kwargs: dict, script, repeats: int = 3) -> None:
    """``script(env)`` yields (method name, args) per call after a reset it does itself."""
    env = make_env(name, **kwargs)
    client = EnvWorkerClient.for_env(name, kwargs)

    def direct() -> tuple[float, int]:
        calls = list(script(env))
        started = time.perf_counter()
        for method, args in calls:
            getattr(env, method)(*args)
        return time.perf_counter() - started, len(calls)

    def through_runtime() -> tuple[float, int]:
        calls = list(script(client))
        return asyncio.run(timed_calls([(getattr(client, m), a) for m, a in calls])), len(calls)

    through_runtime()  # start the worker
    direct_s, runtime_s = [], []
    for _ in range(repeats):
        seconds, n = direct()
        direct_s.append(seconds / n)
        seconds, n = through_runtime()
        runtime_s.append(seconds / n)
    d, r = statistics.median(direct_s), statistics.median(runtime_s)
    row(f"{label} per call, direct", f"{d * 1e6:.0f} us")
    row(f"{label} per call, runtime", f"{r * 1e6:.0f} us", f"overhead {(r - d) * 1e6:.0f} us = {100 * (r - d) / d:.0f}% of the call")
    env.close()
    client.close()


def alfworld_overhead(data_dir: Path, games: list[tuple[str, list[str]]]) -> None:
    task_id, walkthrough = max(games, key=lambda game: len(game[1]))

    def script(env):
        if isinstance(env, EnvWorkerClient):  # the reset is not timed
            asyncio.run(guarded_call(env.reset, task_id, timeout_s=TIMEOUT_S))
        else:
            env.reset(task_id)
        for command in walkthrough[:-1]:  # the last command wins and ends the episode
            yield "step", (command,)
            yield "admissible_actions", ()

    direct_vs_runtime("alfworld step+admissible", "alfworld", {"data_dir": str(data_dir), "split": "train"}, script)


def frozenlake_overhead() -> None:
    kwargs = {"maps": [["SFFF", "FHFH", "FFFH", "HFFG"]], "slip": [0.0, 0.0], "max_steps": 10_000}

    def script(env):
        task = "frozenlake-s4-0000"
        if isinstance(env, EnvWorkerClient):
            asyncio.run(guarded_call(env.reset, task, seed=0, timeout_s=TIMEOUT_S))
        else:
            env.reset(task, seed=0)
        rng = random.Random(0)
        for _ in range(500):  # "up"/"left" into a wall keep the episode alive, so no reset is needed
            yield "step", (rng.choice(["up", "left"]),)
            yield "admissible_actions", ()

    direct_vs_runtime("frozenlake step+admissible", "frozenlake", kwargs, script)


def sciworld_overhead() -> None:
    try:
        env = make_env("sciworld", task_names=["boil"], max_variations_per_task=1)
    except Exception as exc:  # noqa: BLE001 - not installed / no Java
        row("sciworld", "skipped", f"{type(exc).__name__}: {str(exc)[:60]}")
        return
    task = env.tasks()[0].task_id
    gold = env.gold_action_sequence(task)[:20]
    env.close()

    def script(e):
        if isinstance(e, EnvWorkerClient):
            asyncio.run(guarded_call(e.reset, task, timeout_s=TIMEOUT_S))
        else:
            e.reset(task)
        for action in gold[:-1]:
            yield "step", (action,)
            yield "admissible_actions", ()

    direct_vs_runtime("sciworld step+admissible", "sciworld", {"task_names": ["boil"], "max_variations_per_task": 1},
                      script, repeats=2)


# ------------------------------------------------------------------------------------ WebShop


STOCK_APP = """
import logging
from rich import print
user_sessions = {}
class _App:
    view_functions = {}
app = _App()
def index(session_id, goal):
    user_sessions.setdefault(session_id, {'goal': goal, 'done': False})
    logging.getLogger(session_id)
def done(session_id, asin, options):
    # web_agent_site/app.py done(), minus the reward and the template
    user_sessions[session_id]['done'] = True
    user_sessions[session_id]['reward'] = 1.0
    print(user_sessions)
    logging.getLogger(session_id)
    del logging.root.manager.loggerDict[session_id]
    return 'done page'
app.view_functions.update(index=index, done=done)
"""


def webshop_goal(i: int) -> dict:
    return {
        "asin": f"B0{i:08d}", "category": "beauty", "query": "shampoo", "product_category": "Beauty › Hair Care",
        "instruction_text": f"i need a gentle herbal shampoo for dry hair, size 16 oz, price lower than {i % 90 + 10}.00 dollars",
        "attributes": ["paraben free", "dry hair"], "goal_options": {"size": "16 oz"}, "price_upper": float(i % 90 + 10),
        "weight": 1.0,
    }


def purchase_latency(sessions: int, bounded: bool, purchases: int = 5) -> float:
    import types

    site = types.ModuleType("stock_webshop_app")
    exec(STOCK_APP, site.__dict__)
    if bounded:
        from envs.webshop.server import bound_session_state

        bound_session_state(site)
    views = site.app.view_functions
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        for i in range(sessions):  # earlier episodes: each opened a session and bought
            views["index"](session_id=f"old{i}_fixed_{i}", goal=webshop_goal(i))
            if bounded:  # through the bounded view, so the state is what the launcher keeps
                views["done"](session_id=f"old{i}_fixed_{i}", asin="B0", options="{}")
            else:  # the stock view's state, without paying its O(sessions) print 2,000 times
                site.user_sessions[f"old{i}_fixed_{i}"].update(done=True, reward=1.0)
    times = []
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        for k in range(purchases):
            session = f"new{k}_fixed_{k}"
            views["index"](session_id=session, goal=webshop_goal(k))
            started = time.perf_counter()
            views["done"](session_id=session, asin="B0", options="{}")
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def webshop_section() -> None:
    try:
        import rich  # noqa: F401
    except ImportError:
        row("webshop purchase", "skipped", "rich is not installed")
        return
    for bounded in (False, True):
        small, large = purchase_latency(100, bounded), purchase_latency(2000, bounded)
        label = "bounded (our launcher)" if bounded else "stock done()"
        row(f"webshop purchase, {label}, 100 sessions", f"{small * 1e6:.0f} us")
        row(f"webshop purchase, {label}, 2000 sessions", f"{large * 1e6:.0f} us", f"{large / small:.1f}x the 100-session cost")


# ------------------------------------------------------------------------------------ Ray


def ray_section() -> None:
    import ray

    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(_ROOT)}})
    row("ray.init", f"{time.perf_counter() - started:.2f} s")

    @ray.remote(num_cpus=0.01)
    class EnvActor:
        def __init__(self, kwargs):
            self.env = make_env("frozenlake", **kwargs)

        def call(self, method, *args):
            return getattr(self.env, method)(*args)

    kwargs = {"maps": [["SFF", "FHF", "FFG"]], "slip": [0.0, 0.0]}
    for label, start in [("ray actor", lambda: EnvActor.remote(kwargs)), ("worker process", None)]:
        began = time.perf_counter()
        if start is not None:
            actor = start()
            ray.get(actor.call.remote("reset", "frozenlake-s3-0000"))
            started_s = time.perf_counter() - began
            began = time.perf_counter()
            for _ in range(200):
                ray.get(actor.call.remote("admissible_actions"))
            call_s = (time.perf_counter() - began) / 200
            ray.kill(actor)
        else:
            client = EnvWorkerClient.for_env("frozenlake", kwargs)
            asyncio.run(guarded_call(client.reset, "frozenlake-s3-0000", timeout_s=TIMEOUT_S))
            started_s = time.perf_counter() - began
            call_s = asyncio.run(timed_calls([(client.admissible_actions, ())] * 200)) / 200
            client.close()
        row(f"{label}: start, call", f"{started_s:.2f} s", f"{call_s * 1e6:.0f} us per call")
    ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="times each ALFWorld game is played per row")
    parser.add_argument("--ray", action="store_true", help="also time a Ray actor env (starts a local Ray)")
    parser.add_argument("--only", choices=["frozenlake", "alfworld", "sciworld", "webshop"], default=None)
    parser.add_argument("--quick", action="store_true", help="seconds, not minutes: tiny sizes, one repeat; checks it runs (CI)")
    args = parser.parse_args(argv)
    if args.quick:
        args.only, args.rounds = "frozenlake", 1
    print(f"python {platform.python_version()}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}")
    sections = {"frozenlake": frozenlake_overhead, "alfworld": lambda: alfworld_section(args.rounds),
                "sciworld": sciworld_overhead, "webshop": webshop_section}
    for name, section in sections.items():
        if args.only in (None, name):
            section()
    if args.ray:
        ray_section()
    print(f"(load at the end: {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
