"""Worker processes for :func:`streamseq.prefetch`, writing items into shared memory."""

from __future__ import annotations

import ctypes
import functools
import gc
import logging
import multiprocessing
import multiprocessing.connection
import multiprocessing.sharedctypes
import os
import pickle
import select
import signal
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import seqtools
import seqtools.errors
import seqtools.evaluation
import torch
from seqtools.C.refcountedbuffer import RefCountedBuffer

from . import _shm
from .errors import WorkerError

logger = logging.getLogger("streamseq.prefetch")


class _Packed:
    """A tuple of arrays (a :class:`~streamseq.Batch`), pickled as buffers and specs.

    Its buffers, dtypes and shapes: four times cheaper than numpy's reduction of each
    array; the main process gets the same views of the slot as with numpy's.
    """

    def __init__(self, value: tuple):
        self.value = value

    def __reduce__(self) -> tuple:
        v = self.value
        buffers = [pickle.PickleBuffer(a) for a in v]
        return _unpack, (type(v), buffers, [(a.dtype.str, a.shape) for a in v])


def _unpack(cls: type, buffers: list[Any], specs: list[tuple[str, tuple]]) -> tuple:
    arrays = [np.frombuffer(b, d).reshape(s) for b, (d, s) in zip(buffers, specs, strict=True)]
    return cls._make(arrays) if hasattr(cls, "_make") else cls(arrays)


def _pack(value: Any) -> Any:
    """``value``, wrapped in :class:`_Packed` when it is a tuple of plain arrays."""
    if isinstance(value, tuple) and value:
        for a in value:
            if type(a) is not np.ndarray or not a.flags.c_contiguous or not a.dtype.isbuiltin:
                return value
        return _Packed(value)
    return value


def _sendable_error(error: BaseException, payload: bytes, buffers: list[Any]) -> bytes:
    """``payload`` (``error`` pickled), or a WorkerError describing ``error`` instead.

    The description replaces the payload when it does not unpickle: an exception whose
    ``__init__`` takes other arguments than its ``args`` pickles but fails to unpickle,
    which would replace it with an unrelated TypeError in the main process.
    """
    try:
        pickle.loads(payload, buffers=buffers)
        return payload
    except Exception as e:
        text = "".join(traceback.format_exception(error)).rstrip()
        why = f"{type(e).__name__}: {e}"
        message = f"{type(error).__qualname__}: {error} (not sent as itself: {why})\n{text}"
        return pickle.dumps(WorkerError(message), protocol=pickle.HIGHEST_PROTOCOL)


def _describe_exits(ended: list[tuple[int, int | None]]) -> str:
    """How each worker process ended, e.g. ``process 12 killed by SIGKILL``."""
    out = []
    for pid, code in ended:
        if code is not None and code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = "stopped" if code is None else f"exit code {code}"
        out.append(f"process {pid} {how}")
    return ", ".join(out)


class _Poller:
    """Wait until pipes can be read, with one poll object made once.

    ``multiprocessing.connection.wait`` builds and tears down a selector at every call
    (tens of microseconds, per item on both ends of a pipe); where ``select.poll`` is
    missing it is used all the same. A pipe whose other end closed counts as readable
    (its next read raises EOFError).
    """

    def __init__(self, pipes: list[Any]):
        self.pipes = list(pipes)
        self.poller = select.poll() if hasattr(select, "poll") else None
        self.by_fd = {}
        for pipe in self.pipes:
            if self.poller is not None:
                self.poller.register(pipe.fileno(), select.POLLIN)
            self.by_fd[pipe.fileno()] = pipe

    def wait(self, timeout: float) -> list[Any]:
        """The pipes readable within ``timeout`` seconds (empty: none)."""
        if self.poller is None:
            return multiprocessing.connection.wait(self.pipes, timeout)
        return [self.by_fd[fd] for fd, _ in self.poller.poll(timeout * 1000)]


def _message(value: Any) -> bytes:
    """``value`` (ints, tuples, bytes) as the bytes of one message on a pipe.

    Plain pickle: ``Connection.send`` builds a ``ForkingPickler`` for each message,
    copying the table of reducers that torch registers (~10 us).
    """
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


_GOODBYE = b"streamseq: worker done"
_EXITING: list[Any] = []  # stopped worker processes not joined yet
os.register_at_fork(after_in_child=_EXITING.clear)  # a child joins only its own


def _reap() -> None:
    """Join the stopped workers that have exited, and release their resources."""
    for w in list(_EXITING):
        if w.exitcode is not None or not w.is_alive():
            w.join(0)
            _EXITING.remove(w)
            w.close()


