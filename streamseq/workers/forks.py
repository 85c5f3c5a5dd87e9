"""Memory a forked child may hold: the parent reuses a slot only once the child cannot see it.

A batch delivered over the workers' shared memory (:mod:`.slots`) is a view of a
``MAP_SHARED`` mapping, and ``os.fork()`` (``multiprocessing``'s fork, a fork server's
children excepted) gives the child the same mapping: a child holding a batch would see
the parent's workers write the next batches into it once the parent let go of its copy.

So every fork from a process whose slots are held goes through three steps:

1. **Before the fork** (in the parent): the slots held then (by delivered batches or by
   jobs in flight) are noted, with a new pipe, and every set of slots is locked so that
   none is given back during the fork.
2. **In the child**, at once (before any of its code runs): the pages of those slots are
   made private (copied, then mapped again at the same address, ``MAP_PRIVATE``), so the
   child's arrays and tensors keep their addresses and contents but no longer share
   memory with the parent; then the child closes its end of the pipe. Where this cannot
   be done (another platform, a failing ``mmap``), the child keeps the pipe open: it is
   closed when the child ends (or calls ``exec``).
3. **In the parent**: each of those slots, once given back, waits (:class:`Inherited`)
   until the pipe reports its other end closed, before the workers may write it again.
   Until then the workers use the other slots, or send their items through the pipes
   (new memory for each, :mod:`.processes`).

A child thus pays one copy of the slots held when it was forked, and the parent never
writes memory a child may see. Worker processes that this package forks itself are not
such children: they hold no batch and write the slots they are given (:func:`starting_worker`).
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import select
import sys
import threading
import weakref
from collections.abc import Iterator
from typing import Any

from .shm import PAGE

_pools: weakref.WeakSet = weakref.WeakSet()  # every set of slots of this process
_local = threading.local()  # .worker: this thread is starting a worker process
_pending: list[tuple[int, int, list[Any], list[list[int]]]] = []  # (read, write, pools, held)


class Inherited:
    """The parent's end of a fork's pipe: done once the child closed its end (or ended).

    Example:
        >>> r, w = os.pipe()
        >>> child = Inherited(r)
        >>> child.done()
        False
        >>> os.close(w)
        >>> child.done()
        True
    """

    def __init__(self, fd: int):
        self.fd: int | None = fd

    def done(self) -> bool:
        """Whether the child no longer sees the slots it inherited (never blocks)."""
        fd = self.fd
        if fd is None:
            return True
        readable, _, _ = select.select([fd], [], [], 0)
        if not readable:
            return False
        self.close()  # (the child writes nothing: readable means its end is closed)
        return True

    def close(self) -> None:
        """Close the parent's end."""
        fd, self.fd = self.fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __del__(self) -> None:
        self.close()


def register(pool: Any) -> None:
    """Account for the slots of ``pool`` (a :class:`~.slots.Slots`) at every fork.

    ``pool`` has ``lock``, ``owner``, ``held_starts()``, ``inherited(starts, child)`` and
    ``span(start)`` (the bytes of a slot: address, length).
    """
    _pools.add(pool)


@contextlib.contextmanager
def starting_worker() -> Iterator[None]:
    """Forks of this thread meanwhile start worker processes: no slot is held by them.

    Example:
        >>> with starting_worker():
        ...     _local.worker
        True
    """
    _local.worker = True
    try:
        yield
    finally:
        _local.worker = False


def _mine() -> list[Any]:
    pid = os.getpid()
    return [p for p in list(_pools) if p.owner == pid]


def _before() -> None:
    if getattr(_local, "worker", False):
        return
    pools = _mine()
    locked = []
    try:  # (a Ctrl-C as this runs leaves no set of slots locked: none given back again)
        for p in pools:
            p.lock.acquire()  # (released after the fork, in the parent; new in the child)
            locked.append(p)
        held = [p.held_starts() for p in pools]
        if any(held):
            _pending.append((*os.pipe(), pools, held))
            return
    except BaseException:
        _release(locked)
        raise
    _release(locked)


def _release(pools: list[Any]) -> None:
    for p in pools:
        p.lock.release()


def _after_in_parent() -> None:
    while _pending:
        r, w, pools, held = _pending.pop()
        try:
            os.close(w)
            child = Inherited(r)
            for p, starts in zip(pools, held, strict=True):
                p.inherited(starts, child)
        finally:  # (even on a Ctrl-C as this runs)
            _release(pools)


def _after_in_child() -> None:
    pending = list(_pending)
    _pending.clear()
    for r, w, pools, held in pending:
        os.close(r)
        private = True
        for p, starts in zip(pools, held, strict=True):
            p.lock = threading.RLock()  # (the parent's thread held it at the fork)
            for start in starts:
                private = _privatize(*p.span(start)) and private
        if private:
            os.close(w)  # the parent may reuse them: this process has its own copy
        # else: the write end stays open until this process ends or execs


os.register_at_fork(
    before=_before, after_in_parent=_after_in_parent, after_in_child=_after_in_child
)

MAP_FIXED = 0x10  # (Linux and macOS)


def _privatize(address: int, length: int) -> bool:
    """Map the pages of ``[address, address + length)`` privately, with the same contents.

    Example:
        >>> buffer = mmap.mmap(-1, 2 * PAGE)
        >>> buffer[:3] = b"abc"
        >>> address = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
        >>> _privatize(address, 3), buffer[:3]
        (True, b'abc')
    """
    if sys.platform not in ("linux", "darwin") or length <= 0:
        return sys.platform in ("linux", "darwin")
    first = address // PAGE * PAGE
    size = -(-(address + length) // PAGE) * PAGE - first
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        ]
        copy = ctypes.create_string_buffer(size)
        ctypes.memmove(copy, first, size)
        flags = mmap.MAP_PRIVATE | getattr(mmap, "MAP_ANONYMOUS", 0x20) | MAP_FIXED
        got = libc.mmap(first, size, mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
        if got != first:
            return False
        ctypes.memmove(first, copy, size)
        return True
    except Exception:
        return False
