"""Worker processes: the worker loop behind pipes, items built in shared-memory slots.

Each worker has a job pipe and a result pipe. A job is ``(item, slot)``: the worker makes
the slot current while it evaluates the item (:mod:`.slots`), pickles it with its buffers
in the slot, and sends the pickle; what does not fit travels in the pickle (the item is
larger than a slot: :class:`~.prefetched.Prefetched` grows the slots), with the
seconds the worker spent reading it and waiting for its job (:mod:`.timing`). Jobs go
round-robin, one write each (no feeder thread); a job submitted while every slot is held
by delivered items is counted in ``pickled``. A dead worker is noticed from its result
pipe or its exit code, without a monitor thread, and so is one that never comes to life:
a worker says it has started (:data:`~.loop.STARTED`) before its start hook, and one that
has not said so within :data:`STARTUP` seconds is an error (:class:`~.failures.NotStarted`),
timeout or not. How workers stop: :mod:`streamseq.workers`.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import gc
import logging
import multiprocessing
import os
import pickle
import queue
import select
import signal
import struct
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch

from . import (
    forks,
    ownership,
    reaper,
    threadlocals,  # noqa: F401 (its fork hooks: what other threads keep is kept)
    watchdog,
)
from .failures import Cancelled, HookFailed, NotStarted, NotUnpickled, WorkerGone
from .loop import HOOK, STARTED, STOP, run
from .poll import poll
from .shm import Pages
from .slots import Filling, Slots
from .timing import Timing
from .wire import Poller, dump_error, load_error, message

logger = logging.getLogger("streamseq")

GOODBYE = b"streamseq: worker done"
UNPICKLED_NOT = -4
"""The result of a worker process that could not unpickle its sequence (its error)."""
POLL = 0.1  # seconds between liveness checks while waiting
STARTUP = 120.0
"""Seconds a worker process may take from its start to its start hook: importing and
unpickling what it is given (a spawned worker imports torch), never hours. One that takes
longer is stuck (a lock that a thread of the parent held when it forked): an error, not a
hang, whatever the ``timeout``."""


class ProcessWorkers:
    """Worker processes evaluating jobs of ``seq`` into shared-memory slots.

    Args:
        seq: the sequence (pickled for each worker unless processes fork).
        num_workers: number of processes.
        slots: number of shared-memory slots (items in flight plus delivered ones still
            referenced).
        slot_size: bytes per slot (0: items are pickled through the pipes).
        start_hook: called in each worker with its index before its first job.
        timeout: seconds :meth:`wait` may go without a result (None: as long as the
            workers live).
        timing: where the seconds each worker spent reading and idle are added up, as
            the results come (:mod:`.timing`).
        shared: slots of someone else's to use instead of ``slots`` new ones (a loader
            keeps its slots across passes and shares them among its groups of rows):
            jobs take them by item, so that the workers of every group write block
            ``j`` in the same slot; what these workers still hold when they stop is
            given back.
        rows: ``(first, total)``: the workers write rows ``first, ...`` of batches of
            ``total`` rows, the other rows being other workers' (:mod:`.placed`).

    Example:
        >>> import numpy as np
        >>> workers = ProcessWorkers([np.arange(3), np.arange(4)], 1, slots=4, slot_size=256)
        >>> workers.submit(1)
        >>> item, ok, value = workers.wait()
        >>> item, ok, value.tolist()
        (1, True, [0, 1, 2, 3])
        >>> workers.stop()
        >>> [code for _, code in workers.ended]
        [0]
    """

    kind = "process"

    def __init__(
        self,
        seq: Sequence[Any],
        num_workers: int,
        slots: int,
        slot_size: int,
        start_hook: Callable[[int], Any] | None = None,
        timeout: float | None = None,
        timing: Timing | None = None,
        shared: Slots | None = None,
        rows: tuple[int, int] | None = None,
    ):
        reaper.reap()
        self.start_hook, self.timeout = start_hook, timeout
        self.timing = Timing() if timing is None else timing
        self.owner = os.getpid()  # the only process that may stop them (:mod:`.ownership`)
        self.foreign = False  # in a forked child: its parent's workers, left alone
        if shared is not None and shared.owner != os.getpid():
            shared = None  # another process's slots (a forked child's parent): never shared
        self.shared = shared is not None
        self.slots = Slots(slots, slot_size) if shared is None else shared
        self.rows = rows
        self.pickled = 0
        self.copied = 0  # jobs of shared slots sent without one: every slot was held
        self.turn = 0
        self.cancelled = threading.Event()
        self.ended: list[tuple[int, int | None]] = []  # (pid, exit code) once stopped
        self.pending: list[collections.deque[tuple[int, int | None]]] = []  # (item, slot)
        self.job_pipes: list[Any] = []
        self.result_pipes: list[Any] = []
        self.workers: list[Any] = []
        self.starting: list[float | None] = []  # when each worker started, until it says so
        method = multiprocessing.get_context().get_start_method()
        given = None if method == "fork" else _pickled(seq)  # (once for all the workers)
        try:  # (until the finalizer stops them: a Ctrl-C meanwhile stops them here)
            for index in range(num_workers):
                self._start(seq, given, index)
            if given is not None:
                self._feed(given)
            self._results = Poller(self.result_pipes)
            self._finalizer = weakref.finalize(
                self,
                end,
                self.job_pipes,
                self.result_pipes,
                self.workers,
                1.0,
                owner=self.owner,
                held=(self.pending, self.slots) if self.shared else None,
            )
        except BaseException:
            if "_finalizer" in self.__dict__:  # (each set of workers is ended once)
                self._finalizer.detach()
            end(self.job_pipes, self.result_pipes, self.workers, 1.0, owner=self.owner)
            raise
        ownership.track(self)

    def _start(self, seq: Sequence[Any], given: bytes | None, index: int) -> None:
        """Start worker ``index``: given ``seq`` pickled (``given``), it reads it later."""
        ctx = multiprocessing.get_context()
        jobs_rx, jobs_tx = ctx.Pipe(duplex=False)
        results_rx, results_tx = ctx.Pipe(duplex=False)
        # a forked worker inherits this process's ends of its pipes: it closes them, so
        # that its writes fail rather than block once this process is gone
        method = ctx.get_start_method()
        mine = (jobs_tx, results_rx) if method == "fork" else ()
        memory, size, rows = self.slots.memory, self.slots.size, self.rows
        # the worker's parent: this process, unless a fork server starts it
        parent = self.owner if method in ("fork", "spawn") else None
        deathsig = threading.current_thread() is threading.main_thread()
        args = (seq if given is None else None, index, self.start_hook, jobs_rx, results_tx)
        args += (memory, size, mine, parent, deathsig, rows)
        worker = ctx.Process(target=_main, args=args, daemon=True)
        try:
            with forks.starting_worker():
                worker.start()
        except BaseException:
            jobs_tx.close()
            results_rx.close()
            raise
        finally:
            jobs_rx.close()
            results_tx.close()
        self.job_pipes.append(jobs_tx)
        self.result_pipes.append(results_rx)
        self.workers.append(worker)
        self.starting.append(time.monotonic())
        self.pending.append(collections.deque())

    def _feed(self, given: bytes) -> None:
        """Send every started worker its pickled sequence, together, within :data:`STARTUP`.

        The writes do not block: a worker reads its sequence once it has imported what
        it needs (seconds, for a spawned one), the workers do so at the same time, and
        one stuck before it reads (more than a pipe holds) is an error, not a hang. A
        worker gone meanwhile broke its pipe: :meth:`wait` says so.

        Raises:
            NotStarted: a worker has not read its sequence within :data:`STARTUP` seconds.
        """
        n = len(given)
        header = struct.pack("!i", n) if n <= 0x7FFFFFFF else struct.pack("!iQ", -1, n)
        left = {
            pipe.fileno(): (index, [memoryview(header), memoryview(given)])
            for index, pipe in enumerate(self.job_pipes)
        }
        for fd in left:
            os.set_blocking(fd, False)
        try:
            while left:
                for fd, (index, _) in list(left.items()):
                    if not self.workers[index].is_alive():
                        del left[fd]  # (wait() reports it)
                    elif time.monotonic() - self.starting[index] > STARTUP:
                        raise NotStarted(index, self.workers[index].pid, STARTUP)
                writable = select.poll()
                for fd in left:
                    writable.register(fd, select.POLLOUT)
                for fd, _ in writable.poll(POLL * 1000):
                    chunks = left[fd][1]
                    try:
                        while chunks:
                            chunks[0] = chunks[0][os.write(fd, chunks[0]) :]
                            if not chunks[0]:
                                chunks.pop(0)
                    except BlockingIOError:
                        continue  # the pipe is full: the worker reads on
                    except OSError:
                        pass  # gone: its pipe is broken (wait() reports it)
                    del left[fd]
        except BaseException:  # (stuck, or Ctrl-C): a part sent, no stop marker would fit
            for index, _ in left.values():
                self.workers[index].kill()
            raise
        finally:
            for pipe in self.job_pipes:
                with contextlib.suppress(OSError, ValueError):
                    os.set_blocking(pipe.fileno(), True)

    def forked(self) -> None:
        """In a forked child: let go of the parent's workers without touching them.

        The child's copies of the pipes are closed (the parent keeps its own), its
        finalizer detached, and multiprocessing forgets the processes, so that neither
        the child's exit nor its collections stop them.
        """
        if self.foreign or os.getpid() == self.owner:
            return
        self.foreign = True
        self._finalizer.detach()
        ownership.disown(self.workers)
        for pipe in self.job_pipes + self.result_pipes:
            with contextlib.suppress(OSError):
                pipe.close()

    def pids(self) -> list[int]:
        """Process ids of the live workers (none once they are stopped)."""
        if self.foreign:
            return []
        try:
            return [w.pid for w in self.workers if w.is_alive()]
        except ValueError:  # stopped meanwhile, and joined
            return []

    def cancel(self) -> None:
        """Make a :meth:`wait` in another thread raise :class:`Cancelled` within ``POLL``."""
        self.cancelled.set()

    def submit(self, item: int) -> None:
        """Send ``item`` to the next worker, with a free slot if there is one."""
        slot = self.slots.take(item, self.rows) if self.shared else self.slots.take()
        if slot is None and self.slots.size > 0:
            if not self.shared:
                self.pickled += 1
            elif not self.copied:  # (list(loader) holds every batch: not worth a warning)
                logger.info(
                    "all %d shared-memory slots of the workers were held by batches still "
                    "referenced (batches are views of them): the next batches are copied "
                    "through a pipe, more slowly; keep fewer batches (copy what you keep) "
                    "or raise max_buffered",
                    self.slots.count,
                )
            self.copied += 1
        index = self.turn
        self.turn = (self.turn + 1) % len(self.workers)
        self.pending[index].append((item, slot))
        try:
            self.job_pipes[index].send_bytes(message((item, slot)))
        except OSError:  # the worker is gone: wait() reports it
            pass

    def _gone(self, index: int) -> WorkerGone | Cancelled:
        """Worker ``index`` is gone: by itself, or stopped under a wait (a cancellation).

        Once the workers were ended (their finalizer ran, at interpreter exit, while a
        daemon thread waits; or a stop), a worker killed for being stuck is no failure.
        """
        if not self._finalizer.alive:
            return Cancelled("the workers were stopped while a result was awaited")
        pending = self.pending[index]
        return WorkerGone(index, pending[0][0] if pending else None)

    def _ready(self, seconds: float) -> list[Any]:
        """The result pipes ready within ``seconds`` (:class:`queue.Empty`: none)."""
        ready = self._results.wait(seconds)
        if not ready:
            raise queue.Empty
        return ready

    def _alive(self) -> None:
        """Raise for the first worker that exited, or that has not started in time.

        Raises:
            WorkerGone: a worker exited.
            NotStarted: a worker has not said it started within :data:`STARTUP` seconds.
        """
        for index, w in enumerate(self.workers):
            if not w.is_alive() and not self.result_pipes[index].poll(0):
                raise self._gone(index)  # (what it said before it exited is read first)
        now = time.monotonic()
        for index, since in enumerate(self.starting):
            if since is not None and now - since > STARTUP:
                raise NotStarted(index, self.workers[index].pid, STARTUP)

    def wait(self) -> tuple[int, bool, Any]:
        """The next result of any worker: ``(item, ok, value or error)``.

        Raises:
            WorkerGone: a worker died (its result pipe ended, or it exited).
            NoResult: nothing came within ``timeout`` seconds.
            HookFailed: a worker's start hook raised (its error chained).
            NotUnpickled: a worker could not unpickle its sequence (its error chained).
            NotStarted: a worker did not start within :data:`STARTUP` seconds.
            Cancelled: :meth:`cancel` was called meanwhile, or the workers were stopped
                (their finalizer ran: at interpreter exit, while another thread waits).
        """
        while True:
            ready = poll(self._ready, POLL, self._alive, self.timeout, self.cancelled)
            pipe = ready[0]
            index = self.result_pipes.index(pipe)
            try:
                data = pipe.recv_bytes()
            except (EOFError, OSError):
                raise self._gone(index) from None
            if data == GOODBYE:  # stopped under this wait (at exit, by the finalizer)
                raise Cancelled("the workers were stopped while a result was awaited")
            item, ok, start, regions, payload, read, idle = pickle.loads(data)
            if item != STARTED:
                break
            self.starting[index] = None  # (once per worker: no result yet)
        if item == HOOK:
            error = load_error(payload)
            raise HookFailed(self.start_hook, index, "process", error) from error
        if item == UNPICKLED_NOT:
            error = load_error(payload)
            raise NotUnpickled(index, error) from error
        self.timing.add(index, read, idle)
        if self.pending[index] and self.pending[index][0][0] == item:
            self.pending[index].popleft()
        if not ok:
            self.slots.give_back(start)
            return item, False, load_error(payload)
        if regions:  # views of the slot; the slot is free again when they are all gone
            return item, True, pickle.loads(payload, buffers=self.slots.lease(start, regions))
        self.slots.give_back(start)
        return item, True, pickle.loads(payload)

    def stop(self, wait: bool = True, timeout: float = 1.0, deadline: float | None = None) -> None:
        """Stop the workers (:func:`end`); with ``wait``, join them too (bounded).

        ``deadline`` (of :func:`time.monotonic`): the stop markers were sent already
        (:func:`stop_together`), goodbyes are awaited until then. In a process forked
        from the one that started them, nothing: they are not its.
        """
        if self._finalizer.detach() is None and not self.foreign:
            return  # ended already: by a stop() before, or by the finalizer (at exit)
        if self.foreign or os.getpid() != self.owner:
            self.forked()
            return
        held = (self.pending, self.slots) if self.shared else None
        self.ended = end(
            self.job_pipes,
            self.result_pipes,
            self.workers,
            timeout,
            wait,
            held=held,
            deadline=deadline,
        )

    def send_stop(self) -> None:
        """Send every worker the stop marker now (:meth:`stop` with a ``deadline`` follows)."""
        if not self.foreign and os.getpid() == self.owner:
            _send_stop(self.job_pipes)


GRACE = 0.25
"""Seconds workers stopped together have to say goodbye: a worker still reading then is
killed (what it was reading is not wanted)."""


def stop_together(sets: list[ProcessWorkers], wait: bool = False, grace: float = GRACE) -> None:
    """Stop several sets of workers at once: every stop marker first, then one deadline.

    Stopping them one after another would give each set its own wait for a worker
    still reading (the time of a read, or the grace, per set); together, stopping any
    number of workers takes at most ``grace`` (plus the kills).

    Example:
        >>> import numpy as np
        >>> sets = [ProcessWorkers([np.arange(3)], 1, slots=4, slot_size=256) for _ in range(2)]
        >>> stop_together(sets, wait=True)
        >>> [code for s in sets for _, code in s.ended]
        [0, 0]
    """
    for workers in sets:
        workers.send_stop()
    deadline = time.monotonic() + grace
    for workers in sets:
        workers.stop(wait=wait, timeout=grace, deadline=deadline)


def _send_stop(job_pipes: list[Any]) -> None:
    for pipe in job_pipes:
        with contextlib.suppress(OSError):
            pipe.send_bytes(message((STOP, None)))


def end(
    job_pipes: list[Any],
    result_pipes: list[Any],
    workers: list[Any],
    timeout: float = 1.0,
    wait: bool = False,
    owner: int | None = None,
    held: tuple[list[Any], Slots] | None = None,
    deadline: float | None = None,
) -> list[tuple[int, int | None]]:
    """Send every worker the stop marker, wait (bounded) for its goodbye, kill the rest.

    A worker says goodbye when it will not touch the shared memory again; it then exits
    by itself and is joined by the reaper (:mod:`.reaper`), or here with ``wait``
    (bounded). Returns ``(pid, exit code)`` of each worker, ``None`` for one still
    exiting. Called once per set of workers: by ``stop()``, or else by the finalizer;
    in a process other than ``owner`` (a forked child) it does nothing.
    ``held``: the jobs still pending with each worker and the slots they hold (slots
    that outlive the workers): given back once no worker writes them any more.
    ``deadline``: the stop markers were sent already; goodbyes are awaited until then.
    """
    if owner is not None and os.getpid() != owner:
        return []
    if deadline is None:
        _send_stop(job_pipes)
        deadline = time.monotonic() + timeout
    killed = []
    for results, w in zip(result_pipes, workers, strict=True):
        try:
            while results.poll(max(0.0, deadline - time.monotonic())):
                if results.recv_bytes() == GOODBYE:
                    break  # (results still in flight are dropped)
            else:
                w.kill()  # no goodbye in time: stuck, or still reading what is not wanted
                killed.append(w)
        except (EOFError, OSError):
            killed.append(w)  # it is gone: its exit code is known at once
    for w in killed:  # (killed together, then joined: a SIGKILL ends a process at once)
        w.join(max(timeout, 1.0))
    for pipe in job_pipes + result_pipes:
        pipe.close()
    if held is not None:  # no worker writes any more: their slots are free again
        pending, slots = held
        for jobs in pending:
            while jobs:
                slots.give_back(jobs.popleft()[1])
    deadline = time.monotonic() + timeout
    for w in workers if wait else ():
        w.join(max(0.0, deadline - time.monotonic()))
    ended = [(w.pid, w.exitcode) for w in workers]
    reaper.exiting(workers)
    return ended


def _pickled(seq: Any) -> bytes | None:
    """``seq`` pickled, to send a started worker down its job pipe (None: with its start).

    A sequence given to ``Process`` is written to the new process by ``start()``, which
    holds the other end of that pipe meanwhile: a worker that dies before it has read
    it all (its import of the main module fails) would block ``start()`` for good. Sent
    down the job pipe instead, whose other end only the worker holds, its death breaks
    the pipe. What pickles only while a process is spawned goes with the start.
    """
    try:
        return bytes(ForkingPickler.dumps(seq))
    except Exception:
        return None


class _PipeChannel:
    """A worker process's channel: jobs and results on pipes, items built in slots."""

    def __init__(
        self,
        jobs: Any,
        results: Any,
        memory: Any,
        slot_size: int,
        rows: tuple[int, int] | None = None,
    ):
        self.jobs, self.results, self.slot_size, self.rows = jobs, results, slot_size, rows
        self.view = memoryview(memory).cast("B")
        self.base = ctypes.addressof(memory)
        self.pages = Pages(self.view, self.base)  # (mapped before they are written)
        self.poller = Poller([jobs])
        self.filling = Filling(self.view, self.base, None, 0)

    def take(self) -> int | None:
        while True:
            try:
                if not self.poller.wait(1.0):
                    continue  # (the watchdog ends the process when its parent is gone)
                item, start = pickle.loads(self.jobs.recv_bytes())
            except (EOFError, OSError):
                return None
            if item == STOP:
                with contextlib.suppress(OSError):
                    self.results.send_bytes(GOODBYE)  # no more writes to the shared memory
                return None
            self.filling = Filling(
                self.view, self.base, start, self.slot_size, self.rows, self.pages
            )
            return item

    def building(self) -> Filling:
        return self.filling

    def started(self) -> None:
        """Tell the main process that this worker is set up (:data:`STARTUP`)."""
        with contextlib.suppress(OSError):
            self.results.send_bytes(message((STARTED, True, None, [], b"", 0.0, 0.0)))

    def put(
        self, item: int, ok: bool, value: Any, spent: tuple[float, float] = (0.0, 0.0)
    ) -> bool:
        start, regions = self.filling.start, []
        if ok:
            try:
                payload, regions = self.filling.pickle(value)
            except Exception as e:
                value = ValueError(f"failed to send item {item} to the main process: {e}")
                ok, value.__cause__ = False, e
        if not ok:
            payload, regions = dump_error(value), []
        try:
            self.results.send_bytes(message((item, ok, start, regions, payload, *spent)))
            return True
        except OSError:
            return False  # the main process is gone


