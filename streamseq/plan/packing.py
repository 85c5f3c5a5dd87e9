"""Packed rows with at most K streams per chunk: where each stream of a row starts.

With ``pad="pack"`` a row's streams follow one another inside chunks. Some models cannot
attend across many documents: ``max_streams_per_chunk=K`` lets a chunk hold pieces of at
most K streams; once a chunk has K, the rest of it is padding and the next stream starts
the next chunk. A stream never starts later than it would without packing (at the next
chunk), so a capped row has at most the chunks of an unpacked one, and at least those of
a packed one.

A piece that goes on with a stream from a step other than 0 has no ``step == 0`` to mark
where it starts inside a chunk: a segment other than a stream's first
(``segment_length``), or the rest of a stream begun before a resume on other rows (its
row's state went elsewhere, or nowhere). Packed, each of those starts a chunk, where
``reset`` marks it, capped or not (:func:`placed_cap`): the ``resumed`` flags of
:func:`row_spans` (plan version 4; version 3 flags the rest of a begun stream only).
"""

from __future__ import annotations

import numpy as np

from .rows import row_cost


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
    ``resumed`` (one flag a piece, or None) the pieces that start a chunk: those that go
    on with a stream from a step other than 0 (see the module).
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
    if cap > tbins:  # a chunk never holds more than tbins streams: no cap to count
        start = _uncapped_starts(lengths, sizes, tbins, fresh)
        return start, start + lengths
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


def _uncapped_starts(
    lengths: np.ndarray, sizes: np.ndarray, tbins: int, resumed: np.ndarray
) -> np.ndarray:
    """The starts of :func:`row_spans` where no chunk reaches the cap, by arrays only.

    The non-empty flagged pieces (and each row's first) cut the rows into runs that
    start at a chunk and follow one another inside: a run of ``S`` steps takes
    ``ceil(S / tbins)`` chunks, so where every run starts is a running sum.

    Example:
        >>> _uncapped_starts(np.array([1, 2, 3, 2]), np.array([3, 1]), 4,
        ...                  np.array([False, True, False, False])).tolist()
        [0, 4, 6, 0]
    """
    if not len(lengths):
        return np.zeros(0, np.int64)
    first = (np.cumsum(sizes) - sizes)[sizes > 0]  # (each row's first piece)
    head = (lengths > 0) & resumed
    head[first] = True
    at = np.flatnonzero(head)  # where each run starts
    run = np.cumsum(head) - 1  # the run of every piece
    steps = np.add.reduceat(lengths, at)
    chunks = -(-steps // tbins)
    row_of_run = np.repeat(np.arange(len(sizes)), sizes)[at]
    before = np.cumsum(chunks) - chunks  # chunks of the runs before, in every row
    row_first = np.searchsorted(row_of_run, row_of_run, side="left")
    run_start = (before - before[row_first]) * tbins
    inside = np.cumsum(lengths) - lengths  # steps before each piece, all rows
    return run_start[run] + inside - inside[at][run]


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


def most_chunks(
    lengths: np.ndarray, tbins: int, cap: int | None, resumed: np.ndarray | None = None
) -> int:
    """The most chunks a packed row of these pieces takes, in any order.

    ``cap``: the most streams a chunk packs (None: no cap); ``resumed``: the pieces that
    start a chunk (one flag a piece, or None; see :func:`row_spans`). Without shuffle a
    row's chunks are exact (:func:`~streamseq.plan.epoch.row_chunks`); shuffled, they
    depend on the order of its pieces, and this bound is the same for every order.

    Proof. Let ``D = tbins``, ``K`` the cost of a chunk and ``c(n)`` that of a piece of
    ``n > 0`` steps: ``K = D, c(n) = n`` without a cap; ``K = (cap - 1) * D``,
    ``c(n) = n * (cap - 1) + D`` with ``cap > 1`` (:func:`~streamseq.plan.rows.row_cost`).

    1. A row that starts at a chunk and has no flagged piece but its first takes at most
       ``ceil(C / K)`` chunks, ``C`` the cost of its pieces: without a cap, its ``C``
       steps follow one another from a chunk's start; with one, every chunk but the last
       either is full or was padded after ``cap`` streams, ``cap - 1`` of which started
       in it, so each chunk but the last costs at least ``K`` of ``C``.
    2. The ``F`` flagged non-empty pieces of a row cut it into ``G <= F + 1`` groups,
       each starting at a chunk (row 0, or a flagged piece) with no other flagged piece:
       the row takes ``sum(ceil(C_g / K))`` chunks, the caps' counts starting afresh
       at each chunk. As ``ceil(a / K) + ceil(b / K) <= ceil((a + b + K - 1) / K)``,
       that is at most ``ceil((C + (G - 1) * (K - 1)) / K) <= ceil((C + F * (K - 1)) /
       K)``, whatever the order: :func:`~streamseq.plan.rows.row_cost` charges each
       flagged piece ``K - 1`` more, so this is ``ceil(sum(row_cost) / K)``.
    3. No piece starts later than unpacked (each at the next chunk at the latest), so
       the row never takes more than its pieces' own chunks, ``sum(ceil(n / D))``
       (also the count with ``cap=1``).

    Example:
        >>> most_chunks(np.array([1, 7, 7]), 3, 2), most_chunks(np.array([1, 1, 1, 1]), 4, 4)
        (7, 3)
        >>> most_chunks(np.array([3, 3, 3]), 4, None), most_chunks(np.array([3, 3, 3]), 4, None,
        ...                                                        np.array([0, 1, 1], bool))
        (3, 3)
        >>> most_chunks(np.array([1, 1, 1, 1]), 4, None, np.array([0, 1, 1, 0], bool))
        3
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    unpacked = int((-(-lengths // tbins)).sum())
    if cap == 1:
        return unpacked
    cost = int(row_cost(lengths, tbins, True, cap, resumed).sum())
    chunk = tbins if cap is None else (cap - 1) * tbins
    return min(unpacked, -(-cost // chunk))
