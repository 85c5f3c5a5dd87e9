"""Look-ahead steps: the ``lookahead`` steps that follow a chunk in the stream it ends with.

A batch with ``lookahead=k`` holds ``tbins + k`` steps per row. The first ``tbins`` are
the batch without look-ahead; positions ``tbins`` to ``tbins + k - 1`` hold the steps
that follow, in the same stream, the row's step at position ``tbins - 1``: padding where
that stream has no such step, or where position ``tbins - 1`` is padding.

A segment (``segment_length``), or the rest of a stream after a resume, is a piece of
its source: its look-ahead goes on in the source, past the piece's end, so that the
first step of the next piece is a next-step target too (of the same stream, never of
another one).

The batch writer allocates the ``tbins + k`` steps once and writes the look-ahead steps
in place: for rows of arrays they are one longer read of the row's stream (the steps
that follow the chunk), which the compiled pass makes with the chunk's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._tree import tree_map
from .check import put, spec_mismatch
from .positions import Positions

if TYPE_CHECKING:
    from . import meta
    from .chunkmap import ChunkMap


def source_ends(chunks: ChunkMap, r: list[int], p: list[int]) -> np.ndarray:
    """Where each stream ``p`` (read in row ``r``) ends in its source: its source's length.

    Asked only for the pieces whose planned end is near: a segment (a first one starts at
    step 0 like a whole stream) or the rest of a resumed stream goes on in its source.
    """
    refs = [chunks.rows[row].refs[q - chunks.first_list[row]] for row, q in zip(r, p, strict=True)]
    return np.fromiter((len(ref) for ref in refs), np.int64, len(refs))


def ends_near(chunks: ChunkMap, r: np.ndarray, p: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Where the sources of streams ``p`` (read in rows ``r``) end, as far as reads from ``a`` see.

    The planned end of each piece, except where it is nearer than ``chunks.lookahead``
    steps after ``a``: there the source is asked (:func:`source_ends`, once per stream).

    Example:
        >>> from streamseq import interleave_streams, tbin
        >>> rows = interleave_streams([np.arange(5)], 1)
        >>> chunks = tbin(rows[0], 2, lookahead=2).writer()
        >>> ends_near(chunks, np.array([0]), np.array([0]), np.array([4])).tolist()
        [5]
    """
    end = chunks.shifts[p] + chunks.lengths[p]  # the planned piece's end, in the source
    near = np.flatnonzero(end - a < chunks.lookahead)  # its source may go on past it
    if len(near):
        known = getattr(chunks, "_source_ends", None)
        if known is None:
            known = chunks._source_ends = np.full(len(chunks.ids), -1, np.int64)
        q = p[near]
        ask = np.flatnonzero(known[q] < 0)
        if len(ask):
            known[q[ask]] = source_ends(chunks, r[near][ask].tolist(), q[ask].tolist())
        end[near] = known[q]
    return end


def _packed_starts(chunks: ChunkMap) -> tuple[np.ndarray, np.ndarray]:
    """Where every stream of packed rows starts, on one axis of all rows; each row's base.

    Row ``r``'s steps are ``base[r]`` to ``base[r] + len(row)``, one step apart from the
    next row's, made once.
    """
    kept = getattr(chunks, "_packed_starts", None)
    if kept is None:
        spans, starts = [], []
        for row, placed in zip(chunks.rows, chunks.placed, strict=True):
            at = row.offsets[:-1] if placed is None else np.asarray(placed, np.int64)
            starts.append(at)
            spans.append(int((at + row.lengths).max(initial=0)))
        size = np.array(spans, np.int64) + 1
        base = np.cumsum(size) - size
        at = [a + b for a, b in zip(starts, base.tolist(), strict=True)]
        kept = chunks._packed_starts = (np.concatenate([np.zeros(0, np.int64), *at]), base)
    return kept


