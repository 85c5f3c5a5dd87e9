"""Rows split into contiguous groups of even cost, one group per worker.

Workers read their groups side by side, and a batch is ready when the slowest group has
written its rows: an epoch lasts as long as the costliest group takes. Rows have about
the same number of steps (:mod:`.rows`), yet not the same: with groups of as many rows
each, on streams of unequal lengths, one worker may decode a tenth more frames than
the other and the other then waits. Here the cuts between groups are placed where the
costs (the steps each row reads) add up evenly.

Contiguous groups are not always even enough (eight rows cut in two: 1,904 frames
against 1,788). :func:`balanced_sets` gives a worker any set of rows (longest first onto
the least loaded worker, then swaps), kept only where its costliest group costs less
than the contiguous split's. A worker writes each run of consecutive rows of its set in
place (:mod:`~streamseq.workers.runs`): the rows given to each worker, not what any row
reads, is all that changes; batches are the same.
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
    return cut_rows(rows, balanced_sizes(costs, groups))


def cut_rows(rows: Sequence[T], sizes: Sequence[int] | np.ndarray) -> list[list[T]]:
    """``rows`` cut into contiguous groups of ``sizes`` rows, in order.

    Example:
        >>> cut_rows(list("abcde"), [2, 0, 3])
        [['a', 'b'], [], ['c', 'd', 'e']]
    """
    rows = list(rows)
    bounds = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).tolist()
    return [rows[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def balanced_sets(costs: np.ndarray, groups: int) -> list[np.ndarray]:
    """The rows of ``groups`` groups of even cost, each any set of rows (sorted indices).

    The contiguous split (:func:`balanced_sizes`) is kept unless a free assignment has a
    costliest group that costs less. Two groups of up to 16 rows: the best of every
    split (exact). Else the rows, longest first, each onto the group that costs least
    so far (then has fewest rows, then comes first), then improved by moving a row out
    of the costliest group or swapping one of its rows with a cheaper one of another
    group, as long as that lowers the costliest of the two. Deterministic.

    Guarantees (the property tests): the groups partition the rows; every group has a
    row when there are as many rows as groups; the costliest group never costs more
    than the contiguous split's.

    Args:
        costs: what each row costs to read (non-negative).
        groups: the number of groups (>= 1).

    Returns:
        ``groups`` int64 arrays of row indices, each sorted.

    Example:
        >>> [g.tolist() for g in balanced_sets(np.array([90, 10, 10, 90]), 2)]
        [[0, 1], [2, 3]]
        >>> [g.tolist() for g in balanced_sets(np.array([90, 90, 10, 10]), 2)]
        [[0, 3], [1, 2]]
    """
    costs = np.asarray(costs, dtype=np.int64).reshape(-1)
    sizes = balanced_sizes(costs, groups)  # (checks the arguments)
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    contiguous = [
        np.arange(a, b, dtype=np.int64) for a, b in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    n = len(costs)
    if groups == 1 or n <= 1:
        return contiguous
    before = np.concatenate([np.zeros(1, np.int64), np.cumsum(costs)])
    best = _costliest(before, sizes)
    if groups == 2 and n <= _EXACT:
        owner = _halves(costs)
    else:
        owner = _greedy(costs, groups)
        _improve(costs, owner, groups)
    loads = np.bincount(owner, weights=costs, minlength=groups).astype(np.int64)
    if int(loads.max()) >= best:
        return contiguous
    return [np.flatnonzero(owner == g).astype(np.int64) for g in range(groups)]


_EXACT = 16  # rows up to which two groups are chosen among every split (2 ** 16 sums)


def _halves(costs: np.ndarray) -> np.ndarray:
    """The group of each row of the two groups of least costliest, among every split.

    Row 0 is in group 0; each group keeps a row; ties: the first split in binary order.

    Example:
        >>> _halves(np.array([5, 4, 3, 3, 3])).tolist()
        [0, 0, 1, 1, 1]
    """
    n = len(costs)
    sums = np.zeros(1, np.int64)
    for c in costs[1:].tolist():  # bit k of a split: row k + 1 in group 1
        sums = np.concatenate([sums, sums + c])
    total = int(costs.sum())
    splits = np.arange(len(sums), dtype=np.int64)
    worse = np.maximum(sums, total - sums)
    worse[0] = np.iinfo(np.int64).max  # (group 1 without a row)
    best = int(splits[np.argmin(worse)])
    owner = np.zeros(n, np.int64)
    owner[1:] = (best >> np.arange(n - 1)) & 1
    return owner


def _greedy(costs: np.ndarray, groups: int) -> np.ndarray:
    """The group of each row: longest first onto the cheapest group (fewest rows, first)."""
    loads, counts = [0] * groups, [0] * groups
    owner = np.zeros(len(costs), np.int64)
    for r in np.argsort(-costs, kind="stable").tolist():  # (rows of a batch: B of them)
        g = min(range(groups), key=lambda k: (loads[k], counts[k], k))
        owner[r] = g
        loads[g] += int(costs[r])
        counts[g] += 1
    return owner


_PAIRS = 1 << 18  # the most swaps weighed between two groups at once


def _improve(costs: np.ndarray, owner: np.ndarray, groups: int, rounds: int = 64) -> None:
    """Move or swap rows out of the costliest group while that lowers it (in place)."""
    for _ in range(rounds):
        loads = np.bincount(owner, weights=costs, minlength=groups).astype(np.int64)
        h = int(np.argmax(loads))
        if int(loads[h]) - int(loads.min()) <= 1:  # (as even as integers go)
            return
        mine = np.flatnonzero(owner == h)
        found = None  # (new costliest of the two, row out, row in or -1, group)
        for o in range(groups):
            if o == h:
                continue
            theirs = np.append(np.flatnonzero(owner == o), -1)  # -1: a move, nothing back
            if len(mine) * len(theirs) > _PAIRS:  # (many rows: longest first is even already)
                theirs = theirs[-1:]
            back = np.where(theirs >= 0, costs[theirs], 0)
            d = costs[mine][:, None] - back[None, :]  # [mine, theirs]
            worse = np.maximum(loads[h] - d, loads[o] + d)
            if len(mine) == 1:  # (a group keeps a row)
                worse[:, -1] = np.iinfo(np.int64).max
            a, b = np.unravel_index(int(np.argmin(worse)), worse.shape)
            if worse[a, b] < loads[h] and (found is None or worse[a, b] < found[0]):
                found = (int(worse[a, b]), int(mine[a]), int(theirs[b]), o)
        if found is None:
            return
        _, out, back_row, o = found
        owner[out] = o
        if back_row >= 0:
            owner[back_row] = h


def row_costs(rows: Sequence[Any], steps: int) -> np.ndarray:
    """The steps each row reads in an epoch of ``steps`` steps a row (its cost).

    Example:
        >>> row_costs([np.arange(5), np.arange(30)], 12).tolist()
        [5, 12]
    """
    return np.minimum(np.array([len(r) for r in rows], dtype=np.int64), steps)
