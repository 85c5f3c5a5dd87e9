"""Where every row of a batch reads: chunk positions in blocks, packed pieces."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..interleave import Row
    from .chunkmap import ChunkMap


class Positions:
    """Where every row reads in ``size`` consecutive batches, as arrays ``[size, rows]``.

    Idle rows (ended, or empty) read nothing: position, start and stream -1, 0 steps.
    """

    def __init__(self, chunks: ChunkMap, first: int, size: int):
        self.first = first
        t, rows = chunks.tbins, len(chunks.rows)
        i = np.arange(first, first + size, dtype=np.int64)[:, None]
        n = chunks.counts[None, :]
        if chunks.pad == "wrap":
            chunk = i % np.maximum(n, 1)
            active = np.broadcast_to(n > 0, (size, rows))
        else:
            chunk = np.broadcast_to(i, (size, rows))
            active = i < n
        if len(chunks.ends):
            q = chunks.base + chunk
            pos = np.minimum(np.searchsorted(chunks.ends, q, side="right"), len(chunks.ends) - 1)
            prev = np.where(pos > chunks.first, chunks.ends[pos - 1], chunks.base)
            start = (q - prev) * t
            stop = np.minimum(start + t, chunks.lengths[pos])
            ids = chunks.ids[pos]
        else:
            pos = start = stop = ids = np.zeros((size, rows), np.int64)
        self.active = np.ascontiguousarray(active)
        self.pos = np.where(active, pos, -1)
        self.start = np.ascontiguousarray(np.where(active, start, -1), np.int64)
        if chunks.segmented:  # where the slices start in the sources (steps count there)
            shift = chunks.shifts[pos] if len(chunks.ends) else 0
            self.source_start = np.ascontiguousarray(np.where(active, start + shift, -1))
        else:
            self.source_start = self.start
        self.count = np.ascontiguousarray(np.where(active, stop - start, 0), np.int64)
        self.id_rows = np.ascontiguousarray(np.where(active, ids, -1), np.int64)
        self.ramp = np.where(active, start // t, -1)  # row of the chunks of steps (-1: none)
        self.starts = self.source_start.tolist()
        self.counts = self.count.tolist()
        self.partial = Marked((self.count < t) & (self.count > 0), self.count)
        self.full = (self.count == t).all(axis=1).tolist()
        self.totals = self.count.sum(axis=1).tolist()  # the valid steps of each batch
        carried = np.zeros_like(self.active)
        if chunks.carried.any():
            carried = chunks.carried[self.pos] & (self.start == 0) & self.active
        self.carried = Marked(carried, self.pos)  # rows that go on from a resumed state
        moved = self.active.copy()
        moved[1:] &= self.pos[1:] != self.pos[:-1]
        self.moved = Marked(moved, self.pos)
        # with a look-ahead (set by the writer, :func:`~.ahead.block_counts`): the steps
        # each row reads after its chunk, and with it ([size, rows])
        self.ahead: np.ndarray | None = None
        self.reads: np.ndarray | None = None


class Marked:
    """For each batch k of a block: the rows where ``mask[k]``, with ``values[k, row]``.

    Example:
        >>> mask = np.array([[True, False], [True, True]])
        >>> marked = Marked(mask, np.array([[5, 6], [7, 8]]))
        >>> marked(0), marked(1)
        (([0], [5]), ([0, 1], [7, 8]))
    """

    def __init__(self, mask: np.ndarray, values: np.ndarray):
        size, rows = mask.shape
        where = np.flatnonzero(mask)
        self.bounds = np.searchsorted(where, np.arange(0, (size + 1) * rows, rows)).tolist()
        self.rows = (where % rows).tolist()
        self.values = values.reshape(-1)[where].tolist()

    def __call__(self, k: int) -> tuple[list[int], list[int]]:
        """The rows marked in batch ``k`` of the block, and their values."""
        a, z = self.bounds[k], self.bounds[k + 1]
        return self.rows[a:z], self.values[a:z]


def packed_pieces(
    row: Row, i: int, tbins: int, placed: np.ndarray | None = None
) -> list[tuple[int, int, int, int]]:
    """Packed chunk ``i`` of a row: stream ``j`` gives ``n`` steps from ``a``, at ``at``.

    Args:
        row: the row.
        i: the chunk.
        tbins: steps per chunk.
        placed: where each stream starts in the row, when chunks hold a capped number
            of streams (:func:`~streamseq.plan.packing.capped_starts`); else they
            follow one another.

    Returns:
        ``(j, a, n, at)`` for each piece of a stream in the chunk, in order.

    Example:
        >>> from streamseq.read.ref import as_refs
        >>> from streamseq.interleave import Row
        >>> row = Row(as_refs([np.arange(5), np.arange(2), np.arange(4)]))
        >>> packed_pieces(row, 1, 4)
        [(0, 4, 1, 0), (1, 0, 2, 1), (2, 0, 1, 3)]
    """
    first = i * tbins
    if placed is not None:
        return _placed_pieces(row, first, first + tbins, placed)
    out, at = [], 0
    for j, a, n in row.pieces(first, min(first + tbins, len(row))):
        out.append((j, a, n, at))
        at += n
    return out


def _placed_pieces(
    row: Row, first: int, stop: int, placed: np.ndarray
) -> list[tuple[int, int, int, int]]:
    """:func:`packed_pieces` of steps ``first:stop`` of a row whose streams start at ``placed``."""
    out = []
    j = max(int(np.searchsorted(placed, first, side="right")) - 1, 0)
    lengths = row.lengths
    while j < len(placed) and placed[j] < stop:
        p, n = int(placed[j]), int(lengths[j])
        a, z = max(first, p), min(stop, p + n)
        if z > a:
            out.append((j, a - p, z - a, a - first))
        j += 1
    return out
