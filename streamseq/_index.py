"""Indexing a stream, written once: a slice clamped like numpy's, an index checked."""

from __future__ import annotations

import operator
from typing import Any


def slice_bounds(key: slice, n: int) -> tuple[int, int]:
    """Clamp ``key`` to ``[0, n]`` like numpy; steps other than 1 raise :class:`ValueError`.

    Example:
        >>> slice_bounds(slice(-3, None), 10), slice_bounds(slice(7, 2), 10)
        ((7, 10), (7, 7))
    """
    if key.step not in (None, 1):
        raise ValueError(f"only contiguous slices are supported, got step {key.step}")
    a, b, _ = key.indices(n)
    return a, max(a, b)


def step_index(key: Any, n: int, what: str = "a stream of length {n}") -> int:
    """The step ``key`` names in ``n`` steps (negative from the end), checked.

    Args:
        key: an integer (a Python or numpy one; not a float nor a string).
        n: the number of steps.
        what: what has the steps, for the message of an index out of range.

    Raises:
        TypeError: ``key`` is not an integer.
        IndexError: ``key`` is out of range.

    Example:
        >>> step_index(-1, 5), step_index(2, 5)
        (4, 2)
        >>> step_index(5, 5)
        Traceback (most recent call last):
        ...
        IndexError: index 5 out of range for a stream of length 5
    """
    try:
        i = operator.index(key)  # ints and numpy integers, not floats or strings
    except TypeError:
        raise TypeError(f"indices must be integers or slices, not {type(key).__name__}") from None
    if i < 0:
        i += n
    if not 0 <= i < n:
        raise IndexError(f"index {key} out of range for {what.format(n=n)}")
    return i
