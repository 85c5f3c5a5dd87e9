"""Checks of a loader's streams and settings made when it is built, before any read."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from operator import attrgetter
from typing import Any

import numpy as np

from .._tree import leaves
from .._warn import warn
from ..deliver.torch import torch_dtype
from ..gather import spec_mismatch
from ..plan.spec import PlanSpec
from ..read.ref import StreamRef, TableRefs, describe
from ..read.step_spec import step_spec, zero_step


def check_switch(value: Any, name: str) -> bool:
    """``value`` as a bool: True or False (numpy's too), or the integers 1 and 0.

    A string (``shuffle="no"``), None or any other value is refused rather than taken
    by its truth (``bool("no")`` is True).

    Example:
        >>> check_switch(1, "shuffle"), check_switch(np.bool_(False), "shuffle")
        (True, False)
        >>> check_switch("no", "shuffle")
        Traceback (most recent call last):
        ...
        TypeError: shuffle must be True or False, got 'no' (str)
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)) and value in (0, 1):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")


def check_rows(spec: PlanSpec) -> None:
    """Refuse, or warn about, more rows than streams (or segments) to fill them.

    Every row reads whole streams (or segments, with ``segment_length``), so with more
    global rows (``batch_size * world_size``) than non-empty streams some rows are never
    anything but padding. ``pad="drop"`` and ``pad="wrap"`` cannot run so; the other
    modes deliver the empty rows and are warned about.

    Args:
        spec: the loader's plan settings.

    Raises:
        ValueError: with ``pad="drop"`` or ``pad="wrap"``, fewer streams than rows.

    Warns:
        UserWarning: with ``pad="zeros"`` or ``pad="pack"``, fewer streams than rows.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     check_rows(PlanSpec(np.array([5, 3]), batch_size=4, tbins=2))
        >>> print(caught[0].message)  # doctest: +ELLIPSIS
        batch_size=4 gives 4 rows but there are only 2 non-empty streams: 2 rows stay ...
    """
    units = int(np.count_nonzero(spec.units[2]))
    if units >= spec.rows:
        return
    if spec.pad in ("drop", "wrap"):
        what = "every batch would be dropped" if spec.pad == "drop" else "rows would idle"
        raise ValueError(
            f"pad={spec.pad!r} needs a stream for every row: {spec.rows} rows "
            f"(batch_size x world_size) but {units} non-empty streams, so {what}; "
            'use fewer rows, more streams or pad="zeros"'
        )
    rows = f"batch_size={spec.batch_size} gives {spec.rows} rows"
    if spec.world_size > 1:
        rows = (
            f"batch_size={spec.batch_size} x world_size={spec.world_size} gives "
            f"{spec.rows} global rows"
        )
    streams = int(np.count_nonzero(spec.lengths))
    if spec.segment_length is None:
        have = f"{streams} non-empty stream{'s' * (streams != 1)}"
        cut = "segment_length= to cut the streams into more pieces (each planned as a stream)"
    else:
        have = (
            f"{units} segment{'s' * (units != 1)} (segment_length={spec.segment_length}) of "
            f"{streams} non-empty stream{'s' * (streams != 1)}"
        )
        cut = "a shorter segment_length"
    most = units // spec.world_size
    fewer = f"batch_size={most} or less" if most else "fewer ranks"
    empty = spec.rows - units
    warn(
        f"{rows} but there are only {have}: {empty} row{'s' * (empty != 1)} stay"
        f"{'s' * (empty == 1)} empty (all padding) in every batch; use {fewer}, or {cut}"
    )


