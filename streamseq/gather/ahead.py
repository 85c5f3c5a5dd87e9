"""Look-ahead steps: the ``lookahead`` steps that follow a chunk in the stream it ends with.

A batch with ``lookahead=k`` holds ``tbins + k`` steps per row. The first ``tbins`` are
the batch without look-ahead; positions ``tbins`` to ``tbins + k - 1`` hold the steps
that follow, in the same stream, the row's step at position ``tbins - 1``: padding where
that stream has no such step, or where position ``tbins - 1`` is padding.

A segment (``segment_length``), or the rest of a stream after a resume, is a piece of
its source: its look-ahead goes on in the source, past the piece's end, so that the
first step of the next piece is a next-step target too (of the same stream, never of
another one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._tree import tree_map
from ..batch import Batch
from . import meta
from .check import put, spec_mismatch
from .positions import Positions, packed_pieces

if TYPE_CHECKING:
    from .chunkmap import ChunkMap


def source_ends(chunks: ChunkMap, r: list[int], p: list[int]) -> np.ndarray:
    """Where each stream ``p`` (read in row ``r``) ends in its source: its source's length.

    Asked only for the pieces whose planned end is near: a segment (a first one starts at
    step 0 like a whole stream) or the rest of a resumed stream goes on in its source.
    """
    refs = [chunks.rows[row].refs[q - chunks.first_list[row]] for row, q in zip(r, p, strict=True)]
    return np.fromiter((len(ref) for ref in refs), np.int64, len(refs))


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
    if chunks.pad == "pack":
        found = []
        for r, (row, placed) in enumerate(zip(chunks.rows, chunks.placed, strict=True)):
            pieces = packed_pieces(row, i, t, placed)
            if pieces and pieces[-1][3] + pieces[-1][2] == t:
                j, a, n, _ = pieces[-1]
                found.append((r, chunks.first_list[r] + j, a + n))
        r, p, a = np.array(found, np.int64).reshape(-1, 3).T
    else:
        blk = Positions(chunks, i, 1)
        r = np.flatnonzero(blk.count[0] == t)
        p = blk.pos[0, r]
        a = blk.start[0, r] + t
    a = a + chunks.shifts[p]  # in the source
    end = chunks.shifts[p] + chunks.lengths[p]  # the planned piece's end, in the source
    near = np.flatnonzero(end - a < chunks.lookahead)  # its source may go on past it
    if len(near):
        end[near] = source_ends(chunks, r[near].tolist(), p[near].tolist())
    n = np.minimum(chunks.lookahead, end - a)
    keep = n > 0
    return r[keep], p[keep], a[keep], n[keep]


def widen(
    chunks: ChunkMap, base: Batch, i: int, spec: Any, empty: Callable[..., np.ndarray]
) -> Batch:
    """Batch ``i`` with its look-ahead steps: ``base`` (``tbins`` steps) and what follows.

    The wide arrays come from ``empty`` (shared memory in a worker). Streams given as
    arrays are sliced (they were checked when their steps before were read); others are
    read through :meth:`~streamseq.interleave.Row.read` (checked, transformed) and
    checked against ``spec``.
    """
    rows, t, k = len(chunks.rows), chunks.tbins, chunks.lookahead
    reset, valid, stream, step = meta.allocate(rows, t + k, empty)
    reset[:] = base.reset
    for wide, narrow, fill in ((valid, base.valid, False), (stream, base.stream, -1)):
        wide[:, :t] = narrow
        wide[:, t:] = fill
    step[:, :t] = base.step
    step[:, t:] = -1
    data = None
    if base.data is not None:

        def grow(narrow: np.ndarray) -> np.ndarray:
            wide = empty((rows, t + k, *narrow.shape[2:]), narrow.dtype)
            wide[:, :t] = narrow
            wide[:, t:] = 0
            return wide

        data = tree_map(grow, base.data)
    r, p, a, n = ahead_of(chunks, i)
    if not len(r):
        return Batch(data, reset, valid, stream, step, k)
    mask = np.arange(k) < n[:, None]
    valid[r, t:] = mask
    stream[r, t:] = np.where(mask, chunks.ids[p][:, None], -1)
    step[r, t:] = np.where(mask, a[:, None] + np.arange(k), -1)
    if data is None:
        return Batch(data, reset, valid, stream, step, k)
    arrays = chunks.arrays if not chunks.transformed else None
    if arrays is not None and type(data) is np.ndarray:  # in short
        for row, q, start, count in zip(
            r.tolist(), p.tolist(), a.tolist(), n.tolist(), strict=True
        ):
            data[row, t : t + count] = arrays[q][start : start + count]
        return Batch(data, reset, valid, stream, step, k)
    for row, q, start, count in zip(r.tolist(), p.tolist(), a.tolist(), n.tolist(), strict=True):
        _read_into(chunks, data, spec, row, q, start, count, arrays)
    return Batch(data, reset, valid, stream, step, k)


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