def _shared_bytes(size: int) -> Any:
    """``RawArray("B", size)`` without zeroing it in this process.

    Every item is written before it is read, and RawArray's ``memset`` would touch all
    the pages here, in the main process, before each worker starts (10 ms for 32 MB).
    """
    new = getattr(multiprocessing.sharedctypes, "_new_value", None)  # the allocation only
    if new is None:
        return multiprocessing.sharedctypes.RawArray("B", size)
    return new(ctypes.c_ubyte * size)


class _Backend(seqtools.evaluation.ProcessBacked):
    """seqtools' process backend, with workers that build each item in its shm slot.

    Differences with seqtools': each worker makes the slot of its job current
    (:mod:`streamseq._shm`), so the arrays that the item allocates there are written
    once, where the main process maps them, and pickling sends only where they are;
    other buffers are copied into the rest of the slot, and what still does not fit
    travels in the pickle (the item is larger than a slot: :class:`Prefetched` grows the
    slots). Jobs go round-robin through one pipe per worker (no feeder thread, so the
    main process hands out a job with one write); a job submitted while every slot is
    held by delivered items is counted in ``pickled``. Workers ignore SIGINT and stop
    when the main process is gone; :meth:`stop` ends them within a bounded time. A dead
    worker is noticed from its result pipe, without a monitor thread. Unlike
    seqtools', thread pools are not limited around the fork: that starts OpenBLAS
    threads which spin in the main process for a while (about 0.3 s of CPU per start).
    """

    def __init__(
        self,
        seq: Sequence[Any],
        num_workers: int,
        buffer_size: int,
        init_fn: Callable[[int], Any] | None,
        shm_size: int,
        timeout: float | None = None,
    ):
        _reap()
        self.timeout = timeout
        ctx = multiprocessing.get_context()
        self.shm = _shared_bytes(max(1, shm_size))
        self.shm_slot_size = shm_size // buffer_size
        self.free_shm_slots = {k * self.shm_slot_size for k in range(buffer_size)}
        if shm_size <= 0:
            self.free_shm_slots = set()
        self.pickled = 0
        self.turn = 0
        self.ended: list[tuple[int, int | None]] = []  # (pid, exit code) once stopped
        self.job_pipes: list[Any] = []
        self.result_pipes: list[Any] = []
        self.workers: list[Any] = []
        for index in range(num_workers):
            jobs_rx, jobs_tx = ctx.Pipe(duplex=False)
            results_rx, results_tx = ctx.Pipe(duplex=False)
            # a forked worker inherits this process's ends of its pipes: it closes them, so
            # that its writes fail rather than block once this process is gone
            mine = (jobs_tx, results_rx) if ctx.get_start_method() == "fork" else ()
            args = (seq, jobs_rx, self.shm, self.shm_slot_size, results_tx, init_fn, index, mine)
            worker = ctx.Process(target=_Backend.worker, args=args, daemon=True)
            worker.start()
            jobs_rx.close()
            results_tx.close()
            self.job_pipes.append(jobs_tx)
            self.result_pipes.append(results_rx)
            self.workers.append(worker)
        self.worker_died = threading.Event()
        self._results = _Poller(self.result_pipes)
        self._finalizer = weakref.finalize(
            self, _Backend.end, self.job_pipes, self.result_pipes, self.workers
        )

    def wait_completion(self) -> tuple[int, bool, Any]:
        """The next result of any worker: ``(item, success, value)``.

        A dead worker is noticed at once (its result pipe reaches its end) or, for one
        that closed it and lives on, within a second; either raises RuntimeError.
        """
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            left = 1.0 if deadline is None else min(1.0, max(0.0, deadline - time.monotonic()))
            ready = self._results.wait(left)
            if ready:
                break
            if self.worker_died.is_set() or not all(w.is_alive() for w in self.workers):
                raise RuntimeError("a worker died unexpectedly")
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"no result from the workers in {self.timeout:g} s")
        try:
            item, success, start, regions, payload = pickle.loads(ready[0].recv_bytes())
        except (EOFError, OSError):
            self.worker_died.set()
            raise RuntimeError("a worker died unexpectedly") from None
        if regions:  # views of the slot; the slot is free again when they are all gone
            free = functools.partial(self.add_free_shm_slot, start)
            shm = memoryview(RefCountedBuffer(self.shm, free))
            return item, success, pickle.loads(payload, buffers=[shm[a:z] for a, z in regions])
        if start is not None:
            self.free_shm_slots.add(start)
        return item, success, pickle.loads(payload)

    def submit_job(self, item: int) -> None:  # noqa: D102
        slot = self.free_shm_slots.pop() if self.free_shm_slots else None
        if slot is None and self.shm_slot_size > 0:
            self.pickled += 1
        pipe = self.job_pipes[self.turn]
        self.turn = (self.turn + 1) % len(self.job_pipes)
        try:
            pipe.send_bytes(_message((item, slot)))
        except OSError:  # the worker is gone: wait_completion reports it
            self.worker_died.set()

    def stop(self, timeout: float = 1.0, wait: bool = True) -> None:
        """Stop the workers (see :meth:`end`), and with ``wait`` join them (bounded)."""
        self._finalizer.detach()
        self.ended = _Backend.end(self.job_pipes, self.result_pipes, self.workers, timeout)
        if wait:
            ended = []
            for w, (pid, code) in zip(self.workers, self.ended, strict=True):
                if w in _EXITING:  # not joined (nor closed) yet
                    w.join(timeout)
                    code = w.exitcode
                ended.append((pid, code))
            self.ended = ended
            _reap()

    @staticmethod
    def end(
        job_pipes: list[Any], result_pipes: list[Any], workers: list[Any], timeout: float = 1.0
    ) -> list[tuple[int, int | None]]:
        """Send every worker the sentinel and wait (bounded) for its goodbye; kill the rest.

        A worker says goodbye when it will not touch the shared memory again; it then
        exits by itself, and is joined later (:func:`_reap`) rather than waited for here:
        a process with torch loaded takes milliseconds to exit. Returns ``(pid, exit
        code)`` of each worker, ``None`` for one still exiting.
        """
        for pipe in job_pipes:
            try:
                pipe.send_bytes(_message((-1, None)))
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        for results, w in zip(result_pipes, workers, strict=True):
            try:
                while results.poll(max(0.0, deadline - time.monotonic())):
                    if results.recv_bytes() == _GOODBYE:
                        break  # (results still in flight are dropped)
                else:
                    w.kill()  # no goodbye in time: stuck
                    w.join(timeout)
            except (EOFError, OSError):
                w.join(timeout)  # it is gone: its exit code is known at once
        for pipe in job_pipes + result_pipes:
            pipe.close()
        ended = [(w.pid, w.exitcode) for w in workers]
        _EXITING.extend(workers)
        _reap()
        return ended

    @staticmethod
    def worker(seq, jobs, shm, slot_size, results, init_fn, index, inherited=()):  # noqa: D102
        for end in inherited:
            end.close()
        # The objects inherited through fork are left out of this process's collections:
        # a full collection writes to every object it walks, which would copy every page
        # of them here (about 70 ms in a process that imported torch and PyAV).
        gc.freeze()
        # One thread for torch's own operations, as torch's DataLoader workers do: an
        # OpenMP pool that the main process started before the fork hangs a forked worker
        # at its first parallel operation (and workers are the parallelism).
        torch.set_num_threads(1)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the main process
        parent = os.getppid()
        if init_fn is not None:
            init_fn(index)
        seqtools.errors.seterr("passthrough")
        view = memoryview(shm).cast("B")
        base = ctypes.addressof(shm)
        poller = _Poller([jobs])
        while True:
            try:
                if not poller.wait(1):
                    if os.getppid() != parent:
                        return  # the main process is gone
                    continue
                idx, start = pickle.loads(jobs.recv_bytes())
            except (EOFError, OSError):
                return
            if idx < 0:
                try:
                    results.send_bytes(_GOODBYE)  # no more writes to the shared memory
                except OSError:
                    pass
                return
            slot = None if start is None else _shm.Slot(view, start, start + slot_size)
            _shm.use(slot)
            try:
                value, success = seq[idx], True
            except Exception as e:
                value, success = e, False
            finally:
                _shm.use(None)
            regions: list[tuple[int, int]] = []

            def place(buffer: pickle.PickleBuffer, slot=slot, regions=regions) -> bool:
                data = buffer.raw()
                size = data.nbytes
                at = slot.start
                if size and not data.readonly:
                    at = ctypes.addressof(ctypes.c_char.from_buffer(data)) - base
                elif size:
                    at = np.frombuffer(data, np.uint8).ctypes.data - base
                if not slot.start <= at <= at + size <= slot.stop:  # not built in the slot
                    at = -(-slot.offset // _shm.ALIGN) * _shm.ALIGN
                    if at + size > slot.stop:
                        return True  # in the pickle
                    view[at : at + size] = data
                    slot.offset = at + size
                regions.append((at, at + size))
                return False

            try:
                if slot is None:
                    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
                else:
                    payload = pickle.dumps(
                        _pack(value), protocol=pickle.HIGHEST_PROTOCOL, buffer_callback=place
                    )
            except Exception as e:
                regions.clear()
                if success:
                    success = False
                    message = f"failed to send item {idx} to the main process: {e}"
                    payload = pickle.dumps(ValueError(message))
                else:
                    payload = pickle.dumps(str(value))
            if not success and isinstance(value, BaseException):
                payload = _sendable_error(value, payload, [view[a:z] for a, z in regions])
            try:
                results.send_bytes(_message((idx, success, start, regions, payload)))
            except OSError:
                return  # the main process is gone
