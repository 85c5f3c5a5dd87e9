"""The items streamseq delivers: :class:`Chunk` for one row, :class:`Batch` for many."""

from __future__ import annotations

from typing import Any, NamedTuple


class Chunk(NamedTuple):
    """``tbins`` consecutive steps of one row, never spanning two streams.

    Attributes:
        data: step data ``[T, ...]`` (an array or a tuple/dict of arrays), zeros where padded.
        reset: True when the chunk starts a stream (its step 0).
        valid: bool ``[T]``, False on padding.
        stream: int64 ``[T]``, index of the source in the list given, -1 on padding.
        step: int64 ``[T]``, index of the step inside its stream, -1 on padding.
    """

    data: Any
    reset: Any
    valid: Any
    stream: Any
    step: Any


class Batch(NamedTuple):
    """A batch of ``B`` rows of ``T`` steps; row r continues row r of the previous batch.

    Attributes:
        data: step data ``[B, T, ...]`` (an array or a tuple/dict of arrays), zeros where padded.
        reset: bool ``[B]``, True where row r starts a new stream in this batch (reset
            the recurrent state of that row before using it).
        valid: bool ``[B, T]``, False on padding.
        stream: int64 ``[B, T]``, index of the source in the list given, -1 on padding.
        step: int64 ``[B, T]``, index of the step inside its stream, -1 on padding.

    With ``time_major=True`` the loader delivers ``data`` as ``[T, B, ...]`` and
    ``valid``, ``stream``, ``step`` as ``[T, B]``.

    Example:
        >>> import numpy as np
        >>> b = Batch(np.zeros((2, 3)), np.array([True, False]), np.ones((2, 3), bool),
        ...           np.zeros((2, 3), np.int64), np.tile(np.arange(3), (2, 1)))
        >>> b.reset.tolist()
        [True, False]
    """

    data: Any
    reset: Any
    valid: Any
    stream: Any
    step: Any
