"""Shared-memory slots: where a worker process builds an item for the main process.

The main process allocates ``count`` slots of ``size`` bytes (:class:`Slots`) and gives
a free one with each job. The worker makes it current while it evaluates the item
(:mod:`streamseq.workers.shm`: arrays the item allocates there are written once, where the main
process maps them) and pickles the item with its buffers placed in the slot
(:func:`pickle_into`). The main process unpickles views of the slot
(:meth:`Slots.lease`); the slot is free again once every view of it is gone, and
once every child forked while it was held has its own copy (:mod:`.forks`).
"""

from __future__ import annotations

import ctypes
import multiprocessing.sharedctypes
import os
import pickle
import threading
import weakref
from typing import Any

import numpy as np

from . import forks as _forks
from . import shm as _shm
from .placed import place
from .wire import pack


def shared_bytes(size: int) -> Any:
    """``RawArray("B", size)`` without zeroing it in this process.

    Every item is written before it is read, and RawArray's ``memset`` would touch all
    the pages here, in the main process, before each worker starts (10 ms for 32 MB).

    Example:
        >>> len(memoryview(shared_bytes(16)).cast("B"))
        16
    """
    new = getattr(multiprocessing.sharedctypes, "_new_value", None)  # the allocation only
    if new is None:
        return multiprocessing.sharedctypes.RawArray("B", size)
    return new(ctypes.c_ubyte * size)


class Slots:
    """``count`` slots of ``size`` bytes of shared memory, handed out and taken back.

    A slot is held by the jobs it was given to until their results arrive, then by the
    views of it that were delivered (:meth:`lease`); it is free again when neither is
    left. Jobs taken with the same ``key`` by different parties share one slot (the
    workers of each group of rows of a loader writing their rows of the same batches,
    :mod:`.placed`): it is free again once every one of them is done and every view of
    it is gone. A party that took a key already gets a new slot for it (and the key
    goes with that one): while a slot is held, each party writes its part of it once,
    so nothing delivered from a slot is ever written again, whatever the keys (blocks
    numbered from 0 at every pass, an epoch planned again after a resume). The slots
    may outlive the workers that wrote them (a loader keeps them from one pass to the
    next): what a stopped set of workers still held is given back by its ``stop()``.

    A slot held when the process forks is given to the workers again only once the
    child has its own copy of it, or has ended (:mod:`.forks`).

    Args:
        count: number of slots (0 or ``size`` 0: no shared memory, items are pickled).
        size: bytes per slot.

    Example:
        >>> slots = Slots(2, 64)
        >>> start = slots.take()
        >>> view = slots.lease(start, [(start, start + 8)])[0]
        >>> len(slots.free)
        1
        >>> del view
        >>> len(slots.free)
        2
    """

    def __init__(self, count: int, size: int):
        self.size = max(0, int(size))
        self.count = int(count)
        # whole pages around the slots, so that a child can copy theirs (:mod:`.forks`)
        self.memory = shared_bytes(max(1, count * self.size) + 2 * _shm.PAGE)
        self.origin = -ctypes.addressof(self.memory) % _shm.PAGE  # where slot 0 starts
        self.free = {self.origin + k * self.size for k in range(count)} if self.size else set()
        self.owner = os.getpid()  # a forked child has its own slots, never these
        self._holds: dict[int, int] = {}  # start of a held slot -> its holds
        self._keys: dict[Any, tuple[int, set]] = {}  # key -> its slot, the parties in it
        self._key_of: dict[int, Any] = {}
        self._children: dict[int, list[_forks.Inherited]] = {}  # slots a child may see
        self._waiting: set[int] = set()  # slots given back that a child may still see
        self.lock = threading.RLock()  # (finalizers give slots back from any thread)
        _forks.register(self)

    def take(self, key: Any = None, party: Any = None) -> int | None:
        """The start of a free slot, or None when every slot is held.

        With ``key``: the slot already given to that key, if it is still held and
        ``party`` has not taken it yet.
        """
        with self.lock:
            if key is not None:
                shared = self._keys.get(key)
                if shared is not None and party not in shared[1]:
                    shared[1].add(party)
                    self._holds[shared[0]] += 1
                    return shared[0]
            if not self.free and self._waiting:
                self._unblock()
            try:
                start = self.free.pop()
            except KeyError:
                return None
            self._holds[start] = 1
            if key is not None:
                self._keys[key] = (start, {party})
                self._key_of[start] = key
            return start

    def new_parties(self) -> None:
        """Workers are started anew: none of them joins a slot that earlier ones took.

        A slot of earlier workers may still be held (a batch the training loop keeps);
        the new workers may split the rows otherwise (groups of other sizes: parties
        that never took its key), and one joining it would write rows of a delivered
        batch. Each key they take gets a slot of its own.

        Example:
            >>> slots = Slots(2, 64)
            >>> held = slots.take(key=0, party=(0, 4))
            >>> slots.new_parties()
            >>> slots.take(key=0, party=(2, 4)) == held
            False
        """
        with self.lock:
            self._keys.clear()

    def give_back(self, start: int | None) -> None:
        """Let go of one hold of the slot at ``start``; free once none is left (None: no slot)."""
        if start is None:
            return
        with self.lock:
            holds = self._holds.get(start, 1) - 1
            if holds > 0:
                self._holds[start] = holds
                return
            self._holds.pop(start, None)
            key = self._key_of.pop(start, None)
            if key is not None and self._keys.get(key, (None,))[0] == start:
                del self._keys[key]
            if start in self._children:
                self._waiting.add(start)  # (free once the children have their copy)
                self._unblock()
            else:
                self.free.add(start)

    def _unblock(self) -> None:
        """Free the slots given back whose forked children no longer see them."""
        for start in list(self._waiting):
            children = [c for c in self._children[start] if not c.done()]
            if children:
                self._children[start] = children
                continue
            del self._children[start]
            self._waiting.discard(start)
            self.free.add(start)

    def held(self) -> int:
        """The number of slots held (by jobs in flight or by views delivered)."""
        return len(self._holds)

    def held_starts(self) -> list[int]:
        """The starts of the slots held now."""
        return list(self._holds)

    def span(self, start: int) -> tuple[int, int]:
        """The address and length of the slot at ``start``."""
        return ctypes.addressof(self.memory) + start, self.size

    def inherited(self, starts: list[int], child: _forks.Inherited) -> None:
        """The slots at ``starts`` may be seen by ``child``: not reused until it is done."""
        with self.lock:
            for start in starts:
                self._children.setdefault(start, []).append(child)

    def lease(self, start: int, regions: list[tuple[int, int]]) -> list[memoryview]:
        """Views of ``regions`` of the slot at ``start``; it is free again when all are gone.

        The views share one array over the slot: once the last view (and every array
        made from one) is released, the array is collected and the slot given back. The
        lease takes over the hold of the job whose result it is.
        """
        whole = np.frombuffer(self.memory, np.uint8, self.size, start)
        finalizer = weakref.finalize(whole, self.give_back, start)
        finalizer.atexit = False
        view = memoryview(whole)
        return [view[a - start : z - start] for a, z in regions]


