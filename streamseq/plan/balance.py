"""Rows split into contiguous groups of even cost, one group per worker.

Workers read their groups side by side, and a batch is ready when the slowest group has
written its rows: an epoch lasts as long as the costliest group takes. Rows have about
the same number of steps (:mod:`.rows`), yet not the same: with groups of as many rows
each, on streams of unequal lengths, one worker may decode a tenth more frames than
the other and the other then waits. Here the cuts between groups are placed where the
costs (the steps each row reads) add up evenly.

Groups stay contiguous, in the order of the rows: a worker writes its rows of every
batch as one block of rows, so the rows given to each worker, not what any row reads,
is all that changes; batches are the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")


def even_split(counts: int, groups: int) -> np.ndarray:
    """The sizes of ``groups`` contiguous groups of ``counts`` rows, differing by at most one.

    The first groups are the larger ones (as :func:`~streamseq.split_by_worker`).

    Example:
        >>> even_split(7, 3).tolist()
        [3, 2, 2]
    """
    base, extra = divmod(int(counts), int(groups))
    return base + (np.arange(groups) < extra).astype(np.int64)


def balanced_sizes(costs: np.ndarray, groups: int) -> np.ndarray:
    """Sizes of ``groups`` contiguous groups of rows whose summed ``costs`` are even.

    Each cut between groups ``k - 1`` and ``k`` is placed where the costs before it come
    closest to ``k / groups`` of the total (ties: the earlier cut), never before the
    cut before it, and never leaving a group without a row when there are as many
    rows as groups (a worker reads at least one row). That split is kept when its
    costliest group costs less than the costliest of the split into groups of as many
    rows each (:func:`even_split`); otherwise, and for costs that are all equal, that
    split is.

    Guarantees (the property tests): the sizes add up to the rows; every group has a
    row when there are as many rows as groups; no group costs more than with
    :func:`even_split`; with two groups, their costs differ by at most the largest cost
    of a row.

    Args:
        costs: what each row costs to read (non-negative; the steps it reads).
        groups: the number of groups (>= 1).

    Returns:
        int64 ``[groups]``: the number of rows of each group, in order.

    Raises:
        ValueError: ``groups`` < 1, or a negative cost.

    Example:
        >>> balanced_sizes(np.array([300, 280, 260, 240, 500, 90, 90, 60]), 2).tolist()
        [3, 5]
        >>> balanced_sizes(np.array([450, 440, 460, 450, 455, 445, 450, 450]), 2).tolist()
        [4, 4]
    """
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    costs = np.asarray(costs, dtype=np.int64).reshape(-1)
    if len(costs) and int(costs.min()) < 0:
        raise ValueError(f"a row's cost is negative: {int(costs.min())}")
    even = even_split(len(costs), groups)
    if groups == 1 or len(costs) <= 1 or int(costs.max()) == int(costs.min()):
        return even
    before = np.concatenate([np.zeros(1, np.int64), np.cumsum(costs)])  # [rows + 1]
    total = int(before[-1])
    # cut k at the index i with before[i] nearest k * total / groups (in integers: x groups)
    goal = np.arange(1, groups, dtype=np.int64) * total
    scaled = before * groups
    right = np.searchsorted(scaled, goal, side="left")  # first index at or past the goal
    left = np.maximum(right - 1, 0)
    right = np.minimum(right, len(costs))
    nearer = (goal - scaled[left]) <= (scaled[right] - goal)
    cuts = np.where(nearer, left, right)
    if len(costs) >= groups:  # every group keeps a row: cut k after row k at least
        k = np.arange(1, groups, dtype=np.int64)
        cuts = np.clip(cuts, k, len(costs) - groups + k)
        cuts = np.maximum.accumulate(cuts - k) + k
    else:
        cuts = np.maximum.accumulate(cuts)
    bounds = np.concatenate([[0], cuts, [len(costs)]])
    sizes = np.diff(bounds).astype(np.int64)
    if _costliest(before, sizes) < _costliest(before, even):
        return sizes
    return even


def _costliest(before: np.ndarray, sizes: np.ndarray) -> int:
    """The cost of the costliest group (``before``: the costs' sums before each row)."""
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    return int(np.diff(before[bounds]).max())


def balanced_groups(rows: Sequence[T], costs: np.ndarray, groups: int) -> list[list[T]]:
    """``rows`` cut into ``groups`` contiguous groups of even cost (:func:`balanced_sizes`).

    Concatenated, the groups give back ``rows``.

    Args:
        rows: the rows, in order.
        costs: what each row costs to read (the steps it reads in the epoch).
        groups: the number of groups (workers).

    Returns:
        ``groups`` lists of rows.

    Example:
        >>> balanced_groups(list("abcdefgh"), [400, 420, 380, 410, 90, 100, 95, 80], 2)
        [['a', 'b'], ['c', 'd', 'e', 'f', 'g', 'h']]
    """
    rows = list(rows)
    if len(costs) != len(rows):
        raise ValueError(f"{len(costs)} costs for {len(rows)} rows")
    bounds = np.concatenate([[0], np.cumsum(balanced_sizes(costs, groups))]).tolist()
    return [rows[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def row_costs(rows: Sequence[Any], steps: int) -> np.ndarray:
    """The steps each row reads in an epoch of ``steps`` steps a row (its cost).

    Example:
        >>> row_costs([np.arange(5), np.arange(30)], 12).tolist()
        [5, 12]
    """
    return np.minimum(np.array([len(r) for r in rows], dtype=np.int64), steps)
