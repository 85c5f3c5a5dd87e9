"""Which streams go to which row: the cheap, deterministic plan that everything follows."""

from __future__ import annotations

import heapq

import numpy as np


def assign_rows(
    lengths: np.ndarray, num_rows: int, *, shuffle: bool = False, seed: int = 0, epoch: int = 0
) -> list[np.ndarray]:
    """The plan behind :func:`interleave_streams`: stream indices of each row, in order.

    Example:
        >>> [a.tolist() for a in assign_rows(np.array([5, 2, 0, 2, 4]), 2)]
        [[0], [1, 3, 4]]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.arange(len(lengths))
    if shuffle:
        order = np.random.default_rng([seed, epoch]).permutation(len(lengths))
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
