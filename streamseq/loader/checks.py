"""Checks of a loader's streams and settings made when it is built, before any read."""

from __future__ import annotations

import numpy as np

from .._warn import warn
from ..plan.spec import PlanSpec


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
