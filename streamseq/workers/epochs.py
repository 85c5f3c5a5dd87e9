"""Blocks of every epoch, for persistent workers: one sequence of segments, one per epoch.

A persistent worker reads its group of rows in every epoch of the run from one sequence
(:class:`EpochBlocks`), planning each epoch itself; a pass reads its epoch's blocks from
it through :class:`EpochOf`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..batch import Batch
from ..plan.planner import EpochPlan, Epochs
from .blocks import Blocks, Layout
from .prefetched import Prefetched

_STRIDE = 1 << 32  # items of EpochBlocks: block j of epoch e is item e * _STRIDE + j

GroupOf = Callable[[EpochPlan, int, int], Any]
"""``group_of(plan, w, workers)``: the micro-batches of group ``w`` of ``workers`` groups
of rows in ``plan``'s epoch (a sequence; the loader's, pickled to spawned workers)."""


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
        group_of: how to read a group of rows in an epoch (:data:`GroupOf`).
        epochs: the plans of the run.
        w: the group.
        workers: the number of groups.
        size: micro-batches per block (:class:`~.blocks.Layout`).
    """

    def __init__(self, group_of: GroupOf, epochs: Epochs, w: int, workers: int, size: int = 1):
        self.group_of, self.w, self.workers, self.size = group_of, w, workers, size
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
            group = self.group_of(plan, self.w, self.workers)
            self._group = (key, Blocks(group, self.size))
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
    """The blocks of one epoch, read by persistent workers (items shifted to the epoch's).

    Args:
        workers: the persistent workers, reading an :class:`EpochBlocks`.
        epoch: the epoch.
        length: its blocks.
    """

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
