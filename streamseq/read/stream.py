"""What a stream is: a lazy sequence of steps; a dict or tuple of arrays as one stream.

A *stream* is a lazy sequence of timesteps: ``len(s)`` and ``s[a:b]`` returning an array
(or a tuple/dict of arrays) whose first axis has ``b - a`` steps. numpy arrays and memmaps
are streams, and so is a dict or tuple of arrays with the same number of steps
(:class:`ArrayTree`). Reading one safely is :mod:`.ref`'s work.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from .._redact import describe as _describe
from .._tree import leaves, num_steps, tree_map


class ArrayTree:
    """A dict or tuple of arrays with one step axis, as one stream of dict or tuple steps.

    Args:
        tree: a dict, tuple or list (nested as wished) of arrays that all have the same
            number of steps along their first axis.

    Raises:
        ValueError: the arrays disagree on the number of steps, or one has no step axis.

    Example:
        >>> s = ArrayTree({"x": np.arange(4), "y": np.arange(4) * 10})
        >>> len(s), s[1:3]
        (4, {'x': array([1, 2]), 'y': array([10, 20])})
    """

    def __init__(self, tree: Any):
        self.tree = tree
        arrays = leaves(tree)
        if not arrays:
            raise ValueError("a dict or tuple stream needs at least one array")
        if any(np.ndim(a) == 0 for a in arrays):
            raise ValueError("every array of a dict or tuple stream needs a step axis")
        self.length = num_steps(tree)

    def __repr__(self) -> str:
        return f"ArrayTree({tree_map(describe, self.tree)})"

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, key: slice) -> Any:
        return tree_map(operator.itemgetter(key), self.tree)


def _is_array_tree(obj: Any) -> bool:
    """Whether ``obj`` is a dict, or a tuple or list, whose leaves are all arrays."""
    if isinstance(obj, dict):
        values: Any = obj.values()
    elif isinstance(obj, (tuple, list)) and obj:
        values = obj
    else:
        return False
    return all(
        _is_array_tree(v) or (hasattr(v, "shape") and hasattr(v, "dtype") and np.ndim(v) > 0)
        for v in values
    )


def is_stream(obj: Any) -> bool:
    """Tell a stream (``len`` and indexing) from an opener (a callable).

    Example:
        >>> import numpy as np
        >>> is_stream(np.arange(3)), is_stream(lambda: np.arange(3))
        (True, False)
        >>> is_stream({"x": np.arange(3)})
        True
    """
    return hasattr(obj, "__len__") and hasattr(obj, "__getitem__")


def as_stream(obj: Any) -> Any:
    """``obj`` as a stream: a dict or tuple of arrays becomes an :class:`ArrayTree`.

    Example:
        >>> type(as_stream({"x": np.arange(3)})).__name__, type(as_stream(np.arange(3))).__name__
        ('ArrayTree', 'ndarray')
    """
    if type(obj) is np.ndarray:  # the common case, in short
        return obj
    return ArrayTree(obj) if _is_array_tree(obj) else obj


def known_length(stream: Any) -> int | None:
    """The number of steps of a stream when it costs nothing to know it, else ``None``.

    Arrays (with a step axis), anything else with a ``shape`` (a memory-mapped file),
    lists and :class:`ArrayTree` (dicts and tuples of arrays, nested) know their length;
    other streams (files) would be probed for it.

    Example:
        >>> known_length(np.zeros((3, 2))), known_length(ArrayTree({"x": np.arange(5)}))
        (3, 5)
        >>> known_length(np.array(7)) is None  # no step axis: a read error
        True
    """
    if isinstance(stream, (ArrayTree, list)):
        return len(stream)
    own = getattr(type(stream), "known_length", None)  # (a zip_streams of parts measured)
    if callable(own):
        return own(stream)
    shape = getattr(stream, "shape", None)
    return len(stream) if isinstance(shape, tuple) and shape else None


def describe(obj: Any) -> str:
    """A short ``repr`` of a stream or opener, for error messages.

    Example:
        >>> describe(list(range(100)))[:20]
        '[0, 1, 2, 3, 4, 5, ...'
    """
    if hasattr(obj, "shape") and hasattr(obj, "dtype") and not hasattr(obj, "path"):
        return f"{type(obj).__name__}(shape={tuple(obj.shape)}, dtype={obj.dtype})"
    return _describe(obj)
