"""Which streams go to which row: the cheap, deterministic plan that everything follows."""

from __future__ import annotations

import heapq

import numpy as np


def stream_order(
    count: int, *, shuffle: bool = False, seed: int = 0, epoch: int = 0
) -> np.ndarray:
    """The order in which the plan of ``epoch`` deals ``count`` streams out to rows.

    Example:
        >>> stream_order(4).tolist()
        [0, 1, 2, 3]
        >>> sorted(stream_order(4, shuffle=True, seed=1, epoch=2).tolist())
        [0, 1, 2, 3]
    """
    if shuffle:
        return np.random.default_rng([seed, epoch]).permutation(count)
    return np.arange(count)


def assign_rows(
    lengths: np.ndarray,
    num_rows: int,
    *,
    shuffle: bool = False,
    seed: int = 0,
    epoch: int = 0,
    order: np.ndarray | None = None,
) -> list[np.ndarray]:
    """The plan behind :func:`interleave_streams`: stream indices of each row, in order.

    Streams are dealt out in :func:`stream_order` (or ``order``), each to the row with
    the fewest steps so far; empty streams are skipped.

    Example:
        >>> [a.tolist() for a in assign_rows(np.array([5, 2, 0, 2, 4]), 2)]
        [[0], [1, 3, 4]]
        >>> [a.tolist() for a in assign_rows(np.array([5, 2, 0, 2, 4]), 2, order=[4, 0])]
        [[4], [0]]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if order is None:
        order = stream_order(len(lengths), shuffle=shuffle, seed=seed, epoch=epoch)
    order = np.asarray(order, dtype=np.int64)
    order = order[lengths[order] > 0]
    row_of = np.empty(len(order), dtype=np.int64)
    heap = [(0, r) for r in range(num_rows)]
    replace = heapq.heapreplace
    for k, n in enumerate(lengths[order].tolist()):
        total, r = heap[0]
        row_of[k] = r
        replace(heap, (total + n, r))
    by_row = np.argsort(row_of, kind="stable")
    bounds = np.searchsorted(row_of[by_row], np.arange(num_rows + 1))
    ordered = order[by_row]
    return [ordered[bounds[r] : bounds[r + 1]] for r in range(num_rows)]
