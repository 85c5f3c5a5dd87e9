"""Evaluate a sequence ahead in worker processes or threads (seqtools' prefetch, guarded)."""

from __future__ import annotations

import ctypes
import functools
import logging
import multiprocessing
import multiprocessing.connection
import multiprocessing.sharedctypes
import os
import pickle
import queue
import signal
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import seqtools
import seqtools.errors
import seqtools.evaluation
from seqtools.C.refcountedbuffer import RefCountedBuffer

from . import _shm
from ._tree import nbytes
from .errors import StreamError

logger = logging.getLogger(__name__)

METHODS = ("process", "thread")


class WorkerError(RuntimeError):
    """A worker process died (killed, crashed) or a worker thread stopped unexpectedly."""


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

    def __init__(self, seq: Sequence[Any], num_workers: int, init_fn: Callable[[int], Any] | None):
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
        """
        while True:
            try:
                done = self.done_queue.get(timeout=poll)
                break
            except queue.Empty:
                if not all(w.is_alive() for w in self.workers) and self.done_queue.empty():
                    raise RuntimeError("a worker died unexpectedly") from None
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
    ):
        _reap()
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
            worker = ctx.Process(
                target=_Backend.worker,
                args=(seq, jobs_rx, self.shm, self.shm_slot_size, results_tx, init_fn, index),
                daemon=True,
            )
            worker.start()
            jobs_rx.close()
            results_tx.close()
            self.job_pipes.append(jobs_tx)
            self.result_pipes.append(results_rx)
            self.workers.append(worker)
        self.worker_died = threading.Event()
        self._finalizer = weakref.finalize(
            self, _Backend.end, self.job_pipes, self.result_pipes, self.workers
        )

    def wait_completion(self) -> tuple[int, bool, Any]:
        """The next result of any worker: ``(item, success, value)``.

        A dead worker is noticed at once (its result pipe reaches its end) or, for one
        that closed it and lives on, within a second; either raises RuntimeError.
        """
        while True:
            ready = multiprocessing.connection.wait(self.result_pipes, timeout=1)
            if ready:
                break
            if self.worker_died.is_set() or not all(w.is_alive() for w in self.workers):
                raise RuntimeError("a worker died unexpectedly")
        try:
            item, success, start, regions, payload = ready[0].recv()
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
            pipe.send((item, slot))
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
                pipe.send((-1, None))
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
    def worker(seq, jobs, shm, slot_size, results, init_fn, index):  # noqa: D102
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the main process
        parent = os.getppid()
        if init_fn is not None:
            init_fn(index)
        seqtools.errors.seterr("passthrough")
        view = memoryview(shm).cast("B")
        base = ctypes.addressof(shm)
        while True:
            try:
                if not jobs.poll(1):
                    if os.getppid() != parent:
                        return  # the main process is gone
                    continue
                idx, start = jobs.recv()
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
            try:
                results.send((idx, success, start, regions, payload))
            except OSError:
                return  # the main process is gone


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
        check_workers(num_workers, method, max_buffered)
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
            threads = _ThreadBackend(seq, self.num_workers, hook)
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
