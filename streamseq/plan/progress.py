"""Where every stream of an epoch stands, and the rest of the epoch planned from there.

An epoch's plan deals *pieces* out to rows: a piece is steps ``offset : offset + length``
of a unit (a stream, or a segment with ``segment_length``). A fresh epoch has one piece
per unit, whole. After ``k`` batches every unit is done, begun (its next step known) or
untouched: a :class:`Progress`, whose size is that of the units, not of the batches. The
rest of the epoch, on any number of rows, is then one piece per begun unit (from its
next step) followed by the untouched units in the epoch's order (:func:`rest_of_epoch`):
every step not yet delivered is delivered once, each unit in order.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .packing import placed_cap, row_spans

if TYPE_CHECKING:
    from .fields import SavedProgress

#: pieces marked done at a time (bounds the memory of their indices)
BLOCK = 1 << 20

#: ``(unit, offset, length)`` arrays: steps ``offset : offset + length`` of each unit
Pieces = tuple[np.ndarray, np.ndarray, np.ndarray]


def whole_units(lengths: np.ndarray) -> Pieces:
    """The pieces of a fresh epoch: every unit whole.

    Example:
        >>> [a.tolist() for a in whole_units(np.array([3, 0, 2]))]
        [[0, 1, 2], [0, 0, 0], [3, 0, 2]]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    # (zeros of np.zeros are pages the system gives on first write: none resident)
    return np.arange(len(lengths), dtype=np.int64), np.zeros(len(lengths), np.int64), lengths


@dataclass(frozen=True)
class Progress:
    """Where the units of an epoch stand after some batches.

    Attributes:
        done: per unit, whether every step of it was delivered (empty units are done).
        begun: the units begun and not finished.
        next: the next step of each (within the unit).
        row: the global row that was reading each, -1 for one not being read (its row
            moved on when the epoch was planned anew).
        draw: the unit of every occurrence of a mixture's epoch when it was drawn anew
            (its weights changed on resuming, see :func:`~streamseq.plan.reweigh.reweigh`);
            None: the epoch's own units. ``done`` and ``begun`` then index occurrences.
    """

    done: np.ndarray
    begun: np.ndarray
    next: np.ndarray
    row: np.ndarray
    draw: np.ndarray | None = None

    def to_state(self) -> dict[str, Any]:
        """A compact form for JSON or pickle (``done`` as base64 bits; plain ints elsewhere).

        The draw is not in it (the state saves it, see :func:`~streamseq.plan.state.make_state`).

        Example:
            >>> p = Progress(np.array([True, False, False]), np.array([1]), np.array([4]),
            ...              np.array([0]))
            >>> state = p.to_state()
            >>> state["done"], state["begun"], state["next"]
            ('gA==', [1], [4])
        """
        return {
            "units": len(self.done),
            "done": base64.b64encode(np.packbits(self.done).tobytes()).decode("ascii"),
            "begun": self.begun.tolist(),
            "next": self.next.tolist(),
            "row": self.row.tolist(),
        }

    @classmethod
    def from_state(
        cls, saved: SavedProgress, lengths: np.ndarray, draw: np.ndarray | None = None
    ) -> Progress:
        """A progress a state saved (:meth:`to_state`'s form, read), checked against ``lengths``.

        Args:
            saved: the form, read and checked on its own
                (:func:`~streamseq.plan.fields.read_progress`).
            lengths: steps of every unit.
            draw: the epoch's draw the form names (kept with it), or None.

        Raises:
            ValueError: the form does not fit ``lengths`` (names the field).

        Example:
            >>> from streamseq.plan.fields import read_progress
            >>> lengths = np.array([3, 5])
            >>> saved = read_progress({"units": 2, "done": "gA==", "begun": [1], "next": [4],
            ...                        "row": [0]})
            >>> Progress.from_state(saved, lengths).next.tolist()
            [4]
            >>> Progress.from_state(saved, np.array([3, 4]))
            Traceback (most recent call last):
            ...
            ValueError: state['progress']['next'][0]=4 is out of range [1, 3] (unit 1 has 4 steps)
        """
        lengths = np.asarray(lengths, dtype=np.int64)
        name = saved.name
        if saved.units != len(lengths):
            raise ValueError(
                f"{name}['units']: the state has {saved.units} streams or segments, "
                f"this loader {len(lengths)}"
            )
        begun, nxt = saved.begun, saved.next
        for i in np.flatnonzero(nxt >= lengths[begun]).tolist():
            unit, n = int(begun[i]), int(lengths[begun[i]])
            raise ValueError(
                f"{name}['next'][{i}]={nxt[i]} is out of range [1, {n - 1}] "
                f"(unit {unit} has {n} steps)"
            )
        return cls(saved.done | (lengths == 0), begun, nxt, saved.row, draw)


