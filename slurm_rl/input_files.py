"""Opening an input file (a trace, a cluster spec) without waiting on it for ever.

``open()`` of a FIFO blocks until some process opens it for writing, and a character device
such as ``/dev/zero`` never ends: read as a trace, either would hang the command or fill the
memory. Only a regular file (or a symbolic link to one) is read. The file is opened with
``O_NONBLOCK`` and checked with ``fstat`` on that very descriptor, so nothing can swap a FIFO
in between the check and the read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from slurm_rl.errors import InputError

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def open_regular(path: str | Path, what: str) -> BinaryIO:
    """``path`` opened for reading in binary, or one :class:`InputError` saying why not.

    ``what`` names the kind of file in messages: "trace file", "cluster spec file".
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputError("no such file", path=path) from None
    except IsADirectoryError:
        raise InputError(f"is a directory, not a {what}", path=path) from None
    except OSError as error:
        raise InputError(f"cannot open: {error.strerror or error}", path=path) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise InputError(f"is a directory, not a {what}", path=path)
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "a special file")
            raise InputError(f"not a regular file ({kind})", path=path)
        # O_NONBLOCK means nothing for a regular file's reads; clear it all the same.
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
