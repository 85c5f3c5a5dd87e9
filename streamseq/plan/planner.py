"""The plan of an epoch from a :class:`~streamseq.plan.spec.PlanSpec`: pieces, rows, length.

A fresh epoch reads every unit (stream or segment) whole; an epoch resumed on other rows
reads what was left of it (:func:`~streamseq.plan.progress.rest_of_epoch`). The units of
an epoch of a mixture are those it draws (:mod:`~streamseq.plan.draws`): a unit may occur
several times, and the plan deals out occurrences.
"""

from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._checks import check_int
from .epoch import RESUMED_AT_CHUNKS, epoch_rows, segments_at_chunks, start_order
from .packing import most_chunks
from .progress import Pieces, Progress, rest_of_epoch, whole_units
from .rows import stream_order
from .spec import PlanSpec

#: ``(source, start, length)`` of every unit of an epoch
Units = tuple[np.ndarray, np.ndarray, np.ndarray]


def epoch_units(spec: PlanSpec, epoch: int, draw: np.ndarray | None = None) -> Units:
    """``(source, start, length)`` of every unit of ``epoch``: the spec's, or those drawn.

    ``draw``: the unit of every occurrence, instead of the epoch's own draw.

    Example:
        >>> from streamseq.plan.draws import MixSpec
        >>> mix = MixSpec(("a", "b"), (0, 1, 2), (2.0, 0.0))
        >>> spec = PlanSpec(np.array([3, 4]), 1, 2, mixture=mix)
        >>> [a.tolist() for a in epoch_units(spec, 0)]
        [[0, 0], [0, 0], [3, 3]]
    """
    if draw is None and spec.draws is not None:
        draw = spec.draws.of(epoch)
    if draw is None:
        return spec.units
    source, start, length = spec.units
    return source[draw], start[draw], length[draw]


@dataclass(frozen=True, eq=False)
class EpochPlan:
    """What one epoch delivers: its pieces, those of every global row, its batches.

    Attributes:
        epoch: the epoch.
        pieces: ``(unit, offset, length)`` of every piece the rows read.
        assignment: piece indices of every global row (all ranks), in order.
        length: batches of the epoch.
        rest: where the epoch was resumed on other rows, or None for a fresh epoch.
        units: ``(source, start, length)`` of the epoch's units, those a mixture drew
            (``pieces`` index them); None: the spec's units.
    """

    epoch: int
    pieces: Pieces
    assignment: list[np.ndarray]
    length: int
    rest: Progress | None = None
    units: Units | None = None

    def rows_of(self, spec: PlanSpec) -> list[np.ndarray]:
        """The piece indices of the rows of ``spec.rank``."""
        b = spec.batch_size
        return self.assignment[spec.rank * b : (spec.rank + 1) * b]

    def resumed_of(self, spec: PlanSpec) -> list[np.ndarray] | None:
        """For each row of ``spec.rank``, which of its pieces start a chunk.

        Packed, those that go on with a stream from a step other than 0 (see
        :func:`plan_resumed`). None where no piece has to.
        """
        begun = plan_resumed(spec, self.pieces, self.rest, self.units)
        if begun is None:
            return None
        return [begun[m] for m in self.rows_of(spec)]

    def units_of(self, spec: PlanSpec) -> tuple[np.ndarray, np.ndarray] | None:
        """``(stream, first step)`` of every piece, or None when pieces are whole streams."""
        if spec.segment_length is None and self.rest is None and self.units is None:
            return None
        source, start, _ = spec.units if self.units is None else self.units
        unit, offset, _ = self.pieces
        return source[unit], start[unit] + offset

    def continued(self, spec: PlanSpec) -> list[int]:
        """For each row of ``spec.rank``, the global row of the state whose stream it goes on.

        -1 where a row starts afresh: a fresh epoch, a stream from its first step, or a
        stream whose row had already moved on. A row that goes on keeps its state (the
        first batch has no reset there).

        Example:
            >>> from streamseq.plan.progress import Progress
            >>> spec = PlanSpec(np.array([6, 4]), batch_size=2, tbins=2)
            >>> rest = Progress(np.array([False, False]), np.array([0]), np.array([2]),
            ...                 np.array([1]))
            >>> plan_epoch(spec, 0, rest).continued(spec)  # row 0 goes on with stream 0
            [1, -1]
        """
        b = spec.batch_size
        mine = self.assignment[spec.rank * b : (spec.rank + 1) * b]
        if self.rest is None:
            return [-1] * len(mine)
        unit, offset, _ = self.pieces
        row_of = dict(zip(self.rest.begun.tolist(), self.rest.row.tolist(), strict=True))
        out = []
        for pieces in mine:
            p = int(pieces[0]) if len(pieces) else -1
            out.append(row_of.get(int(unit[p]), -1) if p >= 0 and offset[p] > 0 else -1)
        return out


