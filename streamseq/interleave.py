"""Assign streams to rows: the cheap, deterministic plan that everything else follows."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._checks import check_int
from ._tree import leaves, tree_map
from .plan.draws import MixSpec
from .plan.epoch import epoch_rows
from .plan.identities import tally_digest
from .plan.planner import plan_epoch
from .plan.rows import assign_rows
from .plan.spec import PlanSpec
from .read.handle import ProcessLocal
from .read.ref import (
    RowRefs,
    StreamRef,
    TableRefs,
    _collector_paused,
    as_refs,
    identities_of,
    indices_of,
    lengths_of,
)
from .read.transform import StepInfo, Transform


class _Cursor:
    """The position of a row in one process: which of its streams is open."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at = -1


def _one_a_stream(name: str, values: Any, streams: int, least: int | None = None) -> np.ndarray:
    """``values`` as ``int64``, one whole number (``>= least``) for each of ``streams``.

    Raises:
        ValueError: naming ``Row(name=...)``: another shape, a number that is not whole
            (``2.5``, NaN), one smaller than ``least``, or one past ``int64`` (never wrapped).

    Example:
        >>> _one_a_stream("lengths", [3, 4.0], 2).tolist()
        [3, 4]
    """
    array = np.asarray(values)
    if array.shape != (streams,):
        problem = f"one a stream: {streams} streams, got shape {array.shape}"
    elif array.size and array.dtype.kind not in "iuf":
        problem = f"whole numbers, got dtype {array.dtype}"
    else:
        bad = np.zeros(array.shape, bool)
        if array.dtype.kind == "f":  # (2.0**63 is past int64; -2.0**63 its least)
            bad |= ~((array == np.round(array)) & (array >= -(2.0**63)) & (array < 2.0**63))
        elif array.dtype.kind == "u":
            bad |= array > np.iinfo(np.int64).max
        if least is not None:
            bad |= array < least
        if not bad.any():
            return array.astype(np.int64)
        i = int(np.flatnonzero(bad)[0])
        at_least = "" if least is None else f" >= {least}"
        problem = f"whole numbers{at_least} within int64, got {name}[{i}] = {array[i]}"
    raise ValueError(f"Row({name}=...) takes {problem}")


def _flags(resumed: Sequence[bool], count: int) -> np.ndarray:
    """``Row(resumed=...)`` checked: one True or False (or 1 or 0) a stream.

    Example:
        >>> _flags([0, 1], 2).tolist()
        [False, True]
    """
    array = np.asarray(resumed)
    if array.shape != (count,):
        raise ValueError(
            f"Row(resumed=...) takes one flag a stream: {count} streams, "
            f"got flags of shape {array.shape}"
        )
    if array.dtype.kind == "b":
        return array
    bad = np.ones(count, bool)
    if array.dtype.kind in "iuf":
        bad = ~np.isin(array, (0, 1))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"Row(resumed=...) takes True or False a stream, got resumed[{i}] = {array[i]!r}"
        )
    return array.astype(bool)


