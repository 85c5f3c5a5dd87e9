"""StreamLoader: the whole pipeline, from streams to batches of torch tensors."""

from __future__ import annotations

import copy
import functools
import multiprocessing
import pickle
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from ._checks import check_int, check_pad, check_timeout, check_workers
from ._tree import leaves, nbytes, tree_map
from .batch import Batch
from .deliver.assemble import Assembled
from .deliver.background import Background
from .deliver.pin import PinMemory
from .deliver.torch import torch_dtype
from .interleave import Row, make_rows
from .plan.epoch import epoch_plan
from .plan.progress import Pieces, Progress, rest_of_epoch, whole_units
from .plan.rows import stream_order
from .plan.segments import segments
from .prefetch import Prefetched, prefetch
from .read.ref import as_refs
from .read.transform import StepInfo, Transform
from .resume import fingerprint, make_state, plan_key, read_state, row_map
from .split import split_by_worker
from .tbin import tbin
from .workers.blocks import Blocks, Layout, Unblocked, block_size
from .zip_batch import ZipBatch


def resolve_rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """Rank and world size: as given, else from torch.distributed when initialised, else 0, 1.

    Example:
        >>> resolve_rank(None, None)
        (0, 1)
        >>> resolve_rank(1, 4)
        (1, 4)
    """
    if rank is None and world_size is None:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1
    if rank is None or world_size is None:
        raise ValueError("give both rank and world_size, or neither")
    rank, world_size = check_int(rank, "rank"), check_int(world_size, "world_size")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
    return int(rank), int(world_size)


# DataLoader's keywords that do not apply here, and what to use instead
_DATALOADER_ONLY = {
    "drop_last": 'pad="drop" (stop before any row would be all padding)',
    "collate_fn": "transform= (runs in the workers) or a function of each Batch",
    "worker_init_fn": "transform= (it gets the stream, the steps and a seeded rng)",
    "prefetch_factor": "max_buffered= (micro-batches in flight per worker)",
    "sampler": "shuffle= and seed= (the plan decides the order of the streams)",
    "batch_sampler": "batch_size= and tbins= (rows and steps of every batch)",
    "generator": "seed= (the shuffle and info.rng in transforms derive from it)",
    "multiprocessing_context": 'method= ("process" or "thread")',
    "in_order": "nothing: batches always come in order",
    "pin_memory_device": "pin_memory=True, then batch.to(device, non_blocking=True)",
}


def _check_keywords(unsupported: dict[str, Any]) -> None:
    """Raise TypeError for keywords StreamLoader does not take, saying what to use."""
    for name in unsupported:
        hint = _DATALOADER_ONLY.get(name)
        if hint is not None:
            raise TypeError(f"StreamLoader does not take DataLoader's {name}=: use {hint} instead")
        raise TypeError(f"StreamLoader got an unexpected keyword argument {name!r}")


def _read_spec(ref: Any, transform: Transform | None) -> Any:
    """One step of ``ref`` (transformed), closing it after.

    Raises:
        StreamError: naming the stream, when the steps are of a dtype that tensors
            cannot hold (objects, strings, records).
    """
    try:
        data = ref.read(0, 1)
        if transform is not None:
            data = transform(ref, ref.index, data, 0, 1)
        spec = tree_map(_zero_steps, data)
    finally:
        ref.close()
    for leaf in leaves(spec):
        try:
            torch_dtype(leaf.dtype)
        except TypeError:
            raise ref.error(
                f"its steps are of dtype {leaf.dtype}, which tensors cannot hold: turn them "
                "into numbers in the stream or in a transform="
            ) from None
    return spec


def _check_picklable(loader: StreamLoader, groups: list[Any]) -> None:
    """Raise a TypeError naming what spawned workers could not receive, if anything."""
    try:
        pickle.dumps(groups)
        return
    except Exception as e:
        error = e
    hint = (
        "spawned worker processes receive it pickled: use a module-level function or a "
        'functools.partial of one (not a lambda or a local function), or method="thread"'
    )
    if loader.transform is not None:
        try:
            pickle.dumps(loader.transform)
        except Exception as e:
            raise TypeError(f"transform {loader.transform!r} does not pickle ({e}): {hint}") from e
    for ref in loader.refs:
        try:
            pickle.dumps(ref.source)
        except Exception as e:
            raise ref.error(f"does not pickle ({type(e).__name__}: {e}): {hint}") from e
    raise TypeError(f"the streams do not pickle ({error}): {hint}") from error


