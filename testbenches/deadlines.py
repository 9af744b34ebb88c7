"""A deadline for one fuzzer example: a hang is a failure, not a stuck test run."""

from __future__ import annotations

import contextlib
import signal
import time


class Hang(TimeoutError):
    """An example ran past its deadline."""


@contextlib.contextmanager
def deadline(seconds: float):
    """Raise :class:`Hang` in the code run within if it takes longer than `seconds`.
    An alarm set before (pytest-timeout's, for the whole test) is set again after,
    less the time spent."""
    def expire(*_):
        raise Hang(f"ran past its deadline of {seconds} s")
    previous = signal.signal(signal.SIGALRM, expire)
    before, interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if before:
            signal.setitimer(signal.ITIMER_REAL,
                             max(before - (time.monotonic() - start), 1e-3), interval)
