"""The daemon's interruptible sleep between cycles (slurm_rl/daemon/runner.py)."""

from __future__ import annotations

import contextlib
import os
import select


class Waker:
    """An interruptible sleep: a signal handler may only write a byte to a pipe (taking a
    lock there could deadlock with the interrupted code)."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)

    def wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.write(self._write, b"x")

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            select.select([self._read], [], [], seconds)
        with contextlib.suppress(BlockingIOError):
            os.read(self._read, 4096)

    def close(self) -> None:
        if self._read >= 0:  # closing twice could close a descriptor reused meanwhile
            os.close(self._read)
            os.close(self._write)
            self._read = self._write = -1
