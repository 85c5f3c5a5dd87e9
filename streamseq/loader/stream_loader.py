"""StreamLoader: the public facade over a plan, its readers and workers, and a pass."""

from __future__ import annotations

import functools
import operator
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from .._checks import check_cap, check_int, check_pad
from .._warn import warn
from ..batch import Batch
from ..deliver.assemble import Assembled
from ..mix import Mixture
from ..plan.cursor import Cursor
from ..plan.fields import MAX_INT
from ..plan.planner import EpochPlan, Epochs
from ..plan.spec import PlanSpec
from ..plan.state import Resumed, make_state, read_state, row_map
from ..read.handle import ProcessLocal
from ..read.ref import as_refs, identities_of, lengths_of
from ..read.transform import StepInfo
from ..workers.inline import bounded
from ..workers.pool import WorkerPool
from ..zip_batch import ZipBatch
from .checks import check_rows, check_step_specs, check_switch
from .config import LoaderConfig, check_keywords, resolve_rank
from .first_step import FirstStepSpec
from .reading import Reading, read_with, worker_config
from .run import EpochProgress, Move, Pass, Trial
from .sampler import EpochSampler
from .stats import Latest, Meter, PassStats


def _setting(path: str, doc: str) -> property:
    """A read-only property of the loader: the value at ``path`` (``"spec.tbins"``).

    Example:
        >>> class Holder:
        ...     spec = PlanSpec(np.array([4]), batch_size=1, tbins=2)
        ...     tbins = _setting("spec.tbins", "Steps per row and batch.")
        >>> Holder().tbins
        2
    """
    return property(operator.attrgetter(path), doc=doc)


def _read_only(array: np.ndarray) -> np.ndarray:
    """A view of ``array`` that cannot be written (the plan's arrays stay as planned).

    Example:
        >>> _read_only(np.arange(3)).flags.writeable
        False
    """
    view = array.view()
    view.flags.writeable = False
    return view