def _call_with_timeout(fn: Callable[[], Any], timeout: float, ref: Any, what: str) -> Any:
    """``fn()`` in a daemon thread; a StreamError naming ``ref`` if it takes over ``timeout``."""
    done: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            done.append((True, fn()))
        except BaseException as e:
            done.append((False, e))

    thread = threading.Thread(target=run, daemon=True, name="streamseq-spec")
    thread.start()
    thread.join(timeout)
    if not done:
        raise ref.error(f"{what} took more than timeout={timeout:g} s; it was left running")
    ok, value = done[0]
    if not ok:
        raise value
    return value


def _zero_steps(a: Any) -> np.ndarray:
    """No step of ``a``: its dtype (in native byte order) and step shape."""
    a = np.asarray(a)
    # a native dtype is kept as it is: the table checks streams by dtype identity first
    native = a.dtype if a.dtype.isnative else a.dtype.newbyteorder("=")
    return np.empty((0, *a.shape[1:]), native)


class _Plan:
    """What one epoch delivers on this rank: its rows and number of batches."""

    def __init__(self, loader: StreamLoader, epoch: int):
        b, r = loader.batch_size, loader.rank
        self.pieces, self.assignment, self.length = loader._epoch_plan(epoch)
        self.epoch = epoch
        mine = self.assignment[r * b : (r + 1) * b]  # the rows of this rank only
        seed, transform = loader.seed, loader.transform
        source, start, _ = loader.units
        unit, offset, length = self.pieces
        units = None
        if loader.segment_length is not None or loader._rest_of(epoch) is not None:
            units = (source[unit], start[unit] + offset)
        self.rows = make_rows(
            loader.refs, length, mine, transform, seed=seed, epoch=epoch, units=units
        )

    def group(self, rows: Sequence[Row], loader: StreamLoader) -> ZipBatch:
        """The sequence of micro-batches of a group of rows."""
        parts = [tbin(r, loader.tbins, pack=loader.pad == "pack") for r in rows]
        spec = loader._data_spec(self.epoch)
        return ZipBatch(parts, pad=loader.pad, length=self.length, spec=spec)


