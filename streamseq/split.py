"""Split rows into contiguous groups, one per worker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def split_by_worker(rows: Sequence[T], num_workers: int) -> list[list[T]]:
    """Split rows into ``num_workers`` contiguous groups whose sizes differ by at most one.

    Concatenated, the groups give back ``rows``; the first groups are the larger ones.
    With more workers than rows some groups are empty.

    Args:
        rows: the rows (from :func:`interleave_streams`).
        num_workers: number of groups.

    Returns:
        A list of ``num_workers`` lists of rows.

    Raises:
        ValueError: ``num_workers < 1``.

    Example:
        >>> split_by_worker(list("abcdefg"), 3)
        [['a', 'b', 'c'], ['d', 'e'], ['f', 'g']]
    """
    if num_workers < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    rows = list(rows)
    base, extra = divmod(len(rows), num_workers)
    groups, start = [], 0
    for w in range(num_workers):
        size = base + (w < extra)
        groups.append(rows[start : start + size])
        start += size
    return groups
