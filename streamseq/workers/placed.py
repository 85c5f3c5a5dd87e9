"""Blocks of batches written in place: each worker its rows of the same shared batches.

The workers of a loader read one group of rows each, and the main process hands out
batches of all the rows. Instead of each worker building its micro-batches in a slot of
its own and the main process copying them into one batch, the workers of a loader share
one set of slots (:class:`~.slots.Slots` with keys): the job of block ``j`` gets the same
slot in every worker, and each worker's slot is in rows mode (:class:`~.shm.Slot` with
``rows``): every array the batch writer allocates is reserved for all the rows of the
batch, and the worker writes its own rows of it. Once every worker has handed block
``j`` over, the slot holds whole batches, and the main process gives them out as tensors
over the shared memory, copying nothing.

A worker sends such a block as a :class:`Placed`: the slot's bytes (an out-of-band pickle
buffer, not copied) and where each array of each batch is, plus the valid steps of its
rows. Anything else (an item that is not a tuple of arrays the slot holds, a slot that
was full) is sent as before, and the main process copies: the shortcut is taken only
where it is exact.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from .._tree import leaves, rebuilt, tree_map
from .blocks import Failed
from .runs import RunItems, slot_layout
from .shm import Slot

Layout = tuple[tuple[int, str, tuple[int, ...]], ...]
"""Where each leaf of an item is in the slot: (offset, dtype, shape of all the rows)."""


def _skeleton(item: Any) -> Any:
    return tree_map(_none, item)


def _none(_: Any) -> None:
    return None


def place(value: Any, slot: Slot) -> Placed | None:
    """``value`` (a block: a list of items, perhaps ending :class:`Failed`) as a Placed.

    None unless every leaf of every item is an array that ``slot`` reserved in rows mode,
    with the same layout from one item to the next (a fixed stride).
    """
    if type(value) is not list or not value or slot.rows is None or not slot.taken:
        return None
    items, failed = value, None
    if isinstance(items[-1], Failed):
        items, failed = items[:-1], items[-1]
    if items and type(items[0]) is RunItems:  # (a group of several runs: each at its rows)
        return _place_runs(items, failed, slot)
    if not items or not isinstance(items[0], tuple):
        return None
    taken = slot.taken
    kind = type(items[0])
    flat = hasattr(kind, "_fields") and all(id(a) in taken for a in items[0])
    skeleton = rebuilt(items[0], [None] * len(items[0])) if flat else _skeleton(items[0])
    layouts: list[Layout] = []
    for item in items:
        if flat and type(item) is not kind:
            return None
        layout = []
        for a in item if flat else leaves(item):
            record = taken.get(id(a))
            if record is None or record[0] is not a:
                return None
            layout.append(record[1:])
        layouts.append(tuple(layout))
    first = layouts[0]
    stride = 0
    if len(layouts) > 1:
        stride = layouts[1][0][0] - first[0][0]
        for m, layout in enumerate(layouts):
            if any(
                (o - m * stride, d, s) != f for (o, d, s), f in zip(layout, first, strict=True)
            ):
                return None
    if not flat and any(_skeleton(item) != skeleton for item in items[1:]):
        return None
    rows = (slot.rows[0], len(items[0][0] if flat else leaves(items[0])[0]), slot.rows[1])
    steps = _valid_steps(slot, items, first, stride, rows) if flat else None
    used = slot.view[slot.start : slot.offset]
    return Placed(used, rows, first, stride, len(items), skeleton, steps, failed)


def _place_runs(items: list[Any], failed: Failed | None, slot: Slot) -> Placed | None:
    """Items of several runs (:class:`~.runs.RunItems`) as a Placed, if each is in place.

    Every run's arrays must be the same arrays of all the rows (the same layout), each
    run's rows at their place; then the block is that of the first run, with the runs.
    """
    if any(type(it) is not RunItems for it in items):
        return None
    firsts = items[0].firsts
    runs = len(firsts)
    if any(it.firsts != firsts or len(it.parts) != runs for it in items):
        return None
    counts = []
    for r in range(runs):
        part = [it.parts[r] for it in items]
        for item, whole in zip(part, items, strict=True):
            if not isinstance(item, tuple):
                return None
            mine = slot_layout(slot, item)  # (each array where the first run's is)
            if mine is None or mine != slot_layout(slot, whole.parts[0]):
                return None
        counts.append(len(leaves(part[0])[0]))
    placed = place([it.parts[0] for it in items], slot)
    if placed is None:
        return None
    placed.failed = failed
    total = placed.rows[2]
    placed.runs = tuple(zip(firsts, counts, strict=True))
    placed.rows = (firsts[0], sum(counts), total)
    if placed.steps is not None:  # (a named tuple with ``valid``: counted for each run)
        counted = [
            _valid_steps(
                slot, [it.parts[r] for it in items], placed.layout, placed.stride, (f, n, total)
            )
            for r, (f, n) in enumerate(placed.runs)
        ]
        if any(c is None for c in counted):
            placed.steps = None
            return placed
        placed.run_steps = counted  # type: ignore[assignment]
        placed.steps = np.sum(counted, axis=0).tolist()
    return placed


def _valid_steps(
    slot: Slot, items: list[Any], layout: Layout, stride: int, rows: tuple[int, int, int]
) -> list[int] | None:
    """The valid steps of this worker's rows in each item (one count for the block)."""
    fields = getattr(type(items[0]), "_fields", ())
    if "valid" not in fields:
        return None
    offset, dtype, shape = layout[fields.index("valid")]
    if np.dtype(dtype) != np.bool_ or len(shape) != 2:
        return None
    first, count, _ = rows
    mine = np.ndarray(
        (len(items), count, shape[1]),
        np.bool_,
        slot.view,
        slot.start + offset + first * shape[1],
        (stride, shape[1], 1),
    )
    return np.count_nonzero(mine, axis=(1, 2)).tolist()