def _micro_batch_bytes(spec: Any, rows: int, tbins: int) -> int:
    """Size of a micro-batch of ``rows`` rows whose data ``spec`` describes."""
    step = nbytes(tree_map(lambda a: np.zeros((1, *a.shape[1:]), a.dtype), spec))
    return rows * tbins * (step + 8 + 8 + 1) + rows


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
        streams: streams (``len`` and slicing) or picklable zero-argument openers.
        batch_size: rows per batch on this rank.
        tbins: steps per row and batch.
        num_workers: worker processes (or threads), one per group of rows; 0 reads in
            the calling process.
        shuffle: draw a new stream order every epoch (see :meth:`set_epoch`).
        seed: seed of the shuffle.
        pad: ``"zeros"`` (run until the longest row ends), ``"drop"`` (stop before any
            row would be all padding), ``"wrap"`` (rows that end start again) or
            ``"pack"`` (a row goes on with its next stream inside the chunk instead of
            padding it; ``step == 0`` marks where each stream starts, ``reset`` a chunk
            that starts with one; padding is left only at the ends of rows).
        pin_memory: deliver page-locked tensors, prepared by one background thread.
        lengths: declared stream lengths, sparing the probe of openers.
        rank: this process' rank; with ``world_size``, defaults to torch.distributed's.
        world_size: number of ranks sharing one global plan.
        time_major: deliver ``data`` as ``[T, B, ...]`` instead of ``[B, T, ...]``.
        method: ``"process"`` or ``"thread"`` workers.
        max_buffered: hand-overs in flight per worker (shared-memory slots; at least 4
            with processes). A hand-over carries a block of micro-batches of about 2 MB
            (at most 32 of them; the first ones fewer), so small batches cost the main
            process one message per block rather than per batch.
        timeout: seconds the workers may go without delivering a micro-batch before
            :class:`WorkerError` is raised and they are stopped (a stuck decoder, a hung
            network file); ``None`` waits as long as they live. A worker that dies is an
            error at once either way.
        transform: ``fn(steps, info)`` run where the steps are read (the workers, or
            this process with 0 workers), before the copy into shared memory: ``steps``
            is one slice of one stream (an array, or a tuple/dict of arrays) and ``info``
            a :class:`StepInfo` (stream, start, stop, epoch and ``rng(*keys)``, a
            generator seeded from (seed, epoch, stream, ``*keys``)). It returns the steps to
            batch, as many, of any dtype and step shape (the same for every stream);
            see :func:`map_steps`.
        segment_length: cut streams longer than this into segments of at most this many
            steps, planned as streams of their own (each starts with ``reset``; ``stream``
            still names the source and ``step`` counts in it): rows, and ranks, end
            closer together, with less padding.
        persistent_workers: keep the worker processes (or threads) for the whole run
            instead of starting them for every pass: the same workers read the next
            epoch (each plans it for its rows). :meth:`close`, or losing the last
            reference to the loader, stops them.

    Thread safety: indexing a loader (``loader[i]``) from several threads, also while
    one thread iterates it, gives correct batches; a loader runs one pass at a time.

    Raises:
        ValueError: no streams, ``batch_size`` or ``tbins`` < 1, ``num_workers`` < 0, an
            unknown pad mode or method, ``max_buffered`` too small for the method, a
            ``timeout`` that is not positive, or a bad rank.
        TypeError: an integer argument that is not an integer, or a ``transform`` that
            is not callable.
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
        **unsupported: Any,
    ):
        _check_keywords(unsupported)
        if timeout is not None and not isinstance(timeout, bool) and timeout == 0:
            timeout = None  # as in DataLoader: no timeout
        batch_size, tbins = check_int(batch_size, "batch_size", 1), check_int(tbins, "tbins", 1)
        num_workers = check_int(num_workers, "num_workers", 0)
        max_buffered, seed = check_int(max_buffered, "max_buffered"), check_int(seed, "seed", 0)
        if transform is not None:
            Transform(transform)  # checks it now rather than in a worker
        self.transform = transform
        self.persistent_workers = bool(persistent_workers) and num_workers > 0
        self._persistent: list[Prefetched] | None = None  # the persistent workers, once started
        check_workers(num_workers, method, max_buffered, name="method")
        self.timeout = check_timeout(timeout)
        self.pad = check_pad(pad)
        self.batch_size, self.tbins = int(batch_size), int(tbins)
        self.num_workers, self.method, self.max_buffered = int(num_workers), method, max_buffered
        self.shuffle, self.seed = bool(shuffle), int(seed)
        self.pin_memory, self.time_major = bool(pin_memory), bool(time_major)
        self.rank, self.world_size = resolve_rank(rank, world_size)
        self.refs = as_refs(streams, lengths)
        self.lengths = np.array([len(r) for r in self.refs], dtype=np.int64)
        if not self.lengths.any():
            raise ValueError(f"all {len(self.refs)} streams are empty")
        self.segment_length = None
        if segment_length is not None:
            self.segment_length = check_int(segment_length, "segment_length", 1)
        self.units = segments(self.lengths, self.segment_length)  # what the rows read
        rows, streams = self.batch_size * self.world_size, int(np.count_nonzero(self.units[2]))
        if self.pad in ("drop", "wrap") and streams < rows:
            what = "every batch would be dropped" if self.pad == "drop" else "rows would idle"
            raise ValueError(
                f"pad={self.pad!r} needs a stream for every row: {rows} rows "
                f"(batch_size x world_size) but {streams} non-empty streams, so {what}; "
                'use fewer rows, more streams or pad="zeros"'
            )
        self._epoch, self._chosen = 0, False  # chosen: by set_epoch, kept for every pass
        self._rest: tuple[int, Progress] | None = None  # (epoch, where it was resumed)
        self._plan_cache: tuple[int, _Plan] | None = None
        self._position = _Position(0)  # that of the last pass, or the one loaded
        self._active: weakref.ref | None = None
        self._whole: tuple[int, ZipBatch] | None = None
        self._fingerprint: str | None = None
        self._plan_key: dict[str, Any] | None = None
        self._spec: tuple[int, Any] | None = None
        self._lock = threading.RLock()  # plan and in-process reads, made once per epoch

    @property
    def epoch(self) -> int:
        """The epoch of the next pass.

        It advances by one when a pass ends, and when a new pass starts after one that
        was left before its end (so every new pass reshuffles, as with a DataLoader),
        unless :meth:`set_epoch` chose it: then every pass reads that epoch until
        ``set_epoch`` is called again, as with a ``DistributedSampler``. A position loaded
        by :meth:`load_state_dict` is resumed first.
        """
        self._sync()
        return self._epoch

    def _sync(self) -> None:
        """Take in the position the last pass reported: past its end, the next epoch."""
        if self._position.ended and not self._chosen:
            self._epoch += 1
            self._position = _Position(0)

    def __getstate__(self) -> dict[str, Any]:
        """The configuration and the position; not the pass in progress nor the caches.

        A copy (``copy.copy``, ``copy.deepcopy``, pickling) starts from the same position
        with passes of its own.
        """
        state = self.__dict__.copy()
        del state["_lock"]
        state["_active"], state["_whole"], state["_plan_cache"] = None, None, None
        state["_persistent"] = None
        p = self._position
        state["_position"] = position = _Position(p.next, p.pending, p.ended)
        position.started = p.started
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return (
            f"StreamLoader({len(self.refs)} streams, batch_size={self.batch_size}, "
            f"tbins={self.tbins}, num_workers={self.num_workers}, pad={self.pad!r}, "
            f"rank={self.rank}/{self.world_size})"
        )

    @property
    def fingerprint(self) -> str:
        """Hash of everything that decides the plan, except the rows, the epoch and the rank.

        It covers the stream lengths and identities (file paths where the sources have
        them, see :func:`streamseq.read.ref.identity`), tbins, pad, shuffle, seed and
        segment length (:attr:`plan_key`). Batch size and world size are not in it: a
        state loads into a loader with other ones (see :meth:`load_state_dict`).
        """
        if self._fingerprint is None:
            self._fingerprint = fingerprint(self.plan_key)
        return self._fingerprint

    @property
    def plan_key(self) -> dict[str, Any]:
        """What :attr:`fingerprint` hashes, field by field (states keep it)."""
        if self._plan_key is None:
            self._plan_key = plan_key(self)
        return dict(self._plan_key)

    def _data_spec(self, epoch: int) -> Any:
        """Zero-step arrays with the dtype and step shape of the data (or a tree of them).

        Read on first need, from one step of the first non-empty stream (transformed,
        when there is a transform: once per epoch then); every other stream must match
        it. The dtypes are in native byte order (torch reads only that): steps of a
        stream in the other byte order are converted as they are copied into a batch,
        whatever the number of workers.
        """
        key = epoch if self.transform is not None else 0
        if self._spec is None or self._spec[0] != key:
            ref = self.refs[int(np.flatnonzero(self.lengths)[0])]
            transform = None
            if self.transform is not None:
                transform = Transform(self.transform, self.seed, epoch)
            read = functools.partial(_read_spec, ref, transform)
            if self.timeout is None:
                spec = read()
            else:
                what = "reading its first step (the data's dtype and step shape)"
                spec = _call_with_timeout(read, self.timeout, ref, what)
            self._spec = (key, spec)
        return self._spec[1]

    def _rest_of(self, epoch: int) -> Progress | None:
        """Where ``epoch`` was resumed on other rows (then it plans the rest), else None."""
        rest = self._rest
        return rest[1] if rest is not None and rest[0] == epoch else None

    def _epoch_plan(self, epoch: int) -> tuple[Pieces, list[np.ndarray], int]:
        """The pieces of ``epoch``, those of every global row, and its number of batches.

        A fresh epoch reads every unit (stream or segment) whole; one resumed on other
        rows (:meth:`load_state_dict`) reads what was left of it.
        """
        return self._plan_from(epoch, self._rest_of(epoch))

    def _plan_from(
        self, epoch: int, resumed: Progress | None
    ) -> tuple[Pieces, list[np.ndarray], int]:
        """:meth:`_epoch_plan` of ``epoch`` resumed at ``resumed`` (None: fresh)."""
        lengths = self.units[2]
        if resumed is None:
            pieces, order = whole_units(lengths), None
        else:
            order = stream_order(len(lengths), shuffle=self.shuffle, seed=self.seed, epoch=epoch)
            pieces = rest_of_epoch(resumed, lengths, order)
            order = np.arange(len(pieces[0]))
        rows = self.batch_size * self.world_size
        assignment, n = epoch_plan(
            pieces[2],
            rows,
            self.tbins,
            self.pad,
            shuffle=self.shuffle,
            seed=self.seed,
            epoch=epoch,
            order=order,
        )
        return pieces, assignment, n

    def epoch_length(self, epoch: int) -> int:
        """The number of batches of ``epoch``, from the plan, without reading any data.

        Equal to ``len(loader)`` after ``set_epoch(epoch)``; with ``shuffle`` it varies
        from epoch to epoch, so a schedule over the whole run sums it::

            total = sum(loader.epoch_length(e) for e in range(epochs))
            scheduler = OneCycleLR(optimizer, max_lr, total_steps=total)

        Example:
            >>> import numpy as np
            >>> loader = StreamLoader([np.arange(n) for n in (9, 3, 5, 2)], 2, 2, shuffle=True)
            >>> [loader.epoch_length(e) for e in range(3)]
            [6, 6, 7]
        """
        epoch = check_int(epoch, "epoch", 0)
        cached = self._plan_cache
        if cached is not None and cached[0] == self._plan_id(epoch):
            return cached[1].length
        return self._epoch_plan(epoch)[2]

    def _plan_id(self, epoch: int) -> Any:
        """What tells the plan of ``epoch`` from others.

        Without shuffle, transform or a resumed rest every epoch has the same plan, kept
        across passes (with its open files).
        """
        if self._rest_of(epoch) is not None:
            return ("rest", epoch)
        return epoch if self.shuffle or self.transform is not None else "every epoch"

    def plan(self) -> _Plan:
        """The plan of the current epoch (computed once per epoch, or once for all)."""
        with self._lock:
            key = self._plan_id(self.epoch)
            if self._plan_cache is None or self._plan_cache[0] != key:
                self._plan_cache = (key, _Plan(self, self.epoch))
                self._whole = None
            return self._plan_cache[1]

    def __len__(self) -> int:
        return self.plan().length

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (and so the shuffle); the next iteration starts at batch 0.

        A position loaded by :meth:`load_state_dict` and not yet iterated survives
        ``set_epoch`` with its own epoch, so the usual loop resumes where the run was::

            loader.load_state_dict(state)
            for epoch in range(loader.epoch, epochs):
                loader.set_epoch(epoch)  # keeps the loaded position
                for batch in loader: ...
        """
        epoch = check_int(epoch, "epoch", 0)
        if self._position.pending and epoch == self.epoch:
            self._chosen = True
            return
        self._end_pass()
        self._epoch, self._position, self._chosen = epoch, _Position(0), True

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
        self._sync()
        return make_state(self, self.epoch, self._position.next)

    def load_state_dict(self, state: dict[str, Any]) -> None:
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

        Raises:
            ValueError: the state is malformed, or was made over other streams or with
                another tbins, pad, shuffle, seed or segment length (named).

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
        resumed = read_state(self, state)
        rest = None if resumed.rest is None else (resumed.epoch, resumed.rest)
        if resumed.rows == self.batch_size * self.world_size:  # the same plan: check it
            e = resumed.epoch
            if resumed.rest is None and self._rest_of(e) is None:
                n = self.epoch_length(e)  # (from the cached plan when it is this epoch's)
            else:
                n = self._plan_from(e, resumed.rest)[2]
            if "length" in state and check_int(state["length"], "the state's length") != n:
                raise ValueError(
                    f"the state's epoch has {state['length']} batches, this loader's {n}"
                )
            if not 0 <= resumed.next_batch <= n:
                raise ValueError(f"next_batch {resumed.next_batch} out of range for {n} batches")
        self._end_pass()  # an invalid state changes nothing: checked first
        if rest is not None or self._rest is not None:
            self._stop_persistent()  # they plan epochs from the loader they were given
        with self._lock:
            self._rest, self._plan_cache, self._whole = rest, None, None
        self._epoch, self._chosen = resumed.epoch, False
        self._position = _Position(resumed.next_batch, pending=True)

    def row_map(self, state: dict[str, Any]) -> list[int]:
        """For each row of this loader, the global row of ``state``'s run it continues.

        Global row ``g`` of the old run is row ``g % batch_size`` of its rank
        ``g // batch_size`` (``state["batch_size"]``). -1: the row starts afresh (a
        stream from its first step, or one whose row had moved on). With the same
        global rows every row continues itself. Carry the recurrent state across with it::

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
        return row_map(self, read_state(self, state))

    def __getitem__(self, i: int | slice) -> Batch | list[Batch]:
        """Batch ``i`` of the current epoch (a list of batches for a slice), read here.

        Example:
            >>> import numpy as np
            >>> loader = StreamLoader([np.arange(6)], batch_size=1, tbins=2)
            >>> [b.data.tolist() for b in loader[1:]]
            [[[2, 3]], [[4, 5]]]
        """
        batches = self._delivery([self._in_process()], share=True)
        n = len(self)
        if isinstance(i, slice):
            return [batches[k] for k in range(*i.indices(n))]
        k = check_int(i, "a batch index")
        k = k + n if k < 0 else k
        if not 0 <= k < n:
            raise IndexError(f"batch {i} out of range for {n} batches")
        return batches[k]

    def _in_process(self) -> ZipBatch:
        """All the rows of this rank as one zip, read in this process (kept for the epoch)."""
        with self._lock:
            plan = self.plan()
            if self._whole is None:
                self._whole = (self.epoch, plan.group(plan.rows, self))
            return self._whole[1]

    def _delivery(self, groups: list[Any], share: bool) -> Assembled:
        """Batches of tensors from the micro-batches of ``groups``, with one copy at most.

        ``share``: the tensors may share the groups' arrays (not when they are workers'
        shared-memory slots, which must be released).
        """
        return Assembled(groups, self.pin_memory, self.time_major, share=share)

    def _workers(self, groups: list[ZipBatch]) -> list[Prefetched]:
        """The workers reading ``groups``: new ones, or the loader's persistent ones."""
        kept = self._persistent
        if kept is not None and len(kept) == len(groups):
            return kept
        self._stop_persistent()
        if self.method == "process" and multiprocessing.get_start_method() != "fork":
            _check_picklable(self, groups)
        made = []
        for w, g in enumerate(groups):
            size = self._block_size(g)
            shm = _micro_batch_bytes(g.spec_, g.num_rows, self.tbins) * size * self.max_buffered
            seq: Any = Blocks(g, size)
            if self.persistent_workers:
                seq = _EpochGroup(self, w, len(groups), size)
            made.append(
                prefetch(
                    seq,
                    1,
                    method=self.method,
                    max_buffered=self.max_buffered,
                    timeout=self.timeout,
                    shm_size=int(shm * 1.1) + 65536 * self.max_buffered,
                    persistent_workers=self.persistent_workers,
                )
            )
        if self.persistent_workers:
            self._persistent = made
        return made

    def _block_size(self, group: ZipBatch) -> int:
        """Micro-batches a worker hands over at once (about 2 MB of them, at most 32)."""
        return block_size(_micro_batch_bytes(group.spec_, group.num_rows, self.tbins))

    def _stop_persistent(self) -> None:
        kept, self._persistent = self._persistent, None
        for pf in kept or ():
            pf.close(wait=False)

    def __iter__(self) -> Iterator[Batch]:
        """A pass over the batches of the epoch, from the loaded position (or batch 0).

        A loader runs one pass at a time: its position is what :meth:`state_dict` saves.
        A new ``iter(loader)`` stops the pass in progress, whose iterator then raises
        RuntimeError on its next ``next()``: ``zip(loader, loader)``, or a loop over the
        loader inside a loop over it, fails instead of silently ending early. One
        exception: an iterator that delivered nothing, once the pass that superseded it
        has ended, is simply exhausted (``tqdm.auto`` makes such an iterator and never
        uses it). A pass that ended, or that :meth:`close`, :meth:`set_epoch` or
        :meth:`load_state_dict` stopped, stays ended (StopIteration).
        """
        live = self._active() if self._active is not None else None
        if live is not None and not live.closed:
            live.superseded = True
        self._end_pass()
        self._sync()
        if self._position.started and not self._chosen:  # a pass left before its end
            self._epoch, self._position = self._epoch + 1, _Position(0)
        loaded = self._position  # a loaded position is used up by the first batch delivered
        self._position = _Position(loaded.next if loaded.pending else 0, loaded.pending)
        it = _Iteration(self, self._position)
        self._active = weakref.ref(it)
        return it

    def _end_pass(self) -> None:
        """Stop the pass in progress, if any (persistent workers are kept)."""
        it = self._active() if self._active is not None else None
        if it is not None:
            it.close()
        self._active = None

    def close(self) -> None:
        """Stop the pass in progress and the workers, persistent ones included."""
        self._end_pass()
        self._stop_persistent()

    def __del__(self) -> None:
        try:
            self._stop_persistent()
        except Exception:  # interpreter shutdown, half-built object
            pass


