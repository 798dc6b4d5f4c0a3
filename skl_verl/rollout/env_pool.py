"""Per-process reuse of env workers (``skl_verl.rollout.env_runtime``).

Each concurrent episode leases its own env, which lives in its own worker process, started on its
first call. A released env keeps its worker for the next episode with the same spec (building an env
can take seconds: engine imports, a split's index, a JVM), until it has served ``max_leases``
episodes or its worker holds more than ``max_rss_mb`` of memory; then the worker is closed and the
next lease starts a fresh one (JVM and engine leaks end with the process). A worker killed after a
failed call is replaced on the env's next call.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from contextlib import contextmanager
from typing import Any, Iterator

from skl_verl.rollout.env_runtime import EnvWorkerClient

DEFAULT_MAX_LEASES = 200
DEFAULT_MAX_RSS_MB = 4096.0


class EnvPool:
    def __init__(self, max_leases: int = DEFAULT_MAX_LEASES, max_rss_mb: float | None = DEFAULT_MAX_RSS_MB) -> None:
        if max_leases < 1:
            raise ValueError("max_leases must be >= 1")
        self.max_leases, self.max_rss_mb = max_leases, max_rss_mb
        self._idle: dict[str, list[EnvWorkerClient]] = defaultdict(list)
        self._leases: dict[int, int] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(name: str, kwargs: dict[str, Any]) -> str:
        return json.dumps([name, kwargs], sort_keys=True, default=str)

    @contextmanager
    def lease(self, name: str, kwargs: dict[str, Any]) -> Iterator[EnvWorkerClient]:
        key = self.key(name, kwargs)
        with self._lock:
            env = self._idle[key].pop() if self._idle[key] else None
        if env is None:
            env = EnvWorkerClient.for_env(name, kwargs)
        reusable = False
        try:
            yield env
            reusable = True
        finally:
            with self._lock:
                leases = self._leases[id(env)] = self._leases.get(id(env), 0) + 1
            worn = leases >= self.max_leases or (self.max_rss_mb is not None and env.rss_mb() > self.max_rss_mb)
            if reusable and not worn:
                with self._lock:
                    self._idle[key].append(env)
            else:
                with self._lock:
                    self._leases.pop(id(env), None)
                env.close_in_background()

    def close(self) -> None:
        """Close every idle env worker (leased ones end with their lease or at exit)."""
        with self._lock:
            idle = [env for envs in self._idle.values() for env in envs]
            self._idle.clear()
            self._leases.clear()
        for env in idle:
            env.close()


ENV_POOL = EnvPool()
