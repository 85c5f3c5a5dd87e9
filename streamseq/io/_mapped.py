"""A local file read through a memory map, kept open to be measured around every read.

A memory map shows what its file holds now: a file cut short under it reads as zeros (or,
past its last page, kills the process with a bus error), one written again in place gives
other data. :class:`MappedFile` keeps the file open beside its map and measures the open
file (``fstat``, and the bytes of a ``.npy`` header) against what it was when the map was
made. A file replaced by a rename is not a change of the file open: the map reads the
former one, the data planned (the next handle, in another process or pass, finds the new
file). A rewrite in place of the same size within one tick of the clock that stamps
modification times, that leaves a ``.npy`` header as it was, is not seen.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import IO, Any

import numpy as np

from streamseq.errors import SourceError
from streamseq.io._base import state_changes
from streamseq.io._npy import read_npy_header


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

    __slots__ = ("array", "fd", "file", "header", "path", "stamp", "state")

    def __init__(self, path: str, map: Callable[[IO[bytes]], Any], header: bytes = b""):
        self.path, self.header = path, header
        self.file = open(path, "rb")
        try:
            self.fd = self.file.fileno()
            self.state = self._state(recorded=True)
            self.stamp = (self.state["size"], self.state["mtime_ns"])  # (checked first)
            self.file.seek(0)
            self.array = map(self.file)
        except BaseException:
            self.file.close()
            raise

    def _state(self, recorded: bool = False) -> dict[str, Any]:
        fd = self.file.fileno()
        st = os.fstat(fd)
        state: dict[str, Any] = {"size": int(st.st_size), "mtime_ns": int(st.st_mtime_ns)}
        if self.header and (recorded or os.pread(fd, len(self.header), 0) != self.header):
            self.file.seek(0)
            try:
                state.update(npy_state(*read_npy_header(self.path, self.file)))
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
        st = os.fstat(self.fd)  # (every read: the usual case in two system calls)
        if (st.st_size, st.st_mtime_ns) == self.stamp and (
            not (header and self.header) or os.pread(self.fd, len(self.header), 0) == self.header
        ):
            return
        now = self._state()
        if now == self.state:
            return
        changes = [c for c in state_changes(self.state, now) if not c.startswith("header ")]
        changes = changes or ["its .npy header was written again"]
        raise SourceError(
            self.path,
            f"changed since the source was made ({', '.join(changes)}): its steps would not "
            "be the ones planned; make the source again to read the new file",
        )

    def close(self) -> None:
        """Close the file (the map stays readable while anything holds a view of it)."""
        self.file.close()
