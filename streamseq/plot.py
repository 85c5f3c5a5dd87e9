"""Pictures of an epoch's plan: which stream every global row reads in every batch.

Three steps, each usable alone:

- :func:`plan_cells`: what every cell (global row, batch) of an epoch holds, from the
  plan alone (no data is read), with the read positions the batch writer uses
  (:class:`~streamseq.gather.positions.Positions`), so the picture and the batches agree;
- :func:`plan_image`: an RGB image of the cells, at the resolution of steps, batches or
  spans of batches, whichever fits;
- :func:`plot_plan`: the image drawn with matplotlib, with resets, ranks and segment
  boundaries marked (``pip install streamseq[plot]``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .gather.chunkmap import ChunkMap
from .gather.meta import write_resets
from .gather.positions import Positions
from .interleave import Row, make_rows
from .plan.packing import placed_cap, row_spans
from .plan.planner import EpochPlan, planned
from .plan.spec import PlanSpec
from .read.ref import as_refs
from .stream_table import StreamTable
from .tbin import tbin

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: matplotlib's ``tab20`` without its greys, its 9 dark shades first, then the light shade
#: of each: stream ``s`` is ``PALETTE[s % len(PALETTE)]``; in a mixture, group ``g`` is
#: ``PALETTE[g % 9]`` and ``PALETTE[g % 9 + 9]`` (its streams alternate the two shades)
PALETTE = np.array(
    [
        *[(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189)],
        *[(140, 86, 75), (227, 119, 194), (188, 189, 34), (23, 190, 207)],
        *[(174, 199, 232), (255, 187, 120), (152, 223, 138), (255, 152, 150), (197, 176, 213)],
        *[(196, 156, 148), (247, 182, 210), (219, 219, 141), (158, 218, 229)],
    ],
    dtype=np.uint8,
)
#: the colour of padding
PADDING = np.array([200, 200, 200], dtype=np.uint8)
_BLOCK = 1024  # batches whose positions are computed at once


@dataclass(frozen=True, eq=False)
class PlanCells:
    """What every cell (global row, batch) of an epoch holds: arrays ``[rows, batches]``.

    Rows are global: those of every rank, rank ``k`` holding rows ``k * batch_size`` to
    ``(k + 1) * batch_size - 1``.

    Attributes:
        epoch: the epoch.
        pad: the pad mode.
        tbins: steps per chunk.
        batch_size: rows per rank.
        world_size: ranks.
        segment_length: the segment length of the plan, or None.
        stream: the stream with the most steps in the cell (-1: padding only).
        valid: valid steps of the cell (``batch.valid[r].sum()``).
        reset: ``batch.reset[r]`` of every cell.
        cut: the cells whose reset starts a stream past its step 0 (a later segment with
            ``segment_length``, or a stream resumed on other rows).
        runs: with ``pad="pack"``, ``(row, first step, steps, stream)`` of every stream of
            every row, steps counted along the row; None otherwise.
        groups: the names of the groups of a :func:`~streamseq.mix`, or None.
        stream_group: the group of every stream (an index into ``groups``), or None.
        repeated: for every stream, whether the epoch reads some of its steps more than
            once (a mixture's group read again for its weight), or None.
    """

    epoch: int
    pad: str
    tbins: int
    batch_size: int
    world_size: int
    segment_length: int | None
    stream: np.ndarray
    valid: np.ndarray
    reset: np.ndarray
    cut: np.ndarray
    runs: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
    groups: tuple[str, ...] | None = None
    stream_group: np.ndarray | None = None
    repeated: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, batches)``."""
        return self.stream.shape

    @property
    def padding(self) -> float:
        """The share of the epoch's steps that are padding."""
        rows, batches = self.shape
        total = rows * batches * self.tbins
        return 1.0 - float(self.valid.sum()) / total if total else 0.0

    def steps(self, first: int = 0, stop: int | None = None) -> np.ndarray:
        """``batch.stream`` of batches ``first:stop``, concatenated along the steps.

        One number per step: for a part of a large plan, give ``first`` and ``stop``.

        Returns:
            An array ``[rows, (stop - first) * tbins]``: the stream of every step, -1 on
            padding.
        """
        stop = self.shape[1] if stop is None else stop
        t = self.tbins
        if self.runs is None:  # a cell's valid steps come first, from one stream
            ramp = np.arange(t)
            keep = ramp < self.valid[:, first:stop, None]
            return np.where(keep, self.stream[:, first:stop, None], -1).reshape(len(keep), -1)
        return _run_steps(self.runs, self.shape, t, first, stop)


def _run_steps(
    runs: tuple[np.ndarray, ...], shape: tuple[int, int], t: int, first: int, stop: int
) -> np.ndarray:
    """The stream of every step of batches ``first:stop`` of packed ``runs``."""
    rows, batches = shape
    row, start, length, ids = runs
    span = batches * t
    key = row * span + start  # runs along all rows, in order
    x = np.arange(first * t, stop * t, dtype=np.int64)
    at = (np.arange(rows, dtype=np.int64)[:, None] * span + x).reshape(-1)
    j = np.searchsorted(key, at, side="right") - 1
    jc = np.maximum(j, 0)
    inside = (j >= 0) & (at < key[jc] + length[jc])
    return np.where(inside, ids[jc], -1).reshape(rows, len(x))


def plan_of(spec: Any, epoch: int | EpochPlan | None = None) -> tuple[PlanSpec, EpochPlan]:
    """The settings and the plan of ``epoch`` (see :func:`~streamseq.plan.planner.planned`).

    ``spec``: a :class:`~streamseq.plan.spec.PlanSpec`, or a loader. With a loader and
    ``epoch`` None, ``loader.epoch``, the epoch its next pass reads: after training, that
    is the epoch after the last one trained (give ``epoch`` to see another); during a
    pass, the epoch of that pass. The loader's own plan where it stands
    (:meth:`StreamLoader.plan`) is used when it is of that epoch: it may be the rest of
    an epoch resumed on other rows; any other epoch is planned from its start.

    Raises:
        ValueError: a negative ``epoch``.
        TypeError: an ``epoch`` that is not an integer, a ``spec`` that is neither
            settings nor a loader.
    """
    return planned(spec, epoch)


def global_rows(spec: PlanSpec, plan: EpochPlan) -> list[Row]:
    """The rows of every rank in ``plan``, as a loader makes them (nothing is read).

    The streams are known by their lengths alone (``spec.lengths``): a row's cells need
    no more.
    """
    carried, resumed = [], []
    for rank in range(spec.world_size):
        carried += plan.continued(spec.replace(rank=rank))
        resumed += plan.resumed_of(spec.replace(rank=rank)) or []
    return make_rows(
        as_refs(StreamTable(range, spec.lengths)),  # (no object per stream)
        plan.pieces[2],
        plan.assignment,
        units=plan.units_of(spec),
        carried=carried,
        unread=True,  # (a picture of the plan: no stream is referenced)
        resumed=resumed or None,  # (packed, the pieces that start a chunk)
    )


def plan_cells(spec: Any, epoch: int | EpochPlan | None = None) -> PlanCells:
    """What every cell (global row, batch) of an epoch holds, from its plan alone.

    Args:
        spec: the plan's settings (a :class:`~streamseq.plan.spec.PlanSpec`, such as
            ``loader.spec``), or a loader; no data is read.
        epoch: the epoch, or its :class:`~streamseq.plan.planner.EpochPlan`; None for
            epoch 0, or a loader's ``loader.epoch``, the epoch its next pass reads (see
            :func:`plan_of`).

    Returns:
        The cells of every global row (all ranks) and every batch of the epoch.

    Example:
        >>> import numpy as np
        >>> from streamseq import StreamLoader
        >>> loader = StreamLoader([np.zeros(5), np.zeros(3), np.zeros(4)], 2, 2)
        >>> cells = plan_cells(loader)
        >>> cells.stream.tolist(), cells.valid.tolist()
        ([[0, 0, 0, -1], [1, 1, 2, 2]], [[2, 2, 1, 0], [2, 1, 2, 2]])
        >>> cells.reset.astype(int).tolist()
        [[1, 0, 0, 0], [1, 0, 1, 0]]
        >>> cells.steps(2, 4).tolist()  # batch.stream of batches 2 and 3
        [[0, -1, -1, -1], [2, 2, 2, 2]]
        >>> plan_cells(loader.spec, loader.plan()).stream.tolist()  # the same, from the plan
        [[0, 0, 0, -1], [1, 1, 2, 2]]
    """
    spec, plan = plan_of(spec, epoch)
    rows = global_rows(spec, plan)
    if spec.pad == "pack":
        arrays = _packed_cells(rows, plan.length, spec.tbins, spec.max_streams_per_chunk)
    else:
        arrays = (*_chunk_cells(rows, plan.length, spec.tbins, spec.pad), None)
    mixture = spec.mixture
    streams = np.arange(len(spec.lengths), dtype=np.int64)
    return PlanCells(
        plan.epoch,
        spec.pad,
        spec.tbins,
        spec.batch_size,
        spec.world_size,
        spec.segment_length,
        *arrays,
        groups=None if mixture is None else tuple(mixture.names),
        stream_group=None if mixture is None else mixture.group_of(streams),
        repeated=_repeated(rows, np.asarray(spec.lengths, dtype=np.int64)),
    )


def _repeated(rows: list[Row], lengths: np.ndarray) -> np.ndarray:
    """Whether the rows read more steps of each stream than it has: some read twice."""
    ids = _cat([r.stream_ids for r in rows])
    steps = _cat([r.lengths for r in rows])
    read = np.bincount(ids, weights=steps, minlength=len(lengths))
    return read > lengths


def _chunk_cells(rows: list[Row], batches: int, t: int, pad: str) -> tuple[np.ndarray, ...]:
    """``(stream, valid, reset, cut)`` of rows cut into chunks, from the writer's positions."""
    chunks = ChunkMap([tbin(r, t) for r in rows], pad, t)
    shape = (len(rows), batches)
    stream, valid = np.empty(shape, np.int64), np.empty(shape, np.int64)
    reset, cut = np.empty(shape, bool), np.empty(shape, bool)
    for first in range(0, batches, _BLOCK):
        size = min(_BLOCK, batches - first)
        at = Positions(chunks, first, size)
        stream[:, first : first + size] = at.id_rows.T
        valid[:, first : first + size] = at.count.T
        cut[:, first : first + size] = (at.source_start > 0).T
        for k in range(size):
            write_resets(reset[:, first + k], at, k)
    cut &= reset
    return stream, valid, reset, cut


def _packed_cells(
    rows: list[Row], batches: int, t: int, cap: int | None = None
) -> tuple[np.ndarray, ...]:
    """``(stream, valid, reset, cut, runs)`` of packed rows: streams follow one another.

    Each starts where the loader's chunks place it (:func:`~streamseq.tbin.tbin`): right
    after the one before, or at the next chunk after ``cap`` streams or where it goes on
    with a stream from a step other than 0 (``Row.resumed``).
    """
    shape = (len(rows), batches)
    sizes = np.array([len(r.lengths) for r in rows], dtype=np.int64)
    row = np.repeat(np.arange(len(rows), dtype=np.int64), sizes)
    j = np.concatenate([np.arange(n, dtype=np.int64) for n in sizes] + [np.zeros(0, np.int64)])
    flat = _cat([r.lengths for r in rows])
    flags = [getattr(r, "resumed", None) for r in rows]
    if cap is not None or any(f is not None and f.any() for f in flags):
        fresh = np.concatenate(
            [
                np.zeros(n, bool) if f is None else f
                for n, f in zip(sizes.tolist(), flags, strict=True)
            ]
            + [np.zeros(0, bool)]
        )
        start = row_spans(flat, sizes, t, placed_cap(cap, t), fresh)[0]
        valid = _valid_cells(row, start, flat, shape, t)  # (padding inside rows too)
    else:
        start = _cat([r.offsets[:-1] for r in rows])
        ends = np.array([len(r) for r in rows], dtype=np.int64)
        valid = np.clip(ends[:, None] - np.arange(batches, dtype=np.int64) * t, 0, t)
    length = _cat([r.lengths for r in rows])
    ids = _cat([r.stream_ids for r in rows])
    shift = _cat([r.starts for r in rows])  # where each starts in its source
    carried = np.array([r.carried for r in rows], dtype=bool)[row] & (j == 0)
    keep = length > 0  # (an empty stream gives no step)
    row, j, start, length, ids, shift, carried = (
        a[keep] for a in (row, j, start, length, ids, shift, carried)
    )
    reset, cut = np.zeros(shape, bool), np.zeros(shape, bool)
    starts_chunk = (start % t == 0) & ~carried  # a chunk starts with a stream's first step
    reset[row[starts_chunk], start[starts_chunk] // t] = True
    later = starts_chunk & (shift > 0)
    cut[row[later], start[later] // t] = True
    stream = _majority(row, start, length, ids, shape, t)
    return stream, valid, reset, cut, (row, start, length, ids)


def _valid_cells(
    row: np.ndarray, start: np.ndarray, length: np.ndarray, shape: tuple[int, int], t: int
) -> np.ndarray:
    """Valid steps of every cell of rows whose pieces start at ``start`` (in steps).

    Example:
        >>> _valid_cells(np.array([0, 0]), np.array([1, 4]), np.array([2, 5]), (1, 3), 4)
        array([[2, 4, 1]])
    """
    rows, batches = shape
    keep = length > 0
    row, start, length = row[keep], start[keep], length[keep]
    end = start + length
    a, b = start // t, (end - 1) // t  # the first and last cells of each piece
    out = np.zeros((rows, batches + 1), np.int64)
    full = np.zeros((rows, batches + 1), np.int64)  # (cells between a and b: t each)
    one = a == b
    np.add.at(out, (row[one], a[one]), length[one])
    many = ~one
    np.add.at(out, (row[many], a[many]), (a[many] + 1) * t - start[many])
    np.add.at(out, (row[many], b[many]), end[many] - b[many] * t)
    np.add.at(full, (row[many], a[many] + 1), t)
    np.add.at(full, (row[many], b[many]), -t)
    return (out + np.cumsum(full, axis=1))[:, :batches]


def _cat(arrays: list[np.ndarray]) -> np.ndarray:
    """Concatenate int64 arrays (none: an empty one)."""
    return np.concatenate([np.asarray(a, np.int64) for a in arrays] + [np.zeros(0, np.int64)])


def _majority(
    row: np.ndarray,
    start: np.ndarray,
    length: np.ndarray,
    ids: np.ndarray,
    shape: tuple[int, int],
    t: int,
) -> np.ndarray:
    """The stream with the most steps in every cell of packed runs (-1: none).

    A cell that several runs share holds the end of one and the start of others, all
    listed as a run's first or last cell; a cell inside a run holds that run alone.
    """
    rows, batches = shape
    stream = np.full(rows * batches, -1, dtype=np.int64)
    if not len(row):
        return stream.reshape(shape)
    end = start + length
    head, tail = start // t, (end - 1) // t
    span = tail - head + 1
    cell = np.repeat(row * batches + head, span) + _ramps(span)
    stream[cell] = np.repeat(ids, span)  # inside cells: the run alone
    first = np.minimum(end, (head + 1) * t) - start  # steps in the run's first cell
    last = end - tail * t  # steps in its last cell
    edge = np.concatenate([row * batches + head, (row * batches + tail)[tail > head]])
    steps = np.concatenate([first, last[tail > head]])
    who = np.concatenate([ids, ids[tail > head]])
    order = np.concatenate([np.arange(len(ids)), np.arange(len(ids))[tail > head]])
    sort = np.lexsort((order, -steps, edge))  # most steps first, then the earlier run
    edge, who = edge[sort], who[sort]
    best = np.ones(len(edge), dtype=bool)
    best[1:] = edge[1:] != edge[:-1]
    stream[edge[best]] = who[best]
    return stream.reshape(shape)


def _ramps(counts: np.ndarray) -> np.ndarray:
    """``0, 1, ..., n - 1`` for each ``n`` of ``counts``, concatenated.

    Example:
        >>> _ramps(np.array([3, 1, 2])).tolist()
        [0, 1, 2, 0, 0, 1]
    """
    total = int(counts.sum())
    return np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)


@dataclass(frozen=True, eq=False)
class PlanImage:
    """An RGB picture of an epoch's cells: a pixel per step, per batch or per span of batches.

    Attributes:
        rgb: ``[rows, columns, 3]`` ``uint8``: the colour of each stream
            (:data:`PALETTE`; of its group in a mixture), shaded towards
            :data:`PADDING` by the share of padding.
        per_column: batches per column: ``1 / tbins`` at the resolution of steps, else a
            whole number.
        stream: ``[rows, columns]``: the stream each pixel shows (-1: padding).
    """

    rgb: np.ndarray
    per_column: float
    stream: np.ndarray | None = None

    @property
    def extent(self) -> tuple[float, float, float, float]:
        """``(left, right, bottom, top)`` in batches and rows, for ``imshow``."""
        rows, columns = self.rgb.shape[:2]
        return -0.5, columns * self.per_column - 0.5, rows - 0.5, -0.5


def plan_image(
    cells: PlanCells, max_columns: int = 2000, palette: np.ndarray = PALETTE
) -> PlanImage:
    """Colour ``cells``: a column per step when they fit in ``max_columns``, else fewer.

    A column holds one step if ``batches * tbins <= max_columns``, else one batch, or a
    span of batches when there are more than ``max_columns``: its colour is then that
    of the stream with the most steps in it, shaded grey by its share of padding.

    Args:
        cells: from :func:`plan_cells`.
        max_columns: the most columns of the image.
        palette: ``[n, 3]`` ``uint8`` colours; stream ``s`` gets ``palette[s % n]``; in
            a mixture (``cells.groups``) group ``g`` gets ``palette[g % (n // 2)]`` and
            the light shade ``palette[g % (n // 2) + n // 2]``, alternately along the
            streams of the group.

    Returns:
        The image.
    """
    rows, batches = cells.shape
    t = cells.tbins
    if batches * t <= max_columns:
        stream = cells.steps()
        rgb = _colour(_shades(cells, stream, palette), (stream < 0).astype(float), palette)
        return PlanImage(rgb, 1 / t, stream)
    span = -(-batches // max(1, max_columns))
    stream, padding = _spanned(cells.stream, cells.valid, t, span)
    return PlanImage(_colour(_shades(cells, stream, palette), padding, palette), span, stream)


def _shades(cells: PlanCells, stream: np.ndarray, palette: np.ndarray) -> np.ndarray:
    """The palette index of every stream (-1 kept): its own, or its group's in a mixture.

    Example:
        >>> z = np.zeros((1, 1), np.int64)
        >>> cells = PlanCells(0, "zeros", 1, 1, 1, None, z, z, z > 0, z > 0,
        ...                   groups=("a", "b"), stream_group=np.array([0, 0, 1]))
        >>> _shades(cells, np.array([[0, 1, 2, -1]]), PALETTE).tolist()  # b: after a's 2
        [[0, 9, 1, -1]]
    """
    if cells.stream_group is None:
        return stream
    half = len(palette) // 2
    group = cells.stream_group
    first = np.searchsorted(group, group, side="left")  # each group's first stream
    s = np.maximum(stream, 0)
    index = group[s] % half + half * ((s - first[s]) % 2)
    return np.where(stream < 0, -1, index)


def _spanned(
    stream: np.ndarray, valid: np.ndarray, t: int, span: int
) -> tuple[np.ndarray, np.ndarray]:
    """The stream with the most valid steps, and the share of padding, of every column.

    A column spans ``span`` batches.
    """
    if span == 1:
        return stream, 1.0 - valid / t
    rows, batches = stream.shape
    columns = -(-batches // span)
    at = np.arange(rows)[:, None] * columns + np.arange(batches) // span  # each cell's column
    held = (valid > 0) & (stream >= 0)
    c, s, w = at[held], stream[held], valid[held]
    order = np.lexsort((s, c))
    c, s, w = c[order], s[order], w[order]
    new = np.ones(len(c), dtype=bool)
    new[1:] = (c[1:] != c[:-1]) | (s[1:] != s[:-1])
    bounds = np.flatnonzero(new)  # runs of one stream in one column
    c, s, w = c[bounds], s[bounds], np.add.reduceat(w, bounds) if len(w) else w
    order = np.lexsort((-w, c))
    c, s = c[order], s[order]
    best = np.ones(len(c), dtype=bool)
    best[1:] = c[1:] != c[:-1]
    out = np.full(rows * columns, -1, dtype=np.int64)
    out[c[best]] = s[best]
    steps = np.bincount(at.reshape(-1), valid.reshape(-1), minlength=rows * columns)
    cells = np.bincount(at.reshape(-1), minlength=rows * columns) * t
    return out.reshape(rows, columns), (1.0 - steps / cells).reshape(rows, columns)


def _colour(stream: np.ndarray, padding: np.ndarray, palette: np.ndarray) -> np.ndarray:
    """RGB of streams (-1: padding), shaded towards :data:`PADDING` by ``padding`` (0 to 1)."""
    base = palette[np.maximum(stream, 0) % len(palette)].astype(np.float32)
    share = np.where(stream < 0, 1.0, padding).astype(np.float32)[..., None]
    rgb = base * (1 - share) + PADDING.astype(np.float32) * share
    return np.rint(rgb).astype(np.uint8)


def plot_plan(
    spec: Any = None,
    epoch: int | EpochPlan | None = None,
    ax: Axes | None = None,
    *,
    max_columns: int | None = None,
    loader: Any = None,
) -> Figure:
    """Draw an epoch's plan: the stream every global row reads in every batch.

    Computed from the plan alone (no data is read): batches run along x, the global
    rows of every rank down y. Each stream has a colour (cycling by stream index),
    padding is grey, a black tick marks the batch where a row resets (``batch.reset``)
    and a white triangle a reset past a stream's step 0 (a segment start with
    ``segment_length``, or a stream resumed on other rows); lines separate the ranks.
    With few batches a column is a step (with ``pad="pack"``, a dotted line marks a
    stream starting inside a chunk); with more than ``max_columns`` a column spans several
    batches, coloured by the stream with the most steps in it and shaded grey by its
    share of padding.

    Args:
        spec: the plan's settings (a :class:`~streamseq.plan.spec.PlanSpec`, such as
            ``loader.spec``), or a loader.
        epoch: the epoch, or its :class:`~streamseq.plan.planner.EpochPlan`; None for
            epoch 0, or for a loader ``loader.epoch``: the epoch the loader's next pass
            reads (after training, the one after the last epoch trained), or that of
            the pass in progress.
        ax: the axes to draw in; None for a new figure (``matplotlib.pyplot``).
        max_columns: the most columns of the image; None for the width of the axes in
            pixels (a column per pixel at most: nothing is lost to resampling).
        loader: a loader, by the keyword of earlier versions (``plot_plan(loader=l)``):
            the same as giving it as ``spec``.

    Returns:
        The figure.

    Raises:
        ImportError: matplotlib is not installed (``pip install streamseq[plot]``).
        TypeError: both ``spec`` and ``loader`` given, or neither.

    Example:
        >>> import numpy as np
        >>> from streamseq import StreamLoader
        >>> loader = StreamLoader([np.zeros(n) for n in (9, 3, 5, 2)], 2, 2)
        >>> fig = plot_plan(loader)
        >>> fig.axes[0].get_title()
        "epoch 0, pad='zeros': 2 rows, 6 batches of 2 steps, 20.8% padding"
        >>> import matplotlib.pyplot as plt
        >>> plt.close(fig)
    """
    if (spec is None) == (loader is None):
        raise TypeError("plot_plan takes a plan's settings or a loader (loader=), not both")
    plt = _pyplot()
    cells = plan_cells(loader if spec is None else spec, epoch)
    if ax is None:
        rows = cells.shape[0]
        _, ax = plt.subplots(figsize=(8, min(6.0, 2.4 + 0.1 * rows)), layout="constrained")
    if max_columns is None:
        max_columns = max(1, int(ax.get_window_extent().width))
    image = plan_image(cells, max_columns)
    ax.imshow(image.rgb, extent=image.extent, aspect="auto", interpolation="nearest")
    _mark_batches(ax, cells, image)
    _mark_repeated(ax, cells, image)
    _mark_resets(ax, cells)
    _mark_packed_starts(ax, cells, image)
    _mark_ranks(ax, cells)
    _label(ax, cells, image)
    return ax.figure


def _pyplot() -> Any:
    """``matplotlib.pyplot``, or the ImportError that says how to install it."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError(
            "plot_plan needs matplotlib, which is not installed: pip install streamseq[plot]"
        ) from e
    return plt


def _mark_batches(ax: Axes, cells: PlanCells, image: PlanImage) -> None:
    """Thin white lines between batches, when a column is a step and batches are few."""
    rows, batches = cells.shape
    if image.per_column < 1 and 1 < batches <= 80:
        x = np.arange(1, batches) - 0.5
        ax.vlines(x, -0.5, rows - 0.5, colors="white", linewidth=0.6)


def _mark_repeated(ax: Axes, cells: PlanCells, image: PlanImage) -> None:
    """Hatch the stretches of every row that show a stream read more than once."""
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle

    if cells.repeated is None or not cells.repeated.any() or image.stream is None:
        return
    stream = image.stream
    marked = (stream >= 0) & cells.repeated[np.maximum(stream, 0)]
    edges = np.diff(np.pad(marked, ((0, 0), (1, 1))).astype(np.int8), axis=1)
    row, start = np.nonzero(edges == 1)
    _, stop = np.nonzero(edges == -1)  # (in the same order: row by row, left to right)
    w = image.per_column
    boxes = [
        Rectangle((a * w - 0.5, r - 0.5), (b - a) * w, 1.0)
        for r, a, b in zip(row.tolist(), start.tolist(), stop.tolist(), strict=True)
    ]
    marks = PatchCollection(boxes, facecolor="none", edgecolor="white", linewidth=0, hatch="///")
    marks.set_gid("repeated")
    ax.add_collection(marks, autolim=False)


def _mark_resets(ax: Axes, cells: PlanCells) -> None:
    """A black tick at the left edge of every cell with a reset; a triangle on cuts."""
    rows, batches = cells.shape
    inset = 0.003 * batches  # (off the left spine: batch 0 resets every row)
    r, i = np.nonzero(cells.reset)
    width = 1.5 if batches <= 100 else 0.8 if batches <= 1000 else 0.4
    half = 0.42 if rows <= 64 else 0.5
    ax.vlines(i - 0.5 + inset, r - half, r + half, colors="black", linewidth=width)
    r, i = np.nonzero(cells.cut)
    if len(r):
        size = float(np.clip(120 / rows, 2, 6))
        x = i - 0.5 + 2 * inset
        ax.plot(x, r, ls="none", marker=">", ms=size, mfc="white", mec="black", mew=0.6)


def _mark_packed_starts(ax: Axes, cells: PlanCells, image: PlanImage) -> None:
    """A dotted line where a packed stream starts inside a chunk (no reset, ``step == 0``).

    Drawn when a column is a step: two streams of one colour side by side stay apart.
    """
    starts = _packed_starts(cells)
    if starts is None or image.per_column >= 1:
        return
    row, x = starts
    ax.vlines(x, row - 0.42, row + 0.42, colors="black", linewidth=1.0, linestyles=(0, (1, 1)))


def _packed_starts(cells: PlanCells) -> tuple[np.ndarray, np.ndarray] | None:
    """``(row, x in batches)`` of the packed streams that start inside a chunk, or None."""
    if cells.runs is None:
        return None
    row, start, _, _ = cells.runs
    inside = start % cells.tbins != 0
    return row[inside], start[inside] / cells.tbins - 0.5


def _mark_ranks(ax: Axes, cells: PlanCells) -> None:
    """Lines between the ranks' rows, and each rank named on the right."""
    b, ranks = cells.batch_size, cells.world_size
    if ranks < 2:
        return
    for k in range(1, ranks):
        ax.axhline(k * b - 0.5, color="black", linewidth=1.5)
    side = ax.secondary_yaxis("right")
    side.set_yticks([k * b + (b - 1) / 2 for k in range(ranks)])
    side.set_yticklabels([f"rank {k}" for k in range(ranks)], fontsize=9)
    side.tick_params(length=0)


def _label(ax: Axes, cells: PlanCells, image: PlanImage) -> None:
    """Axis labels, title and legend."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator
    from matplotlib.transforms import ScaledTranslation

    rows, batches = cells.shape
    if image.per_column < 1:
        unit = "a column per step"
    elif image.per_column > 1:
        unit = f"a column per {int(image.per_column)} batches"
    else:
        unit = "a column per batch"
    ax.set_xlim(-0.5, batches - 0.5)
    ax.set_xlabel(f"batch ({unit})", fontsize=10)
    ax.set_ylabel("global row" if cells.world_size > 1 else "row", fontsize=10)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.tick_params(labelsize=9)
    ax.set_title(_title(cells), fontsize=10)
    handles = _stream_handles(cells) + [
        Patch(color=PADDING / 255, label="padding"),
        Line2D([], [], color="black", linewidth=1.5, label="reset"),
    ]
    starts = _packed_starts(cells)
    if starts is not None and len(starts[0]) and image.per_column < 1:
        kw = dict(color="black", linewidth=1.0, linestyle=(0, (1, 1)))
        handles.append(Line2D([], [], **kw, label="stream start in a chunk"))
    if cells.cut.any():
        kw = dict(ls="none", marker=">", mfc="white", mec="black")
        handles.append(Line2D([], [], **kw, label="segment start (reset)"))
    below = ax.transAxes + ScaledTranslation(0, -0.5, ax.figure.dpi_scale_trans)
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, 0),
        bbox_transform=below,  # half an inch under the axes: under the x label
        ncols=min(len(handles), 6),
        frameon=False,
        fontsize=9,
    )


def _stream_handles(cells: PlanCells) -> list[Any]:
    """What the colours mean: a stream each (said when they repeat), or a group each."""
    from matplotlib.patches import Patch

    if cells.groups is None:
        n = len(cells.repeated) if cells.repeated is not None else int(cells.stream.max()) + 1
        each = (
            "a colour each"
            if n <= len(PALETTE)
            else f"colours repeat every {len(PALETTE)} streams"
        )
        handles = [Patch(color=PALETTE[0] / 255, label=f"a stream ({each})")]
    else:
        half = len(PALETTE) // 2
        handles = [
            Patch(color=PALETTE[g % half] / 255, label=name) for g, name in enumerate(cells.groups)
        ]
    if cells.repeated is not None and cells.repeated.any():
        kw = dict(facecolor=PALETTE[0] / 255, edgecolor="white", hatch="///", linewidth=0)
        handles.append(Patch(**kw, label="read more than once"))
    return handles


def _title(cells: PlanCells) -> str:
    """``epoch, pad mode: rows (ranks), batches, padding``.

    Example:
        >>> z = np.zeros((4, 3), np.int64)
        >>> cells = PlanCells(1, "pack", 8, 2, 2, 16, z, z, z > 0, z > 0)
        >>> _title(cells)
        "epoch 1, pad='pack', segment_length=16: 4 rows (2 ranks x 2), 3 batches of 8 steps, 100.0% padding"
    """  # noqa: E501
    rows, batches = cells.shape
    head = f"epoch {cells.epoch}, pad={cells.pad!r}"
    if cells.segment_length is not None:
        head += f", segment_length={cells.segment_length}"
    ranks = f" ({cells.world_size} ranks x {cells.batch_size})" if cells.world_size > 1 else ""
    return (
        f"{head}: {rows} rows{ranks}, {batches} batches of {cells.tbins} steps, "
        f"{100 * cells.padding:.1f}% padding"
    )
