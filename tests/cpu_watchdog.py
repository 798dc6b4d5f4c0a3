"""A watchdog for the parser fuzz tests: a bound on runaway work, not a timing assertion.

A linear parser reads a megabyte in a fraction of a second; a backtracking pattern needs minutes to hours
for the same input, so a test without a bound would hang instead of failing. The watchdog fails the test
once one parse has used ``budget_s`` seconds of this process's CPU time. CPU time, not wall time, and a
budget far above what linear parsing needs: a busy machine cannot make a linear parser fail it.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

PARSE_BUDGET_S = 10.0


class RunawayParse(AssertionError):
    pass


@contextlib.contextmanager
def cpu_watchdog(what: str, budget_s: float = PARSE_BUDGET_S) -> Iterator[None]:
    """Raise ``RunawayParse`` naming ``what`` if the block uses ``budget_s`` CPU seconds. The regex engine
    checks for signals while it matches, so a pattern that backtracks is interrupted too."""

    def expire(signum, frame):
        raise RunawayParse(f"{what} used {budget_s:g} s of CPU time: the parser is not linear")

    previous = signal.signal(signal.SIGPROF, expire)
    signal.setitimer(signal.ITIMER_PROF, budget_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
