"""What a pass reads its batches from: this process, or the loader's worker pool.

The rows of an epoch (:class:`Reading`) are split into one contiguous group per worker
(:func:`~streamseq.split_by_worker`); the pool (:class:`~streamseq.workers.pool.WorkerPool`)
reads each group in one worker, and persistent workers read any epoch of their group
through :meth:`Reading.group_of`. :func:`read_with` sets a pass up either way.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import pickle
from collections.abc import Callable, Sequence
from typing import Any

from ..deliver.assemble import Assembled
from ..errors import SourceError
from ..gather.writer import Copy
from ..interleave import Row, make_rows
from ..plan.balance import balanced_sets, cut_rows, row_costs
from ..plan.planner import EpochPlan, Epochs
from ..plan.spec import PlanSpec
from ..read.ref import StreamRef, TableRefs, _collector_paused
from ..split import split_by_worker
from ..store.stream import store_files
from ..stream_table import is_table
from ..tbin import tbin
from ..workers.config import WorkerConfig
from ..workers.inline import bounded
from ..workers.pool import WorkerPool
from ..workers.runs import Runs, in_row_order, runs_of
from ..workers.sizing import micro_batch_bytes
from ..zip_batch import ZipBatch
from .config import LoaderConfig
from .first_step import FirstStepSpec
from .run import Setup

#: the largest batch of mapped arrays read in the calling process whatever the workers:
#: its copy, by two threads at memory speed (3 MiB: 0.06 ms on 2 cores), costs that
#: process less than taking a batch over from workers (3 MiB: 0.8 ms a batch in a pass
#: of 14; ``docs/performance.rst``)
COPY_HERE_BYTES = 8 << 20


class _StoreChecked(ZipBatch):
    """A group whose rows read stores or token corpora: files checked around each batch.

    A data file cut short in place while mapped would kill the process that copies a
    batch out of it (``SIGBUS``); a file rewritten in place would give other steps.
    Checked before the batch (one ``fstat`` a file), it is a :class:`SourceError` naming
    the file, the streams and the steps of the batch; checked again after it, a change
    during the copy is an error of the batch that was copied, never a batch delivered
    with other steps. Files that say they are checked around a batch (a corpus's,
    ``batch()``: their reads check nothing of their own while it is written) are held
    in that state while it is written.
    """

    stores: list[Any] = []

    def __getitem__(self, i: int) -> Any:
        return self._checked(i, super().__getitem__, i)

    def item(self, i: int, need_data: bool = True) -> Any:
        return self._checked(i, super().item, i, need_data)

    def written(self, i: int) -> tuple[Any, ...]:
        return self._checked(i, super().written, i)

    def started(self, i: int) -> Callable[[], tuple[Any, ...]] | None:
        """Batch ``i`` with its copy under way: a call that waits for it, checked; or None.

        The files are checked before the batch is written (as :meth:`written` does); the
        compiled copies of its rows run in the copying thread of the process (``Copy``)
        while the caller goes on (the batch before is handed over meanwhile). The call
        returned waits for them and checks the files again, raising what :meth:`written`
        would: the batch's fields are whole only once it returned. None where the batch
        cannot be copied so (no compiled pass, or files checked by their own ``batch()``).
        """
        if Copy is None or self._after():
            return None
        stores = self.stores
        self._check(i, stores)
        copy = Copy()
        out = ZipBatch.written(self, i, copy)
        copy.start()

        def finish() -> tuple[Any, ...]:
            copy.wait()
            return out

        return functools.partial(self._checked_after, i, stores, finish)

    def _after(self) -> list[Any]:
        """The files checked around a batch by their own ``batch()`` (of :attr:`stores`)."""
        stores = self.stores
        cached = self.__dict__.get("_after_of")
        if cached is None or cached[0] is not stores:
            after = [f for f in stores if getattr(f, "batch", None) is not None]
            cached = self._after_of = (stores, after)
        return cached[1]

    def _checked(self, i: Any, write: Callable[..., Any], *args: Any) -> Any:
        stores = self.stores
        self._check(i, stores)
        after = self._after()
        if after:
            write = functools.partial(_held, after, write)
        return self._checked_after(i, stores, write, *args)

    def _checked_after(
        self, i: Any, stores: list[Any], write: Callable[..., Any], *args: Any
    ) -> Any:
        """``write(*args)``, then the files checked again: a change meanwhile is its error.

        A :class:`SourceError` of the write (a map cut short during the copy) is replaced
        by the error of the file's change, when the check finds one.
        """
        try:
            out = write(*args)
        except SourceError:
            self._check(i, stores)
            raise
        self._check(i, stores)  # (what changed during the copy: this batch's error)
        return out

    def _check(self, i: Any, stores: list[Any]) -> None:
        try:
            for files in stores:
                files.check()
        except SourceError as e:
            raise SourceError(e.path, f"{e.detail}; {self.describe_item(i)}") from None


def _held(after: list[Any], write: Callable[..., Any], *args: Any) -> Any:
    """``write(*args)`` with the files of ``after`` held as checked around a batch."""
    with contextlib.ExitStack() as stack:
        for files in after:
            stack.enter_context(files.batch())
        return write(*args)


class Reading:
    """What reading a plan needs: its spec, the streams, the transform and the data spec.

    Args:
        spec: the plan's settings.
        refs: the streams.
        transform: the user's transform, or None.
        data: the data's dtype and step shape.
        lookahead: steps after each chunk that every row also holds (not in the plan).
    """

    def __init__(
        self,
        spec: PlanSpec,
        refs: Sequence[StreamRef],
        transform: Callable[..., Any] | None,
        data: FirstStepSpec,
        lookahead: int = 0,
    ):
        self.spec, self.refs, self.transform, self.data = spec, refs, transform, data
        self.lookahead = lookahead
        self.steps = spec.tbins + lookahead  # per row of a batch

    @functools.cached_property
    def in_memory(self) -> bool:
        """Whether every stream is arrays already mapped (a store's) and there is no transform.

        A table answers once for its streams (a store's table: ``mapped``); a list is asked
        stream by stream, up to the first that is not mapped.
        """
        if self.transform is not None or not len(self.refs):
            return False
        return all(_mapped(part) for part in _parts_of(self.refs))

    @functools.cached_property
    def stores(self) -> list[Any]:
        """The stores the streams read (checked before each batch: :class:`_StoreChecked`)."""
        got = []
        for part in _parts_of(self.refs):
            if is_table(part):
                got.append(getattr(part, "stores", []))  # (a table of a store: its files)
            else:
                got.append(store_files([r.source for r in part]))
        return _merged(*got)

    @functools.cached_property
    def tables_unasked(self) -> bool:
        """Whether a table that does not say which stores it reads (one built by hand) reads one.

        Its first stream tells: when it is a store's, each group looks at the streams of
        its rows (made for its map of chunks anyway), so that a data file cut short is an
        error there, not a ``SIGBUS``. (A table of a corpus or a manifest costs one stream.)
        """
        return any(
            is_table(p) and not hasattr(p, "stores") and len(p) > 0 and store_files([p[0]])
            for p in _parts_of(self.refs)
        )

    def read_here(self, plan: EpochPlan) -> bool:
        """Whether ``plan``'s batches are read in the calling process whatever the workers.

        So are streams that are all mapped arrays (a store's), with no transform, in
        batches of at most :data:`COPY_HERE_BYTES`: such a batch is one compiled copy out
        of mapped pages, which costs the calling process less than workers' hand-over of
        it (``docs/recipes/materialize.rst``).
        """
        if not self.in_memory:
            return False
        spec = self.data.of(plan.epoch)
        return micro_batch_bytes(spec, self.spec.batch_size, self.steps) <= COPY_HERE_BYTES

    def rows(self, plan: EpochPlan) -> list[Row]:
        """The rows of this rank in ``plan``'s epoch."""
        spec = self.spec
        return make_rows(
            self.refs,
            plan.pieces[2],
            plan.rows_of(spec),
            self.transform,
            seed=spec.seed,
            epoch=plan.epoch,
            units=plan.units_of(spec),
            carried=plan.continued(spec),
            resumed=plan.resumed_of(spec),
        )

    def group(self, plan: EpochPlan, rows: Sequence[Row]) -> ZipBatch:
        """The sequence of micro-batches of a group of rows of ``plan``'s epoch."""
        spec = self.spec
        pack, cap = spec.pad == "pack", spec.max_streams_per_chunk  # (a cap needs pack)
        parts = [
            tbin(r, spec.tbins, pack=pack, max_streams_per_chunk=cap, lookahead=self.lookahead)
            for r in rows
        ]
        data, stores = self.data.of(plan.epoch), self.stores
        if self.tables_unasked:  # (the stores its rows read, among the streams it makes)
            stores = _merged(stores, store_files([f.source for r in rows for f in r.refs]))
        kind = _StoreChecked if stores else ZipBatch
        with _collector_paused():  # (the rows' references, made for its map of chunks)
            group = kind(parts, pad=spec.pad, length=plan.length, spec=data)
        if stores:
            group.stores = stores
        return group

    def whole(self, plan: EpochPlan) -> ZipBatch:
        """The rows of this rank in ``plan``'s epoch, as one group (read in this process)."""
        return self.group(plan, self.rows(plan))

    def groups(self, plan: EpochPlan, workers: int, balanced: bool = True) -> list[ZipBatch]:
        """The rows of this rank in ``plan``'s epoch, as one group per worker.

        ``balanced``: groups of even cost, the steps their rows read in this epoch
        (:mod:`~streamseq.plan.balance`): contiguous where that is as even, else any set
        of rows each, read as runs of consecutive rows (:class:`~streamseq.workers.runs.Runs`,
        its rows in ``given_rows``: :func:`~streamseq.workers.runs.in_row_order` puts
        them back in row order); else of as many rows each, the groups of persistent
        workers (:meth:`group_of`: their sizes hold for every epoch, the rows' costs do not).
        """
        rows = self.rows(plan)
        if not balanced:
            return [self.group(plan, g) for g in split_by_worker(rows, workers)]
        costs = row_costs(rows, plan.length * self.spec.tbins)
        sets = balanced_sets(costs, workers)
        if all(len(s) == 0 or int(s[-1] - s[0]) + 1 == len(s) for s in sets):  # contiguous
            sizes = [len(s) for s in sets]
            return [self.group(plan, g) for g in cut_rows(rows, sizes)]
        made: list[Any] = []
        for mine in sets:
            runs = runs_of(mine)
            parts = [self.group(plan, rows[a : a + n]) for a, n in runs]
            group = Runs(parts, [a for a, _ in runs])  # (at its rows, whatever the others)
            group.given_rows = mine
            made.append(group)
        return made

    def group_of(self, plan: EpochPlan, w: int, workers: int) -> ZipBatch:
        """Group ``w`` of ``workers`` groups of this rank's rows in ``plan``'s epoch.

        What a persistent worker reads in each epoch
        (:class:`~streamseq.workers.epochs.EpochBlocks`).
        """
        return self.group(plan, split_by_worker(self.rows(plan), workers)[w])


def _merged(*stores: list[Any]) -> list[Any]:
    """The stores of the lists ``stores``, each once."""
    found: dict[int, Any] = {}
    for files in (f for got in stores for f in got):
        found.setdefault(id(files), files)
    return list(found.values())


def _parts_of(refs: Sequence[StreamRef]) -> list[Any]:
    """The tables and lists of references that ``refs`` are made of (a list: itself)."""
    if isinstance(refs, TableRefs):
        return refs.parts
    return [refs]


def _mapped(part: Any) -> bool:
    """Whether every stream of ``part`` (a table, or references) is arrays already mapped."""
    if is_table(part):
        return bool(getattr(part, "mapped", False))  # one answer for all its streams
    # (a source's class may say it is not, as a table does: a corpus's document)
    return all(
        callable(getattr(type(r.source), "as_arrays", None))
        and getattr(type(r.source), "mapped", True)
        for r in part
    )


def check_picklable(
    groups: list[Any], transform: Callable[..., Any] | None, refs: Sequence[StreamRef]
) -> None:
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
    if transform is not None:
        try:
            pickle.dumps(transform)
        except Exception as e:
            raise TypeError(f"transform {transform!r} does not pickle ({e}): {hint}") from e
    for ref in refs:
        try:
            pickle.dumps(ref.source)
        except Exception as e:
            raise ref.error(f"does not pickle ({type(e).__name__}: {e}): {hint}") from e
    raise TypeError(f"the streams do not pickle ({error}): {hint}") from error


def worker_config(config: LoaderConfig) -> WorkerConfig:
    """How the worker of each group of rows runs, from the loader's configuration.

    Example:
        >>> worker_config(LoaderConfig(num_workers=3, method="thread"))
        WorkerConfig(num_workers=1, method='thread', max_buffered=6, timeout=None, \
persistent_workers=False, start_hook=None, shm_size=None)
    """
    return WorkerConfig(
        1, config.method, config.max_buffered, config.timeout, config.persistent_workers
    )


def read_with(
    config: LoaderConfig,
    reading: Reading,
    workers: WorkerPool,
    epochs: Epochs,
    plan: EpochPlan,
    count: int,
    here: Sequence[Any] | None = None,
) -> Setup:
    """What a pass reads ``plan``'s batches from: this process (``count`` 0), or workers.

    ``here``: the rows read in this process, if the loader has them already. Persistent
    workers that run already are asked for the epoch (its rows are theirs to plan). It
    holds no reference to the loader (a pass switches with it, :class:`Trial`).
    """
    count = 0 if reading.read_here(plan) else min(count, reading.spec.batch_size)
    if count == 0:
        if here is None:
            here = bounded(reading.whole(plan), config.timeout)
        groups: list[Any] = [here]
        batches = Assembled(groups, config.pin_memory, config.time_major, share=True)
        return batches, groups, [], None, []
    kept = workers.persistent
    given: list[Any] = [None]  # (the rows of each group, when not contiguous in order)
    if config.persistent_workers and kept is not None and len(kept) == count:
        started = kept
    else:
        groups = reading.groups(plan, count, balanced=not config.persistent_workers)
        if config.method == "process" and multiprocessing.get_start_method() != "fork":
            check_picklable(groups, config.transform, reading.refs)
        started = workers.start(groups, reading.steps, reading.group_of, epochs)
        given = [getattr(g, "given_rows", None) for g in groups]
    prefetchers = [] if config.persistent_workers else started  # (the pool's, kept)
    groups = in_row_order(workers.unblocked(started, plan.epoch, plan.length), given)
    batches = Assembled(groups, config.pin_memory, config.time_major, share=False)
    failed = workers.stop if config.persistent_workers else None
    return batches, groups, prefetchers, failed, [pf.timing for pf in started]
