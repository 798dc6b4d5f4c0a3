"""Env processes per node and WebShop servers, checked before any worker starts (paper scale).

verl hands a step's whole batch (``data.train_batch_size`` prompts x ``rollout.n``) to the agent-loop workers at
once and each worker plays its share concurrently; every episode leases its own env worker process
(``skl_verl/rollout/env_pool.py``), and verl spreads agent-loop workers over the nodes round robin. A recipe
that bounds its episodes run-wide (``kw.executor.max_parallel_episodes``) is sized by that bound. So a node holds
about ``ceil(episodes / nnodes)`` env workers, each of the measured size of its env kind
(``benchmarks/env_memory.py``). WebShop episodes share HTTP servers instead:
at most ``WEBSHOP_EPISODES_PER_SERVER`` concurrent episodes a server (``docs/webshop_setup.md``). Validation
plays every row of a validation batch at once (``data.val_batch_size``, null: the whole file, x
``val_kwargs.n``) on the servers each row names (its env kwarg ``server_url``: a validation site apart from the
training one), else on ``WEBSHOP_URL``'s, and is checked the same way.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter

from omegaconf import DictConfig

from envs import ENV_CLASSES
from skl_verl.trainer.capacity import config_value

ENV_WORKER_MEMORY_MB = {
    "frozenlake": 40.0,
    "chess_puzzles": 45.0,
    "alfworld": 90.0,
    "sciworld": 300.0,
    "webshop": 35.0,
}
"""Resident memory of one env worker process (its JVM or engine included) after a short episode, about 10% above
``python benchmarks/env_memory.py`` on this 2-core machine, 2026-12-07: FrozenLake 36 MB, chess 40 (one puzzle
move), ScienceWorld 244-277 (its JVM), WebShop 29 (the client; the server runs apart), ALFWorld 79-82. The
benchmark prints each beside these. Engines Stockfish starts per search (a per-process pool) are not counted."""

ENV_MEMORY_SHARE = 0.5
"""The share of a node's memory its env workers may take: the rest holds Ray, the trainer's host copies (FSDP
offload, checkpoints), vLLM's host side and the page cache."""

WEBSHOP_EPISODES_PER_SERVER = 64
"""Concurrent episodes one WebShop server (our launcher) serves before calls queue past the env timeout
(``docs/webshop_setup.md``: one server per 32-64 concurrent episodes)."""


def run_env(config: DictConfig) -> str | None:
    """The env kind a run plays: ``skl.env``, ``kw.env.name``, else the training loop's name
    ending in an env kind (``skl_sd_webshop``); None when none says."""
    for key in ("skl.env", "kw.env.name"):
        name = config_value(config, key)
        if name in ENV_CLASSES:
            return str(name)
    loop = str(config_value(config, "actor_rollout_ref.rollout.agent.default_agent_loop", ""))
    return next((env for env in ENV_CLASSES if loop.endswith(f"_{env}")), None)


def concurrent_episodes(config: DictConfig) -> int:
    """Episodes a training step plays at once over the whole run."""
    batch = int(config_value(config, "data.train_batch_size", 1)) * int(config_value(config, "actor_rollout_ref.rollout.n", 1))
    limit = config_value(config, "kw.executor.max_parallel_episodes")
    return batch if limit is None else int(limit)


def node_resources(config: DictConfig) -> tuple[float, int, str]:
    """(memory GiB, CPUs) of a node: ``skl.cluster.*`` when set, else this machine's, and where they came from."""
    memory = config_value(config, "skl.cluster.memory_gib_per_node")
    cpus = config_value(config, "skl.cluster.cpus_per_node")
    source = "skl.cluster" if memory is not None and cpus is not None else "this machine (set skl.cluster.*)"
    if memory is None:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    if cpus is None:
        cpus = os.cpu_count() or 1
    return float(memory), int(cpus), source


def sizes_the_training_node(config: DictConfig, source: str) -> bool:
    """Whether the node figures are the training nodes': given in ``skl.cluster``, a CPU run (it runs here), or
    this machine has an NVIDIA GPU. A dry run on a login node or laptop is only warned."""
    return source == "skl.cluster" or config_value(config, "trainer.device") == "cpu" or os.path.exists("/dev/nvidiactl")