class Row:
    """The lazy concatenation of the streams assigned to one row.

    Only the stream being read is kept open (per process), so a row never holds more
    than one file open.

    Args:
        refs: the streams of the row, in reading order.
        lengths: their lengths, when already known.
        stream_ids: their indices in the user's list, when already known (else each
            ref's ``index``).
        transform: applied to every slice read (see :func:`map_steps`).
        starts: where each stream of the row starts in its source (a segment of a longer
            stream, see ``segment_length``); steps are then counted in the source.
        carried: whether the row's first stream goes on from a row of a resumed state,
            whose recurrent state moves with it: its first step is then no reset.
        resumed: which streams of the row go on with a stream from a step other than 0
            (one flag a stream, or None): a segment other than a stream's first, or the
            rest of a stream begun before a resume. Packed (``pad="pack"``), each starts
            a chunk, where ``reset`` marks it (no ``step == 0`` does).

    Raises:
        ValueError: ``resumed`` is not one flag a stream; ``lengths``, ``starts`` (both
            non-negative) or ``stream_ids`` are not one whole number of int64 a stream (a length
            past the end of its stream is found when it is read: an error, never
            other steps).

    Example:
        >>> import numpy as np
        >>> row = Row(as_refs([np.arange(3), np.arange(10, 12)]))
        >>> len(row), row[2:4].tolist(), row.stream_ids.tolist()
        (5, [2, 10], [0, 1])
    """

    def __init__(
        self,
        refs: Sequence[StreamRef],
        lengths: Sequence[int] | None = None,
        stream_ids: Sequence[int] | None = None,
        transform: Transform | None = None,
        starts: Sequence[int] | None = None,
        carried: bool = False,
        resumed: Sequence[bool] | None = None,
    ):
        # (a row of a table: its streams' indices, a reference made when it is read)
        self.refs = refs if isinstance(refs, RowRefs) else list(refs)
        self.carried = carried
        self.resumed = None if resumed is None else _flags(resumed, len(self.refs))
        self.transform = transform
        if lengths is None:
            lengths = [len(r) for r in self.refs]
        self.lengths = _one_a_stream("lengths", lengths, len(self.refs), least=0)
        if stream_ids is None:
            stream_ids = [r.index for r in self.refs]
        self.stream_ids = _one_a_stream("stream_ids", stream_ids, len(self.refs))
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)
        self.starts = (  # where each stream of the row starts in its source
            np.zeros(len(self.refs), np.int64)
            if starts is None
            else _one_a_stream("starts", starts, len(self.refs), least=0)
        )
        self._cursor: ProcessLocal[_Cursor] = ProcessLocal(_Cursor)

    def __repr__(self) -> str:
        return f"Row(streams={self.stream_ids.tolist()}, steps={len(self)})"

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def file_offset(self) -> int:
        """What names a row given as a stream across runs, with its type: its streams.

        A non-negative int64 code of its streams' identities (files, where each starts
        in its file), lengths and starts, so a state of rows of some streams is refused
        by rows of others of the same lengths.
        """
        ids = identities_of(self.refs)
        h = ids.sha256()
        h.update(b"\0" + (ids.offsets_digest() or "").encode())
        h.update(np.ascontiguousarray(self.lengths, "<i8").tobytes())
        h.update(np.ascontiguousarray(self.starts, "<i8").tobytes())
        return int.from_bytes(h.digest()[:8], "little") >> 1

    @property
    def read_options(self) -> str:
        """How a row given as a stream is read: how its streams are (``""`` when unnamed).

        ``rows(reader)`` when its streams share one reader, else ``rows(digest)``, a
        digest of every stream's reader in order
        (:meth:`~streamseq.plan.identities.Identities.readers_digest`), so a state of
        rows of some files is refused by rows of the same files read another way.
        """
        readers = identities_of(self.refs).readers
        if readers is None or not any(readers.names):
            return ""
        used = [0] if readers.codes is None else np.unique(readers.codes).tolist()
        if len(used) == 1:
            one = readers.names[used[0]]
            return f"rows({one})" if one else ""
        return f"rows({tally_digest(readers)[:16]})"

    def switch(self, j: int) -> StreamRef:
        """Make the row's ``j``-th stream the current one, closing the one before."""
        cursor = self._cursor.get()
        if cursor.at != j:
            if cursor.at >= 0 and self.refs[cursor.at] is not self.refs[j]:
                self.refs[cursor.at].close()  # (the next segment of a source keeps it open)
            cursor.at = j
        return self.refs[j]

    def read(self, j: int, start: int, stop: int) -> Any:
        """Read steps ``start:stop`` of the row's ``j``-th stream, closing the one before.

        The row's transform, if any, is applied to what was read. For a segment, the
        steps count from the segment's start.
        """
        ref = self.switch(j)
        shift = int(self.starts[j])
        start, stop = start + shift, stop + shift
        data = ref.read(start, stop)
        if self.transform is None:
            return data
        return self.transform(ref, int(self.stream_ids[j]), data, start, stop)

    def read_part_into(self, j: int, start: int, stop: int, out: Any) -> bool:
        """Write steps ``start:stop`` of the row's ``j``-th stream into ``out``, if it can.

        (Not named ``read_into``: a row given as a stream is read by slicing, and a
        stream's ``read_into(start, stop, out)`` is of the whole stream.)

        Never with a transform (it returns the steps it makes); False when the stream
        writes nothing for it (see :meth:`StreamRef.read_into`): read with :meth:`read`.
        """
        if self.transform is not None:
            return False
        ref = self.switch(j)
        shift = int(self.starts[j])
        return ref.read_into(start + shift, stop + shift, out)

    def release(self) -> None:
        """Close the stream currently open, if any."""
        cursor = self._cursor.peek()
        if cursor is not None and cursor.at >= 0:
            self.refs[cursor.at].close()
            cursor.at = -1

    def pieces(self, start: int, stop: int) -> list[tuple[int, int, int]]:
        """Steps ``start:stop`` of the row as ``(stream j, its first step, steps)``.

        Empty streams give no piece.

        Example:
            >>> row = Row(as_refs([np.arange(5), np.arange(0), np.arange(4)]))
            >>> row.pieces(3, 7)
            [(0, 3, 2), (2, 0, 2)]
        """
        out = []
        j = int(np.searchsorted(self.offsets, start, side="right")) - 1
        while start < stop:
            while self.offsets[j + 1] <= start:  # (empty streams)
                j += 1
            end = min(stop, int(self.offsets[j + 1]))
            out.append((j, start - int(self.offsets[j]), end - start))
            start, j = end, j + 1
        return out

    def __getitem__(self, key: int | slice) -> Any:
        n = len(self)
        if isinstance(key, slice):
            start, stop, stride = key.indices(n)
            if stride != 1:
                raise ValueError("Row slices must have step 1")
            parts = [self.read(j, a, a + n) for j, a, n in self.pieces(start, stop)]
            if not parts:
                raise IndexError("empty slice of a Row")
            if len(parts) == 1:
                return parts[0]
            return tree_map(lambda *xs: np.concatenate(xs), *parts)
        k = key + n if key < 0 else key
        if not 0 <= k < n:
            raise IndexError(f"step {key} out of range for a row of {n} steps")
        item = self[k : k + 1]
        return tree_map(lambda a: a[0], item) if leaves(item) else item


