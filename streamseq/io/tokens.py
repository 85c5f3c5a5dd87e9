"""Token files (flat binary or ``.npy``) as memory-mapped streams."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import numpy.typing as npt

from streamseq.errors import SourceError
from streamseq.io._base import Source, check_file
from streamseq.io._npy import read_npy_header

_NPY_MAGIC = b"\x93NUMPY"


class _Tokens(Source):
    def __init__(self, path: str, dtype: npt.DTypeLike | None):
        super().__init__()
        self.path = check_file(path)
        size = os.path.getsize(self.path)
        with open(self.path, "rb") as f:
            is_npy = f.read(len(_NPY_MAGIC)) == _NPY_MAGIC
        if is_npy:
            shape, fortran, file_dtype, offset = read_npy_header(self.path)
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

    def __repr__(self) -> str:
        return f"tokens({self.path!r})"

    def __len__(self) -> int:
        return self.shape[0]

    def _open(self) -> np.memmap:
        if min(self.shape) == 0:  # nothing to map (mmap refuses empty files)
            return np.zeros(self.shape, self.dtype, order=self.order)
        return np.memmap(
            self.path, self.dtype, mode="r", offset=self.offset, shape=self.shape, order=self.order
        )

    def _read(self, handle: Any, a: int, b: int) -> np.ndarray:
        return handle[a:b]

    def _empty(self) -> np.ndarray:
        return np.zeros((0, *self.shape[1:]), self.dtype)

    def array(self) -> np.ndarray:
        """The whole file as a read-only memory map (opened in this process)."""
        with self._lock():
            return self._handle.get(self._open)


def tokens(path: str | os.PathLike, dtype: npt.DTypeLike | None = None) -> _Tokens:
    """Stream a file of tokens (or of any fixed-size records) through a memory map.

    The file is either a ``.npy`` file (shape and dtype read from its header; step ``i``
    is ``array[i]``) or a flat binary file of ``dtype`` elements in native byte order
    (step ``i`` is element ``i``; give a byte order in ``dtype`` if needed, e.g. ``"<u2"``).
    The memory map is opened on the first read, separately in each process that reads;
    slices are views of it (no copy).

    Args:
        path: the file.
        dtype: dtype of the elements; required for flat files, checked against the header
            for ``.npy`` files.

    Returns:
        A stream: ``t[a:b]`` is a read-only ``np.memmap`` view ``[b - a, ...]``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: a flat file without ``dtype``, or a ``dtype`` that contradicts the
            ``.npy`` header.
        streamseq.errors.SourceError: a bad ``.npy`` header, or a file shorter than its
            header declares or not a whole number of elements.

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
    return _Tokens(os.fspath(path), dtype)
