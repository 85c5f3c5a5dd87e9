"""Where every chunk of every row lies: the rows' streams and chunk ends as arrays.

The batch writer (:class:`~.writer.BatchWriter`) is a chunk map that also reads; the
read positions (:mod:`.positions`) and the look-ahead steps (:mod:`.ahead`) need the
map alone, so they import this module and not the writer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from ..interleave import Row


class Part(Protocol):
    """What the map takes of a row cut into chunks (:class:`~streamseq.tbin.TBinned`)."""

    row: Row
    chunk_ends: np.ndarray

    def __len__(self) -> int: ...


def _plain(source: Any, length: int | None) -> bool:
    """Whether ``source`` is a plain array of ``length`` steps (nothing to open or check)."""
    return type(source) is np.ndarray and source.ndim > 0 and len(source) == length


class ChunkMap:
    """The chunks of ``tbin`` parts as arrays, built once from the rows' stream lengths.

    O(streams) memory: where each stream of each row ends, in chunks, concatenated over
    rows (a *position* is a stream's index in that concatenation).

    Args:
        parts: the rows, each from :func:`~streamseq.tbin`.
        pad: the pad mode of the zip (``"pack"`` for packed rows).
        tbins: steps per chunk.

    Raises:
        ValueError: the parts have different look-aheads.

    Example:
        >>> from streamseq import interleave_streams, tbin
        >>> rows = interleave_streams([np.arange(3), np.arange(2)], 2)
        >>> chunks = ChunkMap([tbin(r, 2) for r in rows], "zeros", 2)
        >>> chunks.ends.tolist(), chunks.ids.tolist(), chunks.lengths.tolist()
        ([2, 3], [0, 1], [3, 2])
    """

    def __init__(self, parts: Sequence[Part], pad: str, tbins: int):
        self.rows: list[Row] = [p.row for p in parts]
        self.pad, self.tbins = pad, tbins
        aheads = {int(getattr(p, "lookahead", 0)) for p in parts}
        if len(aheads) > 1:
            raise ValueError(f"parts have different look-aheads: {sorted(aheads)}")
        self.lookahead = aheads.pop() if aheads else 0  # steps after each chunk (gather.ahead)
        self.counts = np.array([len(p) for p in parts], dtype=np.int64)
        self.placed = [getattr(p, "placed", None) for p in parts]  # packed with a cap
        sizes = np.array([len(p.chunk_ends) for p in parts], dtype=np.int64)
        self.base = np.cumsum(self.counts) - self.counts
        self.first = np.cumsum(sizes) - sizes
        self.first_list = self.first.tolist()
        ends = [p.chunk_ends + b for p, b in zip(parts, self.base.tolist(), strict=True)]
        self.ends = np.concatenate([np.zeros(0, np.int64), *ends]).astype(np.int64)
        self.ids = np.concatenate([np.zeros(0, np.int64), *(r.stream_ids for r in self.rows)])
        self.arrays: list[np.ndarray] | None = None  # the streams, when all are plain arrays
        if all(_plain(f.source, f.length) for r in self.rows for f in r.refs):
            self.arrays = [f.source for r in self.rows for f in r.refs]
        self.lengths = np.concatenate([np.zeros(0, np.int64), *(r.lengths for r in self.rows)])
        self.shifts = np.concatenate([np.zeros(0, np.int64), *(r.starts for r in self.rows)])
        self.segmented = bool(self.shifts.any())  # streams that are segments of longer ones
        self.carried = np.zeros(len(self.ids), bool)  # first pieces of rows that go on
        self.carried[self.first[[r.carried for r in self.rows]]] = True
        self.transformed = any(r.transform is not None for r in self.rows)