def plan_resumed(
    spec: PlanSpec, pieces: Pieces, rest: Progress | None, units: Units | None = None
) -> np.ndarray | None:
    """The pieces of a packed epoch that start a chunk: those that go on with a stream.

    A piece whose first step in its stream is not 0 has no ``step == 0`` to mark where
    it starts, so packed it starts a chunk, where ``reset`` marks it
    (:mod:`~streamseq.plan.packing`): from plan version 4
    (:data:`~streamseq.plan.epoch.SEGMENTS_AT_CHUNKS`), a segment other than a stream's
    first and the rest of a stream begun before a resume on other rows; in version 3
    (:data:`~streamseq.plan.epoch.RESUMED_AT_CHUNKS`), the latter only.

    Args:
        spec: the plan's settings.
        pieces: the epoch's pieces.
        rest: where the epoch was resumed on other rows, or None for a fresh epoch.
        units: ``(source, start, length)`` of the units the pieces index (a mixture's
            draw); None: the spec's.

    Returns:
        One flag a piece, or None where no piece starts a chunk (rows not packed, none
        of them goes on with a stream, or a version that packs them as any).

    Example:
        >>> spec = PlanSpec(np.array([6, 4]), batch_size=1, tbins=2, pad="pack")
        >>> pieces = (np.array([0, 1]), np.array([2, 0]), np.array([4, 4]))
        >>> rest = Progress(np.array([False, False]), np.array([0]), np.array([2]), np.array([0]))
        >>> plan_resumed(spec, pieces, rest).tolist(), plan_resumed(spec, pieces, None)
        ([True, False], None)
        >>> spec = spec.replace(segment_length=3)  # units: steps 0:3, 3:6 of 0; 0:3, 3:4 of 1
        >>> plan_resumed(spec, whole_units(spec.units[2]), None).tolist()
        [False, True, False, True]
        >>> plan_resumed(spec.replace(version=3), whole_units(spec.units[2]), None)
    """
    if spec.pad != "pack" or spec.version < RESUMED_AT_CHUNKS:
        return None
    if not segments_at_chunks(spec.pad, spec.segment_length, spec.version):
        return None if rest is None else pieces[1] > 0
    start = (spec.units if units is None else units)[1]
    flags = start[pieces[0]] + pieces[1] > 0
    return flags if flags.any() else None


def plan_epoch(spec: PlanSpec, epoch: int, rest: Progress | None = None) -> EpochPlan:
    """The plan of ``epoch``, fresh or resumed at ``rest``.

    Example:
        >>> spec = PlanSpec(np.array([5, 2, 3]), batch_size=2, tbins=2)
        >>> plan = plan_epoch(spec, 0)
        >>> [r.tolist() for r in plan.assignment], plan.length
        ([[0], [1, 2]], 3)
    """
    draw = None if rest is None else rest.draw
    units = epoch_units(spec, epoch, draw)
    lengths = units[2]
    if rest is None and units is spec.units and spec.segment_length is None:
        pieces, order = units, None  # (every stream whole: the units are the pieces)
    elif rest is None:
        pieces, order = whole_units(lengths), None
    else:
        pieces = rest_of_epoch(rest, lengths, epoch_order(spec, epoch, draw))
        order = np.arange(len(pieces[0]))
    cap = spec.max_streams_per_chunk if spec.pad == "pack" else None
    resumed = plan_resumed(spec, pieces, rest, units)
    assignment, n = epoch_rows(
        pieces[2],
        spec.rows,
        spec.tbins,
        spec.pad,
        shuffle=spec.shuffle,
        seed=spec.seed,
        epoch=epoch,
        order=order,
        version=spec.version,
        cap=cap,
        resumed=resumed,
    )
    if rest is None and spec.draws is not None and not spec.draws.fixed:
        n = spec.draws.epoch_length(spec)  # the same for every draw
    elif rest is None and spec.shuffle and (cap is not None or resumed is not None):
        # capped rows, or rows with pieces that start a chunk, take more or fewer chunks
        # by the order of their pieces: the most any order takes, every epoch the same
        # (invariant 6; rows keep their pieces, see epoch_rows)
        flags = np.zeros(len(lengths), bool) if resumed is None else resumed
        n = max(
            (most_chunks(lengths[r], spec.tbins, cap, flags[r]) for r in assignment), default=0
        )
    return EpochPlan(epoch, pieces, assignment, n, rest, None if units is spec.units else units)