def interleave_streams(
    streams: Sequence[Any],
    num_rows: int,
    *,
    lengths: Sequence[int] | None = None,
    shuffle: bool = False,
    seed: int = 0,
    epoch: int = 0,
    transform: Callable[[Any, StepInfo], Any] | None = None,
    tbins: int | None = None,
    pack: bool = False,
) -> list[Row]:
    """Distribute streams over ``num_rows`` rows, each row a lazy concatenation of streams.

    Streams are taken in order (a permutation drawn from ``(seed, epoch)`` when
    ``shuffle``) and each goes to the row with the fewest steps so far (lowest row index on
    ties), so the first ``num_rows`` streams start the rows in order and the longest row
    exceeds the shortest by at most the longest stream. Empty streams are skipped.

    A :func:`~streamseq.mix` with weights is read as :class:`~streamseq.StreamLoader` reads
    it: the streams of every group drawn for ``epoch`` by its weights from ``(seed,
    epoch)`` (a stream may be read several times, a group of weight 0 not at all), then
    dealt out to rows; with ``tbins`` (and ``pack``), the rows are those of a loader of
    ``num_rows`` rows (``batch_size * world_size``) with these settings, stream for stream.

    Args:
        streams: streams or zero-argument openers, or a table of streams
            (:class:`~streamseq.StreamTable`: its lengths one array, nothing made per
            stream to plan).
        num_rows: number of rows (the batch size).
        lengths: declared lengths, sparing the probe of openers (each opener is otherwise
            opened once, in this process, to measure it).
        shuffle: draw a new stream order for every epoch.
        seed: seed of the shuffle.
        epoch: epoch of the shuffle.
        transform: ``fn(steps, info)`` applied to every slice read from the rows (see
            :func:`map_steps`), with this seed and epoch.
        tbins: plan as :class:`StreamLoader` does for chunks of ``tbins`` steps: rows
            balanced once (longest first), their order and that of the streams inside
            each shuffled every epoch, so every epoch has the same number of chunks.
            Without it, the streams are dealt out in order as described above.
        pack: with ``tbins``, the rows are packed (``pad="pack"``): balance steps.

    Returns:
        ``num_rows`` :class:`Row` objects (some empty when there are fewer streams).

    Raises:
        ValueError: no streams, ``num_rows < 1``, or bad ``lengths``.

    Example:
        >>> rows = interleave_streams([[0] * 5, [1] * 2, [2] * 2, [3] * 4], 2)
        >>> [r.stream_ids.tolist() for r in rows]
        [[0], [1, 2, 3]]
        >>> rows = interleave_streams([[0] * 5, [1] * 2, [2] * 2, [3] * 4], 2, tbins=1)
        >>> [r.stream_ids.tolist() for r in rows]
        [[0, 2], [1, 3]]
    """
    if num_rows < 1:
        raise ValueError(f"num_rows must be >= 1, got {num_rows}")
    refs = as_refs(streams, lengths)
    if lengths is not None:  # declared: no need to ask every stream
        sizes = np.asarray(lengths, dtype=np.int64)
    else:
        sizes = lengths_of(refs)
    mixture = getattr(streams, "spec", None)
    if isinstance(mixture, MixSpec) and mixture.weights is not None:
        return _mixed_rows(
            refs, sizes, mixture, num_rows, shuffle, seed, epoch, transform, tbins, pack
        )
    if tbins is None:
        assignment = assign_rows(sizes, num_rows, shuffle=shuffle, seed=seed, epoch=epoch)
    else:
        pad = "pack" if pack else "zeros"
        kw = dict(shuffle=shuffle, seed=seed, epoch=epoch, version=2)
        assignment, _ = epoch_rows(sizes, num_rows, check_int(tbins, "tbins", 1), pad, **kw)
    return make_rows(refs, sizes, assignment, transform, seed=seed, epoch=epoch)