def _same_arrays(sources: list, lengths: np.ndarray) -> bool:
    """Whether numpy arrays (of these non-zero lengths) share one dtype and step shape.

    A quick pass over attributes that cost no new object: the step shape of 1-d arrays
    is ``()``, that of 2-d arrays their size over their length; only arrays of more axes
    have their shapes compared.
    """
    if len(set(map(attrgetter("dtype"), sources))) > 1:
        return False
    ndims = set(map(attrgetter("ndim"), sources))
    if len(ndims) > 1:
        return False
    ndim = ndims.pop()
    if ndim == 1:
        return True
    if ndim == 2:
        sizes = np.fromiter(map(attrgetter("size"), sources), np.int64, len(sources))
        widths = sizes // lengths
        return bool((widths == widths[0]).all())
    return len({shape[1:] for shape in map(attrgetter("shape"), sources)}) == 1


def _holdable(spec: Any) -> bool:
    """Whether tensors can hold every leaf of ``spec`` (not objects, strings, records)."""
    try:
        for leaf in leaves(spec):
            torch_dtype(leaf.dtype)
    except TypeError:
        return False
    return True


def _known_specs(refs: Sequence[StreamRef], lengths: np.ndarray, at: int = 0) -> Iterator:
    """``(index, spec)`` of the non-empty streams whose spec is known for free.

    Only the first of many numpy arrays that share one dtype and step shape.
    """
    used = np.flatnonzero(lengths)
    sources = list(map(attrgetter("source"), refs))
    if len(used) < len(sources):
        sources = [sources[i] for i in used.tolist()]
    if not sources:
        return
    if set(map(type, sources)) == {np.ndarray} and _same_arrays(sources, lengths[used]):
        yield at + int(used[0]), step_spec(sources[0])  # (no call per stream)
        return
    for i in used.tolist():
        spec = refs[i].step_spec()
        if spec is not None and _holdable(spec):  # reading tells what tensors cannot hold
            yield at + i, spec


def _table_specs(refs: TableRefs) -> Iterator:
    """``(index, spec)`` of every table's first non-empty stream, and of lists' streams."""
    for part, at in zip(refs.parts, refs.starts.tolist(), strict=False):  # (parts)
        if isinstance(part, list):
            yield from _known_specs(part, refs.lengths[at : at + len(part)], at)
            continue
        used = np.flatnonzero(part.lengths)
        known = part.step_spec()
        if len(used) and known is not None:
            spec = zero_step(*known)
            if _holdable(spec):
                yield at + int(used[0]), spec


def check_step_specs(refs: Sequence[StreamRef], lengths: np.ndarray) -> None:
    """Refuse streams whose steps differ in dtype or shape, where that is known for free.

    Every stream of a loader must give steps of one dtype (up to byte order) and one
    step shape, or of one layout of them (a dict or tuple of arrays). What is known
    without reading is compared (see :meth:`StreamRef.step_spec`: arrays, headers read
    when the sources were made, probes already done; a table of streams tells it once
    for all its streams); the other streams are checked as they are read. Empty
    streams are never read and not compared. A million arrays of one or two axes cost
    a few passes over attributes that make no new object; a table, nothing per stream.

    Args:
        refs: the streams.
        lengths: their lengths.

    Raises:
        StreamError: naming the first stream that differs from an earlier one, and the
            earlier one, with what differs.

    Example:
        >>> from streamseq.read.ref import as_refs
        >>> refs = as_refs([np.zeros((4, 2), np.uint8), np.zeros((3, 2), np.float32)])
        >>> check_step_specs(refs, np.array([4, 3]))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        streamseq.errors.StreamError: stream 1 (...): dtype float32 differs from ... (stream 0, ...
    """
    known = _table_specs(refs) if isinstance(refs, TableRefs) else _known_specs(refs, lengths)
    first: tuple[int, object] | None = None
    for i, spec in known:
        if first is None:
            first = (i, spec)
            continue
        problem = spec_mismatch(first[1], spec)
        if problem is not None:
            raise refs[i].error(
                f"{problem} (stream {first[0]}, {describe(refs[first[0]].source)}); every "
                "stream must give steps of one dtype and step shape: convert them "
                "(np.asarray(x, dtype)) where the streams are made, or in a transform="
            )
