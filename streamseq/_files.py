"""Opening a local file to read: a regular file only, never a wait nor an endless read."""

from __future__ import annotations

import os
import stat
from typing import IO


def open_regular(path: str | os.PathLike) -> IO[bytes]:
    """``path`` opened to read (binary), when it is a regular file (a link to one is followed).

    It is opened without waiting (the opening of a FIFO waits for a writer), then refused
    unless it is a regular file: a FIFO, a device (``/dev/zero`` never ends) or a folder
    is an error, not a wait or a read for ever.

    Raises:
        FileNotFoundError: there is no such file.
        ValueError: it is not a regular file.

    Example:
        >>> open_regular("/dev/zero")
        Traceback (most recent call last):
        ...
        ValueError: /dev/zero is not a regular file (a FIFO, a device or a folder)
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(
                f"{os.fspath(path)} is not a regular file (a FIFO, a device or a folder)"
            )
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def missing(path: str | os.PathLike) -> str:
    """Why ``path`` cannot be read as a file: there is none, or it is not a regular file.

    Example:
        >>> missing("/no/such/file"), missing("/dev/zero")
        ('no such file', 'not a regular file (a FIFO, a device or a folder)')
    """
    if os.path.exists(path):
        return "not a regular file (a FIFO, a device or a folder)"
    return "no such file"
