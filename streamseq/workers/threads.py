"""Worker threads: the worker loop behind two queues.

Each thread gets its index for the start hook, as worker processes do, and sends the
seconds it spent reading and waiting with each result (:mod:`.timing`); a start hook that
raises is reported to the caller; every wait checks that the threads are alive and polls
for :meth:`ThreadWorkers.cancel`. Stopping drops the jobs still queued before it sends
the stop markers, so a thread stops after the job it is evaluating. How workers stop:
:mod:`streamseq.workers`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from . import ownership
from .failures import HookFailed, WorkerGone
from .loop import HOOK, STOP, run
from .poll import poll
from .timing import Timing

logger = logging.getLogger("streamseq.prefetch")

POLL = 0.1  # seconds between liveness checks while waiting


class _QueueChannel:
    """A worker thread's channel: a job queue shared by the threads, a result queue."""

    def __init__(
        self, index: int, jobs: queue.Queue, results: queue.Queue, stopping: threading.Event
    ):
        self.index, self.jobs, self.results, self.stopping = index, jobs, results, stopping

    def take(self) -> int | None:
        while not self.stopping.is_set():
            try:
                item = self.jobs.get(timeout=POLL * 5)
            except queue.Empty:
                continue
            return None if item == STOP or self.stopping.is_set() else item
        return None

    def building(self) -> contextlib.nullcontext:
        return contextlib.nullcontext()

    def put(
        self, item: int, ok: bool, value: Any, spent: tuple[float, float] = (0.0, 0.0)
    ) -> bool:
        self.results.put((self.index, item, ok, value, *spent))
        return not self.stopping.is_set()


class ThreadWorkers:
    """Worker threads evaluating jobs of ``seq``.

    Args:
        seq: the sequence; several threads may call ``seq[i]`` at once.
        num_workers: number of threads.
        start_hook: called in each thread with its index before its first job.
        timeout: seconds :meth:`wait` may go without a result (None: as long as the
            threads live).
        timing: where the seconds each thread spent reading and idle are added up, as
            the results come (:mod:`.timing`).

    Example:
        >>> workers = ThreadWorkers("abc", 2)
        >>> workers.submit(2)
        >>> workers.wait()
        (2, True, 'c')
        >>> workers.stop()
    """

    kind = "thread"
    pickled = 0

    def __init__(
        self,
        seq: Sequence[Any],
        num_workers: int,
        start_hook: Callable[[int], Any] | None = None,
        timeout: float | None = None,
        timing: Timing | None = None,
    ):
        self.start_hook, self.timeout = start_hook, timeout
        self.timing = Timing() if timing is None else timing
        self.jobs: queue.Queue = queue.Queue()
        self.results: queue.Queue = queue.Queue()
        self.stopping = threading.Event()
        self.cancelled = threading.Event()
        queues = self.jobs, self.results, self.stopping
        self.workers = [
            threading.Thread(
                target=run,
                args=(seq, index, start_hook, _QueueChannel(index, *queues)),
                name=f"streamseq-worker-{index}",
                daemon=True,
            )
            for index in range(num_workers)
        ]
        try:
            for w in self.workers:
                w.start()
        except BaseException:  # (Ctrl-C meanwhile): those started stop after their item
            self.stopping.set()
            raise
        self._finalizer = weakref.finalize(self, end, self.jobs, self.workers, self.stopping, 0.0)
        self.owner = os.getpid()
        ownership.track(self)

    def forked(self) -> None:
        """In a forked child: the threads are not there; leave the queues alone.

        (A queue's lock may have been held by a thread of the parent at the fork.)
        """
        if os.getpid() != self.owner:
            self._finalizer.detach()

    def pids(self) -> list[int]:
        """No process ids: the threads run in this process."""
        return []

    def cancel(self) -> None:
        """Make a :meth:`wait` in another thread raise :class:`Cancelled` within ``POLL``."""
        self.cancelled.set()

    def submit(self, item: int) -> None:
        """Queue ``item`` for the first free thread."""
        self.jobs.put(item)

    def _result(self, seconds: float) -> tuple[int, int, bool, Any, float, float]:
        """The next result within ``seconds`` (:class:`queue.Empty`: none)."""
        return self.results.get(timeout=seconds)

    def _alive(self) -> None:
        """Raise :class:`WorkerGone` for the first thread gone with no result left."""
        for index, w in enumerate(self.workers):
            if not w.is_alive() and self.results.empty():
                raise WorkerGone(index)

    def wait(self) -> tuple[int, bool, Any]:
        """The next result of any thread: ``(item, ok, value or error)``.

        Raises:
            WorkerGone: a thread is gone.
            NoResult: nothing came within ``timeout`` seconds.
            HookFailed: a start hook raised (its error chained).
            Cancelled: :meth:`cancel` was called meanwhile.
        """
        get = self._result
        got = poll(get, POLL, self._alive, self.timeout, self.cancelled)
        index, item, ok, value, read, idle = got
        if item == HOOK:
            raise HookFailed(self.start_hook, index, "thread", value) from value
        self.timing.add(index, read, idle)
        return item, ok, value

    def stop(self, wait: bool = True, timeout: float = 1.0) -> None:
        """Stop the threads after the job each is evaluating, and wait (bounded) for them.

        Unlike processes, threads are waited for even without ``wait``: they may be
        reading the same streams as the threads that replace them.
        """
        if os.getpid() == self.owner:  # (in a forked child there are no threads to stop)
            self.stopping.set()  # (first: they stop even if this is interrupted, Ctrl-C)
            self._finalizer.detach()
            end(self.jobs, self.workers, self.stopping, timeout)
        else:
            self._finalizer.detach()


def end(
    jobs: queue.Queue, workers: list[threading.Thread], stopping: threading.Event, timeout: float
) -> None:
    """Drop the queued jobs, send every thread the stop marker, join (bounded)."""
    stopping.set()
    while True:
        try:
            jobs.get_nowait()
        except queue.Empty:
            break
    for _ in workers:
        jobs.put(STOP)
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
