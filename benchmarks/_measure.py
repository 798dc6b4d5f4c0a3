"""What the benchmarks share: CPU seconds of a process set and the printed table row. Named with a leading
underscore so tests/test_benchmarks.py, which runs every benchmark script, does not run it."""

from __future__ import annotations

import os
import time


def cpu_seconds(pids: list[int]) -> float:
    """CPU seconds (user + system) this process and the processes ``pids`` have used; a process that has
    exited since its pid was taken counts nothing (a worker the benchmark restarted, a finished child)."""
    total = time.process_time()
    ticks = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def row(name: str, value: str, note: str = "") -> None:
    print(f"{name:<46} {value:>16}  {note}")
