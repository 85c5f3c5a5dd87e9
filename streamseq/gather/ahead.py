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
    from .writer import Table

Ahead = tuple[int, int, int, int]
"""``(row r, the row's stream j, its first look-ahead step a, steps n)``."""


def ahead_of(table: Table, i: int) -> list[Ahead]:
    """The look-ahead reads of batch ``i``: for each row whose chunk ends inside a stream.

    ``a`` counts from the start of the row's stream ``j`` (a segment's own start), as
    :meth:`~streamseq.interleave.Row.read` does; ``n`` is at most ``table.lookahead``,
    fewer where the source ends.

    Example:
        >>> from streamseq import interleave_streams, tbin
        >>> rows = interleave_streams([np.arange(5), np.arange(3)], 2)
        >>> table = tbin(rows[0], 2, lookahead=2).table()
        >>> ahead_of(table, 0), ahead_of(table, 1), ahead_of(table, 2)
        ([(0, 0, 2, 2)], [(0, 0, 4, 1)], [])
    """
    k, t = table.lookahead, table.tbins
    out = []
    if table.pad == "pack":
        for r, (row, placed) in enumerate(zip(table.rows, table.placed, strict=True)):
            pieces = packed_pieces(row, i, t, placed)
            if pieces and pieces[-1][3] + pieces[-1][2] == t:
                j, a, n, _ = pieces[-1]
                out.append((r, j, a + n))
    else:
        blk = Positions(table, i, 1)
        for r in np.flatnonzero(blk.count[0] == t).tolist():
            j = int(blk.pos[0, r]) - table.first_list[r]
            out.append((r, j, int(blk.start[0, r]) + t))
    reads = []
    for r, j, a in out:
        row = table.rows[r]
        left = len(row.refs[j]) - int(row.starts[j]) - a  # steps of the source after a
        n = min(k, left)
        if n > 0:
            reads.append((r, j, a, n))
    return reads


def widen(table: Table, base: Batch, i: int, spec: Any, empty: Callable[..., np.ndarray]) -> Batch:
    """Batch ``i`` with its look-ahead steps: ``base`` (``tbins`` steps) and what follows.

    The wide arrays come from ``empty`` (shared memory in a worker); the look-ahead steps
    are read through :meth:`~streamseq.interleave.Row.read` (checked, transformed) and
    checked against ``spec``.
    """
    rows, t = len(table.rows), table.tbins
    steps = t + table.lookahead
    reset, valid, stream, step = meta.allocate(rows, steps, empty)
    reset[:] = base.reset
    for wide, narrow, fill in ((valid, base.valid, False), (stream, base.stream, -1)):
        wide[:, :t] = narrow
        wide[:, t:] = fill
    step[:, :t] = base.step
    step[:, t:] = -1
    data = None
    if base.data is not None:

        def grow(narrow: np.ndarray) -> np.ndarray:
            wide = empty((rows, steps, *narrow.shape[2:]), narrow.dtype)
            wide[:, :t] = narrow
            wide[:, t:] = 0
            return wide

        data = tree_map(grow, base.data)
    for r, j, a, n in ahead_of(table, i):
        row = table.rows[r]
        source = int(row.starts[j]) + a
        valid[r, t : t + n] = True
        stream[r, t : t + n] = row.stream_ids[j]
        step[r, t : t + n] = np.arange(source, source + n)
        if data is None:
            continue
        ref = row.refs[j]
        d = row.read(j, a, a + n)
        problem = spec_mismatch(spec, d)
        if problem is not None:
            raise ref.error(f"steps {source}:{source + n}: {problem}")

        def copy(out: np.ndarray, x: Any, r: int = r, n: int = n) -> None:
            put(out[r, t : t + n], x)

        try:
            tree_map(copy, data, d)
        except (TypeError, ValueError, KeyError) as e:
            raise ref.error(f"steps {source}:{source + n}: {e}") from e
    return Batch(data, reset, valid, stream, step)
