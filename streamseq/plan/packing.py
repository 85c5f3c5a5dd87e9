"""Packed rows with at most K streams per chunk: where each stream of a row starts.

With ``pad="pack"`` a row's streams follow one another inside chunks. Some models cannot
attend across many documents: ``max_streams_per_chunk=K`` lets a chunk hold pieces of at
most K streams; once a chunk has K, the rest of it is padding and the next stream starts
the next chunk. A stream never starts later than it would without packing (at the next
chunk), so a capped row has at most the chunks of an unpacked one, and at least those of
a packed one.

The rest of an epoch resumed on other rows holds streams begun before the resume: their
rows' state went elsewhere (or nowhere), and their next step is not a first step, so
nothing inside a chunk would mark where one starts. Packed, each of those starts a chunk
(where ``reset`` marks it), capped or not (:func:`placed_cap`).
"""

from __future__ import annotations

import numpy as np


def placed_cap(cap: int | None, tbins: int) -> int:
    """The cap :func:`row_spans` lays out packed rows with: ``cap``, or none (``tbins + 1``).

    A chunk never holds more than ``tbins`` streams, so ``tbins + 1`` never pads one:
    rows laid out with it are packed as without a cap, but for the streams resumed.

    Example:
        >>> placed_cap(2, 4), placed_cap(None, 4)
        (2, 5)
    """
    return tbins + 1 if cap is None else int(cap)


def capped_starts(
    lengths: np.ndarray, tbins: int, cap: int, resumed: np.ndarray | None = None
) -> np.ndarray:
    """Where each stream of a packed row starts, in steps of the row (padding included).

    Empty streams start where the stream before them ends, and hold no place. The row
    laid out by :func:`row_spans` (``resumed``: the streams that start a chunk).

    Example:
        >>> capped_starts(np.array([1, 1, 1, 1]), 4, 2).tolist()
        [0, 1, 4, 5]
        >>> capped_starts(np.array([3, 3, 3, 3]), 4, 2).tolist()  # 2 streams in each chunk
        [0, 3, 6, 9]
        >>> capped_starts(np.array([3, 3, 3]), 4, 1).tolist()
        [0, 4, 8]
        >>> capped_starts(np.array([2, 2, 0, 2]), 4, 2).tolist()
        [0, 2, 4, 4]
        >>> capped_starts(np.array([2, 3, 2]), 4, 5, np.array([False, True, False])).tolist()
        [0, 4, 7]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    sizes = np.array([len(lengths)], np.int64)
    return row_spans(lengths, sizes, tbins, cap, resumed)[0]


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
    lengths: np.ndarray,
    sizes: np.ndarray,
    tbins: int,
    cap: int,
    resumed: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(start, end)`` in steps of every piece of rows laid out one after the other.

    ``lengths`` are the pieces of every row in order, ``sizes`` the pieces of each row;
    ``resumed`` (one flag a piece, or None) the pieces that start a chunk: the rest of a
    stream begun before a resume.
    Every row is laid out at once, as arrays over the rows: the ``j``-th pieces of all
    rows are placed together (the place of a piece depends on the pieces before it in
    its row), so the work is one array step per piece of the longest row.

    Example:
        >>> start, end = row_spans(np.array([1, 1, 1, 2]), np.array([3, 1]), 4, 2)
        >>> start.tolist(), end.tolist()
        ([0, 1, 4, 0], [1, 2, 5, 2])
        >>> resumed = np.array([False, True, False, False])
        >>> row_spans(np.array([1, 1, 1, 2]), np.array([3, 1]), 4, 5, resumed)[0].tolist()
        [0, 4, 5, 0]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    fresh = np.zeros(len(lengths), bool) if resumed is None else np.asarray(resumed, bool)
    sizes = np.asarray(sizes, dtype=np.int64)
    start = np.zeros(len(lengths), np.int64)
    if len(lengths):
        order = np.argsort(-sizes, kind="stable")  # longest first: the rows still laid out
        first = (np.cumsum(sizes) - sizes)[order]  # are a prefix of them
        left = sizes[order]
        at = np.zeros(len(sizes), np.int64)  # the next free step of every row
        touching = np.zeros(len(sizes), np.int64)  # the streams in that step's chunk
        for j in range(int(left[0])):  # (pieces of a row, every row at once)
            count = int(np.searchsorted(-left, -j, side="left"))  # rows with a j-th piece
            if count == 1:  # the longest row alone: the rest of it in one pass
                k = int(first[0]) + j
                rest = lengths[k : int(first[0]) + int(left[0])]
                flags = fresh[k : k + len(rest)]
                start[k : k + len(rest)] = _lay_out(
                    rest, int(at[0]), int(touching[0]), tbins, cap, flags
                )
                break
            a, t, k = at[:count], touching[:count], first[:count] + j
            n = lengths[k]
            t[a % tbins == 0] = 0
            jump = (n > 0) & ((t >= cap) | (fresh[k] & (a % tbins > 0)))  # (t: 0 at a chunk)
            a += np.where(jump, tbins - a % tbins, 0)
            t[jump] = 0
            start[k] = a
            end = a + n
            placed = n > 0
            same = end // tbins == a // tbins
            t[:] = np.where(placed, np.where(same, t + 1, 1), t)
            a[:] = np.where(placed, end, a)
    return start, start + lengths


def _lay_out(
    lengths: np.ndarray, at: int, touching: int, tbins: int, cap: int, resumed: np.ndarray
) -> list[int]:
    """The starts of the pieces of one row, from its next free step and its chunk's streams.

    What :func:`row_spans` does for every row at once, for the one row left: the pieces of
    a row follow one another (each place depends on the one before), and the numbers of
    one row are faster as integers than as arrays of one value.
    """
    starts = []
    for n, fresh in zip(lengths.tolist(), resumed.tolist(), strict=True):
        if at % tbins == 0:
            touching = 0
        if n and (touching >= cap or (fresh and at % tbins)):
            at += tbins - at % tbins
            touching = 0
        starts.append(at)
        if n:
            end = at + n
            touching = touching + 1 if end // tbins == at // tbins else 1
            at = end
    return starts


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
