"""A local file read through a memory map, kept open to be measured around every read.

A memory map shows what its file holds now: a file cut short under it reads as zeros (or,
past its last page, kills the process with a bus error), one written again in place gives
other data. :class:`MappedFile` keeps the file open beside its map and measures the open
file (``fstat``, and the bytes of a ``.npy`` header) against what it was when the map was
made. A file replaced by a rename is not a change of the file open: the map reads the
former one, the data planned (the next handle, in another process or pass, finds the new
file). A rewrite in place of the same size within one tick of the clock that stamps
modification times (or with its time set back), that leaves a ``.npy`` header as it was,
is not seen.

At most :data:`OPEN_FILES` maps of a process (a quarter of its limit on open files) keep
their file open (a map holds a descriptor of its own already): one made beyond them
measures its file through its path, opened at each check, as long as the path names the
file mapped (the same inode); once the file is replaced by a rename or removed, the map
reads the former one, which is no longer measured.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import IO, Any

import numpy as np

try:
    import resource
except ImportError:  # (not on Windows)
    resource = None  # type: ignore[assignment]

from streamseq.errors import SourceError
from streamseq.io._base import changed_error, state_changes
from streamseq.io._npy import read_npy_header

#: how many maps of a process keep their file open to measure it (each map holds a
#: descriptor too); ``None``: a quarter of the process's limit on open files
OPEN_FILES: int | None = None

_kept = [os.getpid(), 0]  # the process, and its maps that keep their file open now
_kept_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """A child counts its own maps, with a lock of its own (a thread may hold the parent's)."""
    global _kept_lock
    _kept_lock = threading.Lock()
    _kept[:] = [os.getpid(), 0]


os.register_at_fork(after_in_child=_after_fork_in_child)


def _keep(n: int) -> bool:
    """Count a map of this process keeping its file open (``n=1``: if fewer than allowed).

    A map inherited through a fork counts in the process that made it, not in the child.
    """
    with _kept_lock:
        if _kept[0] != os.getpid():
            _kept[:] = [os.getpid(), 0]
        if n > 0 and _kept[1] >= _open_files():
            return False
        _kept[1] += n
        return True


def npy_state(
    shape: tuple[int, ...], fortran: bool, dtype: np.dtype, offset: int
) -> dict[str, Any]:
    """The fields of a ``.npy`` header that identify the file with its ``stat``.

    Example:
        >>> npy_state((3, 2), False, np.dtype("int16"), 128)
        {'npy': True, 'dtype': 'int16', 'shape': (3, 2), 'order': 'C', 'offset': 128}
    """
    return {
        "npy": True,
        "dtype": str(dtype),
        "shape": tuple(int(n) for n in shape),
        "order": "F" if fortran else "C",
        "offset": int(offset),
    }


def _open_files() -> int:
    """:data:`OPEN_FILES`, or a quarter of the soft limit on open files (at least 16)."""
    if OPEN_FILES is not None:
        return OPEN_FILES
    if resource is None:  # (no such limit here)
        return 256
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1 << 30 if soft == resource.RLIM_INFINITY else max(16, soft // 4)


class MappedFile:
    """A memory map of a local file (``map(file)``), with the file open to measure it.

    Args:
        path: the file (named in errors).
        map: makes the map, given the file open (at its start).
        header: the bytes of the file's ``.npy`` header when it was recorded (``b""``:
            not a ``.npy`` file); read again at every check.

    Example:
        >>> import tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "a.bin")
        >>> np.arange(4, dtype=np.uint8).tofile(path)
        >>> m = MappedFile(path, lambda f: np.memmap(f, np.uint8, mode="r"))
        >>> m.check(); m.array.tolist()
        [0, 1, 2, 3]
        >>> os.truncate(path, 2)
        >>> m.check()
        Traceback (most recent call last):
        ...
        streamseq.errors.SourceError: ...a.bin: changed since the source was made (size 4 -> 2...
        >>> m.close()
    """

    __slots__ = ("array", "file", "header", "inode", "kept", "path", "stamp", "state")

    def __init__(self, path: str, map: Callable[[IO[bytes]], Any], header: bytes = b""):
        self.path, self.header, self.kept = path, header, None
        self.file: IO[bytes] | None = open(path, "rb")
        try:
            st = os.fstat(self.file.fileno())
            self.inode = (st.st_dev, st.st_ino)
            self.state = self._state(self.file, recorded=True)
            self.stamp = (self.state["size"], self.state["mtime_ns"])  # (checked first)
            self.file.seek(0)
            self.array = map(self.file)
        except BaseException:
            self.file.close()
            raise
        self.kept = os.getpid() if _keep(1) else None
        if self.kept is None:  # measured through its path (the map holds a descriptor)
            self.file.close()
            self.file = None

    def _state(self, file: IO[bytes], recorded: bool = False) -> dict[str, Any]:
        fd = file.fileno()
        st = os.fstat(fd)
        state: dict[str, Any] = {"size": int(st.st_size), "mtime_ns": int(st.st_mtime_ns)}
        if self.header and (recorded or os.pread(fd, len(self.header), 0) != self.header):
            file.seek(0)
            try:
                state.update(npy_state(*read_npy_header(self.path, file)))
            except SourceError:
                state["npy"] = False
            state["header"] = os.pread(fd, len(self.header), 0) == self.header
        elif self.header:
            state.update((k, v) for k, v in self.state.items() if k not in state)
        return state

    def check(self, header: bool = True) -> None:
        """Raise a :class:`~streamseq.errors.SourceError` when the file open changed.

        ``header=False`` measures the file's size and time only, not its ``.npy`` header
        (before a copy, whose check after it reads the header too).

        Raises:
            SourceError: naming the file and what changed (its size, its time, its
                ``.npy`` header).
        """
        if self.file is not None:
            self._check(self.file, header)
            return
        try:  # (never waiting: a FIFO put in its place is not opened for a writer)
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except FileNotFoundError:
            return  # removed: the map reads the former file
        with os.fdopen(fd, "rb") as file:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) == self.inode:  # (else replaced: the former one is read)
                self._check(file, header)

    def _check(self, file: IO[bytes], header: bool) -> None:
        fd = file.fileno()
        st = os.fstat(fd)  # (every read: the usual case in two system calls)
        if (st.st_size, st.st_mtime_ns) == self.stamp and (
            not (header and self.header) or os.pread(fd, len(self.header), 0) == self.header
        ):
            return
        now = self._state(file)
        if now == self.state:
            return
        changes = [c for c in state_changes(self.state, now) if not c.startswith("header ")]
        changes = changes or ["its .npy header was written again"]
        raise changed_error(self.path, changes)

    def close(self) -> None:
        """Close the file (the map stays readable while anything holds a view of it)."""
        file, self.file = self.file, None
        if file is not None:
            file.close()
        kept, self.kept = self.kept, None
        if kept == os.getpid():
            _keep(-1)

    def __del__(self) -> None:
        if getattr(self, "kept", None) is not None:  # (dropped unclosed: counted no more)
            self.close()