class Filling:
    """A worker's side of one slot: the item is built there, then pickled into it.

    Args:
        view: the shared memory of every slot, as bytes.
        base: its address.
        start: where the slot starts (None: no slot, the item is pickled whole).
        size: bytes per slot.
        rows: ``(first, total)``: this worker writes rows ``first, ...`` of batches of
            ``total`` rows that other workers write too, in the same slot
            (:mod:`.placed`); None: items of its own.
        pages: the pages of ``view`` this process mapped already (:class:`.shm.Pages`):
            each region is mapped before it is written; None: as it comes.
    """

    def __init__(
        self,
        view: memoryview,
        base: int,
        start: int | None,
        size: int,
        rows: tuple[int, int] | None = None,
        pages: _shm.Pages | None = None,
    ):
        self.view, self.base, self.start = view, base, start
        self.regions: list[tuple[int, int]] = []
        self.slot = (
            None if start is None else _shm.Slot(self.view, start, start + size, rows, pages)
        )

    def __enter__(self) -> Filling:
        _shm.use(self.slot)
        return self

    def __exit__(self, *exc: Any) -> None:
        _shm.use(None)

    def place(self, buffer: pickle.PickleBuffer) -> bool:
        """Where pickle puts a buffer: in the slot (False), or in the pickle (True)."""
        slot = self.slot
        data = buffer.raw()
        size = data.nbytes
        at = slot.start
        if size and not data.readonly:
            at = ctypes.addressof(ctypes.c_char.from_buffer(data)) - self.base
        elif size:
            at = np.frombuffer(data, np.uint8).ctypes.data - self.base
        if not slot.start <= at <= at + size <= slot.stop:  # not built in the slot
            at = -(-slot.offset // _shm.ALIGN) * _shm.ALIGN
            if at + size > slot.stop:
                return True  # in the pickle
            if slot.pages is not None:
                slot.pages.map(at, at + size)
            self.view[at : at + size] = data
            slot.offset = at + size
        self.regions.append((at, at + size))
        return False

    def pickle(self, value: Any) -> tuple[bytes, list[tuple[int, int]]]:
        """``value`` pickled, and the regions of the slot where its buffers are.

        Raises what pickling raises (an item that does not pickle).
        """
        self.regions = []
        if self.slot is None:
            return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), []
        if self.slot.rows is not None:
            value = place(value, self.slot) or value  # written in place: sent as such
        payload = pickle.dumps(
            pack(value), protocol=pickle.HIGHEST_PROTOCOL, buffer_callback=self.place
        )
        return payload, self.regions
