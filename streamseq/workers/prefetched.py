"""Evaluate a sequence ahead in worker processes or threads, in order (:func:`prefetch`).

The life of a set of workers: started at an index, restarted elsewhere (or kept, when
persistent), grown when an item outgrows its slot, stopped by ``close()``, by an error,
by the finalizer, or together with others (:func:`close_together`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .._checks import check_int
from .._tree import nbytes
from .._warn import warn
from ..errors import WorkerError, WorkerTimeout
from . import inline, ownership
from .config import WorkerConfig
from .failures import (
    Cancelled,
    HookFailed,
    NoResult,
    NotStarted,
    WorkerGone,
    describe_exits,
    describe_item,
)
from .processes import GRACE, ProcessWorkers, stop_together
from .sizing import slot_size
from .slots import Slots
from .threads import ThreadWorkers
from .timing import Timing
from .window import Window

logger = logging.getLogger("streamseq.prefetch")


ENDLESS = float("inf")
"""The length of a sequence of segments without end (see :func:`prefetch`)."""


def _length(seq: Any) -> int | float:
    """``len(seq)``, or :data:`ENDLESS` for segments without ``len`` (``segment_end``).

    Raises:
        TypeError: ``seq`` has neither.
    """
    try:
        return len(seq)
    except TypeError as e:
        if callable(getattr(seq, "segment_end", None)):
            return ENDLESS
        raise TypeError(f"prefetch needs a sequence with len(), got {type(seq).__name__}") from e


class Prefetched:
    """Items of ``seq`` evaluated ahead by workers; see :func:`prefetch`.

    Args:
        seq: the sequence.
        config: how the workers run.
        slots: shared-memory slots of someone else's for the worker processes to write
            in, instead of slots of their own (a loader keeps its slots across passes
            and shares them among its groups of rows: :class:`~.pool.WorkerPool`); they
            are never grown here: an item larger than a slot travels pickled.
        rows: with ``slots``, ``(first, total)``: the workers write rows ``first, ...``
            of each batch of ``total`` rows (:mod:`.placed`).
    """

    def __init__(
        self,
        seq: Sequence[Any],
        config: WorkerConfig,
        slots: Slots | None = None,
        rows: tuple[int, int] | None = None,
    ):
        self.config = config
        self.length = _length(seq)
        self.seq, self.shared, self.rows = seq, slots, rows
        self.slot_size: int | None = None
        if slots is not None:
            self.slot_size = slots.size
        elif config.shm_size is not None:
            self.slot_size = max(1, int(config.shm_size) // config.max_buffered)
        self._lock = threading.RLock()  # one caller at a time uses the workers
        self._workers: ProcessWorkers | ThreadWorkers | None = None
        self._window: Window | None = None
        self._iterating = 0
        self._retired = False  # closed for good: no workers start again (:meth:`retire`)
        self.grown = 0  # times the slots grew for an item larger than a slot
        self.pickled = 0  # items pickled through a pipe: no slot was free
        self.timing = Timing()  # what the workers spent reading and idle, all along
        ownership.track(self)

    @property
    def num_workers(self) -> int:
        """Worker processes or threads (0: items are evaluated in the calling process)."""
        return self.config.num_workers

    @property
    def method(self) -> str:
        """``"process"`` or ``"thread"``."""
        return self.config.method

    @property
    def max_buffered(self) -> int:
        """Items in flight plus delivered items still referenced."""
        return self.config.max_buffered

    @property
    def timeout(self) -> float | None:
        """Seconds the workers may go without delivering anything (None: no bound)."""
        return self.config.timeout

    @property
    def persistent_workers(self) -> bool:
        """Whether the workers are kept when an access restarts them elsewhere."""
        return self.config.persistent_workers

    def forked(self) -> None:
        """In a forked child: let go of the parent's workers; the next access starts new ones.

        The parent's workers are never stopped nor used from here (:mod:`.ownership`):
        their pipes and shared memory are the parent's.
        """
        workers, self._workers, self._window = self._workers, None, None
        if workers is not None:
            workers.forked()
        self._lock = threading.RLock()  # (a thread of the parent may have held it)
        self._iterating = 0

    def __repr__(self) -> str:
        n = "endless segments" if self.length == ENDLESS else f"{self.length} items"
        what = f"{type(self.seq).__name__} of {n}"  # not the items
        return f"prefetch({what}, {self.num_workers}, method={self.method!r})"

    def __len__(self) -> int:
        if self.length == ENDLESS:
            raise TypeError("a prefetch of endless segments has no len()")
        return self.length

    def __enter__(self) -> Prefetched:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> Iterator[Any]:
        with self._lock:
            self._iterating += 1
        try:
            for i in range(len(self)):
                yield self[i]
        finally:
            with self._lock:
                self._iterating -= 1
                last = self._iterating == 0
            if last:  # (another thread iterating goes on with these workers)
                self.close()

    @property
    def pids(self) -> list[int]:
        """Process ids of the live worker processes (empty for threads)."""
        workers = self._workers
        return [] if workers is None else workers.pids()

    def close(self, wait: bool = True) -> None:
        """Stop the workers now (they also stop when this object is collected).

        A thread waiting for an item of these workers meanwhile gets a
        :class:`WorkerError`. See "Shutdown" in :mod:`streamseq.workers`.

        Args:
            wait: return once the worker processes have exited (waiting up to a
                second); otherwise once they have stopped using the shared memory, and
                let them exit meanwhile (they are joined in the background; a process
                with torch loaded takes a few milliseconds to exit). Worker threads are
                always waited for (up to a second), until they finish the item they are
                evaluating.
        """
        self._stop_held(wait, retire=False)

    def retire(self, wait: bool = True) -> None:
        """Stop the workers for good: a later access raises instead of starting new ones.

        What a loader's pass does with the workers it started when it ends, and a loader
        with its persistent workers when it stops them: a thread that was about to
        wait for them meanwhile (another thread closed the loader) ends with a
        :class:`WorkerError` instead of starting workers that would outlive the close.

        Example:
            >>> import numpy as np
            >>> ahead = prefetch([np.arange(3)] * 4, 1, shm_size=1 << 16)
            >>> int(ahead[0][2])
            2
            >>> ahead.retire()
            >>> ahead[1]  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            streamseq.errors.WorkerError: the workers were closed for good ... item 1 was read
        """
        self._stop_held(wait, retire=True)

    def _stop_held(self, wait: bool, retire: bool) -> None:
        """Stop the workers under the lock (:meth:`_acquire`); with ``retire``, for good."""
        self._acquire()
        try:
            self._retired = self._retired or retire
            self._stop(wait)
            self._release_here()
        finally:
            self._lock.release()

    def _acquire(self) -> None:
        """Take the lock, waking up a thread that waits for these workers meanwhile."""
        while not self._lock.acquire(timeout=0.05):
            workers = self._workers  # another thread waits for them: wake it up
            if workers is not None:
                workers.cancel()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def _stop(self, wait: bool = True) -> None:
        workers, self._workers, self._window = self._workers, None, None
        if workers is not None:
            workers.stop(wait=wait)

    def _release_here(self) -> None:
        """Close the files that worker threads, closed or retired, opened in this process.

        Worker processes close theirs as they exit; threads read through ``seq`` here.
        (Threads replaced at another item, or stopped by an error, keep them until the
        close: the new ones read on.)
        """
        release = getattr(self.seq, "release", None)
        if release is not None and self.method == "thread":
            release()

    def _end(self, i: int) -> int:
        """Where the workers stop evaluating ahead of item ``i``: the end of its segment."""
        segment_end = getattr(self.seq, "segment_end", None)
        return self.length if segment_end is None else min(self.length, segment_end(i))

    def _start(self, i: int) -> None:
        """Start the workers at item ``i``; lock held.

        New workers replace the old ones, unless they persist: then the items they have
        in flight are awaited and dropped, and they go on from ``i``.

        Raises:
            WorkerError: the workers were retired (:meth:`retire`).
        """
        if self._retired:
            raise WorkerError(
                "the workers were closed for good (their loader or pass was closed, by "
                f"another thread?) before {describe_item(self.seq, i)} was read"
            )
        if self.persistent_workers and self._workers is not None and self._window is not None:
            if i >= self.length:
                return
            window = self._window
            self._window = None  # (a failure while draining: new workers next time)
            try:
                window.drain()
            except (NoResult, WorkerGone):  # stuck on, or died with, an item left behind
                logger.info("persistent workers replaced: an item left behind did not come")
            else:
                self.timing.restart()  # (they idled since their last item, unasked)
                self._window = Window(self._workers, i, self._end(i), window.depth)
                return
        self._stop()
        if i >= self.length:
            return
        config, timing = self.config, self.timing
        timing.restart()
        if config.method == "thread":
            workers: Any = ThreadWorkers(
                self.seq, config.num_workers, config.start_hook, config.timeout, timing
            )
            depth = config.max_buffered
        else:
            workers = ProcessWorkers(
                self.seq,
                config.num_workers,
                config.max_buffered,
                self.slot_size,
                config.start_hook,
                config.timeout,
                timing,
                shared=self.shared,
                rows=self.rows,
            )
            depth = config.max_buffered - 2  # two slots stay free for the items being used
        self._workers, self._window = workers, Window(workers, i, self._end(i), depth)

    def _ready(self) -> bool:
        """Whether workers can start: with processes, once the slots are sized."""
        config = self.config
        return config.num_workers > 0 and not (
            config.method == "process" and self.slot_size is None
        )

    def prepare(self, i: int) -> None:
        """Start the workers on item ``i`` now, if they are not there already.

        ``self[i]`` does it too, then waits; preparing several prefetches first lets
        their workers start together.
        """
        if self._ready() and 0 <= i < self.length:
            with self._lock:
                if self._window is None or self._window.next != i:
                    self._start(i)

    def __getitem__(self, i: int) -> Any:
        given = i
        if type(i) is not int:  # (an int is one already: the common case, once a batch)
            i = check_int(i, "an item index")
        if i < 0 and self.length != ENDLESS:
            i += self.length
        if not 0 <= i < self.length:
            raise IndexError(f"item {given} out of range for {self.length} items")
        config = self.config
        if config.num_workers == 0:
            return self._here(i)
        if not self._ready():
            return self._sizing(i)
        with self._lock:
            if self._window is None or self._window.next != i:
                self._start(i)  # out of order: restart there instead of draining the queue
            value = self._take(i)
            if config.method == "process":
                self._check_slots(i, value)
            return value

    def _here(self, i: int) -> Any:
        """Item ``i`` evaluated in this process, within the timeout (:mod:`.workers.inline`)."""
        return self.seq[i] if self.timeout is None else inline.call(self.seq, i, self.timeout)

    def _sizing(self, i: int) -> Any:
        """Item ``i`` evaluated here, to size the shared-memory slots; workers start after."""
        value = self._here(i)
        with self._lock:
            if self.slot_size is None:
                self.slot_size = slot_size(nbytes(value))
                if hasattr(self.seq, "release"):
                    self.seq.release()  # the workers open their own files
                self._start(i + 1)
        return value

    def _take(self, i: int) -> Any:
        """Item ``i`` from the workers, or the error that stops them; lock held."""
        workers, window = self._workers, self._window
        try:
            ok, value = window.take()
        except HookFailed:
            self._stop()
            raise
        except NotStarted as stuck:
            self._stop()
            raise WorkerError(
                f"{stuck} while {describe_item(self.seq, i)} was awaited (it is stuck right "
                "after its start: a lock that another thread held when it was forked?); the "
                "workers were stopped"
            ) from None
        except WorkerGone as gone:
            self._stop()  # joins them: the exit codes are known after
            what = describe_item(self.seq, i if gone.item is None else gone.item)
            if self.method == "thread":
                raise WorkerError(
                    f"a worker thread stopped unexpectedly while evaluating {what}; the "
                    "workers were stopped"
                ) from None
            raise WorkerError(
                f"a worker process died unexpectedly while evaluating {what} "
                f"({describe_exits(workers.ended)}); the workers were stopped"
            ) from None
        except NoResult:
            self._stop()
            raise WorkerTimeout(
                f"the workers delivered nothing for {self.timeout:g} s while evaluating "
                f"{describe_item(self.seq, i)} (timeout={self.timeout:g}); they were stopped"
            ) from None
        except Cancelled:
            self._stop()
            raise WorkerError(
                f"the workers were closed by another thread (or at interpreter exit) while "
                f"{describe_item(self.seq, i)} was awaited"
            ) from None
        except BaseException:  # KeyboardInterrupt: the window is in an unknown state
            self._stop(wait=False)
            raise
        if not ok:
            self._stop()
            raise value
        return value

    def _check_slots(self, i: int, value: Any) -> None:
        """Warn when items were pickled for lack of a slot; grow slots too small."""
        pickled = self._workers.pickled if self._workers is not None else 0
        if pickled and not self.pickled:
            self.pickled = pickled
            warn(
                f"prefetch: all {self.max_buffered} shared-memory slots were held by items "
                "already delivered, so items went through a pipe, pickled: release items "
                "sooner (copy what you keep) or raise max_buffered",
                RuntimeWarning,
            )
        if self.shared is not None:
            return  # (slots of someone else's never grow: a larger item travelled pickled)
        size = nbytes(value)
        if size > self.slot_size:
            self.grown += 1
            logger.info(
                "item %d (%d bytes) outgrew its shared-memory slot (%d bytes): growing",
                i,
                size,
                self.slot_size,
            )
            self.slot_size = slot_size(size)
            self._stop()


def close_together(
    prefetched: Sequence[Prefetched], grace: float = GRACE, *, retire: bool = False
) -> None:
    """Stop the workers of several prefetches at once, without waiting for them to exit.

    Their worker processes all get the stop marker first, then share one deadline of
    ``grace`` seconds to say goodbye (a worker still reading then is killed): what
    :meth:`Prefetched.close` with ``wait=False`` does for each, in a bounded time for
    any number of them (the groups of a loader that a pass leaves early). With
    ``retire``, for good (:meth:`Prefetched.retire`).

    Example:
        >>> import numpy as np
        >>> ahead = [prefetch([np.arange(3)] * 4, 1, shm_size=1 << 16) for _ in range(2)]
        >>> [int(a[1][2]) for a in ahead]
        [2, 2]
        >>> close_together(ahead)
        >>> [a.pids for a in ahead]
        [[], []]
    """
    held = []
    try:
        for pf in prefetched:
            pf._acquire()
            held.append(pf)
        workers = [pf._workers for pf in held]
        for pf in held:
            pf._workers, pf._window = None, None
            pf._retired = pf._retired or retire
        processes = [w for w in workers if isinstance(w, ProcessWorkers)]
        stop_together(processes, wait=False, grace=grace)
        for w in workers:
            if w is not None and not isinstance(w, ProcessWorkers):
                w.stop(wait=False)
        for pf in held:
            pf._release_here()
    finally:
        for pf in held:
            pf._lock.release()


def prefetch(
    seq: Sequence[Any],
    num_workers: int,
    *,
    method: str = "process",
    max_buffered: int = 6,
    start_hook: Callable[[int], Any] | None = None,
    shm_size: int | None = None,
    timeout: float | None = None,
    persistent_workers: bool = False,
) -> Prefetched:
    """Evaluate items of ``seq`` ahead in worker processes or threads, in order.

    ``num_workers=0`` evaluates in the calling process through the same object; an
    out-of-order access restarts the workers at that index (no draining); a sequence
    without ``len`` is a ``TypeError`` up front; a dead worker thread or process, or a
    failing start hook, is a :class:`WorkerError` at once, never a hang. With processes,
    items travel through shared memory (pickle protocol 5 out-of-band buffers). The
    slots are sized from the first item (evaluated in the calling process) unless
    ``shm_size`` is given, and an item that outgrows its slot makes them grow. Errors of
    ``seq`` reach the caller as themselves (with their causes, and the worker's
    traceback as a note), and stop the workers.

    When a worker dies or times out, the error names the item it was evaluating, with
    the text of ``seq.describe_item(i)`` if ``seq`` has that method.

    Thread safety: the returned object may be indexed or iterated from several threads;
    calls are served one at a time, each gets its own item (threads that interleave
    indices make the workers restart, which is correct but slow), and ``close()`` from
    another thread makes a call waiting for an item raise :class:`WorkerError`. With
    ``method="thread"``, ``seq[i]`` is called from several worker threads at once:
    ``seq`` must allow that (with ``num_workers=1`` it is called from one thread at a
    time, though not always the same one).

    Args:
        seq: a sequence with ``len`` whose items pickle (numpy arrays travel zero-copy).
        num_workers: worker processes or threads; 0 evaluates in the calling process.
        method: ``"process"`` or ``"thread"``.
        max_buffered: items in flight plus delivered items still referenced; with
            processes, the number of shared-memory slots (at least 4).
        start_hook: called in each worker with its index when it starts.
        shm_size: total shared memory in bytes, or ``None`` to size it automatically.
        timeout: seconds the workers may go without delivering anything before
            :class:`~streamseq.errors.WorkerTimeout` (a :class:`WorkerError`) is raised
            and they are stopped; ``None`` (or inf) waits as long as they live (a worker
            that dies is an error at once either way). An item evaluated in the calling
            process (``num_workers=0``, or the first one, to size the slots) is
            evaluated in a helper thread under the same bound; a thread cannot be
            stopped, so one that times out is left running as a daemon.
        persistent_workers: keep the workers when an access restarts them at another
            index (their items in flight are awaited and dropped), until ``close()``.
            With a sequence of segments (such as epochs) that has a method
            ``segment_end(i)``, the workers never evaluate past the end of the segment
            of the item asked for, so the next segment starts with idle workers; such a
            sequence may have no ``len`` (segments without end: any index >= 0). Items
            left in flight by an access at another index are awaited by the next
            access; workers that deliver none of them within ``timeout`` (or die) are
            replaced by new ones, so the next access never sees them.

    Returns:
        A sequence with the same items in the same order; ``close()`` stops the workers.

    Raises:
        ValueError: ``num_workers < 0``, an unknown method, too small ``max_buffered``,
            a ``shm_size`` below 1, or a ``timeout`` that is zero, negative or NaN.
        TypeError: ``seq`` has no ``len`` (and no ``segment_end``), ``timeout`` is
            not a number, or ``num_workers``, ``max_buffered`` or ``shm_size`` is not an
            integer. Indexing the result with anything but an integer (a slice, a
            float with a fraction) is a TypeError too.

    Example:
        >>> import numpy as np
        >>> seq = [np.full(3, i) for i in range(5)]
        >>> with prefetch(seq, 1, method="thread") as ahead:
        ...     [int(x[0]) for x in ahead]
        [0, 1, 2, 3, 4]
    """
    config = WorkerConfig(
        num_workers, method, max_buffered, timeout, persistent_workers, start_hook, shm_size
    )
    return Prefetched(seq, config)
