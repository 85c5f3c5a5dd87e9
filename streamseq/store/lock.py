"""One process builds a store at a time: an exclusive ``fcntl.flock`` on its ``.lock``."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Iterator


@contextlib.contextmanager
def build_lock(folder: str, timeout: float) -> Iterator[bool]:
    """Hold the store's lock; wait for it at most ``timeout`` seconds.

    The lock is released when the holder ends, however it ends (a crash, a kill): the
    next process then finishes what was left. In a folder this process cannot write
    (read-only), the lock file is taken as it is, or there is none to take: the store
    can then only be read.

    Yields:
        Whether the store's folder can be written (the lock file could be made).

    Raises:
        TimeoutError: another process held it for the whole ``timeout``.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d, build_lock(d, 1.0) as writable:
        ...     writable
        True
    """
    path = os.path.join(folder, ".lock")
    writable, fd = True, None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        if e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        writable = False
        fd = _open_existing(path)
    if fd is None:  # no lock file, and none can be made: nobody builds here
        yield False
        return
    try:
        deadline, pause = time.monotonic() + timeout, 0.01
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"{folder}: another process has been building this store for "
                        f"{timeout:g} s (lock_timeout); waited for it that long"
                    ) from None
                time.sleep(pause)
                pause = min(pause * 2, 0.25)
        try:
            yield writable
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _open_existing(path: str) -> int | None:
    """The lock file opened for reading (``flock`` needs no more), or ``None``."""
    try:
        return os.open(path, os.O_RDONLY)
    except OSError:
        return None
