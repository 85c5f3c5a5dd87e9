"""A value opened lazily, once per process: the one mechanism behind every open file.

Streams, rows and sources read from things that cannot cross a process boundary: a
decoder, an open file, a memory map, a position in a row. :class:`ProcessLocal` holds such
a value for the process that made it. Used in another process (after a fork) it makes a
new one; pickled (for a spawned worker) it travels empty.

A forked child never frees what it inherited either: FFmpeg decoders and scalers own
threads that exist only in the parent, and freeing them in the child waits for those
threads forever. An inherited value is therefore kept, unused, for the child's whole life.
"""

from __future__ import annotations

import _thread
import contextlib
import contextvars
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

K = TypeVar("K")
T = TypeVar("T")

_PID = [os.getpid()]  # this process, kept by a fork hook (os.getpid is a system call)
#: guards the making of the per-instance locks of :class:`ProcessLocal` (held briefly)
_GUARD = [threading.Lock()]


def _after_fork_in_child() -> None:
    _PID[0] = os.getpid()
    _GUARD[0] = threading.Lock()  # a thread of the parent may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def current_pid() -> int:
    """The id of this process, without a system call.

    Example:
        >>> current_pid() == os.getpid()
        True
    """
    return _PID[0]


_OPENING = contextvars.ContextVar("streamseq_opening", default=False)


@contextlib.contextmanager
def opening() -> Iterator[None]:
    """While an opener makes a stream that this process reads at once.

    Example:
        >>> with opening():
        ...     print(is_opening())
        True
        >>> is_opening()
        False
    """
    token = _OPENING.set(True)
    try:
        yield
    finally:
        _OPENING.reset(token)


def is_opening() -> bool:
    """Whether the calling code runs inside :func:`opening`.

    A source made there may keep what it read to be made, for the read that follows.
    """
    return _OPENING.get()


_KEPT: list[Any] = []  # what this process inherited and must never free


def keep_forever(value: Any) -> None:
    """Never free ``value`` in this process: it belongs to another (see the module's note).

    Also for an object whose ``__del__`` finds it is about to be freed in a process that
    did not make it: keeping itself there resurrects it.

    Example:
        >>> keep_forever(object())
    """
    _KEPT.append(value)


class ProcessLocal(Generic[T]):
    """A value made by ``make()`` on first use in each process; dropped when pickled.

    Args:
        make: builds the value for the calling process (or give it to :meth:`get`, which
            spares its owner a reference cycle through a bound method).
        close: releases a value made in this process (never called on an inherited one).

    Example:
        >>> import pickle
        >>> h = ProcessLocal(list)
        >>> h.get() is h.get(), h.peek()
        (True, [])
        >>> pickle.loads(pickle.dumps(h)).peek() is None
        True
        >>> h.close(); h.peek() is None
        True
    """

    __slots__ = (
        "_close",
        "_lock",
        "_lock_pid",
        "_make",
        "_making",
        "_pid",
        "_value",
        "__weakref__",
    )

    def __init__(
        self, make: Callable[[], T] | None = None, close: Callable[[T], Any] | None = None
    ):
        self._make, self._close = make, close
        self._value: T | None = None
        self._pid = -1
        self._lock, self._lock_pid = threading.Lock(), _PID[0]
        self._making: tuple[int, threading.RLock] | None = None  # (pid, lock): see get

    def __repr__(self) -> str:
        return f"ProcessLocal({self._make!r}, open={self.peek() is not None})"

    @property
    def lock(self) -> threading.Lock:
        """A lock for the users of the value (new in every process and every copy).

        A thread of the parent may have held it at the fork: a child takes a new one.
        """
        if self._lock_pid != _PID[0]:
            with _GUARD[0]:  # (two threads of a child: one new lock for both)
                if self._lock_pid != _PID[0]:
                    self._lock, self._lock_pid = threading.Lock(), _PID[0]
        return self._lock

    def _maker(self) -> threading.RLock:
        """The lock under which this process makes the value (one per process)."""
        making, pid = self._making, _PID[0]
        if making is None or making[0] != pid:
            with _GUARD[0]:
                making = self._making
                if making is None or making[0] != pid:
                    making = self._making = (pid, _thread.RLock())
        return making[1]

    def _forget_inherited(self) -> None:
        if self._value is not None and self._pid != _PID[0]:
            keep_forever(self._value)
            self._value = None

    def peek(self) -> T | None:
        """The value of this process, or None when it has not been made here."""
        self._forget_inherited()
        return self._value

    def get(self, make: Callable[[], T] | None = None) -> T:
        """The value of this process, made now (by ``make``, else the one given) if needed.

        Threads that ask at once for a value not made yet get one value, made once: the
        first makes it while the others wait (a lock taken only until it is made, not
        on every use). The lock is not :attr:`lock`, which callers may hold around this.
        """
        if self._value is not None and self._pid == _PID[0]:
            return self._value
        with self._maker():
            if self._value is not None and self._pid == _PID[0]:  # made meanwhile
                return self._value
            self._forget_inherited()
            value = (make or self._make)()  # type: ignore[misc]
            self._value, self._pid = value, _PID[0]
            return value

    def set(self, value: T | None) -> None:
        """Replace the value of this process (closing the one it replaces)."""
        self._forget_inherited()
        old, self._value, self._pid = self._value, value, _PID[0]
        if old is not None and old is not value and self._close is not None:
            self._close(old)

    def take(self) -> T | None:
        """Remove the value of this process and return it, unreleased (None: none here).

        Example:
            >>> h = ProcessLocal(list)
            >>> h.get().append(1); h.take(), h.peek()
            ([1], None)
        """
        value = self.peek()
        self._value = None
        return value

    def close(self) -> None:
        """Release the value of this process; the next :meth:`get` makes a new one."""
        self.set(None)

    def __getstate__(self) -> tuple:
        return (self._make, self._close)

    def __setstate__(self, state: tuple) -> None:
        self._make, self._close = state
        self._value, self._pid = None, -1
        self._lock, self._lock_pid = threading.Lock(), _PID[0]
        self._making = None

    def __copy__(self) -> ProcessLocal[T]:
        return ProcessLocal(self._make, self._close)

    def __deepcopy__(self, memo: dict) -> ProcessLocal[T]:
        import copy

        return ProcessLocal(copy.deepcopy(self._make, memo), copy.deepcopy(self._close, memo))

    def __del__(self) -> None:
        try:
            if self._value is not None:
                if self._pid == _PID[0]:
                    if self._close is not None:
                        self._close(self._value)
                else:
                    keep_forever(self._value)
        except Exception:  # interpreter shutdown, half-built object
            pass


class SharedHandles(Generic[K, T]):
    """One :class:`ProcessLocal` per key: the handle shared by all the readers of a file.

    Many small sources can read one file (the documents of a token corpus, the episodes of
    a Parquet table): each takes the handle of its file's key here instead of holding its
    own, so that a process opens the file once, however many of them it reads. A source
    unpickled in a worker takes the handle of its key there, and opens it on first read.

    Example:
        >>> handles = SharedHandles()
        >>> a = handles.of(("a.bin", 0))
        >>> a is handles.of(("a.bin", 0)), a is handles.of(("b.bin", 0)), a.peek() is None
        (True, False, True)
    """

    __slots__ = ("_handles",)

    def __init__(self) -> None:
        self._handles: dict[K, ProcessLocal[T]] = {}

    def of(self, key: K) -> ProcessLocal[T]:
        """The handle of ``key``, the same for every caller (made, empty, on first use)."""
        handle = self._handles.get(key)
        if handle is None:
            handle = self._handles.setdefault(key, ProcessLocal())
        return handle
