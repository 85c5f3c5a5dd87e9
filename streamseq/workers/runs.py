"""A worker's group as any set of rows: runs of consecutive rows, each written in place.

A group of rows (:func:`~streamseq.plan.balance.balanced_sets`) need not be contiguous:
it is then runs of consecutive rows (rows 0-1 and 5 of 8, say). The worker reads each run
as a sequence of its own (:class:`Runs`); in a shared slot in rows mode
(:mod:`.placed`) each run's arrays are the rows of that run in the same arrays of all
the rows (the slot's allocations start again at the same place for every run), so the
worker writes every row of its set at its place and the main process still gets whole
batches over the slot, copying nothing. Elsewhere (threads, a slot of its own) an item
is the runs' micro-batches (:class:`RunItems`).

In the main process, :func:`in_row_order` gives the groups as one sequence per run, in
the order of the rows (:class:`RunOf`): concatenated, they are the batch's rows, as
contiguous groups are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._tree import leaves, tree_map
from . import shm as _shm


class RunItems:
    """An item of a group of several runs: each run's micro-batch, and its first row.

    Attributes:
        parts: the micro-batch of each run, in the group's order.
        firsts: the row (of all the rows) each run starts at.
    """

    __slots__ = ("firsts", "parts")

    def __init__(self, parts: list[Any], firsts: Sequence[int]):
        self.parts, self.firsts = parts, tuple(int(f) for f in firsts)

    def __reduce__(self) -> tuple:
        return RunItems, (self.parts, self.firsts)


def runs_of(rows: np.ndarray) -> list[tuple[int, int]]:
    """The runs of consecutive rows of the sorted ``rows``: ``(first, count)`` each.

    Example:
        >>> runs_of(np.array([0, 1, 5, 6, 7, 9]))
        [(0, 2), (5, 3), (9, 1)]
    """
    rows = np.asarray(rows, dtype=np.int64)
    if not len(rows):
        return []
    cut = np.flatnonzero(np.diff(rows) != 1) + 1
    starts = np.concatenate([[0], cut])
    counts = np.diff(np.concatenate([starts, [len(rows)]]))
    return [(int(rows[a]), int(n)) for a, n in zip(starts, counts, strict=True)]


class Runs:
    """The micro-batches of a group of rows made of several runs (one sequence each).

    Args:
        parts: one sequence of micro-batches per run (a :class:`~streamseq.ZipBatch`),
            in the order of the rows.
        firsts: the row (of all the rows) each run starts at.
    """

    def __init__(self, parts: Sequence[Any], firsts: Sequence[int]):
        self.parts, self.firsts = list(parts), tuple(int(f) for f in firsts)
        if len(self.parts) != len(self.firsts) or not self.parts:
            raise ValueError(f"{len(self.parts)} runs for {len(self.firsts)} first rows")
        self.num_rows = sum(p.num_rows for p in self.parts)
        self.length = len(self.parts[0])

    @property
    def spec_(self) -> Any:
        """The data spec of the micro-batches (that of the first run's)."""
        return self.parts[0].spec_

    @property
    def spec(self) -> Any:
        """The data spec of the micro-batches, read from a stream if unknown."""
        return self.parts[0].spec

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> RunItems:
        """Item ``i`` of every run; in a slot in rows mode, each run at its rows."""
        slot = _shm.current()
        if slot is None or slot.rows is None:
            return RunItems([p[i] for p in self.parts], self.firsts)
        kept, total = slot.rows, slot.rows[1]
        begin = end = slot.offset
        got: list[Any] = []
        layout = None
        try:
            for part, first in zip(self.parts, self.firsts, strict=True):
                slot.rows, slot.offset = (first, total), begin  # (the same arrays again)
                got.append(part[i])
                end = max(end, slot.offset)
                mine = slot_layout(slot, got[-1])
                if mine is None or (layout is not None and mine != layout):
                    break  # (an array not of all the rows: another run may have written it)
                layout = mine
            else:
                return RunItems(got, self.firsts)
        finally:
            slot.rows, slot.offset = kept, end
        _shm.use(None)  # each run again, in memory of its own
        try:
            return RunItems([p[i] for p in self.parts], self.firsts)
        finally:
            _shm.use(slot)

    def describe_item(self, i: int) -> str:
        """Item ``i`` as each run describes it (its streams and steps)."""
        said = []
        for part, first in zip(self.parts, self.firsts, strict=True):
            describe = getattr(part, "describe_item", None)
            what = describe(i) if callable(describe) else f"item {i}"
            said.append(f"rows from {first}: {what}")
        return "; ".join(said)

    def release(self) -> None:
        """Release every run's sequence (close its files)."""
        for part in self.parts:
            release = getattr(part, "release", None)
            if release is not None:
                release()


def slot_layout(slot: Any, item: Any) -> tuple | None:
    """Where each array of ``item`` is among the slot's arrays of all the rows, or None.

    None when an array is not one the slot reserved for all the rows (:mod:`.placed`).
    """
    out = []
    for a in leaves(item) if isinstance(item, tuple) else [item]:
        record = slot.taken.get(id(a))
        if record is None or record[0] is not a:
            return None
        out.append(record[1:])
    return tuple(out)


class RunOf:
    """Run ``run`` of a worker's group: rows ``begin:end`` of the group's micro-batches.

    Args:
        group: the group's micro-batches (an :class:`~.blocks.Unblocked`, or a sequence).
        run: which run of the group.
        begin: the run's first row in the group's micro-batches.
        end: past its last.
        owner: whether this run releases the group (the first run of each group does).
    """

    def __init__(self, group: Any, run: int, begin: int, end: int, owner: bool):
        self.group, self.run, self.begin, self.end, self.owner = group, run, begin, end, owner
        if hasattr(group, "prepare"):
            self.prepare = group.prepare
        if hasattr(group, "block"):
            self.block = self._block

    def __len__(self) -> int:
        return len(self.group)

    def __getitem__(self, i: int) -> Any:
        item = self.group[i]
        if type(item) is RunItems:
            return item.parts[self.run]
        begin, end = self.begin, self.end
        return tree_map(lambda a: a[begin:end], item)

    def _block(self, i: int) -> tuple[Any, int]:
        got, k = self.group.block(i)
        run = getattr(got, "run", None)
        return (got if run is None else run(self.run)), k

    def release(self) -> None:
        """Release the group (once: by its first run)."""
        if self.owner:
            self.group.release()


def in_row_order(groups: Sequence[Any], rows: Sequence[np.ndarray | None]) -> list[Any]:
    """``groups`` (one per worker, of the sorted ``rows`` each) as runs in row order.

    None in ``rows``: the groups are contiguous, in order; they are given back as they are.

    Example:
        >>> a = [np.array([[0], [1], [5]])]  # rows 0, 1 and 5
        >>> b = [np.array([[2], [3], [4]])]
        >>> runs = in_row_order([a, b], [np.array([0, 1, 5]), np.array([2, 3, 4])])
        >>> np.concatenate([r[0] for r in runs]).ravel().tolist()
        [0, 1, 2, 3, 4, 5]
    """
    if any(r is None for r in rows):
        return list(groups)
    found = []
    for w, (group, mine) in enumerate(zip(groups, rows, strict=True)):
        at = 0
        for r, (first, count) in enumerate(runs_of(mine)):
            found.append((first, RunOf(group, r, at, at + count, r == 0), w))
            at += count
    found.sort(key=lambda x: x[0])
    return [run for _, run, _ in found]