def epoch_order(spec: PlanSpec, epoch: int, draw: np.ndarray | None = None) -> np.ndarray:
    """The order of the units in the fresh plan of ``epoch``: that of the rest of it.

    ``draw``: the units drawn for the epoch, instead of its own draw (see
    :func:`epoch_units`).

    Example:
        >>> spec = PlanSpec(np.array([5, 2, 3, 4]), batch_size=2, tbins=1)
        >>> epoch_order(spec, 0).tolist(), epoch_order(spec.replace(version=1), 0).tolist()
        ([0, 2, 3, 1], [0, 1, 2, 3])
    """
    lengths = epoch_units(spec, epoch, draw)[2]
    if spec.version == 1:
        return stream_order(len(lengths), shuffle=spec.shuffle, seed=spec.seed, epoch=epoch)
    pack = spec.pad == "pack"
    cap = spec.max_streams_per_chunk if pack else None
    units = epoch_units(spec, epoch, draw)
    flags = plan_resumed(spec, whole_units(lengths), None, units)  # (a fresh epoch's)
    if draw is None:
        assignment = plan_epoch(spec, epoch).assignment
    else:  # the units drawn anew, planned as a fresh epoch would be
        kw = dict(shuffle=spec.shuffle, seed=spec.seed, epoch=epoch, version=2, cap=cap)
        assignment = epoch_rows(lengths, spec.rows, spec.tbins, spec.pad, **kw)[0]
    return start_order(lengths, assignment, spec.tbins, pack=pack, cap=cap, resumed=flags)


#: the last fresh plan :meth:`Epochs.plan` made for each spec (while the spec lives)
RECENT: weakref.WeakKeyDictionary[PlanSpec, EpochPlan] = weakref.WeakKeyDictionary()