def _mixed_rows(
    refs: list[StreamRef],
    sizes: np.ndarray,
    mixture: MixSpec,
    num_rows: int,
    shuffle: bool,
    seed: int,
    epoch: int,
    transform: Callable[[Any, StepInfo], Any] | None,
    tbins: int | None,
    pack: bool,
) -> list[Row]:
    """The rows of a weighted mixture's ``epoch``: the loader's plan, or its draw in order."""
    pad = "pack" if pack and tbins is not None else "zeros"
    spec = PlanSpec(
        sizes,
        num_rows,
        1 if tbins is None else check_int(tbins, "tbins", 1),
        pad,
        shuffle=shuffle,
        seed=seed,
        mixture=mixture,
    )
    epoch = check_int(epoch, "epoch", 0)
    if tbins is not None:
        plan = plan_epoch(spec, epoch)
        units = plan.units_of(spec)
        return make_rows(
            refs, plan.pieces[2], plan.assignment, transform, seed=seed, epoch=epoch, units=units
        )
    draw = spec.draws.of(epoch)  # type: ignore[union-attr]
    drawn = np.arange(len(sizes), dtype=np.int64) if draw is None else draw
    assignment = assign_rows(sizes[drawn], num_rows, shuffle=shuffle, seed=seed, epoch=epoch)
    units = (drawn, np.zeros(len(drawn), np.int64))
    return make_rows(
        refs, sizes[drawn], assignment, transform, seed=seed, epoch=epoch, units=units
    )


