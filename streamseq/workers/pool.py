"""A loader's worker pool: one worker per group of rows, started per pass or persistent.

Each group of rows is read in order by one worker (:class:`~.prefetched.Prefetched`),
which hands its micro-batches over in blocks (:class:`~.blocks.Blocks`) and writes its
rows of each block in slots that every group shares (:mod:`.placed`), kept from one pass
to the next. Persistent workers read every epoch of their group
(:class:`~.epochs.EpochBlocks`), planning each from the frozen plan spec they were given
and reading it through the loader's ``group_of`` (the pool knows nothing of the loader).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..plan.planner import Epochs
from .blocks import Blocks, Layout, Unblocked
from .config import WorkerConfig
from .epochs import EpochBlocks, EpochOf, GroupOf
from .prefetched import Prefetched, close_together
from .sizing import hand_over
from .slots import Slots


class WorkerPool:
    """The workers of a loader: started for each pass, or kept across passes (persistent).

    Args:
        config: how each group's workers run (``num_workers`` per group: 1).
    """

    def __init__(self, config: WorkerConfig):
        self.config = config
        self.persistent: list[Prefetched] | None = None
        self.slots: Slots | None = None  # kept from one pass to the next
        self.block_size = 1  # micro-batches a hand-over of the workers started last holds

    def shared_slots(self, need: int) -> Slots:
        """Slots of at least ``need`` bytes, where the workers of every group write their rows.

        Kept across passes: their pages are mapped and written already, so that workers
        started for a new pass do not pay for fresh memory (in the kernel, a page fault
        and zeroing per page). New ones when the batches grew, or in a forked child.
        """
        # max_buffered hand-overs in flight and being read, and two more for the blocks of
        # batches the training loop still holds (its loop variable, one kept aside)
        count, kept = self.config.max_buffered + 2, self.slots
        if kept is None or kept.size < need or kept.count != count or kept.owner != os.getpid():
            kept = self.slots = Slots(count, need)
        kept.new_parties()  # (new workers: the slots still held are not theirs to join)
        return kept

    def start(
        self, groups: Sequence[Any], tbins: int, group_of: GroupOf, epochs: Epochs
    ) -> list[Prefetched]:
        """The workers reading ``groups``: new ones, or the persistent ones.

        Args:
            groups: one sequence of micro-batches per worker (each a
                :class:`~streamseq.ZipBatch`).
            tbins: steps per row of a micro-batch.
            group_of: how persistent workers read their group in another epoch.
            epochs: the plans of the run (for persistent workers).
        """
        config, kept = self.config, self.persistent
        if kept is not None and len(kept) == len(groups):
            return kept
        self.stop()
        size, need = hand_over(groups, tbins)
        self.block_size = size
        slots = self.shared_slots(need) if config.method == "process" else None
        made, first, total = [], 0, sum(g.num_rows for g in groups)
        for w, g in enumerate(groups):
            seq: Any = Blocks(g, size)
            if config.persistent_workers:
                seq = EpochBlocks(group_of, epochs, w, len(groups), size)
            rows = None if slots is None else (first, total)
            made.append(Prefetched(seq, config, slots, rows))
            first += g.num_rows
        if config.persistent_workers:
            self.persistent = made
        return made

    def unblocked(self, started: list[Prefetched], epoch: int, stop: int) -> list[Unblocked]:
        """The micro-batches of ``epoch`` that ``started`` read, one by one, per group.

        Args:
            started: the workers of each group (:meth:`start`).
            epoch: the epoch of the pass (persistent workers read every epoch).
            stop: the micro-batches of the pass.
        """
        size, blocks = self.block_size, list(started)
        if self.config.persistent_workers:  # this pass reads its epoch from them
            blocks = [EpochOf(pf, epoch, len(Layout(size, stop))) for pf in started]
        return [Unblocked(b, size, stop) for b in blocks]

    def stop(self) -> None:
        """Stop the persistent workers, if any, for good (new ones are made next time)."""
        kept, self.persistent = self.persistent, None
        close_together(kept or (), retire=True)  # all at once (bounded)