def ahead_of(chunks: ChunkMap, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The look-ahead reads of batch ``i``, for the rows whose chunk ends inside a stream.

    Returns arrays ``(r, p, a, n)``: row ``r`` reads ``n`` steps (at most
    ``chunks.lookahead``, fewer where the source ends) from step ``a`` of the source of
    the chunks's stream ``p``.

    Example:
        >>> from streamseq import interleave_streams, tbin
        >>> rows = interleave_streams([np.arange(5), np.arange(3)], 2)
        >>> chunks = tbin(rows[0], 2, lookahead=2).writer()
        >>> [[int(x[0]) for x in ahead_of(chunks, c)] for c in (0, 1)], ahead_of(chunks, 2)[0]
        ([[0, 0, 2, 2], [0, 0, 4, 1]], array([], dtype=int64))
    """
    t = chunks.tbins
    if chunks.pad == "pack":  # the stream of the last step of each row's chunk, if any
        starts, base = _packed_starts(chunks)
        x = base + (i + 1) * t - 1
        p = np.searchsorted(starts, x, side="right") - 1
        q = np.maximum(p, 0)
        stop = np.append(chunks.first[1:], len(chunks.ids))  # (each row's streams)
        ok = (p >= chunks.first) & (p < stop) & (i < chunks.counts)
        ok &= x < starts[q] + chunks.lengths[q] if len(starts) else False
        r = np.flatnonzero(ok)
        p = p[r]
        a = x[r] - starts[p] + 1
    else:
        blk = Positions(chunks, i, 1)
        r = np.flatnonzero(blk.count[0] == t)
        p = blk.pos[0, r]
        a = blk.start[0, r] + t
    a = a + chunks.shifts[p]  # in the source
    n = np.minimum(chunks.lookahead, ends_near(chunks, r, p, a) - a)
    keep = n > 0
    return r[keep], p[keep], a[keep], n[keep]


def block_counts(chunks: ChunkMap, blk: Positions) -> np.ndarray:
    """Look-ahead steps of every row in every batch of a block of positions, ``[size, rows]``.

    A row whose chunk is full reads up to ``chunks.lookahead`` steps after it, from
    ``blk.source_start + tbins`` on in its source (fewer where the source ends); other
    rows none.

    Example:
        >>> from streamseq import interleave_streams, tbin
        >>> rows = interleave_streams([np.arange(5), np.arange(3)], 2)
        >>> chunks = tbin(rows[0], 2, lookahead=2).writer()
        >>> block_counts(chunks, Positions(chunks, 0, 3)).tolist()
        [[2], [1], [0]]
    """
    t = chunks.tbins
    out = np.zeros_like(blk.count)
    k, r = np.nonzero(blk.count == t)
    p = blk.pos[k, r]
    a = blk.source_start[k, r] + t
    out[k, r] = np.clip(ends_near(chunks, r, p, a) - a, 0, chunks.lookahead)
    return out


def write_meta(
    m: meta.Meta,
    t: int,
    n: np.ndarray,
    ids: np.ndarray,
    first: np.ndarray,
    rows: np.ndarray | None = None,
) -> None:
    """Write the metadata of the look-ahead steps (positions ``t`` on) of every row.

    Row ``rows[j]`` (every row when ``rows`` is None) holds ``n[j]`` steps of stream
    ``ids[j]`` from step ``first[j]`` on; the rest is padding.

    Example:
        >>> from streamseq.gather import meta
        >>> m = meta.padding(2, 3)
        >>> write_meta(m, 1, np.array([1]), np.array([7]), np.array([4]), np.array([1]))
        >>> m[2].tolist(), m[3].tolist()
        ([[-1, -1, -1], [-1, 7, -1]], [[-1, -1, -1], [-1, 4, -1]])
    """
    _, valid, stream, step = m
    j = np.arange(valid.shape[1] - t)
    mask = j < n[:, None]
    if rows is None:
        valid[:, t:] = mask
        np.copyto(stream[:, t:], np.where(mask, ids[:, None], -1))
        np.copyto(step[:, t:], np.where(mask, first[:, None] + j, -1))
        return
    valid[:, t:] = False
    stream[:, t:] = -1
    step[:, t:] = -1
    valid[rows, t:] = mask
    stream[rows, t:] = np.where(mask, ids[:, None], -1)
    step[rows, t:] = np.where(mask, first[:, None] + j, -1)


def read_rows(
    chunks: ChunkMap,
    data: Any,
    spec: Any,
    reads: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> None:
    """Copy the look-ahead reads ``(r, p, a, n)`` (:func:`ahead_of`) into ``data``.

    Streams given as arrays are sliced (they were checked when their steps before were
    read); others are read through :meth:`~streamseq.interleave.Row.read` (checked,
    transformed) and checked against ``spec``. The steps after the reads are zeros
    already.
    """
    arrays = chunks.arrays if not chunks.transformed else None
    t = chunks.tbins
    r, p, a, n = (x.tolist() for x in reads)
    if arrays is not None and type(data) is np.ndarray:  # in short
        for row, q, start, count in zip(r, p, a, n, strict=True):
            data[row, t : t + count] = arrays[q][start : start + count]
        return
    for row, q, start, count in zip(r, p, a, n, strict=True):
        _read_into(chunks, data, spec, row, q, start, count, arrays)


def _read_into(
    chunks: ChunkMap,
    data: Any,
    spec: Any,
    r: int,
    p: int,
    start: int,
    n: int,
    arrays: list[np.ndarray] | None,
) -> None:
    """Copy steps ``start:start + n`` of the source of the chunks's stream ``p`` into row ``r``."""
    t = chunks.tbins
    j = p - chunks.first_list[r]
    row = chunks.rows[r]
    ref = row.refs[j]
    if arrays is not None:
        d = arrays[p][start : start + n]
    else:
        shift = int(row.starts[j])
        d = row.read(j, start - shift, start - shift + n)
        problem = spec_mismatch(spec, d)
        if problem is not None:
            raise ref.error(f"steps {start}:{start + n}: {problem}")

    def copy(out: np.ndarray, x: Any) -> None:
        put(out[r, t : t + n], x)

    try:
        tree_map(copy, data, d)
    except (TypeError, ValueError, KeyError) as e:
        raise ref.error(f"steps {start}:{start + n}: {e}") from e
