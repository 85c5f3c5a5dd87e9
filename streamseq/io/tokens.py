"""Token files (flat binary or ``.npy``) as memory-mapped streams, or read in ranges at URLs."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import numpy.typing as npt

from streamseq._redact import redacted_repr
from streamseq.errors import SourceError
from streamseq.io._base import Source, check_file, file_state, state_changes
from streamseq.io._mapped import MappedFile
from streamseq.io._mapped import npy_state as _header_state
from streamseq.io._npy import RemoteArray, read_npy_header
from streamseq.io._options import read_options, reads
from streamseq.io.remote import locate
from streamseq.read.handle import ProcessLocal, is_opening

_NPY_MAGIC = b"\x93NUMPY"


class _Tokens(Source):
    def __init__(
        self,
        path: str,
        dtype: npt.DTypeLike | None,
        storage_options: dict[str, Any] | None = None,
    ):
        super().__init__(close=_close)
        #: how it reads (:func:`~streamseq.io._options.read_options`): the dtype given
        self.read_options = read_options("tokens", {"dtype": dtype})
        self._remote = locate(path, storage_options)
        if self._remote is None:
            self.path = check_file(path)
            file = open(self.path, "rb")
            state = file_state(self.path, os.fstat(file.fileno()))  # of the file read here
            size = state["size"]
        else:
            self.path, size = path, self._remote.size
            state = dict(self._remote.stat)
            file = self._remote.open()
        # a file at a URL that an opener makes to read stays open for this process's first
        # read: its cache holds the start of the file (the first block read for the header)
        keep = self._remote is not None and is_opening()
        try:
            is_npy = file.read(len(_NPY_MAGIC)) == _NPY_MAGIC
            file.seek(0)
            header = read_npy_header(self.path, file) if is_npy else None
            self._header = b""  # the bytes of the .npy header, to compare on each open
            if header is not None:
                file.seek(0)
                self._header = file.read(header[3])
        except BaseException:
            file.close()
            raise
        self._spare: ProcessLocal[Any] = ProcessLocal()
        if keep:
            self._spare.set(file)
        else:
            file.close()
        self._npy = header is not None
        if header is not None:
            state.update(_header_state(*header))
            shape, fortran, file_dtype, offset = header
            if dtype is not None and np.dtype(dtype) != file_dtype:
                raise ValueError(
                    f"{self.path}: dtype {np.dtype(dtype)} given, file has {file_dtype}"
                )
            if file_dtype.hasobject:
                raise SourceError(self.path, "object arrays cannot be memory-mapped")
            if len(shape) == 0:
                raise SourceError(self.path, "a 0-d array has no steps")
            self.dtype = file_dtype
            self.order = "F" if fortran else "C"
        else:
            if dtype is None:
                raise ValueError(f"{self.path}: not a .npy file, give the dtype of its elements")
            self.dtype = np.dtype(dtype)
            offset, self.order = 0, "C"
            if size % self.dtype.itemsize:
                raise SourceError(
                    self.path,
                    f"size {size} is not a multiple of {self.dtype} ({self.dtype.itemsize})",
                )
            shape = (size // self.dtype.itemsize,)
        expected = offset + int(np.prod(shape)) * self.dtype.itemsize
        if size < expected:
            raise SourceError(self.path, f"truncated: {size} bytes, {expected} expected")
        self.shape = tuple(int(n) for n in shape)
        self.offset = offset
        self._record_state(state)

    def __repr__(self) -> str:
        return f"tokens({redacted_repr(self.path)})"

    def __len__(self) -> int:
        return self.shape[0]

    def _open(self) -> np.ndarray | RemoteArray | MappedFile:
        if min(self.shape) == 0:  # nothing to map (mmap refuses empty files)
            return np.zeros(self.shape, self.dtype, order=self.order)
        if self._remote is not None:
            file = self._spare.take()  # what was read of it here stays in its cache
            if file is None or file.closed:
                file = self._remote.open()
            array = RemoteArray(file, self.shape, self.dtype, self.offset)
            if self.order == "F" and len(self.shape) > 1:  # rows are not contiguous
                with array.file:
                    flat = array.file.read_range(self.offset, self._remote.size)
                data = np.frombuffer(flat, self.dtype, int(np.prod(self.shape)))
                return data.reshape(self.shape, order="F")
            return array
        return MappedFile(
            self.path,
            lambda file: np.memmap(
                file, self.dtype, mode="r", offset=self.offset, shape=self.shape, order=self.order
            ),
            self._header,
        )

    def _read(self, handle: Any, a: int, b: int) -> np.ndarray:
        if isinstance(handle, MappedFile):
            handle.check()  # (a file cut short under the map: zeros, or a bus error)
            return handle.array[a:b]
        return handle[a:b]

    def read_into(self, start: int, stop: int, out: np.ndarray) -> int | None:
        """Copy steps ``start:stop`` of a local file's map into ``out`` (a batch's rows).

        The file the map reads is measured before and after the copy: a file cut short
        or written again in place before or during it is a
        :class:`~streamseq.errors.SourceError`, never other tokens. Only for a local
        file, into an ``out`` of the file's dtype and step shape; ``None`` otherwise.

        Example:
            >>> import tempfile, os
            >>> path = os.path.join(tempfile.mkdtemp(), "a.bin")
            >>> np.arange(10, dtype=np.uint16).tofile(path)
            >>> out = np.zeros(3, np.uint16)
            >>> tokens(path, np.uint16).read_into(4, 7, out), out.tolist()
            (3, [4, 5, 6])
        """
        if self._remote is not None or out.dtype != self.dtype:
            return None
        if not 0 <= start < stop <= len(self) or out.shape != (stop - start, *self.shape[1:]):
            return None
        with self._lock():
            handle = self._handle.get(self._open_checked)
            if not isinstance(handle, MappedFile):
                return None
            handle.check(header=False)  # (cut short: no copy from past its end)
            out[...] = handle.array[start:stop]
            handle.check()  # a change before or during the copy: its steps refused
        return stop - start

    def _current_state(self) -> dict[str, Any]:
        """The file's ``stat`` (or ETag) and, for a ``.npy`` file, its header.

        The header of a local file is read every time (a few hundred bytes): a file
        rewritten in place within the resolution of the clock that stamps modification
        times keeps its inode, and may keep its size and time, but not its header. At a
        URL the ETag tells; the header is read only to say what changed.
        """
        state = super()._current_state()
        if self._npy and (self._remote is None or state_changes(self._file_state or {}, state)):
            state.update(self._header_now())
        return state

    def _header_now(self) -> dict[str, Any]:
        """What the header of the ``.npy`` file says now (``{"npy": False}``: unreadable).

        Parsed only when its bytes differ from those read when the source was made.
        """
        file = open(self.path, "rb") if self._remote is None else self._remote.open()
        with file:
            if file.read(len(self._header)) == self._header:
                return {k: v for k, v in (self._file_state or {}).items() if k in _HEADER_FIELDS}
            file.seek(0)
            try:
                return _header_state(*read_npy_header(self.path, file))
            except SourceError:
                return {"npy": False}

    def _empty(self) -> np.ndarray:
        return np.zeros((0, *self.shape[1:]), self.dtype)

    def step_spec(self) -> tuple[np.dtype, tuple[int, ...]]:
        """The dtype and step shape, from the ``.npy`` header (or the ``dtype`` given)."""
        return self.dtype, self.shape[1:]

    def array(self) -> np.ndarray:
        """The whole file as a read-only memory map (opened in this process).

        A file at a URL is read whole, into memory.
        """
        with self._lock():
            handle = self._handle.get(self._open_checked)
            if isinstance(handle, MappedFile):
                handle.check()
                return handle.array
            return handle[:] if isinstance(handle, RemoteArray) else handle


#: the fields of the state of a ``.npy`` file that its header gives
_HEADER_FIELDS = ("npy", "dtype", "shape", "order", "offset")


def _close(handle: Any) -> None:
    if isinstance(handle, (RemoteArray, MappedFile)):
        handle.close()


@reads("tokens")
def tokens(
    path: str | os.PathLike,
    dtype: npt.DTypeLike | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
) -> _Tokens:
    """Stream a file of tokens (or of any fixed-size records) through a memory map.

    The file is either a ``.npy`` file (shape and dtype read from its header; step ``i``
    is ``array[i]``) or a flat binary file of ``dtype`` elements in native byte order
    (step ``i`` is element ``i``; give a byte order in ``dtype`` if needed, e.g. ``"<u2"``).
    The memory map is opened on the first read, separately in each process that reads;
    slices are views of it (no copy). The file it maps is measured before every read (its
    size and time, a ``.npy`` header) and, when a loader copies steps into a batch, after
    the copy: a file cut short or written again in place under the map is an error, never
    zeros or other tokens (a view already taken reads what the file holds when it is read;
    a rewrite that keeps the size, the time and a ``.npy`` header is not seen).

    A file at a URL cannot be memory-mapped: each slice is read as a byte range, through a
    cache that reads ahead (:data:`streamseq.io.remote.BLOCK_SIZE` bytes a request), so
    consecutive slices cost one request per block. A Fortran-order ``.npy`` file at a URL
    is read whole on the first read (its rows are not contiguous).

    Args:
        path: the file: a local path, or a URL (``s3://``, ``gs://``, ``https://``, any
            fsspec protocol).
        dtype: dtype of the elements; required for flat files, checked against the header
            for ``.npy`` files.
        storage_options: for a URL, the options of its fsspec filesystem (credentials,
            endpoint, ...); see :mod:`streamseq.io.remote`.

    Returns:
        A stream: ``t[a:b]`` is a read-only ``np.memmap`` view ``[b - a, ...]`` (a
        read-only array for a URL).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ImportError: ``path`` is a URL and fsspec (or the package of its protocol) is
            missing: ``pip install 'streamseq[remote]'``.
        ValueError: a flat file without ``dtype``, or a ``dtype`` that contradicts the
            ``.npy`` header.
        streamseq.errors.SourceError: a bad ``.npy`` header, or a file shorter than its
            header declares or not a whole number of elements; a URL that cannot be
            reached (after a few attempts); on a read, a file that changed since the
            source was made (another size, time, inode, header or ETag: each process
            checks when it opens the file, and a local file's map before every read).

    Example:
        >>> import tempfile, os, numpy as np
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     np.arange(100, dtype=np.uint16).tofile(os.path.join(tmp, "a.bin"))
        ...     np.save(os.path.join(tmp, "b.npy"), np.arange(20).reshape(10, 2))
        ...     a = tokens(os.path.join(tmp, "a.bin"), np.uint16)
        ...     b = tokens(os.path.join(tmp, "b.npy"))
        ...     print(len(a), a[10:14], len(b), b[8:].tolist())
        100 [10 11 12 13] 10 [[16, 17], [18, 19]]
    """
    return _Tokens(os.fspath(path), dtype, storage_options)
