"""Every benchmark runs in its quick mode (a benchmark nobody runs rots): it must finish and its own equality
checks must hold. No timing is asserted; the numbers are for people, from a full run on an idle machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# a leading underscore marks a helper module the benchmarks share, not a benchmark
BENCHMARKS = sorted(path.name for path in (ROOT / "benchmarks").glob("*.py") if not path.name.startswith("_"))


def test_every_benchmark_is_covered():
    assert len(BENCHMARKS) >= 6


@pytest.mark.parametrize("name", BENCHMARKS)
def test_benchmark_runs_in_quick_mode(name):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    # a test before this one may have loaded the CPU backend in pytest's process, which exports these: a
    # benchmark sets up its own backend, as a user's shell would have it
    for inherited in ("VERL_PLATFORM", "VERL_ENGINE_DEVICE"):
        env.pop(inherited, None)
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / name), "--quick"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{name} --quick failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    assert result.stdout.strip(), f"{name} --quick printed nothing"
    failed_checks = [line for line in result.stdout.splitlines() if "MISMATCH" in line]
    assert not failed_checks, f"{name} --quick: its equality checks failed:\n" + "\n".join(failed_checks)