def check_env_capacity(config: DictConfig, environ=os.environ) -> tuple[str, list[str]]:
    """Env workers per node against the node's memory, and WebShop episodes per server: (the lines every run
    prints, the problems). A problem names the key (or variable) and the fix; like a missing data file, a dry run
    reports it as a warning and a run refuses to start."""
    env = run_env(config)
    if env is None:
        return "env capacity: skipped (no skl.env, kw.env.name or env-named training loop)", []
    episodes = concurrent_episodes(config)
    nnodes = int(config_value(config, "trainer.nnodes", 1))
    per_node = math.ceil(episodes / nnodes)
    memory_gib, cpus, source = node_resources(config)
    need_gib = per_node * ENV_WORKER_MEMORY_MB[env] / 1024
    problems: list[str] = []
    lines = [f"env capacity: {episodes} concurrent {env} episode(s), {per_node} env worker(s) a node x "
             f"{ENV_WORKER_MEMORY_MB[env]:.0f} MB = {need_gib:.1f} GiB of {memory_gib:.0f} GiB "
             f"({per_node / cpus:.1f} a CPU of {cpus}; node from {source})"]
    if need_gib > ENV_MEMORY_SHARE * memory_gib and not sizes_the_training_node(config, source):
        lines.append(f"warning: {need_gib:.0f} GiB of env workers would not fit this machine, which looks like no "
                     "training node (no GPU): set skl.cluster.memory_gib_per_node and cpus_per_node to check the nodes")
    elif need_gib > ENV_MEMORY_SHARE * memory_gib:
        problems.append(
            f"{per_node} concurrent {env} env workers a node need {need_gib:.0f} GiB, past {ENV_MEMORY_SHARE:.0%} of "
            f"the node's {memory_gib:.0f} GiB ({source}); lower data.train_batch_size or actor_rollout_ref.rollout.n, "
            "raise trainer.nnodes, or set skl.cluster.memory_gib_per_node to the training nodes' memory"
        )
    if env == "webshop":
        from envs.webshop.env import DEFAULT_URL, server_urls

        try:
            servers = len(server_urls(environ.get("WEBSHOP_URL") or DEFAULT_URL))
        except ValueError:  # a malformed WEBSHOP_URL: config_checks.resource_problems says what is wrong
            return "\n".join(lines), problems
        lines.append(f"webshop: {episodes} concurrent episodes on {servers} server(s) (at most "
                     f"{WEBSHOP_EPISODES_PER_SERVER} each)")
        problems += webshop_server_problems("WEBSHOP_URL", servers, episodes, "")
        for named, val_episodes in validation_episodes_by_server(config).items():
            try:
                val_servers = len(server_urls(named)) if named else servers
            except ValueError as exc:
                problems.append(f"a validation row's server_url {named!r}: {exc}")
                continue
            source = f"the validation rows' server_url ({named})" if named else "WEBSHOP_URL"
            lines.append(f"webshop validation: {val_episodes} concurrent episodes on {val_servers} server(s) of {source}")
            problems += webshop_server_problems(source, val_servers, val_episodes, " validation")
    return "\n".join(lines), problems


def webshop_server_problems(source: str, servers: int, episodes: int, kind: str) -> list[str]:
    needed = math.ceil(episodes / WEBSHOP_EPISODES_PER_SERVER)
    if servers >= needed:
        return []
    return [f"{source} lists {servers} WebShop server(s) for {episodes} concurrent{kind} episodes; one serves at most "
            f"{WEBSHOP_EPISODES_PER_SERVER} before env calls time out into zero-reward samples: start {needed} "
            f"(docs/webshop_setup.md) and list them comma-separated in {source}"]


def validation_episodes_by_server(config: DictConfig) -> dict[str, int]:
    """Concurrent validation episodes by the ``server_url`` their rows name ("" for none: the env's default),
    read from ``data.val_files``; empty when no file is there yet (a dry run before the data is built) or the run
    never validates (no ``val_before_train``, ``val_only`` or positive ``test_freq``)."""
    validates = (bool(config_value(config, "trainer.val_before_train", True)) or bool(config_value(config, "trainer.val_only", False))
                 or int(config_value(config, "trainer.test_freq", -1) or -1) > 0)
    if not validates:  # a run that never validates plays none of these rows
        return {}
    files = config_value(config, "data.val_files")
    files = [files] if isinstance(files, str) else list(files or [])
    if not files or not all(os.path.isfile(str(f)) for f in files):
        return {}
    import pyarrow.parquet as pq

    named: list[str] = []
    for path in files:
        for info in pq.read_table(str(path), columns=["extra_info"]).column("extra_info").to_pylist():
            spec = (info or {}).get("env_spec") or "{}"
            spec = json.loads(spec) if isinstance(spec, str) else spec
            named.append(str((spec.get("kwargs") or {}).get("server_url") or ""))
    batch = config_value(config, "data.val_batch_size") or len(named)
    at_once = min(int(batch), len(named))
    samples = int(config_value(config, "actor_rollout_ref.rollout.val_kwargs.n", 1) or 1)
    # a batch's rows come from anywhere in the file: each server list may get all of its rows in one batch
    return {url: min(count, at_once) * samples for url, count in Counter(named).items()}
