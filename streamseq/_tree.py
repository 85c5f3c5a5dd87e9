"""Helpers over step data: an array, or a tuple, list or dict of arrays (nested)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def tree_map(fn: Callable[..., Any], tree: Any, *others: Any) -> Any:
    """Apply ``fn`` leaf-wise over one tree, or several trees of the same structure.

    Example:
        >>> tree_map(lambda a: a * 2, {"x": np.arange(2), "y": (np.ones(1),)})
        {'x': array([0, 2]), 'y': (array([2.]),)}
    """
    if isinstance(tree, dict):
        return {k: tree_map(fn, v, *(o[k] for o in others)) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return rebuilt(tree, [tree_map(fn, *parts) for parts in zip(tree, *others, strict=True)])
    return fn(tree, *others)


def rebuilt(like: tuple | list, items: Any) -> Any:
    """A tuple (or list) of the type of ``like`` holding ``items``.

    A named tuple keeps the attributes of ``like`` that are not fields (a
    :class:`~streamseq.Batch`'s ``lookahead``).

    Example:
        >>> from streamseq import Batch
        >>> b = Batch(None, [True], [[True] * 2], [[0] * 2], [[0, 1]], lookahead=1)
        >>> c = rebuilt(b, [None, [False], [[True] * 2], [[0] * 2], [[2, 3]]])
        >>> c.step, c.lookahead, rebuilt((1,), [2])
        ([[2, 3]], 1, (2,))
    """
    if not hasattr(like, "_fields"):
        return type(like)(items)
    out = type(like)(*items)
    own = getattr(like, "__dict__", None)
    if own:
        out.__dict__.update(own)
    return out


def leaves(tree: Any) -> list[Any]:
    """List the leaves of a tree in a fixed order.

    Example:
        >>> leaves({"a": 1, "b": (2, 3)})
        [1, 2, 3]
    """
    out: list[Any] = []
    tree_map(out.append, tree)
    return out


def nbytes(tree: Any) -> int:
    """Total size in bytes of the arrays of a tree.

    Example:
        >>> nbytes((np.zeros(3, np.int64), np.zeros(2, np.uint8)))
        26
    """
    return sum(int(np.asarray(a).nbytes) for a in leaves(tree))


def num_steps(tree: Any) -> int:
    """Length of the first axis shared by every leaf; ValueError when they differ.

    Example:
        >>> num_steps({"a": np.zeros((4, 2)), "b": np.zeros(4)})
        4
    """
    sizes = {len(a) for a in leaves(tree)}
    if len(sizes) != 1:
        raise ValueError(f"leaves disagree on the number of steps: {sorted(sizes)}")
    return sizes.pop()