def _main(
    seq: Sequence[Any],
    index: int,
    start_hook: Callable[[int], Any] | None,
    jobs: Any,
    results: Any,
    memory: Any,
    slot_size: int,
    inherited: tuple[Any, ...],
    parent: int | None,
    deathsig: bool,
    rows: tuple[int, int] | None = None,
) -> None:
    """A worker process: set the process up, then run the worker loop.

    ``seq`` None: it comes first down the job pipe (:func:`_pickled`).
    """
    watchdog.guard(os.getppid() if parent is None else parent, deathsig)
    for pipe in inherited:
        pipe.close()
    if seq is None:
        try:
            seq = pickle.loads(jobs.recv_bytes())
        except (EOFError, OSError):
            return  # the main process is gone, or stopped this worker
        except Exception as e:  # (said to the main process, which raises NotUnpickled)
            with contextlib.suppress(OSError):
                results.send_bytes(message((UNPICKLED_NOT, False, None, [], dump_error(e), 0, 0)))
            return
    # The objects inherited through fork are left out of this process's collections:
    # a full collection writes to every object it walks, which would copy every page
    # of them here (about 70 ms in a process that imported torch and PyAV).
    gc.freeze()
    # One thread for torch's own operations, as torch's DataLoader workers do: an
    # OpenMP pool that the main process started before the fork hangs a forked worker
    # at its first parallel operation (and workers are the parallelism).
    torch.set_num_threads(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the main process
    channel = _PipeChannel(jobs, results, memory, slot_size, rows)
    channel.started()
    run(seq, index, start_hook, channel)
