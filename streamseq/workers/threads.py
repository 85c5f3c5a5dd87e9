"""Worker threads for :func:`streamseq.prefetch`: seqtools' thread backend, guarded."""

from __future__ import annotations

import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import seqtools
import seqtools.errors
import seqtools.evaluation

from .errors import WorkerError

logger = logging.getLogger("streamseq.prefetch")


class _HookFailed:
    """What a worker thread reports when its start hook raised."""

    def __init__(self, index: int, error: BaseException):
        self.index, self.error = index, error


class _ThreadBackend:
    """Worker threads evaluating jobs of ``seq``: seqtools' thread backend, guarded.

    Differences with seqtools': each thread gets its index for the start hook, as the
    process backend does; a start hook that raises is reported to the caller (seqtools'
    thread dies and the caller waits forever); every wait checks that the threads are
    alive; :meth:`stop` drops the jobs still queued before it sends the stop marker, so
    a thread stops after the job it is evaluating (seqtools' evaluates the whole queue
    first, concurrently with the threads that replace it).
    """

    def __init__(
        self,
        seq: Sequence[Any],
        num_workers: int,
        init_fn: Callable[[int], Any] | None,
        timeout: float | None = None,
    ):
        self.timeout = timeout
        self.job_queue: queue.Queue = queue.Queue()
        self.done_queue: queue.Queue = queue.Queue()
        self.workers = [
            threading.Thread(
                target=_ThreadBackend.worker,
                args=(seq, self.job_queue, self.done_queue, init_fn, index),
                daemon=True,
            )
            for index in range(num_workers)
        ]
        for w in self.workers:
            w.start()
        self._finalizer = weakref.finalize(
            self, _ThreadBackend.end, self.job_queue, self.workers, 0.0
        )

    def submit_job(self, item: int) -> None:  # noqa: D102
        self.job_queue.put(item)

    def wait_completion(self, poll: float = 0.2) -> tuple[int, bool, Any]:
        """The next result of any thread: ``(item, success, value)``.

        Raises:
            WorkerError: a start hook raised (its error chained).
            RuntimeError: a thread is gone (``"a worker died unexpectedly"``).
            TimeoutError: nothing came within ``timeout`` seconds.
        """
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            try:
                done = self.done_queue.get(timeout=poll)
                break
            except queue.Empty:
                if not all(w.is_alive() for w in self.workers) and self.done_queue.empty():
                    raise RuntimeError("a worker died unexpectedly") from None
                if deadline is not None and time.monotonic() >= deadline:
                    message = f"no result from the threads in {self.timeout:g} s"
                    raise TimeoutError(message) from None
        if isinstance(done, _HookFailed):
            e = done.error
            raise WorkerError(
                f"the start_hook of worker thread {done.index} raised {type(e).__name__}: {e}"
            ) from e
        return done

    def stop(self, timeout: float = 1.0, wait: bool = True) -> None:
        """Stop the threads after the job each is evaluating, and wait (bounded) for them.

        Unlike processes, threads are waited for even without ``wait``: they may be
        reading the same streams as the threads that replace them.
        """
        self._finalizer.detach()
        _ThreadBackend.end(self.job_queue, self.workers, timeout)

    @staticmethod
    def end(jobs: queue.Queue, workers: list[threading.Thread], timeout: float) -> None:
        """Drop the queued jobs, send every thread the stop marker, join (bounded)."""
        while True:
            try:
                jobs.get_nowait()
            except queue.Empty:
                break
        for _ in workers:
            jobs.put(-1)
        deadline = time.monotonic() + timeout
        for w in workers:
            if w is not threading.current_thread():
                w.join(max(0.0, deadline - time.monotonic()))
        stuck = sum(w.is_alive() for w in workers)
        if stuck and timeout > 0:
            logger.warning(
                "%d prefetch thread(s) still evaluating an item after %.1f s: left to "
                "finish it in the background",
                stuck,
                timeout,
            )

    @staticmethod
    def worker(seq, jobs, done, init_fn, index):  # noqa: D102
        if init_fn is not None:
            try:
                init_fn(index)
            except BaseException as e:
                done.put(_HookFailed(index, e))
                return
        seqtools.errors.seterr("passthrough")
        while True:
            idx = jobs.get()
            if idx < 0:
                return
            try:
                value, success = seq[idx], True
            except Exception as e:
                value, success = e, False
            done.put((idx, success, value))
