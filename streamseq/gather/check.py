"""Steps read from a stream against the batch they go into: same layout, safe copies."""

from __future__ import annotations

from typing import Any

import numpy as np


def _layout(tree: Any) -> str:
    if isinstance(tree, dict):
        return f"a dict with keys {sorted(map(str, tree))}"
    if isinstance(tree, (tuple, list)):
        return f"a {type(tree).__name__} of {len(tree)}"
    return "an array"


def spec_mismatch(spec: Any, data: Any, where: str = "") -> str | None:
    """Why steps ``data`` of a stream do not match ``spec``, or None when they do.

    ``spec`` holds zero-step arrays (or a tree of them) with the dtype and step shape of
    the data; ``data`` must have the same layout, dtypes equal up to byte order and the
    same step shapes.

    Args:
        spec: zero-step arrays (or a tree of them) describing the data.
        data: steps read from a stream.
        where: prefix of the reason (the path in the tree).

    Returns:
        The reason, or None when ``data`` matches.

    Example:
        >>> spec = np.zeros((0, 3), np.int64)
        >>> spec_mismatch(spec, np.ones((4, 3), np.int64)) is None
        True
        >>> spec_mismatch(spec, np.ones((4, 3)))
        "dtype float64 differs from the first stream's int64"
        >>> spec_mismatch(spec, np.ones((4, 1), np.int64))
        "step shape (1,) differs from the first stream's (3,)"
    """
    if isinstance(spec, dict):
        if not isinstance(data, dict) or set(data) != set(spec):
            return f"{where}steps are {_layout(data)}, the first stream's {_layout(spec)}"
        keys: Any = spec
    elif isinstance(spec, (tuple, list)):
        if not isinstance(data, (tuple, list)) or len(data) != len(spec):
            return f"{where}steps are {_layout(data)}, the first stream's {_layout(spec)}"
        keys = range(len(spec))
    elif isinstance(data, (dict, tuple)):
        return f"{where}steps are {_layout(data)}, the first stream's {_layout(spec)}"
    else:
        d = data if type(data) is np.ndarray else np.asarray(data)
        if d.ndim == 0:
            return f"{where}steps are not arrays with a step axis"
        s = spec.dtype
        if d.dtype != s and d.dtype.newbyteorder("=") != s.newbyteorder("="):
            return f"{where}dtype {d.dtype} differs from the first stream's {s}"
        got, want = d.shape[1:], spec.shape[1:]
        if got != want:
            return f"{where}step shape {got} differs from the first stream's {want}"
        return None
    for key in keys:
        problem = spec_mismatch(spec[key], data[key], f"{where}[{key!r}]: ")
        if problem is not None:
            return problem
    return None


def put(out: np.ndarray, x: Any) -> None:
    """Copy ``x`` into ``out``: same shape (no broadcasting), safe casting.

    Args:
        out: where the steps go (a part of a batch).
        x: the steps, an array or anything :func:`numpy.asarray` takes.

    Raises:
        ValueError: ``x`` has another shape.
        TypeError: ``x`` cannot be cast safely to the dtype of ``out``.

    Example:
        >>> out = np.zeros(3, np.int64)
        >>> put(out, np.arange(3, dtype=np.int8))
        >>> out.tolist()
        [0, 1, 2]
        >>> put(out, [1, 2])
        Traceback (most recent call last):
        ...
        ValueError: data of shape (2,) where the batch holds (3,)
    """
    if np.shape(x) != out.shape:
        raise ValueError(f"data of shape {np.shape(x)} where the batch holds {out.shape}")
    np.copyto(out, x, casting="safe")