class Placed:
    """A block of items in a slot, each a row range of arrays of all the rows.

    Attributes:
        buffer: the slot's bytes (in the main process: a view of the shared memory; the
            slot is free again once no array made from it is left).
        rows: ``(first, count, total)``: the rows this worker wrote, of all.
        layout: where each leaf of the first item is (offset in the slot, dtype, shape
            of all the rows); item ``m`` is ``stride * m`` bytes further.
        count: the items.
        skeleton: the structure of an item, leaves None.
        steps: valid steps of this worker's rows in each item (None: not counted).
        failed: the error of item ``count`` (:class:`Failed`), or None.
    """

    __slots__ = (
        "_runs",
        "_stacked",
        "address",
        "buffer",
        "count",
        "failed",
        "flat",
        "layout",
        "rows",
        "run_steps",
        "runs",
        "skeleton",
        "steps",
        "stride",
    )

    def __init__(
        self,
        buffer: Any,
        rows: tuple[int, int, int],
        layout: Layout,
        stride: int,
        count: int,
        skeleton: Any,
        steps: list[int] | None,
        failed: Failed | None,
    ):
        self.buffer, self.rows, self.layout, self.stride = buffer, rows, layout, stride
        self.count, self.skeleton, self.steps, self.failed = count, skeleton, steps, failed
        self.address = 0
        self._stacked: list[np.ndarray] | None = None
        self.runs: tuple[tuple[int, int], ...] | None = None  # (first, count) of each run
        self.run_steps: list[list[int]] | None = None  # valid steps of each run, each item
        self._runs: list[Placed] | None = None
        self.flat = (  # a named tuple of arrays (a Batch of arrays): rebuilt in short
            hasattr(skeleton, "_make") and skeleton.count(None) == len(skeleton)
        )

    def __reduce__(self) -> tuple:
        args = (self.rows, self.layout, self.stride, self.count, self.skeleton, self.steps)
        runs = (self.runs, self.run_steps)
        return _placed, (pickle.PickleBuffer(self.buffer), *args, self.failed, runs)

    def run(self, r: int) -> Placed:
        """Run ``r`` of this worker's rows, as a Placed of the same slot (itself: one run).

        The runs of every worker, in row order, are one slot of whole items
        (:func:`same_slot`), as contiguous groups are.
        """
        if self.runs is None:
            return self
        if self._runs is None:
            made = []
            for (first, count), steps in zip(
                self.runs, self.run_steps or [None] * len(self.runs), strict=True
            ):
                one = Placed(
                    self.buffer,
                    (first, count, self.rows[2]),
                    self.layout,
                    self.stride,
                    self.count,
                    self.skeleton,
                    steps,
                    self.failed,
                )
                # (the arrays, where made already; else a run makes its own when used)
                one.address, one._stacked = self.address, self._stacked
                made.append(one)
            self._runs = made
        return self._runs[r]

    def stacked(self) -> list[np.ndarray]:
        """For each leaf, the arrays of all the rows of every item, stacked (views)."""
        if self._stacked is None:
            out = []
            for offset, dtype, shape in self.layout:
                dt = np.dtype(dtype)
                inner = [dt.itemsize]
                for n in reversed(shape[1:]):
                    inner.insert(0, inner[0] * n)
                out.append(
                    np.ndarray(
                        (self.count, *shape),
                        dt,
                        self.buffer,
                        offset,
                        (self.stride, *inner),
                    )
                )
            self._stacked = out
        return self._stacked

    def whole(self, m: int) -> Any:
        """Item ``m`` with all the rows (those of every worker that wrote the slot)."""
        arrays = [a[m] for a in self.stacked()]
        if self.flat:
            return rebuilt(self.skeleton, arrays)
        return _rebuild(self.skeleton, arrays)

    def item(self, m: int) -> Any:
        """Item ``m`` with this worker's rows only (of several runs: :class:`~.runs.RunItems`)."""
        if self.runs is not None:
            self.stacked()  # (made once, for all the runs)
            parts = [self.run(r).item(m) for r in range(len(self.runs))]
            return RunItems(parts, [first for first, _ in self.runs])
        first, count, _ = self.rows
        arrays = [a[m, first : first + count] for a in self.stacked()]
        return _rebuild(self.skeleton, arrays)


def _rebuild(skeleton: Any, arrays: list[np.ndarray]) -> Any:
    it = iter(arrays)
    return tree_map(lambda _: next(it), skeleton)


def _placed(buffer: Any, *args: Any) -> Placed:
    *args, (runs, run_steps) = args
    placed = Placed(memoryview(buffer).cast("B"), *args)
    placed.runs, placed.run_steps = runs, run_steps
    if len(placed.buffer):
        placed.address = np.frombuffer(placed.buffer, np.uint8, 1).ctypes.data
    return placed


def same_slot(blocks: list[Any]) -> bool:
    """Whether ``blocks`` (one per group, in row order) are one slot of whole items.

    They are when each is a :class:`Placed` of the same slot and layout, and their rows
    follow each other and cover all the rows.

    Example:
        >>> same_slot([[1], [2]])
        False
    """
    first = blocks[0]
    if type(first) is not Placed or not first.address:
        return False
    at = 0
    for b in blocks:
        if (
            type(b) is not Placed
            or b.address != first.address
            or b.layout != first.layout
            or b.stride != first.stride
            or b.rows[0] != at
        ):
            return False
        at += b.rows[1]
    return at == first.rows[2]
