"""ScienceWorld task difficulty: the length of the package's gold action sequence of a variation.

Generating one gold path costs 0.1-7 s of JVM time (3,592 train variations: hours on one core), so it is
measured only when a dataset build asks for it (``SciWorldEnv.measure_difficulty``), only for the tasks
that build needs, in parallel processes (each with its own JVM), with a progress bar and a time estimate,
and cached per package version and simplification. Building an env only reads the cache: env worker
processes never measure.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Callable

logger = logging.getLogger(__name__)

Pair = tuple[str, int]
"""(task name, variation)."""

SAVE_EVERY = 25
"""Measurements between cache writes, so an interrupted first build keeps what it measured."""


def default_cache_dir() -> Path:
    base = os.environ.get("SKL_VERL_CACHE_DIR")
    root = Path(base) if base else Path.home() / ".cache" / "skl_verl"
    return root / "sciworld"


def cache_path(cache_dir: Path | None, package_version: str, simplification: str) -> Path | None:
    if cache_dir is None:
        return None
    simp = re.sub(r"[^A-Za-z0-9_.-]+", "_", simplification) or "none"
    return cache_dir / f"gold_lengths-scienceworld{package_version}-{simp}.json"


def read_cache(path: Path | None) -> dict[Pair, int]:
    """Cached lengths; an unreadable cache is ignored with a warning (it is only a cache)."""
    if path is None or not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        logger.warning("sciworld: ignoring unreadable gold-length cache %s (%s)", path, exc)
        return {}
    if not isinstance(data, dict):
        return {}
    return {(name, int(variation)): value for name, rows in data.items() if isinstance(rows, dict)
            for variation, value in rows.items() if isinstance(value, int) and value > 0}


def write_cache(path: Path | None, lengths: dict[Pair, int]) -> None:
    """Merge ``lengths`` into the cache file (another process may have added entries meanwhile), atomically."""
    if path is None or not lengths:
        return
    merged = {**read_cache(path), **lengths}
    nested: dict[str, dict[str, int]] = {}
    for (name, variation), value in merged.items():
        nested.setdefault(name, {})[str(variation)] = value
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as fh:
            json.dump(nested, fh, sort_keys=True)
        os.replace(fh.name, path)
    except OSError as exc:
        logger.warning("sciworld: could not write gold-length cache %s (%s)", path, exc)


def measure(
    pairs: list[Pair],
    measure_here: Callable[[str, int], int],
    make_env: Callable[[], Any],
    processes: int,
    path: Path | None,
) -> dict[Pair, int]:
    """Gold lengths of ``pairs``: in this process with ``measure_here`` when ``processes`` is 1, else in
    ``processes`` spawned workers, each building its env once with ``make_env`` (picklable, e.g. a
    ``functools.partial`` of the env class). Prints progress and an estimate of the time left to stderr;
    saves to ``path`` every SAVE_EVERY results."""
    out: dict[Pair, int] = {}
    started = time.monotonic()
    print(f"sciworld: measuring the gold action sequences of {len(pairs)} variations in {processes} process(es) "
          f"(0.1-7 s each; cached in {path})", file=sys.stderr, flush=True)

    def done(pair: Pair, length: int) -> None:
        out[pair] = length
        if len(out) % SAVE_EVERY == 0:
            write_cache(path, out)
        if len(out) % 10 == 0 or len(out) == len(pairs):
            elapsed = time.monotonic() - started
            left = elapsed / len(out) * (len(pairs) - len(out))
            print(f"sciworld: {len(out)}/{len(pairs)} measured, {elapsed:.0f} s so far, about {left:.0f} s left",
                  file=sys.stderr, flush=True)

    if processes <= 1:
        for pair in pairs:
            done(pair, measure_here(*pair))
    else:
        with ProcessPoolExecutor(processes, mp_context=get_context("spawn"), initializer=_start_worker,
                                 initargs=(make_env,)) as pool:
            futures = {pool.submit(_measure_in_worker, pair): pair for pair in pairs}
            for future in as_completed(futures):
                done(futures[future], future.result())
    write_cache(path, out)
    return out


_WORKER_ENV: Any = None


def _start_worker(make_env: Callable[[], Any]) -> None:
    global _WORKER_ENV
    _WORKER_ENV = make_env()


def _measure_in_worker(pair: Pair) -> int:
    return len(_WORKER_ENV.gold_action_sequence_for(*pair))
