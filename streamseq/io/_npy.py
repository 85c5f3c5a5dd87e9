"""Reading the header of a ``.npy`` file, whatever damage it has; arrays at URLs."""

from __future__ import annotations

import contextlib
import tokenize
from typing import IO, Any

import numpy as np

from streamseq._index import slice_bounds, step_index
from streamseq.errors import SourceError

#: what numpy raises on a damaged header: the header is a Python literal that numpy
#: tokenizes and evaluates, so a damaged one fails in the tokenizer or the parser too
NPY_HEADER_ERRORS = (ValueError, TypeError, SyntaxError, tokenize.TokenError, EOFError)


def read_npy_header(
    path: str, file: IO[bytes] | None = None
) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """Shape, Fortran order, dtype and data offset of a ``.npy`` file.

    Args:
        path: the file (named in errors).
        file: the file open, at its start (a file at a URL); ``path`` is opened otherwise.

    Raises:
        SourceError: naming the file, when its header cannot be read (the error numpy
            raised is chained) or gives a negative dimension.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "a.npy")
        >>> np.save(path, np.zeros((3, 2), np.int16))
        >>> read_npy_header(path)
        ((3, 2), False, dtype('int16'), 128)
        >>> with open(path, "r+b") as f:
        ...     _ = f.seek(10); _ = f.write(b"'")
        >>> read_npy_header(path)
        Traceback (most recent call last):
        ...
        streamseq.errors.SourceError: ...a.npy: not a valid .npy file (damaged header: ...)
    """
    with open(path, "rb") if file is None else contextlib.nullcontext(file) as f:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise ValueError(f"unsupported .npy version {version}")
        except NPY_HEADER_ERRORS as e:
            raise SourceError(path, f"not a valid .npy file (damaged header: {e})") from e
        if any(n < 0 for n in shape):
            raise SourceError(path, f"not a valid .npy file (negative dimension: {shape})")
        return shape, fortran, dtype, f.tell()


class RemoteArray:
    """A C-order array in a file at a URL (after its header), read in ranges.

    ``len``, ``ndim``, ``shape`` and ``dtype`` as an array's; ``x[i]`` and ``x[a:b]`` read
    the rows asked for (read-only arrays), ``x["t"]`` is a lazy column of a structured
    array (what :func:`bisect.bisect_left` needs).

    Args:
        file: a :class:`~streamseq.io.remote.RemoteFile` (its cache reads ahead).
        shape: of the array.
        dtype: of the array.
        offset: bytes before the data.
    """

    def __init__(self, file: Any, shape: tuple[int, ...], dtype: np.dtype, offset: int):
        self.file, self.shape, self.dtype, self.offset = file, shape, dtype, offset
        self.row = dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))

    @property
    def ndim(self) -> int:
        """Number of axes."""
        return len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def rows(self, a: int, b: int) -> np.ndarray:
        """Rows ``a`` to ``b`` (``0 <= a <= b <= len``), read-only."""
        data = self.file.read_range(self.offset + a * self.row, self.offset + b * self.row)
        return np.frombuffer(data, self.dtype).reshape((b - a, *self.shape[1:]))

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return _Column(self, key)
        if isinstance(key, slice):
            return self.rows(*slice_bounds(key, len(self)))
        i = step_index(key, len(self), "{n} rows")
        return self.rows(i, i + 1)[0]

    def close(self) -> None:
        """Close the file."""
        self.file.close()


class _Column:
    """One field of a structured :class:`RemoteArray`, read element by element."""

    def __init__(self, array: RemoteArray, name: str):
        self.array, self.name = array, name

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, i: int) -> Any:
        return self.array[i][self.name]
