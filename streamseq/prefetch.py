"""Evaluate a sequence ahead in worker processes or threads (seqtools' prefetch, guarded)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import seqtools
import seqtools.errors
import seqtools.evaluation

from ._processes import _Backend, _describe_exits
from ._threads import _ThreadBackend
from ._tree import nbytes
from .errors import StreamError, WorkerError

logger = logging.getLogger(__name__)

METHODS = ("process", "thread")


def check_workers(
    num_workers: int, method: str, max_buffered: int, *, name: str = "prefetch method"
) -> None:
    """Raise ValueError unless workers can run with these settings.

    Args:
        num_workers: worker processes or threads (0: none).
        method: ``"process"`` or ``"thread"``.
        max_buffered: items in flight (at least 4 with processes, 1 with threads).
        name: what the caller calls ``method``, for the message.

    Example:
        >>> check_workers(2, "fork", 6, name="method")
        Traceback (most recent call last):
        ...
        ValueError: unknown method 'fork': expected one of ('process', 'thread')
    """
    if num_workers < 0:
        raise ValueError(f"num_workers must be >= 0, got {num_workers}")
    if method not in METHODS:
        raise ValueError(f"unknown {name} {method!r}: expected one of {METHODS}")
    if max_buffered < (4 if method == "process" else 1):
        raise ValueError(f"max_buffered too small for the {method} backend: {max_buffered}")


def check_timeout(timeout: float | None) -> float | None:
    """``timeout`` as a float, or None; ValueError unless it is positive.

    Example:
        >>> check_timeout(2), check_timeout(None)
        (2.0, None)
    """
    if timeout is None:
        return None
    if not float(timeout) > 0:
        raise ValueError(f"timeout must be > 0 seconds (or None), got {timeout}")
    return float(timeout)


class _Shifted:
    """``seq[offset:]`` as a sequence whose errors never kill a worker thread."""

    def __init__(self, seq: Sequence[Any], offset: int):
        self.seq, self.offset = seq, offset

    def __len__(self) -> int:
        return len(self.seq) - self.offset

    def __getitem__(self, i: int) -> Any:
        try:
            return self.seq[i + self.offset]
        except Exception:
            raise
        except BaseException as e:  # SystemExit, KeyboardInterrupt: report, do not die
            raise WorkerError(f"worker interrupted by {type(e).__name__}: {e}") from e


class Prefetched:
    """Items of ``seq`` evaluated ahead by workers; see :func:`prefetch`."""

    def __init__(
        self,
        seq: Sequence[Any],
        num_workers: int,
        method: str = "process",
        max_buffered: int = 6,
        start_hook: Callable[[int], Any] | None = None,
        shm_size: int | None = None,
        timeout: float | None = None,
    ):
        check_workers(num_workers, method, max_buffered)
        self.timeout = check_timeout(timeout)
        try:
            self.length = len(seq)
        except TypeError as e:
            raise TypeError(
                f"prefetch needs a sequence with len(), got {type(seq).__name__}"
            ) from e
        self.seq, self.num_workers, self.method = seq, num_workers, method
        self.max_buffered, self.start_hook = max_buffered, start_hook
        self.slot_size = None if shm_size is None else max(1, int(shm_size) // max_buffered)
        self._prefetch: Any = None
        self._base = 0
        self._next = -1
        self.grown = 0  # times the slots grew for an item larger than a slot
        self.pickled = 0  # items pickled through a pipe: no slot was free

    def __repr__(self) -> str:
        what = f"{type(self.seq).__name__} of {self.length} items"  # not the items
        return f"prefetch({what}, {self.num_workers}, method={self.method!r})"

    def __len__(self) -> int:
        return self.length

    def __enter__(self) -> Prefetched:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self):
        try:
            for i in range(self.length):
                yield self[i]
        finally:
            self.close()

    @property
    def pids(self) -> list[int]:
        """Process ids of the live worker processes (empty for threads)."""
        if self._prefetch is None or self.method != "process":
            return []
        return [w.pid for w in self._prefetch.backend.workers if w.is_alive()]

    def close(self, wait: bool = True) -> None:
        """Stop the workers now (they also stop when this object is collected).

        Args:
            wait: return once the worker processes have exited; otherwise once they
                have stopped using the shared memory, and let them exit meanwhile
                (they are joined later; a process with torch loaded takes a few
                milliseconds to exit). Worker threads are always waited for (up to a
                second), until they finish the item they are evaluating.
        """
        pf, self._prefetch = self._prefetch, None
        self._next = -1
        if pf is not None:
            pf.backend.stop(wait=wait)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def _start(self, i: int) -> None:
        self.close()
        if i >= self.length:
            return
        hook, seq = self.start_hook, _Shifted(self.seq, i)
        if self.method == "thread":
            threads = _ThreadBackend(seq, self.num_workers, hook, self.timeout)
            self._prefetch = seqtools.evaluation.Prefetch(
                len(seq), threads, buffer_size=self.max_buffered
            )
        else:
            backend = _Backend(
                seq,
                num_workers=self.num_workers,
                buffer_size=self.max_buffered,
                init_fn=hook,
                shm_size=self.slot_size * self.max_buffered,
                timeout=self.timeout,
            )
            # as seqtools.prefetch does: two slots stay free for the items being used
            self._prefetch = seqtools.evaluation.Prefetch(
                len(seq), backend, buffer_size=self.max_buffered - 2
            )
        self._base, self._next = i, i

    def prepare(self, i: int) -> None:
        """Start the workers on item ``i`` now, if they are not there already.

        ``self[i]`` does it too, then waits; preparing several prefetches first lets
        their workers start together.
        """
        ready = self.num_workers == 0 or (self.method == "process" and self.slot_size is None)
        if not ready and 0 <= i < self.length and (i != self._next or self._prefetch is None):
            self._start(i)

    def __getitem__(self, i: int) -> Any:
        given, i = i, int(i)
        if i < 0:
            i += self.length
        if not 0 <= i < self.length:
            raise IndexError(f"item {given} out of range for {self.length} items")
        if self.num_workers == 0:
            return self.seq[i]
        if self.method == "process" and self.slot_size is None:
            value = self.seq[i]  # size the shared-memory slots from the first item
            self.slot_size = int(nbytes(value) * 1.25) + 65536
            if hasattr(self.seq, "release"):
                self.seq.release()  # the workers open their own files
            self._start(i + 1)
            return value
        if i != self._next or self._prefetch is None:
            self._start(i)  # out of order: restart there instead of draining the queue
        try:
            value = self._prefetch[i - self._base]
        except seqtools.EvaluationError as e:
            self.close()
            if isinstance(e.__cause__, BaseException):
                raise e.__cause__ from e.__cause__.__cause__
            raise StreamError(f"evaluation of item {i} failed in a worker: {e}") from None
        except WorkerError:  # a start hook failed
            self.close()
            raise
        except TimeoutError:
            self.close()
            raise WorkerError(
                f"the workers of {self!r} delivered nothing for {self.timeout:g} s while "
                f"preparing item {i} (timeout={self.timeout:g}); they were stopped"
            ) from None
        except RuntimeError as e:
            if "worker died" not in str(e):
                raise
            backend = self._prefetch.backend
            self.close()  # joins them: the exit codes are known after
            if self.method == "thread":
                raise WorkerError(
                    f"a worker thread of {self!r} stopped unexpectedly while preparing "
                    f"item {i}; its workers were stopped"
                ) from None
            raise WorkerError(
                f"a worker process of {self!r} died unexpectedly while preparing item {i} "
                f"({_describe_exits(backend.ended)}); its workers were stopped"
            ) from None
        self._next = i + 1
        if self.method == "process" and self._prefetch.backend.pickled and not self.pickled:
            self.pickled = self._prefetch.backend.pickled
            warnings.warn(
                f"prefetch: all {self.max_buffered} shared-memory slots were held by items "
                "already delivered, so items went through a pipe, pickled: release items "
                "sooner (copy what you keep) or raise max_buffered",
                RuntimeWarning,
                stacklevel=2,
            )
        if self.method == "process" and nbytes(value) > self.slot_size:
            self.grown += 1
            logger.info(
                "item %d (%d bytes) outgrew its shared-memory slot (%d bytes): growing",
                i,
                nbytes(value),
                self.slot_size,
            )
            self.slot_size = int(nbytes(value) * 1.5)
            self.close()
        return value


def prefetch(
    seq: Sequence[Any],
    num_workers: int,
    *,
    method: str = "process",
    max_buffered: int = 6,
    start_hook: Callable[[int], Any] | None = None,
    shm_size: int | None = None,
    timeout: float | None = None,
) -> Prefetched:
    """Evaluate items of ``seq`` ahead in worker processes or threads, in order.

    Built on :func:`seqtools.prefetch`, with its sharp edges handled: ``num_workers=0``
    evaluates in the calling process through the same object; an out-of-order access
    restarts the workers at that index (no draining); a sequence without ``len`` is a
    ``TypeError`` up front; a dead worker thread or process is an error, never a hang.
    With processes, items travel through shared memory (pickle protocol 5 out-of-band
    buffers). The slots are sized from the first item (evaluated in the calling process)
    unless ``shm_size`` is given, and an item that outgrows its slot makes them grow.

    Args:
        seq: a sequence with ``len`` whose items pickle (numpy arrays travel zero-copy).
        num_workers: worker processes or threads; 0 evaluates in the calling process.
        method: ``"process"`` or ``"thread"``.
        max_buffered: items in flight plus delivered items still referenced; with
            processes, the number of shared-memory slots (at least 4).
        start_hook: called in each worker with its index when it starts.
        shm_size: total shared memory in bytes, or ``None`` to size it automatically.
        timeout: seconds the workers may go without delivering anything before
            :class:`WorkerError` is raised and they are stopped; ``None`` waits as long
            as they live (a worker that dies is an error at once either way).

    Returns:
        A sequence with the same items in the same order; ``close()`` stops the workers.

    Raises:
        ValueError: ``num_workers < 0``, an unknown method, too small ``max_buffered``,
            or a ``timeout`` that is not positive.
        TypeError: ``seq`` has no ``len``.

    Example:
        >>> import numpy as np
        >>> seq = [np.full(3, i) for i in range(5)]
        >>> with prefetch(seq, 1, method="thread") as ahead:
        ...     [int(x[0]) for x in ahead]
        [0, 1, 2, 3, 4]
    """
    return Prefetched(seq, num_workers, method, max_buffered, start_hook, shm_size, timeout)