def progress_at(
    lengths: np.ndarray,
    pieces: Pieces,
    assignment: list[np.ndarray],
    tbins: int,
    pack: bool,
    batches: int,
    done_before: np.ndarray | None = None,
    cap: int | None = None,
    resumed_at_chunks: bool = True,
    starts_chunk: np.ndarray | None = None,
) -> Progress:
    """Where the units stand after ``batches`` batches of a plan.

    Args:
        lengths: steps of every unit.
        pieces: the plan's pieces.
        assignment: piece indices of every global row, in order.
        tbins: steps per batch.
        pack: the rows are packed (``pad="pack"``); else each piece fills whole chunks.
        batches: batches delivered.
        done_before: units done before this plan started (not among its pieces).
        cap: with ``pack``, the most streams a chunk may pack.
        resumed_at_chunks: with ``pack``, a piece that goes on with a stream begun before
            (``offset > 0``) starts a chunk (:mod:`~streamseq.plan.packing`); False: it is
            packed as any (plans of version 2).
        starts_chunk: with ``pack``, the pieces that start a chunk (one flag a piece,
            :func:`~streamseq.plan.planner.plan_resumed`), instead of those
            ``resumed_at_chunks`` says.

    Example:
        >>> lengths = np.array([5, 2, 3])
        >>> p = progress_at(lengths, whole_units(lengths), [np.array([0]), np.array([1, 2])],
        ...                 2, False, 2)
        >>> p.done.tolist(), p.begun.tolist(), p.next.tolist(), p.row.tolist()
        ([False, True, False], [0, 2], [4, 2], [0, 1])
    """
    unit, offset, length = pieces
    # (every temporary over all pieces is made in place or let go once used: a state is
    # saved at any time of a run, next to the plan of every stream)
    sizes = np.array([len(a) for a in assignment], dtype=np.int64)
    flat = np.concatenate(assignment) if len(assignment) else np.zeros(0, np.int64)
    flat = flat.astype(np.int64, copy=False)
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    budget = batches * tbins if pack else batches
    resumed = None  # (the pieces that start a chunk: see packing)
    if pack and starts_chunk is not None:
        resumed = np.asarray(starts_chunk, bool)[flat]
    elif pack and resumed_at_chunks:
        resumed = offset[flat] > 0  # (begun before)
    if pack and (cap is not None or (resumed is not None and resumed.any())):
        start, end = row_spans(length[flat], sizes, tbins, placed_cap(cap, tbins), resumed)
        finished = end <= budget
        del end
        begun = start < budget
        begun &= ~finished
        begun_start = start[begun]
        del start
    else:  # row by row: no array of every piece's start or end at once
        finished = np.empty(len(flat), bool)
        begun = np.empty(len(flat), bool)
        starts = [np.zeros(0, np.int64)]
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):  # (rows)
            cost = length[flat[a:b]]
            if not pack:
                cost = -(-cost // tbins)
            end = np.cumsum(cost)
            start = end - cost
            np.less_equal(end, budget, out=finished[a:b])
            np.less(start, budget, out=begun[a:b])
            begun[a:b] &= ~finished[a:b]
            starts.append(start[begun[a:b]])
        begun_start = np.concatenate(starts)
    waiting = ~finished
    waiting &= ~begun
    waiting &= (offset > 0)[flat]  # begun earlier, not resumed yet
    done = np.asarray(lengths) == 0
    if done_before is not None:
        done = done | done_before
    for a in range(0, len(flat), BLOCK):  # (blocks of pieces, not pieces)
        part = flat[a : a + BLOCK]
        done[unit[part[finished[a : a + BLOCK]]]] = True
    del finished
    at = np.flatnonzero(begun)
    into = (budget - begun_start) * (1 if pack else tbins)
    rows = np.searchsorted(bounds, at, side="right") - 1  # the row of each begun piece
    return Progress(
        done,
        np.concatenate([unit[flat[at]], unit[flat[waiting]]]),
        np.concatenate([offset[flat[at]] + into, offset[flat[waiting]]]),
        np.concatenate([rows, np.full(int(waiting.sum()), -1, np.int64)]),
    )


def rest_of_epoch(progress: Progress, lengths: np.ndarray, order: np.ndarray) -> Pieces:
    """The pieces left: begun units from their next step (by row), then untouched ones.

    ``order`` is the epoch's order of the units (:func:`~streamseq.plan.rows.stream_order`).
    Dealt out to rows in this order, begun unit ``i`` (by its old row) is the first piece
    of new row ``i`` when there are at least as many rows as begun units.

    Example:
        >>> lengths = np.array([5, 2, 3, 4])
        >>> p = Progress(np.array([False, True, False, False]), np.array([2, 0]),
        ...              np.array([1, 4]), np.array([1, 0]))
        >>> [a.tolist() for a in rest_of_epoch(p, lengths, np.arange(4))]
        [[0, 2, 3], [4, 1, 0], [1, 2, 4]]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    by_row = np.lexsort(
        (progress.begun, np.where(progress.row < 0, np.iinfo(np.int64).max, progress.row))
    )
    begun, nxt = progress.begun[by_row], progress.next[by_row]
    waiting = ~progress.done
    waiting[progress.begun] = False
    order = np.asarray(order, dtype=np.int64)
    untouched = order[waiting[order]]
    unit = np.concatenate([begun, untouched])
    offset = np.concatenate([nxt, np.zeros(len(untouched), np.int64)])
    return unit, offset, lengths[unit] - offset
