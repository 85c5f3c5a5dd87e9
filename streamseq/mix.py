"""Weighted mixtures of datasets: :func:`mix` groups lists of streams under names and weights.

A :class:`Mixture` is the list of the streams of all its groups, in the order given; a
:class:`~streamseq.StreamLoader` given one reads each group for its share of every
epoch's steps (see :mod:`streamseq.plan.draws` for the draws), deterministically and
resumably.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any, NamedTuple, overload

import numpy as np

from ._checks import check_int
from .plan.draws import MixSpec
from .plan.planner import EpochPlan, planned
from .plan.spec import PlanSpec
from .stream_table import StreamTable


class GroupShare(NamedTuple):
    """What one group gives an epoch (see :meth:`Mixture.summary`).

    Attributes:
        group: the group's name.
        steps: its steps delivered in the epoch.
        streams: its occurrences (streams or segments read, a repeat counted each time).
        share: its steps over all groups' steps.
        weight: its normalised weight (its asked share), or None without weights.
        padding: padding steps inside its streams' chunks (a stream's last chunk, or a
            chunk capped by ``max_streams_per_chunk``).
    """

    group: str
    steps: int
    streams: int
    share: float
    weight: float | None
    padding: int


class MixSummary(NamedTuple):
    """The groups' shares of an epoch, and the padding at the ends of rows.

    Printed, a table: one line per group, then the padding after the rows' ends.
    """

    epoch: int
    groups: tuple[GroupShare, ...]
    end_padding: int
    batches: int

    def __str__(self) -> str:
        lines = [f"epoch {self.epoch}: {self.batches} batches"]
        lines.append(
            f"{'group':<12} {'steps':>10} {'streams':>8} {'share':>7} {'weight':>7} {'padding':>8}"
        )
        for g in self.groups:
            weight = "-" if g.weight is None else _share(g.weight)
            lines.append(
                f"{g.group:<12} {g.steps:>10} {g.streams:>8} {g.share:>7.3f} {weight:>7} "
                f"{g.padding:>8}"
            )
        lines.append(f"{'(row ends)':<12} {'':>10} {'':>8} {'':>7} {'':>7} {self.end_padding:>8}")
        return "\n".join(lines)


def _share(x: float) -> str:
    """A share in [0, 1] as the summary prints it: 3 decimals, or 2 digits when smaller.

    A positive share below any float (:data:`TINY`) prints as ``<1e-323``.

    Example:
        >>> _share(0.5), _share(0), _share(5e-11), _share(TINY)
        ('0.500', '0.000', '5.0e-11', '<1e-323')
    """
    if x == TINY:
        return "<1e-323"
    return f"{x:.3f}" if x == 0 or x >= 0.0005 else f"{x:.1e}"


#: the normalised weight of a group whose exact share is positive but below any float
TINY = math.ulp(0.0)


class Mixture(Sequence):
    """The streams of several named groups, one list; see :func:`mix`.

    Attributes:
        names: the groups, in order.
        spec: the groups' ranges and weights, as the plan takes them.
    """

    def __init__(self, streams: list[Any], spec: MixSpec, parts: list[Any] | None = None):
        self._streams, self.spec = streams, spec
        self.names = spec.names
        #: every group's streams (a list or a table of streams), when a group is a table
        self.parts = parts

    def __repr__(self) -> str:
        parts = [f"{n}: {c}" for n, c in zip(self.names, self.spec.counts, strict=True)]
        weights = "" if self.spec.weights is None else f", weights={self.weights}"
        return f"Mixture({{{', '.join(parts)}}}{weights})"

    def __len__(self) -> int:
        return self.spec.bounds[-1] if self.parts is not None else len(self._streams)

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> list[Any]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if self.parts is None:
            return self._streams[i]
        if isinstance(i, slice):
            return [self[j] for j in range(len(self))[i]]
        n = range(len(self))[i]  # (the IndexError of a list, negatives)
        g = int(np.searchsorted(np.asarray(self.spec.bounds[1:]), n, side="right"))
        return self.parts[g][n - self.spec.bounds[g]]

    @property
    def weights(self) -> dict[str, float] | None:
        """The weight of every group, as a float (None: every stream once)."""
        w = self.spec.weights
        return None if w is None else dict(zip(self.names, w, strict=True))

    @property
    def ranges(self) -> dict[str, range]:
        """The stream indices of every group.

        Example:
            >>> mix({"a": [[1], [2]], "b": [[3]]}).ranges
            {'a': range(0, 2), 'b': range(2, 3)}
        """
        b = self.spec.bounds
        return {n: range(b[g], b[g + 1]) for g, n in enumerate(self.names)}

    def group_of(self, i: int) -> str:
        """The group of stream ``i`` (as ``batch.stream`` names it).

        Example:
            >>> mix({"a": [[1], [2]], "b": [[3]]}).group_of(2)
            'b'
        """
        i = check_int(i, "a stream index")
        if not 0 <= i < len(self):
            raise IndexError(f"stream {i} out of range for a mixture of {len(self)} streams")
        return self.names[int(self.spec.group_of(np.array([i]))[0])]

    def summary(
        self, spec: Any = None, epoch: int | EpochPlan | None = None, *, loader: Any = None
    ) -> MixSummary:
        """Every group's steps, streams, share and padding in an epoch, from the plan alone.

        Args:
            spec: the plan's settings (a :class:`~streamseq.plan.spec.PlanSpec`, such as
                ``loader.spec``) of a plan of this mixture; no data is read. Anything
                with ``spec`` and ``plan()`` (a loader) is taken too: then its own plan
                is used for its current epoch (which may be the rest of an epoch resumed
                on other rows or with other weights: then what is left of it).
            epoch: the epoch, planned from its start; or its plan
                (:class:`~streamseq.plan.planner.EpochPlan`, such as ``loader.plan()``);
                None: epoch 0, or for a loader the epoch where its run stands (that of
                ``loader.plan()`` and of ``loader.state_dict()``).
            loader: a loader, by the keyword of earlier versions
                (``summary(loader=l)``): the same as giving it as ``spec``.

        Returns:
            A :class:`MixSummary` (printed, a table).

        Raises:
            ValueError: ``spec`` plans another mixture, or a negative ``epoch``.
            TypeError: ``spec`` is neither a plan's settings nor holds them
                (:func:`~streamseq.plan.planner.planned`), or both ``spec`` and
                ``loader`` are given (or neither).

        Example:
            >>> from streamseq.plan.spec import PlanSpec
            >>> m = mix({"a": [np.zeros(4)] * 2, "b": [np.zeros(2)]}, {"a": 1, "b": 1})
            >>> spec = PlanSpec(np.array([4, 4, 2]), batch_size=2, tbins=2, mixture=m.spec)
            >>> print(m.summary(spec, 0))
            epoch 0: 3 batches
            group             steps  streams   share  weight  padding
            a                     4        1   0.500   0.500        0
            b                     4        2   0.500   0.500        0
            (row ends)                                              4
            >>> from streamseq import StreamLoader
            >>> loader = StreamLoader(m, batch_size=2, tbins=2)
            >>> m.summary(loader) == m.summary(loader.spec, loader.plan())
            True
        """
        if (spec is None) == (loader is None):
            raise TypeError("summary takes a plan's settings or a loader (loader=), not both")
        source = loader if spec is None else spec
        if (
            epoch is None
            and not isinstance(source, PlanSpec)
            and callable(getattr(source, "plan", None))
        ):
            epoch = source.plan()  # a loader: the epoch where its run stands
        spec, plan = planned(source, epoch)
        if spec.mixture != self.spec:
            raise ValueError("this plan does not read this mixture")
        return _summary(spec, plan)


def _summary(spec: PlanSpec, plan: EpochPlan) -> MixSummary:
    """:meth:`Mixture.summary` of ``plan``."""
    mixture = spec.mixture
    assert mixture is not None
    source = (spec.units if plan.units is None else plan.units)[0]
    unit, _, length = plan.pieces
    group = mixture.group_of(source[unit])
    held = np.zeros(len(unit), bool)
    for row in plan.assignment:
        held[row] = True
    held &= length > 0
    count = len(mixture.names)
    steps = np.bincount(group[held], weights=length[held], minlength=count).astype(np.int64)
    streams = np.bincount(group[held], minlength=count)
    padding = _padding(spec, plan, group, count)
    total = max(int(steps.sum()), 1)
    w = mixture.weights
    norm = None if w is None else [_normalised(Fraction(x), sum(map(Fraction, w))) for x in w]
    rows = len(plan.assignment) * plan.length * spec.tbins
    end = rows - int(steps.sum()) - int(padding.sum())
    groups = tuple(
        GroupShare(
            name,
            int(steps[g]),
            int(streams[g]),
            int(steps[g]) / total,
            None if norm is None else norm[g],
            int(padding[g]),
        )
        for g, name in enumerate(mixture.names)
    )
    return MixSummary(plan.epoch, groups, end, plan.length)


def _normalised(weight: Fraction, total: Fraction) -> float:
    """``weight / total`` as a float, positive when it is (:data:`TINY` at the least)."""
    share = float(weight / total)
    return TINY if weight > 0 and share == 0 else share


def _padding(spec: Any, plan: EpochPlan, group: np.ndarray, count: int) -> np.ndarray:
    """Padding steps inside the chunks of each group's streams (not after the rows' ends)."""
    _, _, length = plan.pieces
    t = spec.tbins
    out = np.zeros(count, np.int64)
    if spec.pad != "pack":
        pad = -(-length // t) * t - length
        np.add.at(out, group, pad)
        return out
    cap = spec.max_streams_per_chunk
    from .plan.packing import placed_cap, row_spans
    from .plan.planner import plan_resumed

    resumed = plan_resumed(spec, plan.pieces, plan.rest, plan.units)  # (start a chunk)
    if resumed is None:
        resumed = np.zeros(len(length), bool)
    if cap is None and not resumed.any():
        return out

    rows = [np.asarray(r, np.int64) for r in plan.assignment]
    flat = np.concatenate(rows + [np.zeros(0, np.int64)])
    sizes = np.array([len(r) for r in rows], np.int64)
    start, end = row_spans(length[flat], sizes, t, placed_cap(cap, t), resumed[flat])
    follows = np.ones(len(flat), bool)  # a piece with one after it in its row
    follows[np.cumsum(sizes)[sizes > 0] - 1] = False
    gaps = start[1:] - end[:-1]
    np.add.at(out, group[flat[:-1][follows[:-1]]], gaps[follows[:-1]])
    return out


def _check_weights(
    groups: Mapping[str, Sequence[Any]], weights: Mapping[str, Any]
) -> tuple[float, ...]:
    """The weights of ``groups`` in their order, checked: errors name the group."""
    if not isinstance(weights, Mapping):
        raise TypeError(
            f"weights must be a dict from a group's name to a number, got {type(weights).__name__}"
        )
    unknown = [k for k in weights if k not in groups]
    if unknown:
        raise ValueError(f"weights name groups that are not in the mixture: {unknown!r}")
    out = []
    for name, streams in groups.items():
        if name not in weights:
            raise ValueError(f"group {name!r} has no weight: give every group one (0 to skip it)")
        w = _weight(name, weights[name])
        if w > 0 and len(streams) == 0:
            raise ValueError(f"group {name!r} has weight {w:g} but no streams")
        out.append(w)
    if not any(out):
        raise ValueError(f"every weight is 0 ({dict(weights)!r}): nothing to read")
    return tuple(out)


def _weight(name: str, w: Any) -> float:
    """One group's weight as a float >= 0 (``-0.0`` is 0), checked: errors name the group.

    Any real number is taken (int, float, Fraction, Decimal, numpy scalars), not a bool.

    Example:
        >>> from fractions import Fraction
        >>> _weight("a", Fraction(1, 4)), _weight("a", -0.0)
        (0.25, 0.0)
        >>> _weight("a", float("nan"))
        Traceback (most recent call last):
        ...
        ValueError: the weight of group 'a' must be a finite number >= 0, got nan
    """
    real = isinstance(w, (numbers.Real, Decimal)) and not isinstance(w, (bool, np.bool_))
    if not real:
        raise TypeError(f"the weight of group {name!r} must be a real number, got {w!r}")
    bad = ValueError(f"the weight of group {name!r} must be a finite number >= 0, got {w!r}")
    try:
        finite = w.is_finite() if isinstance(w, Decimal) else math.isfinite(w)
    except OverflowError:  # an exact number past any float (Fraction(10**400)): finite
        finite = True
    except (TypeError, ValueError):
        finite = False
    if not finite or w < 0:
        raise bad
    try:
        out = float(w) + 0.0  # (-0.0 + 0.0 is 0.0)
    except OverflowError:
        out = math.inf
    if not math.isfinite(out):
        raise ValueError(
            f"the weight of group {name!r} is too large for a float, got {w!r}: give the "
            "weights on a smaller scale (only their ratios count)"
        )
    if w > 0 and out == 0:
        raise ValueError(
            f"the weight of group {name!r} is too small for a float, got {w!r}: give the "
            "weights on a larger scale (only their ratios count), or 0 to skip the group"
        )
    return out


def mix(
    groups: Mapping[str, Sequence[Any]],
    weights: Mapping[str, float] | None = None,
    *,
    steps: int | None = None,
) -> Mixture:
    """Mix groups of streams by weight: each group's share of every epoch's steps.

    The result is the list of the streams of every group, in the order given (the first
    group's streams first), accepted wherever a list of streams is:
    ``batch.stream`` indexes it, :meth:`Mixture.group_of` names a stream's group. A
    :class:`~streamseq.StreamLoader` reads every group for ``weight / sum(weights)`` of
    the epoch's steps, whole streams (or segments) only: a group asking for more than it
    has is read again, each of its streams ``k`` or ``k + 1`` times; one asking for less
    gives a subset, without repeats. Which streams are read, or read once more, is drawn
    anew every epoch from ``(seed, epoch)``: the same for any number of workers, and
    after resuming. A group whose share is below one of its streams is read in some
    epochs only, drawn so that over epochs it gets its share on average (never starved).
    With weights proportional to the groups' steps, every step is read exactly once;
    without weights, the loader reads the streams as it would a list.
    :func:`~streamseq.interleave_streams` reads a mixture with weights as the loader does
    (the same draw and rows for the same seed and epoch).

    Args:
        groups: a name for every list of streams (arrays, sources or openers), or
            table of streams (:class:`~streamseq.StreamTable`, kept as it is).
        weights: a number >= 0 for every group (any real number: int, float,
            ``Fraction``, ``Decimal``, numpy scalars; kept as floats, ``-0.0`` taken
            as 0; only their ratios count); None: every stream once.
        steps: steps of an epoch (default: all groups' steps together).

    Returns:
        A :class:`Mixture`.

    Raises:
        ValueError: no groups, a weight for a group that is not there, a group without
            a weight, a negative, NaN or infinite weight, a positive weight for a group
            without streams, or every weight 0 (each naming the group).
        TypeError: a weight that is not a real number (or a bool).

    Example:
        >>> import numpy as np
        >>> m = mix({"web": [np.arange(6), np.arange(4)], "code": [np.arange(5)]},
        ...         {"web": 1, "code": 1})
        >>> len(m), m.group_of(2), m.ranges["web"]
        (3, 'code', range(0, 2))
    """
    if not isinstance(groups, Mapping) or not groups:
        raise ValueError("mix needs a dict from a group's name to its list of streams")
    names = tuple(groups)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"group names must be strings, got {name!r}")
    checked = None if weights is None else _check_weights(groups, weights)
    if steps is not None:
        steps = check_int(steps, "steps", 1)
    streams: list[Any] = []
    bounds = [0]
    if any(isinstance(groups[name], StreamTable) for name in names):  # kept as they are
        parts = [g if isinstance(g, StreamTable) else list(g) for g in groups.values()]
        for part in parts:
            bounds.append(bounds[-1] + len(part))
    else:
        parts = None
        for name in names:
            streams += list(groups[name])
            bounds.append(len(streams))
    if bounds[-1] == 0:
        raise ValueError(f"the groups {list(names)} hold no streams")
    return Mixture(streams, MixSpec(names, tuple(bounds), checked, steps), parts)
