"""Who reads which rows: this process, or one worker per group of rows, fresh or persistent.

The rows of an epoch (:class:`Reading`) are split into one contiguous group per worker
(:func:`~streamseq.split_by_worker`); each group is read in order by one worker
(:func:`~streamseq.prefetch`), which hands its micro-batches over in blocks
(:class:`~streamseq.workers.blocks.Blocks`). Persistent workers read every epoch of
their group (:class:`EpochBlocks`), planning each from the frozen plan spec they were
given.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._tree import leaves, nbytes, tree_map
from ..batch import Batch
from ..deliver.assemble import Assembled
from ..interleave import Row, make_rows
from ..plan.balance import balanced_groups, row_costs
from ..plan.planner import EpochPlan, Epochs
from ..plan.spec import PlanSpec
from ..prefetch import Prefetched, close_together, prefetch
from ..read.ref import StreamRef
from ..split import split_by_worker
from ..tbin import tbin
from ..workers import shm
from ..workers.blocks import Blocks, Layout, Unblocked, block_size
from ..workers.inline import bounded
from ..workers.processes import Shared
from ..workers.slots import Slots
from ..zip_batch import ZipBatch
from .config import LoaderConfig
from .run import Setup
from .spec import DataSpec

#: the largest batch of mapped arrays read in the calling process whatever the workers:
#: its copy (0.1 to 0.4 ms at memory speed) costs that process no more than taking a
#: batch over from workers (about 0.5 ms on 2 cores, ``docs/performance.rst``)
COPY_HERE_BYTES = 2 << 20


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
        data: DataSpec,
        lookahead: int = 0,
    ):
        self.spec, self.refs, self.transform, self.data = spec, refs, transform, data
        self.lookahead = lookahead
        self.steps = spec.tbins + lookahead  # per row of a batch

    @functools.cached_property
    def in_memory(self) -> bool:
        """Whether every stream is arrays already mapped (a store's) and there is no transform."""
        refs = self.refs
        return (
            self.transform is None
            and len(refs) > 0
            and all(callable(getattr(type(r.source), "as_arrays", None)) for r in refs)
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
        )

    def group(self, plan: EpochPlan, rows: Sequence[Row]) -> ZipBatch:
        """The sequence of micro-batches of a group of rows of ``plan``'s epoch."""
        spec = self.spec
        pack, cap = spec.pad == "pack", spec.max_streams_per_chunk  # (a cap needs pack)
        parts = [
            tbin(r, spec.tbins, pack=pack, max_streams_per_chunk=cap, lookahead=self.lookahead)
            for r in rows
        ]
        return ZipBatch(parts, pad=spec.pad, length=plan.length, spec=self.data.of(plan.epoch))

    def groups(
        self, plan: EpochPlan, rows: Sequence[Row], workers: int, balanced: bool = True
    ) -> list[ZipBatch]:
        """One group of ``rows`` per worker.

        ``balanced``: contiguous groups of even cost, the steps their rows read in this
        epoch (:mod:`~streamseq.plan.balance`); else of as many rows each, the groups of
        persistent workers (their sizes hold for every epoch: the rows' costs do not).
        """
        if not balanced:
            return [self.group(plan, g) for g in split_by_worker(rows, workers)]
        costs = row_costs(rows, plan.length * self.spec.tbins)
        return [self.group(plan, g) for g in balanced_groups(rows, costs, workers)]


def micro_batch_bytes(spec: Any, rows: int, tbins: int) -> int:
    """Size of a micro-batch of ``rows`` rows whose data ``spec`` describes.

    Example:
        >>> micro_batch_bytes(np.empty((0, 3), np.float32), 2, 4)
        234
    """
    step = nbytes(tree_map(lambda a: np.zeros((1, *a.shape[1:]), a.dtype), spec))
    return rows * tbins * (step + 8 + 8 + 1) + rows


def group_block_size(group: ZipBatch, tbins: int) -> int:
    """Micro-batches a worker hands over at once (about 2 MB of them, at most 32)."""
    return block_size(micro_batch_bytes(group.spec_, group.num_rows, tbins))


def common_block_size(groups: Sequence[ZipBatch], tbins: int) -> int:
    """Micro-batches every worker hands over at once: the same for all the groups.

    The workers write their rows of the same batches in one slot (:mod:`..workers.placed`),
    so the blocks of every group hold the same batches.
    """
    return min(group_block_size(g, tbins) for g in groups)


def slot_bytes(groups: Sequence[ZipBatch], tbins: int, size: int) -> int:
    """Bytes of a slot that holds ``size`` whole batches of ``groups``' rows."""
    rows = sum(g.num_rows for g in groups)
    spec = groups[0].spec_
    arrays = len(leaves(spec)) + 4 if spec is not None else 4
    batch = micro_batch_bytes(spec, rows, tbins) + shm.ALIGN * arrays  # (each aligned)
    return int(batch * size * 1.05) + 65536


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


_STRIDE = 1 << 32  # items of EpochBlocks: block j of epoch e is item e * _STRIDE + j


class EpochBlocks:
    """The blocks of group ``w`` of ``workers`` in every epoch: what persistent workers read.

    A sequence of segments without end, one per epoch: item ``e * 2**32 + j`` is block
    ``j`` of epoch ``e`` (Python integers have no bound, so neither have the epochs; an
    epoch has far fewer than 2**32 blocks), and :meth:`segment_end` ends the segment, so
    :func:`~streamseq.prefetch` never reads past the end of an epoch. It has no ``len``.
    Each worker plans the epochs for its own rows from the frozen plan spec it was given
    (no reference to the loader, so that the loader and its workers are collected when
    it is no longer referenced).

    Args:
        reading: the plan spec, streams, transform and data spec.
        epochs: the plans of the run.
        w: the group.
        workers: the number of groups.
        size: micro-batches per block (:class:`~streamseq.workers.blocks.Layout`).
    """

    def __init__(self, reading: Reading, epochs: Epochs, w: int, workers: int, size: int = 1):
        self.reading, self.w, self.workers, self.size = reading, w, workers, size
        self.epochs = Epochs(epochs.spec, epochs.rest, epochs.per_epoch)  # plans of its own
        self._group: tuple[Any, Blocks] | None = None
        self._ends: dict[Any, int] = {}  # blocks of the epochs asked for (each a plan)

    @staticmethod
    def first_item(epoch: int) -> int:
        """The item of block 0 of ``epoch``.

        Example:
            >>> EpochBlocks.first_item(2**40) == 2**72
            True
        """
        return epoch * _STRIDE

    def group(self, epoch: int) -> Blocks:
        """The blocks of this group in ``epoch`` (kept until another is asked for)."""
        key = self.epochs.key(epoch)
        if self._group is None or self._group[0] != key:
            self.release()
            plan = self.epochs.plan(epoch)
            rows = split_by_worker(self.reading.rows(plan), self.workers)[self.w]
            self._group = (key, Blocks(self.reading.group(plan, rows), self.size))
        return self._group[1]

    def __getitem__(self, k: int) -> list[Batch]:
        epoch, j = divmod(k, _STRIDE)
        return self.group(epoch)[j]

    def segment_end(self, k: int) -> int:
        """The item after the last block of the epoch of item ``k``."""
        epoch = k // _STRIDE
        key = self.epochs.key(epoch)
        blocks = self._ends.get(key)
        if blocks is None:
            if len(self._ends) > 8:
                self._ends.clear()
            blocks = self._ends[key] = len(Layout(self.size, self.epochs.length(epoch)))
        return epoch * _STRIDE + blocks

    def name_item(self, k: int) -> str:
        """What item ``k`` reads: its epoch, batches, streams and steps."""
        epoch, j = divmod(k, _STRIDE)
        return f"epoch {epoch}, {self.group(epoch).name_item(j)}"

    def release(self) -> None:
        """Close the files the group holds open."""
        if self._group is not None:
            self._group[1].release()


class EpochOf:
    """The blocks of one epoch, read by persistent workers (items shifted to the epoch's)."""

    def __init__(self, workers: Prefetched, epoch: int, length: int):
        self.workers, self.base, self.length = workers, EpochBlocks.first_item(epoch), length

    def __len__(self) -> int:
        return self.length

    def prepare(self, i: int) -> None:  # noqa: D102
        self.workers.prepare(self.base + i)

    def __getitem__(self, i: int) -> Batch:
        return self.workers[self.base + i]

    def release(self) -> None:
        """Nothing: the workers own their files."""


class Workers:
    """The workers of a loader: started for each pass, or kept across passes (persistent).

    Args:
        config: the loader's configuration.
        refs: the streams (to name one that does not pickle).
    """

    def __init__(self, config: LoaderConfig, refs: Sequence[StreamRef]):
        self.config, self.refs = config, refs
        self.persistent: list[Prefetched] | None = None
        self.slots: Slots | None = None  # kept from one pass to the next
        self.block_size = 1  # micro-batches a hand-over of the workers started last holds

    def shared_slots(self, groups: list[ZipBatch], tbins: int, size: int) -> Slots:
        """The slots the workers of every group write their rows of each block in.

        Kept across passes: their pages are mapped and written already, so that workers
        started for a new pass do not pay for fresh memory (in the kernel, a page fault
        and zeroing per page). New ones when the batches grew, or in a forked child.
        """
        # max_buffered hand-overs in flight and being read, and two more for the blocks of
        # batches the training loop still holds (its loop variable, one kept aside)
        need, count = slot_bytes(groups, tbins, size), self.config.max_buffered + 2
        kept = self.slots
        if kept is None or kept.size < need or kept.count != count or kept.owner != os.getpid():
            kept = self.slots = Slots(count, need)
        return kept

    def start(self, groups: list[ZipBatch], reading: Reading, epochs: Epochs) -> list[Prefetched]:
        """The workers reading ``groups``: new ones, or the persistent ones."""
        config, kept, tbins = self.config, self.persistent, reading.steps
        if kept is not None and len(kept) == len(groups):
            return kept
        self.stop()
        if config.method == "process" and multiprocessing.get_start_method() != "fork":
            check_picklable(groups, config.transform, self.refs)
        size = self.block_size = common_block_size(groups, tbins)
        slots = None
        if config.method == "process":
            slots = self.shared_slots(groups, tbins, size)
        made, first, total = [], 0, sum(g.num_rows for g in groups)
        for w, g in enumerate(groups):
            seq: Any = Blocks(g, size)
            if config.persistent_workers:
                seq = EpochBlocks(reading, epochs, w, len(groups), size)
            shm_size = None
            if slots is not None:
                seq, shm_size = Shared(seq, slots, (first, total)), slots.size * slots.count
            made.append(
                prefetch(
                    seq,
                    1,
                    method=config.method,
                    max_buffered=config.max_buffered,
                    timeout=config.timeout,
                    shm_size=shm_size,
                    persistent_workers=config.persistent_workers,
                )
            )
            first += g.num_rows
        if config.persistent_workers:
            self.persistent = made
        return made

    def stop(self) -> None:
        """Stop the persistent workers, if any."""
        kept, self.persistent = self.persistent, None
        close_together(kept or ())  # all at once (bounded)


def read_with(
    config: LoaderConfig,
    reading: Reading,
    workers: Workers,
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
            here = bounded(reading.group(plan, reading.rows(plan)), config.timeout)
        groups: list[Any] = [here]
        batches = Assembled(groups, config.pin_memory, config.time_major, share=True)
        return batches, groups, [], None, []
    stop, kept = plan.length, workers.persistent
    if config.persistent_workers and kept is not None and len(kept) == count:
        started = kept
    else:
        groups = reading.groups(plan, reading.rows(plan), count, not config.persistent_workers)
        started = workers.start(groups, reading, epochs)
    size = workers.block_size
    prefetchers = started
    blocks: list[Any] = started
    if config.persistent_workers:  # the loader's: this pass reads its epoch from them
        prefetchers = []
        blocks = [EpochOf(pf, plan.epoch, len(Layout(size, stop))) for pf in started]
    groups = [Unblocked(b, size, stop) for b in blocks]
    batches = Assembled(groups, config.pin_memory, config.time_major, share=False)
    failed = workers.stop if config.persistent_workers else None
    return batches, groups, prefetchers, failed, [pf.timing for pf in started]
