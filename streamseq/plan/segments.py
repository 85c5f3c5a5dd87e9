"""Streams cut into segments of at most N steps, planned as streams of their own."""

from __future__ import annotations

import numpy as np


def segments(
    lengths: np.ndarray, segment_length: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The segments of every stream: ``(source, start, length)`` arrays, one entry each.

    Without ``segment_length`` each stream is one segment. With it, a stream of ``L``
    steps gives ``ceil(L / N)`` segments ``[k*N, min((k+1)*N, L))``, in order; an empty
    stream gives none.

    Example:
        >>> source, start, length = segments(np.array([5, 0, 2]), 2)
        >>> source.tolist(), start.tolist(), length.tolist()
        ([0, 0, 0, 2], [0, 2, 4, 0], [2, 2, 1, 2])
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if segment_length is None:
        # (zeros of np.zeros are pages the system gives on first write: none resident)
        return np.arange(len(lengths), dtype=np.int64), np.zeros(len(lengths), np.int64), lengths
    counts = -(-lengths // segment_length)
    source = np.repeat(np.arange(len(lengths), dtype=np.int64), counts)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    start = (np.arange(len(source), dtype=np.int64) - first) * segment_length
    return source, start, np.minimum(segment_length, lengths[source] - start)
