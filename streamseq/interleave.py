"""Assign streams to rows: the cheap, deterministic plan that everything else follows."""

from __future__ import annotations

import heapq
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._tree import leaves, tree_map
from .streams import _PID, StreamRef, as_refs


class Row:
    """The lazy concatenation of the streams assigned to one row.

    Only the stream being read is kept open (per process), so a row never holds more
    than one file open.

    Args:
        refs: the streams of the row, in reading order.
        lengths: their lengths, when already known.
        stream_ids: their indices in the user's list, when already known (else each
            ref's ``index``).

    Example:
        >>> import numpy as np
        >>> row = Row(as_refs([np.arange(3), np.arange(10, 12)]))
        >>> len(row), row[2:4].tolist(), row.stream_ids.tolist()
        (5, [2, 10], [0, 1])
    """

    def __init__(
        self,
        refs: Sequence[StreamRef],
        lengths: Sequence[int] | None = None,
        stream_ids: Sequence[int] | None = None,
    ):
        self.refs = list(refs)
        if lengths is None:
            lengths = [len(r) for r in self.refs]
        self.lengths = np.asarray(lengths, dtype=np.int64)
        if stream_ids is None:
            stream_ids = [r.index for r in self.refs]
        self.stream_ids = np.asarray(stream_ids, dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)
        self._current = -1
        self._pid = -1

    def __repr__(self) -> str:
        return f"Row(streams={self.stream_ids.tolist()}, steps={len(self)})"

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_current"], state["_pid"] = -1, -1
        return state

    def switch(self, j: int) -> StreamRef:
        """Make the row's ``j``-th stream the current one, closing the one before."""
        if self._pid != _PID[0]:
            self._current, self._pid = -1, _PID[0]
        if self._current != j:
            if self._current >= 0:
                self.refs[self._current].close()
            self._current = j
        return self.refs[j]

    def read(self, j: int, start: int, stop: int) -> Any:
        """Read steps ``start:stop`` of the row's ``j``-th stream, closing the one before."""
        return self.switch(j).read(start, stop)

    def release(self) -> None:
        """Close the stream currently open, if any."""
        if self._current >= 0 and self._pid == _PID[0]:
            self.refs[self._current].close()
        self._current = -1

    def __getitem__(self, key: int | slice) -> Any:
        n = len(self)
        if isinstance(key, slice):
            start, stop, stride = key.indices(n)
            if stride != 1:
                raise ValueError("Row slices must have step 1")
            stop = max(start, stop)
            first = int(np.searchsorted(self.offsets, start, side="right")) - 1
            parts = []
            while start < stop:
                end = min(stop, int(self.offsets[first + 1]))
                off = int(self.offsets[first])
                parts.append(self.read(first, start - off, end - off))
                start, first = end, first + 1
            if not parts:
                raise IndexError("empty slice of a Row")
            if len(parts) == 1:
                return parts[0]
            return tree_map(lambda *xs: np.concatenate(xs), *parts)
        k = key + n if key < 0 else key
        if not 0 <= k < n:
            raise IndexError(f"step {key} out of range for a row of {n} steps")
        item = self[k : k + 1]
        return tree_map(lambda a: a[0], item) if leaves(item) else item


def interleave_streams(
    streams: Sequence[Any],
    num_rows: int,
    *,
    lengths: Sequence[int] | None = None,
    shuffle: bool = False,
    seed: int = 0,
    epoch: int = 0,
) -> list[Row]:
    """Distribute streams over ``num_rows`` rows, each row a lazy concatenation of streams.

    Streams are taken in order (a permutation drawn from ``(seed, epoch)`` when
    ``shuffle``) and each goes to the row with the fewest steps so far (lowest row index on
    ties), so the first ``num_rows`` streams start the rows in order and the longest row
    exceeds the shortest by at most the longest stream. Empty streams are skipped.

    Args:
        streams: streams or zero-argument openers.
        num_rows: number of rows (the batch size).
        lengths: declared lengths, sparing the probe of openers (each opener is otherwise
            opened once, in this process, to measure it).
        shuffle: draw a new stream order for every epoch.
        seed: seed of the shuffle.
        epoch: epoch of the shuffle.

    Returns:
        ``num_rows`` :class:`Row` objects (some empty when there are fewer streams).

    Raises:
        ValueError: no streams, ``num_rows < 1``, or bad ``lengths``.

    Example:
        >>> rows = interleave_streams([[0] * 5, [1] * 2, [2] * 2, [3] * 4], 2)
        >>> [r.stream_ids.tolist() for r in rows]
        [[0], [1, 2, 3]]
    """
    if num_rows < 1:
        raise ValueError(f"num_rows must be >= 1, got {num_rows}")
    refs = as_refs(streams, lengths)
    if lengths is not None:  # declared: no need to ask every stream
        sizes = np.asarray(lengths, dtype=np.int64)
    else:
        sizes = np.fromiter((len(r) for r in refs), np.int64, len(refs))
    ids = np.fromiter((r.index for r in refs), np.int64, len(refs))
    assignment = assign_rows(sizes, num_rows, shuffle=shuffle, seed=seed, epoch=epoch)
    return [Row(_pick(refs, m), sizes[m], ids[m]) for m in assignment]


def _pick(items: list[Any], indices: np.ndarray) -> list[Any]:
    """``[items[i] for i in indices]``, at C speed."""
    if len(indices) == 0:
        return []
    if len(indices) == 1:
        return [items[int(indices[0])]]
    return list(operator.itemgetter(*indices.tolist())(items))


def assign_rows(
    lengths: np.ndarray, num_rows: int, *, shuffle: bool = False, seed: int = 0, epoch: int = 0
) -> list[np.ndarray]:
    """The plan behind :func:`interleave_streams`: stream indices of each row, in order.

    Example:
        >>> [a.tolist() for a in assign_rows(np.array([5, 2, 0, 2, 4]), 2)]
        [[0], [1, 3, 4]]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.arange(len(lengths))
    if shuffle:
        order = np.random.default_rng([seed, epoch]).permutation(len(lengths))
    order = order[lengths[order] > 0]
    row_of = np.empty(len(order), dtype=np.int64)
    heap = [(0, r) for r in range(num_rows)]
    replace = heapq.heapreplace
    for k, n in enumerate(lengths[order].tolist()):
        total, r = heap[0]
        row_of[k] = r
        replace(heap, (total + n, r))
    by_row = np.argsort(row_of, kind="stable")
    bounds = np.searchsorted(row_of[by_row], np.arange(num_rows + 1))
    ordered = order[by_row]
    return [ordered[bounds[r] : bounds[r + 1]] for r in range(num_rows)]
