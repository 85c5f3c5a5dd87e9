"""A stream's *step spec*: zero-step arrays with its dtype and step shape.

Two ways to know it, both here: :func:`step_spec` where it costs no read (arrays, and
sources that know it), :func:`step_spec_of` from steps read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._tree import leaves, tree_map
from .stream import ArrayTree


def zero_step(dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    """An array with no step, of ``dtype`` and step ``shape``.

    Example:
        >>> zero_step(np.uint8, (4, 3)).shape
        (0, 4, 3)
    """
    return np.empty((0, *shape), dtype)


def step_spec_of(steps: Any, native: bool = False) -> Any:
    """The step spec of ``steps`` read from a stream (an array, or a tree of arrays).

    Args:
        steps: what a stream's ``s[a:b]`` gave.
        native: in native byte order (what tensors hold), rather than the steps' own.

    Example:
        >>> step_spec_of(np.zeros((5, 2), ">f4")).dtype.str
        '>f4'
        >>> spec = step_spec_of({"x": np.zeros((5, 2), ">f4")}, native=True)
        >>> spec["x"].dtype.str, spec["x"].shape
        ('<f4', (0, 2))
    """

    def leaf(a: Any) -> np.ndarray:
        a = np.asarray(a)
        dtype = a.dtype  # (a native dtype is kept as it is: the writer checks identity first)
        if native and not dtype.isnative:
            dtype = dtype.newbyteorder("=")
        return zero_step(dtype, a.shape[1:])

    return tree_map(leaf, steps)


def _leaf(array: Any) -> np.ndarray | None:
    if isinstance(array, np.ndarray) and array.ndim > 0:
        return zero_step(array.dtype, array.shape[1:])
    return None


def step_spec(stream: Any) -> Any:
    """Zero-step arrays with the dtype and step shape of ``stream``, or ``None``.

    Only what costs no read: numpy arrays (and memory maps), a dict or tuple of them
    (:class:`~streamseq.read.stream.ArrayTree`), and the sources whose ``step_spec()``
    method tells it from what they already know (a file header read when they were
    made, a probe already done). ``None`` when any part is unknown.

    Example:
        >>> step_spec(np.zeros((5, 2), np.int16)).shape
        (0, 2)
        >>> from streamseq.read.stream import ArrayTree
        >>> spec = step_spec(ArrayTree({"x": np.zeros(3), "y": np.zeros((3, 4), np.uint8)}))
        >>> {k: (v.dtype.name, v.shape) for k, v in spec.items()}
        {'x': ('float64', (0,)), 'y': ('uint8', (0, 4))}
        >>> step_spec([1, 2, 3]) is None
        True
    """
    if isinstance(stream, np.ndarray):
        return _leaf(stream)
    if isinstance(stream, ArrayTree):
        spec = tree_map(_leaf, stream.tree)
        return None if any(leaf is None for leaf in leaves(spec)) else spec
    method = getattr(stream, "step_spec", None)
    if callable(method):
        known = method()
        return None if known is None else zero_step(*known)
    return None