def make_rows(
    refs: list[StreamRef],
    sizes: np.ndarray,
    assignment: Sequence[np.ndarray],
    transform: Callable[[Any, StepInfo], Any] | None = None,
    *,
    seed: int = 0,
    epoch: int = 0,
    units: tuple[np.ndarray, np.ndarray] | None = None,
    carried: Sequence[int] | None = None,
    unread: bool = False,
    resumed: Sequence[np.ndarray] | None = None,
) -> list[Row]:
    """The rows of a plan: row r reads ``refs[assignment[r]]``, transformed if asked.

    With ``units`` (the source and start of every segment, from
    :func:`streamseq.plan.segments.segments`), the assignment and ``sizes`` index
    segments, and row r reads segment ``m`` from ``refs[source[m]]`` at ``start[m]``.
    ``carried[r] >= 0`` marks a row whose first stream goes on from a resumed state's row
    (see :meth:`streamseq.plan.planner.EpochPlan.continued`); ``resumed[r]`` flags the
    streams of row r that go on with a stream from a step other than 0
    (:meth:`~streamseq.plan.planner.EpochPlan.resumed_of`: packed, each starts a chunk).
    ``unread`` rows are for their plan only (lengths, stream ids: a picture of the
    plan): no stream is referenced in them, and they cannot be read.

    Example:
        >>> refs = as_refs([np.arange(3), np.arange(2)])
        >>> [r.stream_ids.tolist() for r in make_rows(refs, np.array([3, 2]), [[1], [0]])]
        [[1], [0]]
    """
    ids = indices_of(refs)
    assignment = [np.asarray(m, dtype=np.int64) for m in assignment]
    if unread:
        refs = _Unread(len(refs))
    with _collector_paused():  # a row's references: many objects without cycles
        if units is not None:
            source, start = units
            rows = [
                Row(_pick(refs, source[m]), sizes[m], ids[source[m]], None, start[m])
                for m in assignment
            ]
        else:
            rows = [Row(_pick(refs, m), sizes[m], ids[m]) for m in assignment]
    for row, c in zip(rows, carried or (), strict=False):
        row.carried = c >= 0
    for row, flags in zip(rows, resumed or (), strict=False):
        row.resumed = np.asarray(flags, dtype=bool)
    if transform is not None:
        rows = [map_steps(r, transform, seed=seed, epoch=epoch) for r in rows]
    return rows


def map_steps(
    row: Row, fn: Callable[[Any, StepInfo], Any], *, seed: int = 0, epoch: int = 0
) -> Row:
    """Transform the steps of a row where they are read: ``fn(steps, info)``.

    ``fn`` receives each slice read from one stream of the row (an array, or a tuple or
    dict of arrays) and a :class:`StepInfo` (stream index, step range, epoch, seed and
    ``rng(*keys)``); it returns the steps to batch, with as many steps, possibly of
    another dtype and step shape. It runs in the process that reads (a worker), before
    the copy into shared memory. Randomness drawn from ``info.rng(...)`` is part of the
    plan: the batches stay identical for any number of workers and after resuming.
    Applied twice, the transforms compose (the first given runs first).

    Args:
        row: a row from :func:`interleave_streams`.
        fn: a picklable function (no lambda with spawned workers).
        seed: the seed given to ``info.rng``.
        epoch: the epoch given to it.

    Returns:
        A :class:`Row` reading the same streams, transformed.

    Raises:
        TypeError: ``fn`` is not callable, or ``seed`` or ``epoch`` not integers.
        StreamError: later, when a read is transformed: ``fn`` raised, or returned
            another number of steps (it names the stream and the step range).

    Example:
        >>> import numpy as np
        >>> def shift(x, info):
        ...     return x + info.rng().integers(100, 200)
        >>> (row,) = interleave_streams([np.zeros(4, int), np.zeros(2, int)], 1)
        >>> out = map_steps(row, shift)[0:6].tolist()
        >>> out[0] == out[3] != out[4] == out[5]
        True
    """
    transform = Transform(fn, seed, epoch, row.transform)
    resumed = getattr(row, "resumed", None)
    return Row(row.refs, row.lengths, row.stream_ids, transform, row.starts, row.carried, resumed)


class _Unread:
    """In place of the references of rows that are never read: one that reads nothing."""

    def __init__(self, count: int):
        self.count = count

    def __len__(self) -> int:
        return self.count


#: what an unread row holds in place of every stream: a stream with no step
_NOTHING = StreamRef(-1, np.zeros(0))


def _pick(items: Any, indices: np.ndarray) -> Sequence[Any]:
    """``[items[i] for i in indices]``, at C speed."""
    if len(indices) == 0:
        return []
    if isinstance(items, _Unread):
        return [_NOTHING] * len(indices)
    if isinstance(items, TableRefs):  # references made when the row is read
        return items.row(indices)
    if len(indices) == 1:
        return [items[int(indices[0])]]
    return list(operator.itemgetter(*indices.tolist())(items))