_STRIDE = 1 << 32  # with persistent workers, batch i of epoch e is item e * _STRIDE + i


class _EpochGroup:
    """The micro-batches of group ``w`` of ``workers`` in every epoch, in blocks of ``size``.

    Item ``e * _STRIDE + j`` is block ``j`` of epoch ``e`` (see :class:`Blocks`). What
    persistent workers read: each plans the epochs for its own rows, from a copy of the
    loader's configuration (no reference to the loader itself, so that the loader and its
    workers are collected when it is no longer referenced).
    """

    def __init__(self, loader: StreamLoader, w: int, workers: int, size: int = 1):
        self.loader, self.w, self.workers = copy.copy(loader), w, workers
        self.size = size
        self._group: tuple[Any, Blocks] | None = None

    def __len__(self) -> int:
        return _STRIDE << 24

    def group(self, epoch: int) -> Blocks:
        """The blocks of this group in ``epoch`` (kept until another is asked for)."""
        key = self.loader._plan_id(epoch)
        if self._group is None or self._group[0] != key:
            self.release()
            plan = _Plan(self.loader, epoch)
            rows = split_by_worker(plan.rows, self.workers)[self.w]
            self._group = (key, Blocks(plan.group(rows, self.loader), self.size))
        return self._group[1]

    def __getitem__(self, k: int) -> list[Batch]:
        epoch, j = divmod(k, _STRIDE)
        return self.group(epoch)[j]

    def segment_end(self, k: int) -> int:
        """The item after the last block of the epoch of item ``k``."""
        epoch = k // _STRIDE
        return epoch * _STRIDE + len(Layout(self.size, self.loader.epoch_length(epoch)))

    def describe_item(self, k: int) -> str:
        """What item ``k`` reads: its epoch, streams and steps."""
        epoch, j = divmod(k, _STRIDE)
        return f"epoch {epoch}, {self.group(epoch).describe_item(j)}"

    def release(self) -> None:
        """Close the files the group holds open."""
        if self._group is not None:
            self._group[1].release()


