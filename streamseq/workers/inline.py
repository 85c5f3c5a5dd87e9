"""Reads in the calling process under a timeout, as workers' reads are (``num_workers=0``).

Without workers a batch is read where it is asked for; with a ``timeout``, each read
runs in a helper thread that the caller waits for, at most ``timeout`` seconds. A read
that takes longer raises :class:`~streamseq.errors.WorkerTimeout`, naming the batch, its
streams and steps, as a worker that delivers nothing does.

A thread cannot be stopped from outside: the stuck read is left running in its daemon
thread (it ends with the process, or when the read returns; its result is dropped).
Later reads of the same streams may wait for it where they share a lock with it (the
batch writer writes one batch at a time), and then time out as well: a stuck file stays
stuck. Without a timeout, reads run in the calling thread, with no helper thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import seqtools

from .._writing import writing_here
from ..errors import WorkerTimeout


def _what(seq: Any, i: int) -> str:
    """What ``seq.describe_item(i)`` says (a batch names its streams and steps), or ``item i``."""
    describe = getattr(seq, "describe_item", None)
    if callable(describe):
        try:
            return str(describe(i))
        except Exception:
            pass
    return f"item {i}"


def in_thread(fn: Callable[[], Any], timeout: float, name: str) -> tuple[bool, Any] | None:
    """``fn()`` in a daemon thread, waited for at most ``timeout`` seconds.

    Asked by a thread writing a batch (a transform asking for ``loader[i]``), ``fn()``
    runs in that thread, whose own read is bounded already: a thread of its own would
    wait for the writer this one holds.

    Returns:
        ``(True, result)``, ``(False, exception)``, or None when it took longer (it is left
        running, see the module).

    Example:
        >>> in_thread(lambda: 3, 5.0, "adding")
        (True, 3)
    """
    done: list[tuple[bool, Any]] = []
    if writing_here():  # asked by a read of a batch, bounded already: in its thread
        try:  # (another thread would wait for the writer this one holds)
            return True, fn()
        except Exception as e:
            return False, e

    def run() -> None:
        try:
            done.append((True, fn()))
        except BaseException as e:
            done.append((False, e))

    thread = threading.Thread(target=run, name=f"streamseq-{name}", daemon=True)
    thread.start()
    thread.join(timeout)
    return done[0] if done else None


def call(seq: Sequence[Any], i: int, timeout: float) -> Any:
    """``seq[i]``, read in a helper thread for at most ``timeout`` seconds.

    Raises:
        WorkerTimeout: the read took longer (it is left running, see the module).

    Example:
        >>> call("abc", 1, 5.0)
        'b'
    """
    setting = seqtools.seterr()  # (a setting of each thread: the caller's applies)

    def read() -> Any:
        seqtools.seterr(setting)
        return seq[i]

    done = in_thread(read, timeout, "read")
    if done is None:
        raise WorkerTimeout(
            f"reading {_what(seq, i)} in this process took more than "
            f"timeout={timeout:g} s; the read was left running in a daemon thread (a thread "
            "cannot be stopped)"
        )
    ok, value = done
    if not ok:
        raise value
    return value


class Bounded:
    """The items of ``seq``, each read within ``timeout`` seconds (see :func:`call`).

    ``describe_item``, ``release`` and ``spec_`` of ``seq`` carry over.

    Example:
        >>> items = Bounded("abc", 5.0)
        >>> len(items), items[2]
        (3, 'c')
    """

    def __init__(self, seq: Sequence[Any], timeout: float):
        self.seq, self.timeout = seq, timeout

    def __len__(self) -> int:
        return len(self.seq)

    def __getitem__(self, i: int) -> Any:
        return call(self.seq, i, self.timeout)

    def __getattr__(self, name: str) -> Any:
        if name in ("describe_item", "release", "spec_"):
            return getattr(self.__dict__["seq"], name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def bounded(seq: Sequence[Any], timeout: float | None) -> Sequence[Any]:
    """``seq`` read under ``timeout`` (:class:`Bounded`), or as it is without one.

    Example:
        >>> items = [1, 2]
        >>> bounded(items, None) is items, bounded(items, 2.0)[1]
        (True, 2)
    """
    return seq if timeout is None else Bounded(seq, timeout)
