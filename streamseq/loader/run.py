"""A pass over a loader's batches, the cursor transitions it reports, and its figures."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from collections.abc import Callable
from time import perf_counter
from typing import Any, NamedTuple

from .._redact import redact_text
from .._writing import writing_here
from ..batch import Batch
from ..deliver.assemble import Assembled, counted_from
from ..deliver.background import Background
from ..plan.cursor import Cursor
from ..read.handle import ProcessLocal
from ..workers.prefetched import Prefetched, close_together
from .stats import Latest, Meter

logger = logging.getLogger("streamseq")

Setup = tuple[Assembled, list[Any], list[Prefetched], Any, list[Any]]
"""What a pass reads from: batches, groups, the workers it started, what to call when it
fails, and the workers' timings."""


def _pass_locks() -> tuple[threading.RLock, threading.Lock]:
    """A pass's locks in one process: to read a batch, and to count one or to close."""
    return threading.RLock(), threading.Lock()


Move = Callable[[Cursor], Cursor]
"""A transition of the run's cursor (:meth:`Cursor.delivered`, :meth:`Cursor.ended`)."""


class Trial:
    """``num_workers="auto"``: the first batches read here, then by workers; the faster kept.

    A loader's first passes deliver their batches as always (the batches are a pure
    function of the plan, whoever reads them), and time them: the time ``next()`` takes
    is what a training loop waits. First ``here`` (this process), then with
    ``workers`` workers, started at a batch boundary with the position carried over. The
    first batch of each way is left out of its figures (files opened, workers started);
    what the start of the workers adds to their first batch counts, spread over the
    batches of an epoch, when they are started for every pass. Once both ways have at
    least :attr:`MIN_BATCHES` batches and :attr:`MIN_SECONDS` seconds (or
    :attr:`MAX_BATCHES` batches), the faster way is kept
    (:attr:`chosen`), logged at INFO on the logger ``"streamseq"``; with the workers no
    faster, the pass goes on in this process and the workers are stopped.

    Args:
        workers: the workers tried.
        persistent: whether they persist across passes (their start is paid once).
        stop_workers: stops the loader's persistent workers.
    """

    MIN_BATCHES = 4
    MIN_SECONDS = 0.2
    MAX_BATCHES = 32

    def __init__(self, workers: int, persistent: bool, stop_workers: Callable[[], None]):
        self.workers, self.persistent, self.stop_workers = workers, persistent, stop_workers
        self.phase = 0  # 0: here, then ``workers``
        self.times: dict[int, list[float]] = {0: [], workers: []}
        self.first = True  # the next batch is the first one of this way
        self.start = 0.0  # the first batch with workers: their start
        self.chosen: int | None = None
        self.said: tuple[Any, ...] | None = None  # what to log once the pass counted

    def now(self) -> int:
        """The workers the next pass starts with."""
        return self.phase if self.chosen is None else self.chosen

    def _enough(self, times: list[float]) -> bool:
        n = len(times)
        return n >= self.MAX_BATCHES or (n >= self.MIN_BATCHES and sum(times) >= self.MIN_SECONDS)

    def opened(self) -> None:
        """A pass opened the current way: its first batch is a start."""
        self.first = True

    def delivered(self, run: Pass, seconds: float, length: int) -> None:
        """A batch took ``seconds``; switch ``run`` to the other way when it is time.

        ``length``: the batches of the epoch (over which a start is spread). The choice
        is logged by :meth:`tell`, once the pass no longer holds its locks (a handler
        of the log may call the loader).
        """
        if self.chosen is not None:
            return
        if self.first:
            self.first = False
            if self.phase:
                self.start = seconds
            return
        times = self.times[self.phase]
        times.append(seconds)
        if not self._enough(times):
            return
        if self.phase == 0:
            self.phase = self.workers
            self.first = True
            run.switch(self.workers)
            return
        here = sum(self.times[0]) / len(self.times[0])
        there = sum(times) / len(times)
        if not self.persistent:  # what their start adds to a batch, over an epoch
            there += max(0.0, self.start - there) / max(1, length)
        self.chosen = self.workers if there < here else 0
        self.said = (
            'num_workers="auto" chose %d: %.3g ms a batch in this process, %.3g ms with %d '
            "workers%s",
            self.chosen,
            1e3 * here,
            1e3 * there,
            self.workers,
            "" if self.persistent else " (their start spread over an epoch)",
        )
        if self.chosen == 0:
            run.switch(0)
            self.stop_workers()

    def tell(self) -> None:
        """Log the choice made, once (at INFO, on the logger ``"streamseq"``)."""
        said, self.said = self.said, None
        if said is not None:
            logger.info(*said)


