"""The metadata of a batch: ``reset``, ``valid``, ``stream`` and ``step``, written here.

Every batch's metadata is written by this module, or by the compiled pass
(:mod:`streamseq.gather._gather`), which writes the same values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..batch import Chunk

if TYPE_CHECKING:
    from ..interleave import Row
    from .positions import Positions

Meta = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""``(reset [B], valid [B, T], stream [B, T], step [B, T])``, written in place."""

_TABLE_LIMIT = 1 << 20  # elements of the tables of steps and valid masks


def allocate(rows: int, tbins: int, empty: Callable[..., np.ndarray] = np.empty) -> Meta:
    """Uninitialised metadata arrays of a batch, from ``empty`` (``np.empty``, or shm).

    Example:
        >>> [a.shape for a in allocate(2, 3)]
        [(2,), (2, 3), (2, 3), (2, 3)]
    """
    shape = (rows, tbins)
    reset, valid = empty(shape[:1], bool), empty(shape, bool)
    return reset, valid, empty(shape, np.int64), empty(shape, np.int64)


def layout(rows: int, tbins: int) -> list[tuple[tuple[int, ...], np.dtype]]:
    """The shapes and dtypes of the arrays :func:`allocate` makes, in its order.

    Example:
        >>> [(shape, str(dtype)) for shape, dtype in layout(2, 3)]
        [((2,), 'bool'), ((2, 3), 'bool'), ((2, 3), 'int64'), ((2, 3), 'int64')]
    """
    shape = (rows, tbins)
    b, i = np.dtype(bool), np.dtype(np.int64)
    return [(shape[:1], b), (shape, b), (shape, i), (shape, i)]


def padding(rows: int, tbins: int) -> Meta:
    """The metadata of a batch of padding: no reset, nothing valid, stream and step -1.

    Example:
        >>> reset, valid, stream, step = padding(1, 2)
        >>> reset.tolist(), valid.tolist(), stream.tolist(), step.tolist()
        ([False], [[False, False]], [[-1, -1]], [[-1, -1]])
    """
    shape = (rows, tbins)
    return (
        np.zeros(rows, dtype=bool),
        np.zeros(shape, dtype=bool),
        np.full(shape, -1, dtype=np.int64),
        np.full(shape, -1, dtype=np.int64),
    )


def copy_rows(meta: Meta, at: int, rows: int, item: Any) -> None:
    """Copy the metadata of ``item`` (a :class:`Chunk`, or a batch of ``rows`` rows) at ``at``.

    Example:
        >>> meta = padding(2, 2)
        >>> chunk = Chunk(None, True, np.ones(2, bool), np.zeros(2, np.int64), np.arange(2))
        >>> copy_rows(meta, 1, 1, chunk)
        >>> meta[0].tolist(), meta[3].tolist()
        ([False, True], [[-1, -1], [0, 1]])
    """
    reset, valid, stream, step = meta
    if isinstance(item, Chunk):
        reset[at], valid[at], stream[at], step[at] = item.reset, item.valid, item.stream, item.step
        return
    z = at + rows
    reset[at:z] = np.asarray(item.reset)
    valid[at:z] = np.asarray(item.valid)
    stream[at:z] = np.asarray(item.stream)
    step[at:z] = np.asarray(item.step)


def write_resets(reset: np.ndarray, positions: Positions, k: int) -> None:
    """Set ``reset`` where a row reads from step 0 of its stream (or segment).

    A row that goes on with the stream of a resumed state's row (whose recurrent state
    moves with it, see :meth:`streamseq.StreamLoader.row_map`) has no reset there.
    """
    np.equal(positions.start[k], 0, out=reset)
    rows, _ = positions.carried(k)
    reset[rows] = False


def write_packed(meta: Meta, rows: Sequence[Row], pieces: Sequence[list]) -> None:
    """Write the metadata of a packed batch: each row's ``pieces`` one after the other.

    ``pieces[r]`` are the pieces of row ``r``
    (:func:`~streamseq.gather.positions.packed_pieces`): ``reset`` is set where a chunk
    starts with a stream's first step.
    """
    reset, valid, stream, step = meta
    reset.fill(False)
    valid.fill(False)
    stream.fill(-1)
    step.fill(-1)
    for r, (row, row_pieces) in enumerate(zip(rows, pieces, strict=True)):
        for j, a, n, at in row_pieces:
            source = int(row.starts[j]) + a
            valid[r, at : at + n] = True
            stream[r, at : at + n] = row.stream_ids[j]
            step[r, at : at + n] = np.arange(source, source + n)
            if at == 0 and a == 0 and not (j == 0 and row.carried):
                reset[r] = True


class StepTables:
    """Small tables from which a batch's ``valid`` and ``step`` rows are taken.

    Chunk ``c`` covers steps ``c*T + [0, T)`` (row ``c`` of ``ramps``, the last row -1);
    ``n`` valid steps make the mask ``[0, T) < n`` (row ``n`` of ``masks``). Tables
    larger than ``2**20`` elements are not made: the rows are computed instead.

    Args:
        tbins: steps per chunk.
        longest: steps of the longest stream.
        segmented: whether streams are segments of longer ones (steps count in the
            sources: no table of steps).
    """

    def __init__(self, tbins: int, longest: int, segmented: bool):
        self.steps = np.arange(tbins, dtype=np.int64)
        chunks = -(-longest // tbins)
        self.ramps = None  # row c: the steps of chunk c; last row: -1
        if (chunks + 1) * tbins <= _TABLE_LIMIT and not segmented:
            self.ramps = np.arange((chunks + 1) * tbins, dtype=np.int64).reshape(-1, tbins)
            self.ramps[-1] = -1
        self.masks = None  # row n: n valid steps
        if (tbins + 1) * tbins <= _TABLE_LIMIT:
            self.masks = self.steps < np.arange(tbins + 1)[:, None]

    def write(self, meta: Meta, positions: Positions, k: int) -> None:
        """Write the metadata of batch ``k`` of a block of ``positions``.

        Example:
            >>> from streamseq import interleave_streams, tbin
            >>> from streamseq.gather.writer import BatchWriter
            >>> rows = interleave_streams([np.arange(3), np.arange(2)], 2)
            >>> writer = BatchWriter([tbin(r, 2) for r in rows], "zeros", 2)
            >>> m = allocate(2, 2)
            >>> writer.step_tables.write(m, writer.positions(1, 1), 0)
            >>> for a in m:
            ...     print(a.tolist())
            [False, False]
            [[True, False], [False, False]]
            [[0, -1], [-1, -1]]
            [[2, -1], [-1, -1]]
        """
        reset, valid, stream, step = meta
        start = positions.source_start[k]
        if positions.full[k]:
            valid.fill(True)
        elif self.masks is not None:
            self.masks.take(positions.count[k], axis=0, out=valid, mode="clip")
        else:
            np.less(self.steps, positions.count[k][:, None], out=valid)
        if self.ramps is not None:
            self.ramps.take(positions.ramp[k], axis=0, out=step, mode="wrap")
        else:
            np.add(self.steps, start[:, None], out=step)
            np.putmask(step, ~valid, -1)
        stream[...] = positions.id_rows[k][:, None]
        write_resets(reset, positions, k)
        partial = positions.partial
        a, z = partial.bounds[k], partial.bounds[k + 1]
        if a < z:
            for r, n in zip(partial.rows[a:z], partial.values[a:z], strict=True):
                step[r, n:] = -1
                stream[r, n:] = -1
