"""Packed rows with at most K streams per chunk: where each stream of a row starts.

With ``pad="pack"`` a row's streams follow one another inside chunks. Some models cannot
attend across many documents: ``max_streams_per_chunk=K`` lets a chunk hold pieces of at
most K streams; once a chunk has K, the rest of it is padding and the next stream starts
the next chunk. A stream never starts later than it would without packing (at the next
chunk), so a capped row has at most the chunks of an unpacked one, and at least those of
a packed one.
"""

from __future__ import annotations

import numpy as np


def capped_starts(lengths: np.ndarray, tbins: int, cap: int) -> np.ndarray:
    """Where each stream of a packed row starts, in steps of the row (padding included).

    Empty streams start where the next stream would, and hold no place.

    Example:
        >>> capped_starts(np.array([1, 1, 1, 1]), 4, 2).tolist()
        [0, 1, 4, 5]
        >>> capped_starts(np.array([3, 3, 3, 3]), 4, 2).tolist()  # 2 streams in each chunk
        [0, 3, 6, 9]
        >>> capped_starts(np.array([3, 3, 3]), 4, 1).tolist()
        [0, 4, 8]
        >>> capped_starts(np.array([2, 2, 0, 2]), 4, 2).tolist()
        [0, 2, 4, 4]
    """
    starts = np.empty(len(lengths), np.int64)
    at = touching = 0  # the next free step, and the streams in its chunk
    for j, n in enumerate(np.asarray(lengths).tolist()):
        if at % tbins == 0:
            touching = 0
        if n and touching >= cap:
            at += tbins - at % tbins
            touching = 0
        starts[j] = at
        if n:
            end = at + n
            touching = touching + 1 if end // tbins == at // tbins else 1
            at = end
    return starts


def capped_end(lengths: np.ndarray, tbins: int, cap: int) -> int:
    """Steps of a capped packed row, padding inside it included.

    Example:
        >>> capped_end(np.array([1, 1, 1]), 4, 2), capped_end(np.array([], int), 4, 2)
        (5, 0)
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if not len(lengths):
        return 0
    starts = capped_starts(lengths, tbins, cap)
    return int(starts[-1] + lengths[-1])


def row_spans(
    lengths: np.ndarray, sizes: np.ndarray, tbins: int, cap: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(start, end)`` in steps of every piece of rows laid out one after the other.

    ``lengths`` are the pieces of every row in order, ``sizes`` the pieces of each row.

    Example:
        >>> start, end = row_spans(np.array([1, 1, 1, 2]), np.array([3, 1]), 4, 2)
        >>> start.tolist(), end.tolist()
        ([0, 1, 4, 0], [1, 2, 5, 2])
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    start = np.zeros(len(lengths), np.int64)
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        start[a:b] = capped_starts(lengths[a:b], tbins, cap)
    return start, start + lengths


def most_chunks(lengths: np.ndarray, tbins: int, cap: int) -> int:
    """The most chunks a capped packed row of these streams takes, in any order.

    A row never takes more chunks than unpacked (each stream its own chunks), nor more
    than its :func:`~streamseq.plan.rows.row_cost` allows (a chunk padded after ``cap``
    streams saw at least ``cap - 1`` of them start).

    Example:
        >>> most_chunks(np.array([1, 7, 7]), 3, 2), most_chunks(np.array([1, 1, 1, 1]), 4, 4)
        (7, 3)
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    unpacked = int((-(-lengths // tbins)).sum())
    if cap == 1:
        return unpacked
    cost = int(lengths.sum()) * (cap - 1) + tbins * int(np.count_nonzero(lengths))
    return min(unpacked, -(-cost // ((cap - 1) * tbins)))