class EpochProgress(NamedTuple):
    """Where a run stands in its epoch: batches delivered and batches in all.

    Attributes:
        epoch: the epoch.
        done: its batches delivered, also those before a resume.
        total: its batches in all: ``done`` plus what the loader will deliver of it.
    """

    epoch: int
    done: int
    total: int


class Pass:
    """One pass over the batches of an epoch, from batch ``start`` to ``stop``.

    It reads the batches it was ``opened`` with and tells its loader where it stands by
    the cursor transitions it gives ``moved`` (:meth:`Cursor.delivered` for each batch,
    :meth:`Cursor.ended` at the end), and its figures in ``meter`` (:mod:`.stats`:
    reported to ``latest`` at its first batch, logged when it ends); it never touches
    the loader. A closed pass delivers nothing more; one superseded by a newer pass says
    so (see :meth:`StreamLoader.__iter__`).

    Args:
        start: the batch it starts at.
        stop: the number of batches of the epoch.
        opened: what it reads from (:data:`Setup`): the batches of the epoch, the
            sequences of micro-batches they are assembled from (their files are
            released when the pass ends), the workers this pass started (stopped when it
            ends), what to call when reading a batch raised (after the pass is closed:
            the loader stops its persistent workers there, all of them, and the next
            pass starts new ones), and the workers' timings (not read here: see
            ``meter``).
        moved: given each transition of the run's cursor the pass makes.
        newer_running: whether a newer pass of the same loader is running.
        meter: where its figures are kept (a meter of its own by default).
        latest: told of ``meter`` when the pass delivers its first batch.
        trial: ``num_workers="auto"`` choosing (:class:`Trial`), or None.
        reopen: makes what the pass reads from with a number of workers, from the batch
            it is at (for the trial to switch).
        serial: the loader's lock, under which passes open: held while the workers are
            stopped after a failure, unless a newer pass reads with them by then.
    """

    def __init__(
        self,
        *,
        start: int,
        stop: int,
        opened: Setup,
        moved: Callable[[Move], None],
        newer_running: Callable[[Pass], bool],
        meter: Meter | None = None,
        latest: Latest | None = None,
        trial: Trial | None = None,
        reopen: Callable[[int], Setup] | None = None,
        serial: Callable[[], Any] | None = None,
    ):
        self.batches, self.groups, self.prefetchers, self.failed, _ = opened
        self.stop, self.moved, self.newer_running = stop, moved, newer_running
        self.start = self.next = start
        self.closed = False
        self.superseded = False
        self.broken = False  # reading a batch raised (:meth:`_failed`)
        self.background: Background | None = None
        self.meter = Meter(-1, 0) if meter is None else meter
        self.latest = latest
        self.trial, self.reopen, self.serial = trial, reopen, serial
        self._locks = ProcessLocal(_pass_locks)  # (a parent's thread may have held them)
        if trial is not None:
            trial.opened()

    def __iter__(self) -> Pass:
        return self

    def _guard(self) -> tuple[threading.RLock, threading.Lock]:
        """The locks of the pass in this process (a parent's thread may have held them).

        The first is held while a batch is read (one thread at a time), the second while
        the pass counts a batch delivered, reaches its end, or is closed: a close from
        another thread waits for no read (workers stopped there end it), the batch read
        meanwhile is not delivered (nor counted in the position of the next pass), and
        a position loaded meanwhile is not taken for the end of the pass.
        """
        return self._locks.get()  # (in a child: made once, by the first of its threads)

    def __next__(self) -> Batch:
        """The next batch: one thread at a time (threads reading one pass share its batches).

        Asked for by a thread writing a batch (a transform or a source read in this
        thread, in a worker thread, or in the helper thread of a bounded read), it raises
        RuntimeError at once: that batch may be one this pass waits for.
        """
        reading, counting = self._guard()
        if writing_here():  # (it would wait for itself, or for a next() waiting for it)
            raise RuntimeError(
                "a batch was asked for while one is written, by a read of it (a transform, "
                "a source) in the same thread or in a worker thread: a read of a batch "
                "cannot ask the loader for a batch"
            )
        with reading:
            return self._next(counting)

    def _next(self, counting: threading.Lock) -> Batch:
        if self.closed:
            if self.superseded and (self.next > self.start or self.newer_running(self)):
                raise RuntimeError(
                    "this iteration was superseded by a new iter(loader): a StreamLoader "
                    "runs one pass at a time (its position is what state_dict() saves); "
                    "end a pass before starting another, or index the loader (loader[i])"
                )
            raise StopIteration
        if self.next >= self.stop:
            with counting:
                if self.closed:  # (meanwhile: a position set then is not used up here)
                    return self._next(counting)
                self.moved(Cursor.ended)  # the loader moves on to the next epoch
            self.close()
            raise StopIteration
        if self.background is not None and self.background.pid != os.getpid():
            self.background = None  # forked during the pass: the thread is the parent's
        asked = perf_counter()
        try:
            if not self.batches.share and self.batches.pin:
                if self.background is None:  # one thread assembles into pinned memory
                    produce = functools.partial(counted_from, self.batches, self.next)
                    self.background = Background(produce)
                batch, steps = next(self.background)
            else:
                batch, steps = self.batches.counted_next(self.next, self.stop)
        except Exception as e:
            # closed meanwhile by another thread: this batch is not delivered (but a pass
            # that failed, in a read this one's own code asked for, fails with its error)
            if self.closed and not self.broken:
                logger.info(
                    "batch %d of a pass closed meanwhile by another thread is not delivered; "
                    "reading it raised %s: %s",
                    self.next,
                    type(e).__name__,
                    redact_text(str(e)),
                )
                return self._next(counting)
            self._failed()
            raise
        except BaseException:
            self._failed()
            raise
        if self.closed:  # (by another thread, or the batch's own code: a new pass moves on)
            return self._next(counting)
        took = perf_counter() - asked
        with counting:
            if self.closed:  # (meanwhile)
                return self._next(counting)
            if self.trial is not None:  # (a switch starts workers: never for a closed pass)
                self.trial.delivered(self, took, self.stop)
            self.meter.delivered(steps, asked)
            if self.next == self.start and self.latest is not None:
                self.latest.started(self.meter)
            self.next += 1
            self.moved(Cursor.delivered)  # (a loaded position is used once)
        if self.trial is not None:
            self.trial.tell()  # (out of the locks: its log's handlers may call the loader)
        return batch

    def _failed(self) -> None:
        """Reading a batch raised: close the pass, then tell the loader.

        Not when a newer pass (opened by another thread meanwhile) reads with the
        persistent workers the loader would stop: they would be stopped for good under it.
        """
        self.broken = True
        self.close()
        if self.failed is None:
            return
        with contextlib.nullcontext() if self.serial is None else self.serial():
            if not self.newer_running(self):
                self.failed()

    def switch(self, workers: int) -> None:
        """Read the next batches with ``workers`` workers (0: here) instead, from the next batch.

        The batches are the same either way: only who reads them changes, at a batch
        boundary. What the pass read from until now is stopped.
        """
        if self.reopen is None:
            return
        self._let_go()
        self.batches, self.groups, self.prefetchers, self.failed, timings = self.reopen(workers)
        meter = self.meter  # (their time counts from now on)
        for t in timings:
            if all(t is not mine for mine in meter.timings):
                meter.timings.append(t)
                meter.base.append(t.totals())

    def _let_go(self) -> None:
        """Stop the pinning thread and the workers this pass started; release the groups."""
        if self.background is not None:
            self.background.close()
            self.background = None
        # (for good: a thread about to wait for them meanwhile starts no new ones)
        if self.next >= self.stop:  # read to its end: no worker is in the middle of a read
            for pf in self.prefetchers:
                pf.retire(wait=False)  # (cheaper than together: measured, bench_throughput)
        else:  # left early: all at once, bounded; they exit by themselves meanwhile
            close_together(self.prefetchers, retire=True)
        self.prefetchers = []
        for g in self.groups:
            g.release()
        self.batches.release()

    def close(self, log: bool = True) -> None:
        """Stop the pinning thread and the worker processes; log the pass's figures once.

        Called from another thread, the batch being read there is not delivered (that
        ``next()`` raises as on a closed pass).
        """
        with self._guard()[1]:
            self.closed = True
        self._close(log)

    def _close(self, log: bool) -> None:
        self.closed = True
        if self.meter.end() and log:
            self.meter.log("ended" if self.next >= self.stop else "stopped")
        self._let_go()

    def __del__(self) -> None:
        try:
            self._close(log=False)  # (perhaps at interpreter shutdown; no thread reads it)
        except Exception:
            pass