class _Shifted:
    """Items ``base`` to ``base + length`` of persistent workers (blocks of one pass)."""

    def __init__(self, workers: Prefetched, base: int, length: int):
        self.workers, self.base, self.length = workers, base, length

    def __len__(self) -> int:
        return self.length

    def prepare(self, i: int) -> None:  # noqa: D102
        self.workers.prepare(self.base + i)

    def __getitem__(self, i: int) -> Batch:
        return self.workers[self.base + i]

    def release(self) -> None:
        """Nothing: the workers own their files."""


class _Position:
    """Where a pass stands: the next batch it delivers, reported to its loader.

    ``pending``: a position loaded by :meth:`StreamLoader.load_state_dict` that no pass
    has used yet (the first batch delivered, or the end, uses it up). ``ended``: the
    pass delivered its last batch and reached the end.
    """

    __slots__ = ("ended", "next", "pending", "started")

    def __init__(self, next: int, pending: bool = False, ended: bool = False):
        self.next, self.pending, self.ended = next, pending, ended
        self.started = False  # a pass delivered a batch from here


class _Iteration:
    """One pass over the batches of a StreamLoader, from ``position.next``.

    Nothing starts before the first ``next()`` (``tqdm.auto`` makes an iterator it never
    uses), and a closed pass delivers nothing more; one superseded by a newer pass says
    so (see :meth:`StreamLoader.__iter__`).
    """

    def __init__(self, loader: StreamLoader, position: _Position):
        self.loader = loader
        self.position = position
        self.closed = False
        self.superseded = False
        plan = loader.plan()
        self.stop = len(loader)
        self.start = self.next = position.next
        workers = min(loader.num_workers, len(plan.rows))
        self.prefetchers: list[Prefetched] = []
        self.background: Background | None = None
        if workers == 0:
            self.groups = [loader._in_process()]
            self.batches = loader._delivery(self.groups, share=True)
            return
        self.groups = [plan.group(g, loader) for g in split_by_worker(plan.rows, workers)]
        sizes = [loader._block_size(g) for g in self.groups]
        workers_ = loader._workers(self.groups)
        if loader.persistent_workers:  # the loader's: this pass reads its epoch from them
            base = loader.epoch * _STRIDE
            blocks: list[Any] = [
                _Shifted(pf, base, len(Layout(k, self.stop)))
                for pf, k in zip(workers_, sizes, strict=True)
            ]
        else:
            self.prefetchers = blocks = workers_
        self.groups = [Unblocked(b, k, self.stop) for b, k in zip(blocks, sizes, strict=True)]
        self.batches = loader._delivery(self.groups, False)

    def __iter__(self) -> _Iteration:
        return self

    def __next__(self) -> Batch:
        if self.closed:
            if self.superseded and (self.next > self.start or self._newer_running()):
                raise RuntimeError(
                    "this iteration was superseded by a new iter(loader): a StreamLoader "
                    "runs one pass at a time (its position is what state_dict() saves); "
                    "end a pass before starting another, or index the loader (loader[i])"
                )
            raise StopIteration
        if self.next >= self.stop:
            self.position.pending = False
            self.position.ended = True  # the loader moves on to the next epoch
            self.close()
            raise StopIteration
        try:
            if not self.batches.share and self.batches.pin:
                if self.background is None:
                    self.background = PinMemory(self.batches).iterate(self.next)
                batch = next(self.background)
            else:
                batch = self.batches[self.next]
        except BaseException:
            self.close()
            raise
        self.next = self.position.next = self.next + 1
        self.position.pending = False  # a loaded position is used once
        self.position.started = True
        return batch

    def _newer_running(self) -> bool:
        newer = self.loader._active() if self.loader._active is not None else None
        return newer is not None and newer is not self and not newer.closed

    def close(self) -> None:
        """Stop the pinning thread and the worker processes."""
        self.closed = True
        if self.background is not None:
            self.background.close()
            self.background = None
        for pf in self.prefetchers:
            pf.close(wait=False)  # they exit by themselves meanwhile
        self.prefetchers = []
        for g in self.groups:
            g.release()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
