"""A batch stacked from the items of other parts: chunks (one row) and batches (rows)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._tree import leaves, tree_map
from ..batch import Batch, Chunk
from . import meta
from .check import put


def stack(
    items: Sequence[tuple[int, int, Any]],
    rows: int,
    tbins: int,
    spec: Any = None,
    describe: Callable[[], Any] | None = None,
    where: str = "",
) -> Batch:
    """Stack ``items`` into one batch of ``rows`` rows; the rows no item fills are padding.

    The data takes its dtype and step shape from ``spec``, else from the first item with
    data, else from ``describe()``; with none of them the batch has ``data=None``.

    Args:
        items: ``(first row, rows, item)`` for each :class:`Chunk` (one row) or
            :class:`Batch` (``data`` None: its metadata only).
        rows: rows of the batch.
        tbins: steps per chunk.
        spec: zero-step arrays with the data's dtype and step shape, or None.
        describe: called for the zero-step arrays when ``spec`` is None and no item
            has data.
        where: prefix of the errors (which batch).

    Returns:
        The :class:`Batch`, with numpy arrays.

    Raises:
        ValueError: an item's data does not fit its rows (another shape, or no safe cast).

    Example:
        >>> chunk = Chunk(np.arange(2), True, np.ones(2, bool), np.zeros(2, np.int64),
        ...               np.arange(2))
        >>> b = stack([(1, 1, chunk)], rows=2, tbins=2)
        >>> b.data.tolist(), b.reset.tolist(), b.stream.tolist()
        ([[0, 0], [0, 1]], [False, True], [[-1, -1], [0, 0]])
    """
    m = meta.padding(rows, tbins)
    writes = []  # (row offset, steps or None for a full item, data)
    for o, k, item in items:
        meta.copy_rows(m, o, k, item)
        if isinstance(item, Chunk):
            writes.append((o, tbins, item.data))
        elif item.data is not None:
            writes.append((o, None, item.data))
    template, skip = spec, 1
    if template is None and writes:
        template, skip = writes[0][2], (2 if writes[0][1] is None else 1)
    if template is None and describe is not None:
        template = describe()
    if template is None:
        return Batch(None, *m)
    data = tree_map(
        lambda a: np.zeros((rows, tbins, *np.shape(a)[skip:]), np.asarray(a).dtype), template
    )
    for o, n, d in writes:
        if n is None:
            count = len(leaves(d)[0])

            def copy(out: np.ndarray, a: Any, o: int = o, count: int = count) -> None:
                put(out[o : o + count], a)

        else:

            def copy(out: np.ndarray, a: Any, o: int = o, n: int = n) -> None:
                put(out[o, :n], a)

        try:
            tree_map(copy, data, d)
        except (TypeError, ValueError, KeyError) as e:
            raise ValueError(f"{where}row {o}: {type(e).__name__}: {e}") from e
    return Batch(data, *m)