class StreamLoader:
    """Temporally coherent batches of streams: row r of batch i+1 continues row r of batch i.

    Streams are assigned to rows by a deterministic plan (:func:`interleave_streams`);
    rows are cut into chunks of ``tbins`` steps (:func:`tbin`), split into one contiguous
    group per worker (:func:`split_by_worker`), each group read in order by one worker
    (:func:`prefetch`), and the micro-batches assembled into batches of torch tensors with
    one copy (page-locked when ``pin_memory``). The batches are a pure function of
    (streams, lengths, batch_size, tbins, pad, shuffle, seed, epoch, rank, world_size):
    the number of workers and the backend change nothing.

    Args:
        streams: streams (``len`` and slicing) or picklable zero-argument openers, or a
            :func:`mix` of groups of them: each group is read for its weight's share of
            every epoch's steps.
        batch_size: rows per batch on this rank.
        tbins: steps per row and batch.
        num_workers: worker processes (or threads), one per group of rows; 0 reads in
            the calling process. ``"auto"``: the first pass reads its first batches in
            the calling process, then with one worker per usable core (at a batch
            boundary, the position carried over: the batches are the same), times what
            ``next()`` waits each way and keeps the faster; it logs the choice at INFO on
            the ``"streamseq"`` logger, and ``loader.num_workers`` is then the number
            chosen (``"auto"`` until then). Worker processes write their rows of each
            batch in place in shared memory, and the batches are tensors over it: a
            batch held stays as it was delivered, through later passes, epochs,
            :meth:`load_state_dict`, :meth:`close` and forks (a forked child copies the
            slots it may hold); the memory goes back to the workers once no tensor,
            array or view of its block is left, and with more batches held than the
            workers have slots (``max_buffered + 2``) the next ones are copied, more
            slowly (logged once), never blocked.
        shuffle: draw a new stream order every epoch (see :meth:`set_epoch`).
        seed: seed of the shuffle.
        pad: ``"zeros"`` (run until the longest row ends), ``"drop"`` (stop before any
            row would be all padding), ``"wrap"`` (rows that end start again) or
            ``"pack"`` (a row goes on with its next stream inside the chunk instead of
            padding it; ``step == 0`` marks where each stream starts, ``reset`` a chunk
            that starts with one; padding is left only at the ends of rows, and before a
            piece that goes on with a stream from a step other than 0, which has no
            ``step == 0`` to mark it: a segment other than a stream's first
            (``segment_length``), or a stream begun before a resume on other rows; it
            starts a chunk, with ``reset``).
        pin_memory: deliver page-locked tensors, prepared by one background thread.
        lengths: declared stream lengths, sparing the probe of openers.
        rank: this process' rank; with ``world_size``, defaults to torch.distributed's.
        world_size: number of ranks sharing one global plan.
        time_major: deliver ``data`` as ``[T, B, ...]`` instead of ``[B, T, ...]``.
        method: ``"process"`` or ``"thread"`` workers.
        max_buffered: hand-overs in flight per worker (at least 4 with processes; the
            workers share ``max_buffered + 2`` shared-memory slots). A hand-over carries
            a block of batches of about 2 MB a worker (at most 32 of them; the first ones
            fewer), so small batches cost the main process one message per worker and
            block rather than per batch.
        timeout: seconds the workers may go without delivering a micro-batch before
            :class:`WorkerTimeout` (a :class:`WorkerError`) is raised and they are
            stopped (a stuck decoder, a hung network file); ``None`` (or 0, or inf)
            waits as long as they live. A worker that dies is an error at once either
            way. Without workers (and for ``loader[i]``) it bounds each read in this
            process: the read runs in a helper thread, and one that takes longer raises
            :class:`WorkerTimeout` naming the batch, streams and steps; a thread cannot be
            stopped, so the stuck read is left running in a daemon thread.
        transform: ``fn(steps, info)`` run where the steps are read (the workers, or
            this process with 0 workers), before the copy into shared memory: ``steps``
            is one slice of one stream (an array, or a tuple/dict of arrays) and ``info``
            a :class:`StepInfo` (stream, start, stop, epoch and ``rng(*keys)``, a
            generator seeded from (seed, epoch, stream, ``*keys``)). It returns the steps to
            batch, as many, of any dtype and step shape (the same for every stream);
            see :func:`map_steps`.
        segment_length: cut streams longer than this into segments of at most this many
            steps, planned as streams of their own (each starts a chunk with ``reset``,
            with ``pad="pack"`` too, but a stream's first segment, which ``step == 0``
            marks; ``stream`` still names the source and ``step`` counts in it): rows,
            and ranks, end closer together, with less padding.
        persistent_workers: keep the worker processes (or threads) for the whole run
            instead of starting them for every pass: the same workers read the next
            epoch (each plans it for its rows). :meth:`close`, or losing the last
            reference to the loader, stops them, and so does an error while reading (a
            worker that dies, a read that fails or times out): the next pass starts new
            ones.
        max_streams_per_chunk: with ``pad="pack"``, the most streams one chunk may
            pack (for models that cannot attend across many documents): once a chunk
            has that many, the rest of it is padding. With ``shuffle`` every epoch has
            the most chunks any order of each row's streams can take.
        lookahead: every per-step field of a batch (``data``, ``valid``, ``stream``,
            ``step``) holds ``tbins + lookahead`` steps. The first ``tbins`` are the
            batch without look-ahead (same batches, ``len``, ``reset`` and states); the
            others hold the steps that follow, in the same stream, each row's step at
            ``tbins - 1`` (padding where that stream has no such step or that step is
            padding; a segment's go on in its source). So next-step prediction (input
            at t < tbins, target at t + 1 where ``stream`` is equal and ``step``
            consecutive: :meth:`Batch.target_mask`) uses every step but the first of
            every stream as a target exactly once per epoch. It does not change the
            plan: a state loads across look-aheads. At most the length of the longest
            stream (more steps would all be padding).

    Thread safety: indexing a loader (``loader[i]``) from several threads, also while
    one thread iterates it, gives correct batches; a loader runs one pass at a time.
    ``iter(loader)``, :meth:`close`, :meth:`set_epoch` and :meth:`load_state_dict`
    from several threads take effect one after the other, and :meth:`state_dict` from
    another thread saves a position the run stood at (a batch being read then is
    counted or not, never half).

    Raises:
        ValueError: no streams, ``batch_size`` or ``tbins`` < 1, ``lookahead`` < 0 or
            more than the longest stream, ``num_workers`` < 0 (or a string other than
            ``"auto"``), an unknown pad mode or method, ``max_buffered`` too small for
            the method, a ``timeout`` that is not positive, or a bad rank.
        TypeError: an integer argument that is not an integer (``lookahead``: nor a
            float), a switch (``shuffle``, ``pin_memory``, ``time_major``,
            ``persistent_workers``) that is not True or False (nor 1 or 0), or a
            ``transform`` that is not callable.
        StreamError: an opener failed while its length was measured.

    Example:
        >>> import numpy as np
        >>> streams = [np.arange(5), np.arange(100, 103), np.arange(200, 204)]
        >>> loader = StreamLoader(streams, batch_size=2, tbins=2)
        >>> len(loader)
        4
        >>> for batch in loader:
        ...     print(batch.data.tolist(), batch.reset.tolist())
        [[0, 1], [100, 101]] [True, True]
        [[2, 3], [102, 0]] [False, False]
        [[4, 0], [200, 201]] [False, True]
        [[0, 0], [202, 203]] [False, False]
    """

    def __init__(
        self,
        streams: Sequence[Any],
        batch_size: int,
        tbins: int,
        *,
        num_workers: int = 0,
        shuffle: bool = False,
        seed: int = 0,
        pad: str = "zeros",
        pin_memory: bool = False,
        lengths: Sequence[int] | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        time_major: bool = False,
        method: str = "process",
        max_buffered: int = 6,
        timeout: float | None = None,
        transform: Callable[[Any, StepInfo], Any] | None = None,
        persistent_workers: bool = False,
        segment_length: int | None = None,
        max_streams_per_chunk: int | None = None,
        lookahead: int = 0,
        **unsupported: Any,
    ):
        check_keywords(unsupported)
        self._streams = streams
        batch_size, tbins = check_int(batch_size, "batch_size", 1), check_int(tbins, "tbins", 1)
        self._config = LoaderConfig.checked(
            num_workers=num_workers,
            method=method,
            max_buffered=max_buffered,
            timeout=timeout,
            pin_memory=pin_memory,
            time_major=time_major,
            persistent_workers=persistent_workers,
            transform=transform,
            lookahead=lookahead,
        )
        seed, pad = check_int(seed, "seed", 0), check_pad(pad)
        rank, world_size = resolve_rank(rank, world_size)
        self._refs = refs = as_refs(streams, lengths)
        lengths_ = lengths_of(refs)
        if not lengths_.any():
            raise ValueError(f"all {len(self.refs)} streams are empty")
        if segment_length is not None:
            segment_length = check_int(segment_length, "segment_length", 1)
        cap = check_cap(max_streams_per_chunk, pad)
        self._spec = PlanSpec(
            lengths_,
            int(batch_size),
            int(tbins),
            pad,
            check_switch(shuffle, "shuffle"),
            int(seed),
            segment_length,
            rank,
            world_size,
            identities_of(self.refs),
            mixture=streams.spec if isinstance(streams, Mixture) else None,
            max_streams_per_chunk=cap,
        )
        _ = self.spec.draws  # a group with weight but no steps: an error now
        check_rows(self.spec)
        if transform is None:  # a transform may give every stream the same steps
            check_step_specs(self.refs, lengths_)
        config = self._config
        longest = int(lengths_.max())
        if config.lookahead > longest:  # (its last steps would be padding in every batch)
            raise ValueError(
                f"lookahead={config.lookahead} is more than the longest stream "
                f"({longest} steps): at most {longest} look-ahead steps can hold a step"
            )
        t, packed = self.spec.tbins, pad == "pack"
        if config.lookahead and segment_length is not None and (segment_length % t or packed):
            after = "padding or another stream" if packed else "padding"
            warn(
                f"lookahead={config.lookahead} with segment_length={segment_length}: a "
                f"segment that ends inside a chunk is followed by {after}, not by its "
                "stream's next steps, so the first step of the segment after it is never a "
                f"next-step target; give a segment_length that is a multiple of tbins={t} "
                "(and a pad other than 'pack') for every step to be a target"
            )
        data = FirstStepSpec(self.refs, lengths_, config.transform, self.spec.seed, config.timeout)
        self._reading = Reading(self.spec, self.refs, config.transform, data, config.lookahead)
        self._epochs = Epochs(self.spec, per_epoch=config.transform is not None)
        self._workers = WorkerPool(worker_config(config))
        self._trial = self._new_trial(self._workers)
        self._cursor = Cursor()  # where the run stands: the one owner of the position
        self._last_read: tuple[Any, Resumed] | None = None  # (see _read_state)
        self._active: weakref.ref | None = None
        self._latest = Latest()  # the figures of the latest pass
        self._whole: tuple[Any, ZipBatch] | None = None
        # the plan, in-process reads, a pass opened or stopped (iter, close, loads); per process
        self._lock = ProcessLocal(threading.RLock)
        self._moving = ProcessLocal(threading.Lock)  # held while the cursor changes

    def _new_trial(self, workers: WorkerPool) -> Trial | None:
        """The ``num_workers="auto"`` trial of a loader (None: the number was given)."""
        config = self._config
        if not config.auto:
            return None
        count = min(config.num_workers, self.spec.batch_size)
        return Trial(count, config.persistent_workers, workers.stop)

    # The settings, read-only: the plan's (:attr:`spec`) and how it is read (:attr:`config`).
    batch_size = _setting("spec.batch_size", "Rows per batch on this rank.")
    tbins = _setting("spec.tbins", "Steps per row and batch (without ``lookahead``).")
    pad = _setting("spec.pad", 'The pad mode: "zeros", "drop", "wrap" or "pack".')
    shuffle = _setting("spec.shuffle", "Whether every epoch draws a new stream order.")
    seed = _setting("spec.seed", "The seed of the shuffle and of ``info.rng``.")
    segment_length = _setting("spec.segment_length", "Longest segment a stream is cut in.")
    max_streams_per_chunk = _setting(
        "spec.max_streams_per_chunk", 'With pad="pack", the most streams a chunk packs.'
    )
    rank = _setting("spec.rank", "This process' rank (given, or torch.distributed's).")
    world_size = _setting("spec.world_size", "The number of ranks sharing one global plan.")

    @property
    def lengths(self) -> np.ndarray:
        """The steps of every stream (an int64 array, read-only: the plan's own)."""
        return _read_only(self.spec.lengths)

    @property
    def units(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(source, start, length)`` of every stream or segment (read-only arrays)."""
        source, start, length = self.spec.units
        return _read_only(source), _read_only(start), _read_only(length)

    method = _setting("config.method", 'The workers: "process" or "thread".')
    max_buffered = _setting("config.max_buffered", "Hand-overs in flight per worker.")
    timeout = _setting("config.timeout", "Seconds a read may go without delivering, or None.")
    pin_memory = _setting("config.pin_memory", "Whether batches are page-locked.")
    time_major = _setting("config.time_major", "Whether ``data`` is ``[T, B, ...]``.")
    persistent_workers = _setting(
        "config.persistent_workers", "Whether the workers are kept across passes."
    )
    transform = _setting("config.transform", "``fn(steps, info)`` run where steps are read.")
    lookahead = _setting("config.lookahead", "Steps after each chunk every batch also holds.")

    @property
    def config(self) -> LoaderConfig:
        """How the batches are read and delivered (frozen); the choice of ``"auto"`` once made.

        Example:
            >>> import numpy as np
            >>> StreamLoader([np.arange(6)], 1, 2, method="thread").config.method
            'thread'
        """
        self._trial_now()
        return self._config

    @property
    def streams(self) -> Sequence[Any]:
        """The streams given (a sequence, or a :func:`mix` of groups)."""
        return self._streams

    @property
    def spec(self) -> PlanSpec:
        """Everything that decides the plan (frozen): what summaries and pictures take."""
        return self._spec

    @property
    def refs(self) -> Sequence[Any]:
        """The streams as the loader reads them (a reference to each)."""
        return self._refs

    @property
    def epoch(self) -> int:
        """The epoch of the pass in progress, else the epoch the next pass reads.

        A pass is in progress from ``iter(loader)`` until it ends, is closed, or its
        iterator is let go. The epoch advances by one when a pass ends, and when a pass
        is let go before its end (a peek, ``next(iter(loader))``, or a loop left with
        ``break``): the next pass reshuffles, as with a DataLoader. Unless
        :meth:`set_epoch` chose it: then every pass reads that epoch until ``set_epoch``
        is called again, as with a ``DistributedSampler``. A position loaded by
        :meth:`load_state_dict` is resumed first. :meth:`state_dict` and
        :attr:`progress` tell where the run stands, which after a pass left before its
        end is still that pass' epoch (a checkpoint taken there resumes it).

        Example:
            >>> import numpy as np
            >>> loader = StreamLoader([np.arange(6)], batch_size=1, tbins=2, shuffle=True)
            >>> _ = next(iter(loader))  # a peek: the pass is let go
            >>> loader.epoch, loader.state_dict()["epoch"]
            (1, 0)
        """
        cursor = self._now()
        return cursor.epoch if self._running() else cursor.upcoming

    def _now(self) -> Cursor:
        """The cursor, the end of the last pass taken in (:meth:`Cursor.settled`).

        Only read, never written back: a read from another thread (``loader[i]``,
        :attr:`progress`, :meth:`state_dict`) that a new pass overtakes between its read
        and a write would move that pass back. Only passes, :meth:`set_epoch` and
        :meth:`load_state_dict` write the cursor.
        """
        return self._cursor.settled()

    def _standing(self) -> tuple[Epochs, Cursor, EpochPlan]:
        """The plans, where the run stands (:meth:`_now`) and that epoch's plan, at once.

        Under the loader's lock: a pass ending, :meth:`set_epoch` or a state loaded in
        another thread gives all three before or after, never one position's batch with
        another's epoch.
        """
        with self._lock.get():
            epochs, cursor = self._epochs, self._now()
            return epochs, cursor, epochs.plan(cursor.epoch)

    def _moved(self, move: Move) -> None:
        """A transition of the cursor, one thread at a time.

        Those of the pass in progress (a batch delivered, the end reached), of
        :meth:`set_epoch`, of a new pass and of a state loaded. Two at once
        (``set_epoch`` while a pass counts a batch in another thread) would each make
        theirs from the same cursor, one lost.
        """
        with self._moving.get():
            self._cursor = move(self._cursor)

    def _running(self) -> bool:
        """Whether a pass is in progress (opened, not ended, closed or let go)."""
        live = self._active() if self._active is not None else None
        return live is not None and not live.closed and not self._cursor.at_end

    def __getstate__(self) -> dict[str, Any]:
        """The configuration and the position; not the pass in progress nor the caches.

        A copy (``copy.copy``, ``copy.deepcopy``, pickling) starts from the same position
        with passes of its own.
        """
        state = self.__dict__.copy()
        state["_lock"] = ProcessLocal(threading.RLock)
        state["_moving"] = ProcessLocal(threading.Lock)
        state["_active"], state["_whole"], state["_latest"] = None, None, Latest()
        self._trial_now()  # (a choice made is kept)
        state["_config"] = self._config
        state["_workers"] = WorkerPool(worker_config(self._config))
        state["_trial"] = self._new_trial(state["_workers"])
        return state

    def __repr__(self) -> str:
        return (
            f"StreamLoader({len(self.refs)} streams, batch_size={self.batch_size}, "
            f"tbins={self.tbins}, num_workers={self.num_workers}, pad={self.pad!r}, "
            f"rank={self.rank}/{self.world_size})"
        )

    @property
    def sampler(self) -> EpochSampler:
        """Where a trainer sets the epoch, as on a DataLoader's sampler (Lightning does)."""
        return EpochSampler(self)

    batch_sampler = None  # no batch sampler: the plan makes the batches

    @property
    def fingerprint(self) -> str:
        """Hash of everything that decides the plan, except the rows, the epoch and the rank.

        It covers the stream lengths and identities (file paths where the sources have
        them, see :func:`streamseq.read.ref.identity`), tbins, pad, shuffle, seed and
        segment length (:attr:`plan_key`). Batch size and world size are not in it: a
        state loads into a loader with other ones (see :meth:`load_state_dict`).
        """
        return self.spec.fingerprint

    @property
    def plan_key(self) -> dict[str, Any]:
        """What :attr:`fingerprint` hashes, field by field (states keep it)."""
        return dict(self.spec.key)

    def epoch_length(self, epoch: int) -> int:
        """The number of batches of ``epoch``, from the plan, without reading any data.

        Equal to ``len(loader)`` after ``set_epoch(epoch)``. Every epoch has the same
        number of batches, shuffled or not: the rows are balanced once and each epoch
        shuffles the order of the rows and of the streams inside each row, so a trainer
        that reads ``len`` once (Lightning) sees every batch of every epoch. Only the
        rest of an epoch resumed on other rows (:meth:`load_state_dict`) differs. A
        schedule over the whole run sums it::

            total = sum(loader.epoch_length(e) for e in range(epochs))
            scheduler = OneCycleLR(optimizer, max_lr, total_steps=total)

        Example:
            >>> import numpy as np
            >>> loader = StreamLoader([np.arange(n) for n in (9, 3, 5, 2)], 2, 2, shuffle=True)
            >>> [loader.epoch_length(e) for e in range(3)]
            [6, 6, 6]
        """
        return self._epochs.length(check_int(epoch, "epoch", 0))

    @property
    def progress(self) -> EpochProgress:
        """Where the run stands in its epoch: batches done and in all, also after a resume.

        After :meth:`load_state_dict` on other rows, ``len(loader)`` counts the batches
        of the rest of the epoch, planned anew; ``progress`` counts those delivered before
        too, so a progress bar stays right::

            where = loader.progress
            for batch in tqdm(loader, initial=where.done, total=where.total): ...

        Example:
            >>> import numpy as np
            >>> streams = [np.arange(6), np.arange(10, 14)]
            >>> run = StreamLoader(streams, batch_size=2, tbins=2)
            >>> it = iter(run); _ = next(it)
            >>> run.progress
            EpochProgress(epoch=0, done=1, total=3)
            >>> narrow = StreamLoader(streams, batch_size=1, tbins=2)
            >>> narrow.load_state_dict(run.state_dict())
            >>> narrow.progress, len(narrow)
            (EpochProgress(epoch=0, done=1, total=4), 3)
        """
        epochs, cursor, plan = self._standing()
        before = epochs.before_of(cursor.epoch)
        return EpochProgress(cursor.epoch, before + cursor.next, before + plan.length)

    @property
    def stats(self) -> PassStats:
        """Figures of the pass in progress, or of the last one: is data the bottleneck.

        Batches and steps delivered, steps per second, and ``wait_fraction``: the share
        of the pass the training loop spent in ``next()`` waiting for a batch (near 0 the
        model is the bottleneck, near 1 the data), with where each worker's time went
        (:class:`~streamseq.loader.PassStats`). Measuring costs a few clock reads and
        one count of ``valid`` a batch; it is always on. At the end of every pass the
        same figures go to the ``streamseq`` logger (INFO)::

            bar = tqdm(loader)
            for batch in bar:
                ...
                bar.set_postfix(loader.stats.postfix(), refresh=False)  # steps/s=22.6k, wait=3%

        Example:
            >>> import numpy as np
            >>> loader = StreamLoader([np.arange(5), np.arange(3)], batch_size=2, tbins=2)
            >>> for batch in loader:
            ...     pass
            >>> stats = loader.stats
            >>> stats.batches, stats.steps, stats.padding_steps, stats.running
            (3, 8, 4, False)
        """
        return self._latest.stats(self._cursor.epoch)

    def plan(self) -> EpochPlan:
        """The plan of the epoch where the run stands (computed once per epoch, or once for all).

        That of the pass in progress, or of the last one (:meth:`state_dict` saves a
        position in it); past the end of a pass, the next epoch's.
        """
        with self._lock.get():
            epoch = self._now().epoch
            if self._epochs.cached(epoch) is None:
                self._drop_whole()
            return self._epochs.plan(epoch)

    def __len__(self) -> int:
        return self.plan().length

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (and so the shuffle); the next iteration starts at batch 0.

        As with a DataLoader's sampler, a pass in progress goes on with its own epoch:
        the epoch set is read from the next pass (trainers set the epoch through
        :attr:`sampler` after they start iterating). A position loaded by
        :meth:`load_state_dict` and not yet iterated survives ``set_epoch`` with its own
        epoch, so the usual loop resumes where the run was::

            loader.load_state_dict(state)
            for epoch in range(loader.epoch, epochs):
                loader.set_epoch(epoch)  # keeps the loaded position
                for batch in loader: ...

        Raises:
            TypeError: ``epoch`` is not an integer.
            ValueError: ``epoch`` is negative, or more than a state holds (2**63 - 1).
        """
        epoch = check_int(epoch, "epoch", 0)
        if epoch > MAX_INT:  # (a state could not hold it)
            raise ValueError(f"epoch must be <= 2**63 - 1, got {epoch}")
        with self._lock.get():  # (a pass opened meanwhile: before or after, not during)
            running = self._running()
            if not running:
                self._end_pass()
            self._moved(functools.partial(Cursor.set_epoch, epoch=epoch, running=running))

    def state_dict(self) -> dict[str, Any]:
        """Where the run stands: epoch, next batch and where every stream of the epoch is.

        Its size does not grow with the number of batches: one bit per stream (or
        segment), plus the streams begun (at most one per global row) and the plan's
        settings (to name what differs when it is loaded elsewhere).

        Example:
            >>> import numpy as np
            >>> loader = StreamLoader([np.arange(6)], batch_size=1, tbins=2)
            >>> it = iter(loader); _ = next(it)
            >>> state = loader.state_dict()
            >>> state["epoch"], state["next_batch"], state["length"], state["progress"]["next"]
            (0, 1, 3, [2])
        """
        epochs, cursor, plan = self._standing()
        return make_state(self.spec, plan, cursor.next, epochs.before_of(cursor.epoch))

    def load_state_dict(self, state: dict[str, Any], *, weights_changed: bool = False) -> None:
        """Resume: the next iteration starts where the state's run stood.

        The state may come from any rank: all ranks of a run stand at the same batch. It
        loads into a loader with any ``num_workers``, ``method``, ``batch_size`` and
        ``world_size`` over the same streams (and ``tbins``, ``pad``, ``shuffle``,
        ``seed``, ``segment_length``):

        - the same global rows (``batch_size * world_size``): the next batches are those
          the run would have delivered;
        - other global rows: the rest of the epoch is planned anew from where every stream
          stands. Every step not yet delivered is delivered once; a stream that was begun
          goes on from its next step at the start of a row, with ``reset`` set there
          (:meth:`row_map` tells which old row each new row continues); nothing delivered
          is delivered again. The next epochs are this loader's own.

        A state saved after the last batch of its epoch (as a trainer checkpoints after
        its last step) resumes at the start of the next epoch.

        A state of a :func:`mix` names its groups and weights; one of another mixture is
        refused, naming the group. With ``weights_changed=True`` it loads into a loader
        of the same groups with other weights, or with groups added: the steps already
        delivered stay delivered, begun streams go on, and the rest of the epoch follows
        this loader's weights.

        Nothing in the state is trusted: every field is checked (type and range), and
        its parts against each other. The state's epoch is planned again on the state's
        rows; its number of batches, ``next_batch`` and where every stream stands after
        ``next_batch`` batches must be those the state holds.

        Raises:
            ValueError: the state is malformed (the field named), its parts do not agree,
                or it was made over other streams or with another tbins, pad, shuffle,
                seed, segment length or mixture (named).

        Example:
            >>> import numpy as np
            >>> streams = [np.arange(6), np.arange(10, 14)]
            >>> loader = StreamLoader(streams, batch_size=1, tbins=2)
            >>> it = iter(loader); _ = next(it); _ = next(it)
            >>> state = loader.state_dict()
            >>> again = StreamLoader(streams, batch_size=1, tbins=2)
            >>> again.load_state_dict(state)
            >>> [b.data.tolist() for b in again]
            [[[4, 5]], [[10, 11]], [[12, 13]]]
            >>> wider = StreamLoader(streams, batch_size=2, tbins=2)
            >>> wider.load_state_dict(state)
            >>> [b.data.tolist() for b in wider]
            [[[4, 5], [10, 11]], [[0, 0], [12, 13]]]
            >>> StreamLoader(streams, batch_size=1, tbins=3).load_state_dict(state)
            Traceback (most recent call last):
            ...
            ValueError: this state was made by another plan, differing in tbins (the state ...
        """
        resumed = self._read_state(state, weights_changed)
        epochs, epoch = resumed.epochs, resumed.epoch
        cursor = Cursor.from_state(epoch, resumed.next_batch, epochs.plan(epoch).length)
        if cursor.epoch != epoch:  # the next epoch: planned afresh, as any
            epochs = Epochs(self.spec, None, self.transform is not None)
        with self._lock.get():  # (with the cursor: state_dict() sees both or neither)
            self._end_pass()  # an invalid state changes nothing: checked first
            if epochs.rest is not None or self._epochs.rest is not None:
                self._workers.stop()  # they plan epochs from the rest they were given
            self._drop_whole()
            self._epochs = epochs
            self._moved(lambda _: cursor)

    def row_map(self, state: dict[str, Any], *, weights_changed: bool = False) -> list[int]:
        """For each row of this loader, the global row of ``state``'s run it continues.

        Global row ``g`` of the old run is row ``g % batch_size`` of its rank
        ``g // batch_size`` (``state["batch_size"]``). -1: the row starts afresh (a
        stream from its first step, or one whose row had moved on). With the same
        global rows every row continues itself. A row that continues one has no ``reset``
        in the first batch after resuming. Carry the recurrent state across with it::

            rows = torch.tensor(loader.row_map(state))
            h = torch.where((rows >= 0)[:, None], old_h[rows.clamp(min=0)], 0.0)

        Example:
            >>> import numpy as np
            >>> streams = [np.arange(n) for n in (8, 6, 4, 2)]
            >>> run = StreamLoader(streams, batch_size=4, tbins=2)
            >>> it = iter(run); _ = next(it)
            >>> StreamLoader(streams, batch_size=2, tbins=2).row_map(run.state_dict())
            [0, 1]
        """
        return row_map(self.spec, self._read_state(state, weights_changed))

    def _read_state(self, state: dict[str, Any], weights_changed: bool) -> Resumed:
        """``state`` checked and its epoch planned (the last one kept: its plans are pure).

        ``row_map`` and ``load_state_dict`` of one state plan its epoch once.
        """
        try:
            key = (weights_changed, repr(state))  # a state changed in between is read again
        except ValueError:  # an integer too long to print: checked as any state, not kept
            key = None
        last = self._last_read
        if key is not None and last is not None and last[0] == key:
            return last[1]
        resumed = read_state(self.spec, state, self.transform is not None, weights_changed)
        self._last_read = (key, resumed)
        return resumed

    def __getitem__(self, i: int | slice) -> Batch | list[Batch]:
        """Batch ``i`` of the current epoch (a list of batches for a slice), read here.

        Example:
            >>> import numpy as np
            >>> loader = StreamLoader([np.arange(6)], batch_size=1, tbins=2)
            >>> [b.data.tolist() for b in loader[1:]]
            [[[2, 3]], [[4, 5]]]
        """
        batches = Assembled([self._in_process()], self.pin_memory, self.time_major, share=True)
        n = len(self)
        if isinstance(i, slice):
            return [batches[k] for k in range(*i.indices(n))]
        k = check_int(i, "a batch index")
        k = k + n if k < 0 else k
        if not 0 <= k < n:
            raise IndexError(f"batch {i} out of range for {n} batches")
        return batches[k]

    def _in_process(self) -> Sequence[Any]:
        """All the rows of this rank as one zip, read in this process (kept for the epoch).

        With a ``timeout``, each read is bounded (:mod:`streamseq.workers.inline`).
        """
        with self._lock.get():
            plan = self.plan()
            key = self._epochs.key(plan.epoch)
            if self._whole is None or self._whole[0] != key:
                self._drop_whole()  # (another epoch's)
                self._whole = (key, self._reading.group(plan, self._reading.rows(plan)))
            return bounded(self._whole[1], self._config.timeout)

    def _drop_whole(self) -> None:
        """Close the files that batches read by index opened here (opened again when read)."""
        whole, self._whole = self._whole, None
        if whole is not None:
            whole[1].release()

    def __iter__(self) -> Iterator[Batch]:
        """A pass over the batches of the epoch, from the loaded position (or batch 0).

        A loader runs one pass at a time: its position is what :meth:`state_dict` saves.
        A new ``iter(loader)`` stops the pass in progress, whose iterator then raises
        RuntimeError on its next ``next()``: ``zip(loader, loader)``, or a loop over the
        loader inside a loop over it, fails instead of silently ending early. One
        exception: an iterator that delivered nothing, once the pass that superseded it
        has ended, is simply exhausted (``tqdm.auto`` makes such an iterator and never
        uses it). A pass that ended, or that :meth:`close` or :meth:`load_state_dict`
        stopped, stays ended (StopIteration); :meth:`set_epoch` lets it go on.
        """
        with self._lock.get():  # (one pass opens at a time: passes, close, loads wait)
            live = self._active() if self._active is not None else None
            if live is not None and not live.closed:
                live.superseded = True
            self._end_pass()
            self._moved(Cursor.pass_opened)  # (a pass left early: the next epoch)
            it = self._open_pass(self._cursor.next)
            self._active = weakref.ref(it)
            return it

    def _open_pass(self, start: int) -> Pass:
        """A pass from batch ``start``: read here, or by workers (new or persistent)."""
        trial = self._trial_now()
        config, plan = self._config, self.plan()
        if trial is not None and self._reading.read_here(plan):
            trial = None  # a store's batches are read here whatever the workers: no trial
        size = self.spec.batch_size * self._reading.steps  # steps a batch holds (stats)
        workers = trial.now() if trial is not None else config.num_workers
        setup = functools.partial(
            read_with, config, self._reading, self._workers, self._epochs, plan
        )
        opened = setup(workers, self._in_process() if workers == 0 else None)
        return Pass(
            start=start,
            stop=plan.length,
            opened=opened,
            moved=self._moved,
            newer_running=self._newer_running,
            meter=Meter(plan.epoch, size, opened[4]),
            latest=self._latest,
            trial=trial,
            reopen=None if trial is None else setup,
            serial=self._lock.get,
        )

    def _trial_now(self) -> Trial | None:
        """The ``num_workers="auto"`` trial still running, if any; else its choice applied."""
        trial = self._trial
        if trial is None or trial.chosen is None:
            return trial
        self._config, self._trial = self._config.with_workers(trial.chosen), None
        return None

    @property
    def num_workers(self) -> int | str:
        """The setting: the number of workers given, or ``"auto"`` until the trial chose.

        With ``num_workers="auto"``, the number chosen (an int) once the first batches
        have been timed both ways (:class:`~streamseq.loader.run.Trial`; with short
        epochs that may take more than one pass). Until then the batches are read in
        this process, then by the workers tried: :attr:`workers_in_use` tells which.
        Streams that are all stored and read in this process whatever the workers
        (:func:`~streamseq.materialize`) are not timed: the setting stays ``"auto"``.
        """
        self._trial_now()
        return "auto" if self._config.auto else self._config.num_workers

    @property
    def workers_in_use(self) -> int:
        """The workers reading the batches of the pass in progress, or of the next one.

        Always an int (0: the calling process reads). With a number of workers given,
        that number (at most one a row: ``batch_size``), or 0 for streams that are all
        stored (:func:`~streamseq.materialize`) and read in this process; with
        ``num_workers="auto"``, 0 then the number tried while the trial runs, then the
        number chosen (equal to :attr:`num_workers` from then on).

        Example:
            >>> import numpy as np
            >>> StreamLoader([np.arange(6)] * 2, 2, 2, num_workers=4).workers_in_use
            2
        """
        trial = self._trial_now()
        count = trial.now() if trial is not None else self._config.num_workers
        if count and self._reading.in_memory and self._reading.read_here(self.plan()):
            return 0  # a store's batches: copied in this process (Reading.read_here)
        return min(count, self.spec.batch_size)

    def _newer_running(self, it: Pass) -> bool:
        newer = self._active() if self._active is not None else None
        return newer is not None and newer is not it and not newer.closed

    def _end_pass(self) -> None:
        """Stop the pass in progress, if any (persistent workers are kept)."""
        it = self._active() if self._active is not None else None
        if it is not None:
            it.close()
        self._active = None

    def close(self) -> None:
        """Stop the pass in progress and the workers, persistent ones included.

        The files that batches read by index (``loader[i]``) opened are closed too: a
        later read opens them again.
        """
        with self._lock.get():  # (a pass opened meanwhile: before or after, not during)
            self._end_pass()
            self._workers.stop()
            self._drop_whole()

    def __del__(self) -> None:
        try:
            self._workers.stop()
        except Exception:  # interpreter shutdown, half-built object
            pass
