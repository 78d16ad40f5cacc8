"""A wall-clock bound for one test step: a hang fails the test instead of stalling the suite.

``signal.setitimer`` interrupts even a blocking ``open()`` of a FIFO (the handler runs when
the system call returns EINTR, and its exception propagates). Main thread only, POSIX only.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class Hang(AssertionError):
    """The step ran past its time bound."""


@contextmanager
def time_limit(seconds: float, what: str = "this step") -> Iterator[None]:
    def _expired(signum: int, frame: FrameType | None) -> None:
        raise Hang(f"{what} ran past {seconds:g} s (a hang?)")

    previous = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
