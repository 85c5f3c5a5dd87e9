"""Cut a row into chunks of ``tbins`` steps that never span two streams."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ._tree import tree_map
from .batch import Chunk
from .gather import BatchWriter
from .interleave import Row
from .plan.packing import capped_starts, placed_cap
from .read.step_spec import step_spec_of


def check_lookahead(lookahead: Any) -> int:
    """``lookahead`` as an int >= 0: an integer, not a bool, a float or a string.

    Raises:
        TypeError: ``lookahead`` is not an integer.
        ValueError: it is negative.

    Example:
        >>> check_lookahead(np.int64(2))
        2
        >>> check_lookahead(1.0)
        Traceback (most recent call last):
        ...
        TypeError: lookahead must be an integer >= 0, got 1.0 (float)
        >>> check_lookahead(-1)
        Traceback (most recent call last):
        ...
        ValueError: lookahead must be >= 0, got -1
    """
    if isinstance(lookahead, (bool, np.bool_)) or not isinstance(lookahead, numbers.Integral):
        raise TypeError(
            f"lookahead must be an integer >= 0, got {lookahead!r} ({type(lookahead).__name__})"
        )
    if lookahead < 0:
        raise ValueError(f"lookahead must be >= 0, got {lookahead}")
    return int(lookahead)


class TBinned:
    """Chunks of a row; see :func:`tbin`.

    The plan is two small arrays computed once (chunks per stream and their running
    total); locating chunk ``c`` is a binary search, so memory stays O(streams).
    """

    num_rows = 1

    def __init__(
        self,
        row: Row,
        tbins: int,
        pack: bool = False,
        cap: int | None = None,
        lookahead: int = 0,
    ):
        if tbins < 1:
            raise ValueError(f"tbins must be >= 1, got {tbins}")
        self.row = row
        self.tbins = int(tbins)
        self.lookahead = check_lookahead(lookahead)
        self.pack = bool(pack)
        counts = -(-row.lengths // self.tbins)
        self.chunk_ends = np.cumsum(counts, dtype=np.int64)
        self.length = (
            -(-len(row) // self.tbins)
            if pack
            else (int(self.chunk_ends[-1]) if len(counts) else 0)
        )
        self.placed = None  # packed with a cap: where each stream starts in the row
        resumed = getattr(row, "resumed", None)  # (streams begun before: start a chunk)
        if pack and (cap is not None or (resumed is not None and resumed.any())):
            self.placed = capped_starts(
                row.lengths, self.tbins, placed_cap(cap, self.tbins), resumed
            )
            end = int(self.placed[-1] + row.lengths[-1]) if len(counts) else 0
            self.length = -(-end // self.tbins)
        self._writer: BatchWriter | None = None
        self._spec: Any = None

    def __repr__(self) -> str:
        ahead = f", lookahead={self.lookahead}" if self.lookahead else ""
        return f"tbin({self.row!r}, {self.tbins}{ahead})"

    def __len__(self) -> int:
        return self.length

    def locate(self, c: int) -> tuple[int, int, int]:
        """Return ``(j, start, stop)``: chunk ``c`` covers steps start:stop of stream j."""
        j = int(np.searchsorted(self.chunk_ends, c, side="right"))
        first = int(self.chunk_ends[j - 1]) if j else 0
        start = (c - first) * self.tbins
        return j, start, min(start + self.tbins, int(self.row.lengths[j]))

    def read(self, c: int) -> tuple[Any, int, int]:
        """Read the valid steps of chunk ``c``: ``(data, stream index, first step)``."""
        j, start, stop = self.locate(c)
        return self.row.read(j, start, stop), int(self.row.stream_ids[j]), start

    def spec(self) -> Any:
        """Zero-step arrays with the dtype and step shape of the data, or None if empty."""
        if self._spec is None and len(self):
            self._spec = step_spec_of(self.row.read(0, 0, 1))
        return self._spec

    def describe_item(self, c: int) -> str:
        """Which stream and steps chunk ``c`` reads."""
        return self.writer().describe(c)

    def writer(self) -> BatchWriter:
        """The row as a one-row batch writer (made once)."""
        if self._writer is None:
            self._writer = BatchWriter([self], "pack" if self.pack else "zeros", self.tbins)
        return self._writer

    def release(self) -> None:
        """Close the file the row has open."""
        self.row.release()
        if self._writer is not None:
            self._writer.forget()

    def __getitem__(self, c: int) -> Chunk:
        n, given = len(self), c
        if c < 0:
            c += n
        if not 0 <= c < n:
            raise IndexError(f"chunk {given} out of range for {n} chunks")
        b = self.writer().batch(c, self.spec())
        return Chunk(tree_map(lambda a: a[0], b.data), b.reset[0], *(f[0] for f in b[2:]))


def tbin(
    row: Row,
    tbins: int,
    *,
    pack: bool = False,
    max_streams_per_chunk: int | None = None,
    lookahead: int = 0,
) -> TBinned:
    """Cut a row into chunks of ``tbins`` steps; a chunk never spans two streams.

    The last chunk of a stream is padded (zeros, ``valid`` False) and the next chunk
    starts the next stream at its step 0, with ``reset`` set. With ``pack`` the next
    stream starts right after inside the same chunk (``step == 0`` marks it; ``reset`` is
    set when a chunk starts with a stream's first step), and only the end of the row is
    padded. ``max_streams_per_chunk`` caps the streams one packed chunk holds: once it
    has that many, the rest of the chunk is padding and the next stream starts the next
    chunk. A stream of the row that goes on from a step other than 0 (a segment other
    than its stream's first, or the rest of a stream begun before a resume: flagged in
    ``Row(resumed=...)``, as the loader's rows are) has no step 0 to mark it: packed, it
    starts the next chunk, after padding, where ``reset`` marks it.

    With ``lookahead=k`` every per-step field of a chunk (``data``, ``valid``,
    ``stream``, ``step``) holds ``tbins + k`` steps: the first ``tbins`` are the chunk
    without look-ahead, the last ``k`` the steps that follow, in the same stream, the
    chunk's last step (padding where that stream ends, or where the chunk's last step is
    padding). A segment's look-ahead goes on in its source. So for next-step prediction
    (input at t, target at t + 1 where ``stream`` is equal and ``step`` consecutive)
    every step but the first of every stream is a target exactly once.

    Args:
        row: a row from :func:`interleave_streams`.
        tbins: steps per chunk.
        pack: pack the streams of the row, without padding between them.
        max_streams_per_chunk: with ``pack``, the most streams a chunk may hold.
        lookahead: steps of the stream after the chunk that every chunk also holds.

    Returns:
        A lazy sequence of :class:`Chunk`.

    Raises:
        ValueError: ``tbins < 1``, or ``lookahead < 0``.
        TypeError: ``lookahead`` is not an integer.

    Example:
        >>> import numpy as np
        >>> from streamseq import interleave_streams
        >>> (row,) = interleave_streams([np.arange(5), np.arange(100, 102)], 1)
        >>> chunks = tbin(row, 3)
        >>> [c.data.tolist() for c in chunks]
        [[0, 1, 2], [3, 4, 0], [100, 101, 0]]
        >>> [bool(c.reset) for c in chunks]
        [True, False, True]
        >>> [c.data.tolist() for c in tbin(row, 3, pack=True)]
        [[0, 1, 2], [3, 4, 100], [101, 0, 0]]
        >>> [c.data.tolist() for c in tbin(row, 3, pack=True, max_streams_per_chunk=1)]
        [[0, 1, 2], [3, 4, 0], [100, 101, 0]]
        >>> [c.data.tolist() for c in tbin(row, 2, lookahead=1)]
        [[0, 1, 2], [2, 3, 4], [4, 0, 0], [100, 101, 0]]
        >>> [c.step.tolist() for c in tbin(row, 2, lookahead=1)]
        [[0, 1, 2], [2, 3, 4], [4, -1, -1], [0, 1, -1]]
    """
    return TBinned(row, tbins, pack, max_streams_per_chunk, lookahead)
