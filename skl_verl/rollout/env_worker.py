"""The far end of ``skl_verl.rollout.env_runtime.EnvWorkerClient``: one env instance in its own process.

Started as ``python -m skl_verl.rollout.env_worker FD`` in a new session (so the client can kill the
whole process group, the env's own children included: ScienceWorld's JVM, a Stockfish engine). FD is a
connected socket spoken to with ``multiprocessing.connection.Connection``:

    client -> {"env_class": "module:Class", "kwargs": {...}, "parent_pid": pid}
    worker -> ("ready", None) | ("start_failed", ErrorReport)
    client -> (call_id, method, args, kwargs)       method: a public env method, "getattr" or "close"
    worker -> (call_id, "ok", value) | (call_id, "error", ErrorReport) | (call_id, "missing", None)
                                                     ("missing": ``getattr`` of an attribute the env lacks)

Every exception of the env, ``BaseException`` included (``SystemExit`` from Fast Downward, a stray
``CancelledError``), becomes an error reply; the client then kills this process. The worker exits on
``close``, when the client's end of the socket closes, or (watchdog) when its parent process is gone.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection

PARENT_CHECK_INTERVAL_S = 1.0


@dataclass(frozen=True)
class ErrorReport:
    """An exception raised in the worker, as text (its class may not exist in the client)."""

    type_name: str
    message: str
    traceback: str
    config_error: bool
    """Raised while building the env by a misconfiguration (missing dependency, bad kwargs): the
    client re-raises it instead of flagging the sample, so a broken setup stops the run loudly."""

    @classmethod
    def of(cls, exc: BaseException, building: bool = False) -> "ErrorReport":
        config_error = False
        if building:
            from envs.base import DependencyMissingError

            config_error = isinstance(exc, (DependencyMissingError, ImportError, TypeError, ValueError))
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(type(exc).__name__, str(exc)[:2000], text[-8000:], config_error)


def _exit_with_parent(parent_pid: int) -> None:
    """A worker whose agent-loop process died (SIGKILL, OOM) takes its process group with it."""
    while True:
        time.sleep(PARENT_CHECK_INTERVAL_S)
        if os.getppid() != parent_pid:
            os.killpg(0, signal.SIGKILL)


def _build(spec: dict):
    module_name, class_name = spec["env_class"].split(":")
    return getattr(importlib.import_module(module_name), class_name)(**spec["kwargs"])


def _answer(env, method: str, args: tuple, kwargs: dict):
    if method.startswith("_"):
        raise AttributeError(f"env worker: {method!r} is not a public env method")
    if method == "getattr":
        (name,) = args
        if name.startswith("_"):
            raise AttributeError(f"env worker: {name!r} is not a public env attribute")
        return getattr(env, name)
    return getattr(env, method)(*args, **kwargs)


def serve(conn: Connection) -> None:
    spec = conn.recv()
    threading.Thread(target=_exit_with_parent, args=(spec["parent_pid"],), daemon=True).start()
    try:
        env = _build(spec)
    except BaseException as exc:  # noqa: BLE001 - reported to the client, which decides
        conn.send(("start_failed", ErrorReport.of(exc, building=True)))
        return
    conn.send(("ready", None))
    while True:
        try:
            call_id, method, args, kwargs = conn.recv()
        except EOFError:  # the client closed its end: nobody will ask again
            env.close()
            return
        if method == "close":
            try:
                env.close()
            finally:
                conn.send((call_id, "ok", None))
            return
        try:
            if method == "getattr" and not hasattr(env, args[0]):  # getattr(env, "done", None) is no failure
                reply = (call_id, "missing", None)
            else:
                reply = (call_id, "ok", _answer(env, method, args, kwargs))
        except BaseException as exc:  # noqa: BLE001 - every failure is the client's to handle
            reply = (call_id, "error", ErrorReport.of(exc))
        try:
            conn.send(reply)  # pickles first: an unpicklable value raises before any byte is written
        except Exception as exc:  # noqa: BLE001
            conn.send((call_id, "error", ErrorReport.of(TypeError(f"result of {method}() cannot be sent: {exc}"))))


def main(argv: list[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the agent-loop process decides when envs stop
    serve(Connection(int(argv[1])))


if __name__ == "__main__":
    # Run the package's copy, so the ErrorReport the client unpickles is skl_verl.rollout.env_worker's.
    from skl_verl.rollout.env_worker import main as package_main

    package_main(sys.argv)
