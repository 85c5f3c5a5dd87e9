"""Evaluate a sequence ahead in worker processes or threads (seqtools' prefetch, guarded)."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import seqtools
import seqtools.evaluation

from ._tree import nbytes
from .errors import StreamError

logger = logging.getLogger(__name__)

METHODS = ("process", "thread")


class WorkerError(RuntimeError):
    """A worker process died (killed, crashed) or a worker thread stopped unexpectedly."""


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


class _ThreadHook:
    """Give each worker thread its index, as the process backend does."""

    def __init__(self, hook: Callable[[int], Any]):
        self.hook, self.count, self.lock = hook, 0, threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            index, self.count = self.count, self.count + 1
        self.hook(index)


def _stop_backend(backend: Any, timeout: float = 1.0) -> None:
    """Stop the workers of a seqtools backend: sentinel, bounded join, then kill."""
    for f in list(weakref.finalize._registry):  # type: ignore[attr-defined]
        info = f.peek()
        if info is not None and info[0] is backend:
            f.detach()  # its cleanup joins a monitor thread without timeout
    process = isinstance(backend, seqtools.evaluation.ProcessBacked)
    for _ in backend.workers:
        try:
            backend.job_queue.put((-1, -1) if process else -1)
        except (OSError, ValueError):
            pass
    for w in backend.workers:
        w.join(timeout)
        if process and w.is_alive():
            w.kill()
            w.join(timeout)
    if process:
        backend.job_queue.cancel_join_thread()
        backend.job_queue.close()
        for pipe in backend.result_pipes:
            pipe.close()


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
    ):
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        if method not in METHODS:
            raise ValueError(f"unknown prefetch method {method!r}: expected one of {METHODS}")
        if max_buffered < (4 if method == "process" else 1):
            raise ValueError(f"max_buffered too small for the {method} backend: {max_buffered}")
        try:
            self.length = len(seq)
        except TypeError as e:
            raise TypeError(f"prefetch needs a sequence with len(), got {seq!r}") from e
        self.seq, self.num_workers, self.method = seq, num_workers, method
        self.max_buffered, self.start_hook = max_buffered, start_hook
        self.slot_size = None if shm_size is None else max(1, int(shm_size) // max_buffered)
        self._prefetch: Any = None
        self._base = 0
        self._next = -1
        self.grown = 0

    def __repr__(self) -> str:
        return f"prefetch({self.seq!r}, {self.num_workers}, method={self.method!r})"

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

    def close(self) -> None:
        """Stop the workers now (they also stop when this object is collected)."""
        pf, self._prefetch = self._prefetch, None
        self._next = -1
        if pf is not None:
            _stop_backend(pf.backend)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def _start(self, i: int) -> None:
        self.close()
        if i >= self.length:
            return
        hook = self.start_hook
        if self.method == "thread" and hook is not None:
            hook = _ThreadHook(hook)
        shm = 0 if self.method == "thread" else self.slot_size * self.max_buffered
        self._prefetch = seqtools.prefetch(
            _Shifted(self.seq, i),
            nworkers=self.num_workers,
            method=self.method,
            max_buffered=self.max_buffered,
            start_hook=hook,
            shm_size=shm,
        )
        self._base, self._next = i, i

    def __getitem__(self, i: int) -> Any:
        i = int(i)
        if i < 0:
            i += self.length
        if not 0 <= i < self.length:
            raise IndexError(f"item {i} out of range for {self.length} items")
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
        except RuntimeError as e:
            if "worker died" not in str(e):
                raise
            codes = [w.exitcode for w in self._prefetch.backend.workers]
            self.close()
            raise WorkerError(
                f"a worker process of {self!r} died unexpectedly while preparing item {i} "
                f"(exit codes {codes}); its workers were stopped"
            ) from None
        self._next = i + 1
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

    Returns:
        A sequence with the same items in the same order; ``close()`` stops the workers.

    Raises:
        ValueError: ``num_workers < 0``, an unknown method, or too small ``max_buffered``.
        TypeError: ``seq`` has no ``len``.

    Example:
        >>> import numpy as np
        >>> seq = [np.full(3, i) for i in range(5)]
        >>> with prefetch(seq, 1, method="thread") as ahead:
        ...     [int(x[0]) for x in ahead]
        [0, 1, 2, 3, 4]
    """
    return Prefetched(seq, num_workers, method, max_buffered, start_hook, shm_size)