class Epochs:
    """The plans of every epoch of a run: fresh ones, and the one resumed at a rest.

    Plans are computed on demand and the last one is kept: without shuffle, a per-epoch
    transform or a resumed rest, every epoch has the same plan (:meth:`key`), kept
    across epochs.

    Args:
        spec: the plan's settings.
        rest: ``(epoch, progress)`` when that epoch was resumed on other rows.
        per_epoch: the rows differ by epoch even without shuffle (a transform seeded
            by the epoch).
        before: batches of the resumed epoch delivered before its rest was planned.

    Example:
        >>> epochs = Epochs(PlanSpec(np.array([5, 2, 3]), batch_size=2, tbins=2))
        >>> epochs.length(0), epochs.plan(0).assignment is epochs.plan(1).assignment
        (3, True)
    """

    def __init__(
        self,
        spec: PlanSpec,
        rest: tuple[int, Progress] | None = None,
        per_epoch: bool = False,
        before: int = 0,
    ):
        self.spec, self.rest, self.per_epoch = spec, rest, per_epoch
        self.before = before if rest is not None else 0
        self._last: tuple[Any, EpochPlan] | None = None

    def before_of(self, epoch: int) -> int:
        """Batches of ``epoch`` delivered before its plan (those of a resumed rest)."""
        return self.before if self.rest_of(epoch) is not None else 0

    def rest_of(self, epoch: int) -> Progress | None:
        """Where ``epoch`` was resumed on other rows, else None."""
        rest = self.rest
        return rest[1] if rest is not None and rest[0] == epoch else None

    def key(self, epoch: int) -> Any:
        """What tells the plan of ``epoch`` from the others."""
        if self.rest_of(epoch) is not None:
            return ("rest", epoch)
        draws = self.spec.draws
        varies = draws is not None and not draws.fixed
        return epoch if self.spec.shuffle or self.per_epoch or varies else "every epoch"

    def cached(self, epoch: int) -> EpochPlan | None:
        """The plan of ``epoch`` if it is the one kept."""
        last = self._last
        if last is None or last[0] != self.key(epoch):
            return None
        plan = last[1]
        return plan if plan.epoch == epoch else dataclasses.replace(plan, epoch=epoch)

    def plan(self, epoch: int) -> EpochPlan:
        """The plan of ``epoch`` (kept until another is asked for).

        A fresh plan is a pure function of the spec and the epoch: the last one made for
        this very spec (:data:`RECENT`) is taken again, so that a loader resuming its own
        state does not plan its epoch twice, nor hold two plans of it at once.
        """
        plan = self.cached(epoch)
        if plan is None:
            rest = self.rest_of(epoch)
            recent = RECENT.get(self.spec) if rest is None else None
            if recent is not None and recent.epoch == epoch:
                plan = recent
            else:
                plan = plan_epoch(self.spec, epoch, rest)
                if rest is None:
                    RECENT[self.spec] = plan
            self._last = (self.key(epoch), plan)
        return plan

    def length(self, epoch: int) -> int:
        """Batches of ``epoch``, without keeping its plan."""
        plan = self.cached(epoch)
        if plan is not None:
            return plan.length
        draws, rest = self.spec.draws, self.rest_of(epoch)
        if rest is None and draws is not None and not draws.fixed:
            return draws.epoch_length(self.spec)
        return plan_epoch(self.spec, epoch, rest).length

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_last"] = None
        return state


def planned(source: Any, epoch: int | EpochPlan | None = None) -> tuple[PlanSpec, EpochPlan]:
    """The settings and the plan of an epoch, from a :class:`PlanSpec` or what holds one.

    What summaries and pictures of a plan take (:meth:`streamseq.Mixture.summary`,
    :func:`streamseq.plot_plan`), so that they never need the loader's module.

    Args:
        source: the plan's settings (a :class:`PlanSpec`, such as ``loader.spec``); or
            anything with ``spec``, ``epoch`` and ``plan()`` (a loader), whose own plan
            is taken for the epoch it stands in: it may be the rest of an epoch resumed
            on other rows or with other weights.
        epoch: the epoch, planned from its start; or its plan, taken as it is; None:
            epoch 0, or the epoch a loader stands in (``loader.epoch``).

    Returns:
        ``(spec, plan)``.

    Raises:
        TypeError: ``source`` is neither settings nor holds them; an ``epoch`` that is
            not an integer.
        ValueError: a negative ``epoch``.

    Example:
        >>> spec = PlanSpec(np.array([5, 2, 3]), batch_size=2, tbins=2)
        >>> planned(spec, 1)[1].epoch, planned(spec)[1].length
        (1, 3)
        >>> planned([5, 2, 3])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        TypeError: expected a plan's settings (a PlanSpec, ...) or a loader, got list
    """
    if isinstance(source, PlanSpec):
        spec, own, current = source, None, 0
    else:
        spec, own = getattr(source, "spec", None), getattr(source, "plan", None)
        if not isinstance(spec, PlanSpec) or not callable(own):
            raise TypeError(
                "expected a plan's settings (a PlanSpec, such as loader.spec) or a loader, "
                f"got {type(source).__name__}"
            )
        current = int(source.epoch)
    if isinstance(epoch, EpochPlan):
        return spec, epoch
    wanted = current if epoch is None else int(check_int(epoch, "epoch", 0))
    if own is not None and wanted == current:
        plan = own()
        if plan.epoch == wanted:
            return spec, plan
    return spec, plan_epoch(spec, wanted)
