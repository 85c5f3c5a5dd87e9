"""Where an item is built: straight in the shared-memory slot of the job, in a worker.

A prefetch worker process (see :mod:`streamseq.prefetch`) makes the slot of the job it is
evaluating current; :func:`empty` then carves arrays out of that slot, so the item is
written once, where the main process reads it, and pickling it copies nothing. Outside a
worker, or when the slot is full, :func:`empty` is :func:`numpy.empty`.

Lifetime of the shared memory
=============================

The slots are one block that the main process allocates (:mod:`.slots`, through
:mod:`multiprocessing.heap`): a file in ``/dev/shm`` (``pym-<pid>-...``) that is
**unlinked as soon as it is created**, its descriptor kept. The memory lives while a
process maps it or holds the descriptor: workers receive it by inheritance (fork) or a
duplicated descriptor (spawn), never by name. So no name is ever left in ``/dev/shm``,
whatever happens, and nobody needs to unlink anything: when the last process that maps
the block ends, the kernel frees it. Workers create no shared memory of their own.

That makes the memory's lifetime that of the processes: the main process's, and each
worker's. The workers end with the main process, even killed and even inside a read
that never returns (:mod:`.watchdog`), so a killed main process leaves no memory behind.
Only the process that started the workers stops them (:mod:`.ownership`): a forked child
inherits the mapping, and unmaps its copy when it exits.
"""

from __future__ import annotations

import functools
import math
import mmap
from typing import Any

import numpy as np

ALIGN = 64
PAGE = mmap.PAGESIZE
SEEN = 4096  # regions a worker remembers it mapped


class Pages:
    """The pages of the slots that this process has mapped already: each is mapped once.

    A worker's page tables start without the slots' pages (a fork copies none of a
    shared mapping's), so its first write to each page of the slots would fault, one
    page at a time, at every pass its workers are started for (1 to 1.5 us a page: 12
    ms for a worker's half of eight 9.6 MB batches). :meth:`map` reads one byte of each
    page of a region before it is written: a read fault maps the pages of the block
    around it that the memory has already (the kernel's fault-around, 16 pages by
    default), writable, since the mapping is shared, so a region of pages written at an
    earlier pass costs a sixteenth of the faults. Pages never written yet (the first
    pass of new slots) cost the same one fault each. The data are not changed.

    Args:
        view: the shared memory of every slot, as bytes.
        base: its address.

    Example:
        >>> memory = bytearray(5 * PAGE)
        >>> pages = Pages(memoryview(memory), 0)
        >>> pages.map(PAGE - 1, 2 * PAGE + 1)
        3
        >>> pages.map(PAGE, 2 * PAGE)  # mapped already
        0
    """

    def __init__(self, view: memoryview, base: int):
        self.bytes = np.frombuffer(view, np.uint8)
        self.shift = base % PAGE  # where the view starts in its first page
        self.mapped = np.zeros((len(self.bytes) + self.shift) // PAGE + 1, bool)
        self.seen: set[tuple[int, int]] = set()  # regions mapped (the layouts repeat)

    def map(self, begin: int, end: int) -> int:
        """Map the pages of ``view[begin:end]`` not mapped yet: the number of pages read.

        A region past the end of the view is mapped up to its end.
        """
        end = min(end, len(self.bytes))
        region = begin, end
        if region in self.seen or end <= begin:
            return 0
        if len(self.seen) >= SEEN:  # (regions that do not repeat: checked page by page)
            self.seen.clear()
        self.seen.add(region)
        first, stop = (begin + self.shift) // PAGE, (end - 1 + self.shift) // PAGE + 1
        mapped = self.mapped[first:stop]
        if mapped.all():
            return 0
        pages = np.flatnonzero(~mapped) + first
        # one byte of each page (in ascending order: the fault-around maps the next ones)
        self.bytes.take(np.maximum(pages * PAGE - self.shift, begin))
        mapped[:] = True
        return len(pages)


class Slot:
    """The free part of one shared-memory slot: ``view[offset:stop]``.

    With ``rows`` ``(first, total)`` the slot holds whole batches that several workers
    write together, each its own rows: an array of ``n`` rows is rows ``first`` to
    ``first + n`` of an array of ``total`` rows reserved in the slot (the other rows are
    the other workers'), and :attr:`taken` records where (:mod:`.placed`).
    """

    def __init__(
        self,
        view: memoryview,
        start: int,
        stop: int,
        rows: tuple[int, int] | None = None,
        pages: Pages | None = None,
    ):
        self.view, self.start, self.offset, self.stop = view, start, start, stop
        self.rows, self.pages = rows, pages
        self.taken: dict[int, tuple[np.ndarray, int, str, tuple[int, ...]]] = {}

    def take(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray | None:
        """An uninitialised array in the slot, or None when it does not fit."""
        rows = self.rows
        if rows is not None and shape and rows[0] + shape[0] <= rows[1]:
            full, dtype, size = _reserved(shape, dtype, rows[1])
            begin = -(-self.offset // ALIGN) * ALIGN
            if size == 0 or begin + size > self.stop:
                return None
            self.offset = begin + size
            if self.pages is not None:  # (this worker's rows only)
                row = size // rows[1]
                self.pages.map(begin + rows[0] * row, begin + (rows[0] + shape[0]) * row)
            out = np.ndarray(full, dtype, self.view, begin)[rows[0] : rows[0] + shape[0]]
            self.taken[id(out)] = (out, begin - self.start, dtype.str, full)
            return out
        dtype = np.dtype(dtype)
        size = math.prod(shape) * dtype.itemsize
        begin = -(-self.offset // ALIGN) * ALIGN
        if size == 0 or begin + size > self.stop:
            return None
        self.offset = begin + size
        if self.pages is not None:
            self.pages.map(begin, begin + size)
        return np.frombuffer(self.view, dtype, size // dtype.itemsize, begin).reshape(shape)


@functools.lru_cache(maxsize=256)
def _reserved(shape: tuple[int, ...], dtype: Any, total: int) -> tuple[tuple, np.dtype, int]:
    """The shape, dtype and bytes of the array of ``total`` rows that rows of ``shape`` are of."""
    dtype = np.dtype(dtype)
    full = (total, *shape[1:])
    return full, dtype, math.prod(full) * dtype.itemsize


_current: Slot | None = None


def use(slot: Slot | None) -> None:
    """Make ``slot`` the one :func:`empty` allocates from (None: ordinary memory)."""
    global _current
    _current = slot


def current() -> Slot | None:
    """The slot :func:`empty` allocates from, if any."""
    return _current


def empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised array, in the current shared-memory slot when there is one.

    Example:
        >>> empty((2, 3), np.int64).shape
        (2, 3)
    """
    slot = _current
    if slot is not None:
        out = slot.take(shape, dtype)
        if out is not None:
            return out
    return np.empty(shape, dtype)
