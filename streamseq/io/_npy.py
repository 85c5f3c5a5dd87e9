"""Reading the header of a ``.npy`` file, whatever damage it has."""

from __future__ import annotations

import tokenize

import numpy as np

from streamseq.errors import SourceError

#: what numpy raises on a damaged header: the header is a Python literal that numpy
#: tokenizes and evaluates, so a damaged one fails in the tokenizer or the parser too
NPY_HEADER_ERRORS = (ValueError, TypeError, SyntaxError, tokenize.TokenError, EOFError)


def read_npy_header(path: str) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """Shape, Fortran order, dtype and data offset of a ``.npy`` file.

    Raises:
        SourceError: naming the file, when its header cannot be read (the error numpy
            raised is chained).

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
    with open(path, "rb") as f:
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
        return shape, fortran, dtype, f.tell()
