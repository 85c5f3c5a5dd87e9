"""Reading the fields of a saved state: strict integers, named in errors, shown short.

A state comes from a file: any field may hold anything. Every reader here raises a
ValueError that names the field (``state['progress']['next'][2]``) and shows the value it
found cut short, however large it is.
"""

from __future__ import annotations

import base64
import reprlib
from typing import Any

import numpy as np

#: the largest integer a state holds (int64)
MAX_INT = 2**63 - 1


class _Short(reprlib.Repr):
    """``reprlib`` that also cuts integers too long to print."""

    def __init__(self) -> None:
        super().__init__()
        self.maxstring = self.maxother = 40
        self.maxlist = self.maxtuple = self.maxdict = 6
        self.maxlong = 30

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 96:
            return f"<an integer of {x.bit_length()} bits>"
        return super().repr_int(x, level)


_SHORT = _Short()


def short(value: Any) -> str:
    """``repr(value)``, cut short (never more than about a hundred characters).

    Example:
        >>> short(10**5000)
        '<an integer of 16610 bits>'
        >>> short(list(range(100)))
        '[0, 1, 2, 3, 4, 5, ...]'
    """
    return _SHORT.repr(value)


def require(state: Any, name: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """``state`` if it is a dict holding every one of ``keys``.

    Example:
        >>> require({"a": 1}, "state", ("a", "b"))
        Traceback (most recent call last):
        ...
        ValueError: not a StreamLoader state: state is missing ['b']
    """
    if not isinstance(state, dict):
        raise ValueError(f"{name} must be a dict, got {short(state)} ({type(state).__name__})")
    missing = [k for k in keys if k not in state]
    if missing:
        raise ValueError(f"not a StreamLoader state: {name} is missing {missing}")
    return state


def integer(value: Any, name: str, low: int = 0, high: int = MAX_INT) -> int:
    """``value`` as an int: an integer (not a bool, float or string) in ``[low, high]``.

    Example:
        >>> integer(np.int64(3), "state['epoch']")
        3
        >>> integer(3.0, "state['epoch']")
        Traceback (most recent call last):
        ...
        ValueError: state['epoch'] must be an integer, got 3.0 (float)
        >>> integer(-1, "state['next_batch']")
        Traceback (most recent call last):
        ...
        ValueError: state['next_batch']=-1 is out of range [0, 2**63 - 1]
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {short(value)} ({type(value).__name__})")
    value = int(value)
    if not low <= value <= high:
        top = "2**63 - 1" if high == MAX_INT else str(high)
        raise ValueError(f"{name}={short(value)} is out of range [{low}, {top}]")
    return value


def integers(value: Any, name: str, low: int = 0, high: int = MAX_INT) -> np.ndarray:
    """A list (or tuple) of integers in ``[low, high]`` as an int64 array.

    Example:
        >>> integers([1, 2], "state['progress']['next']").tolist()
        [1, 2]
        >>> integers([1, 2.5], "state['progress']['next']")
        Traceback (most recent call last):
        ...
        ValueError: state['progress']['next'][1] must be an integer, got 2.5 (float)
    """
    if not isinstance(value, (list, tuple)):
        raise ValueError(
            f"{name} must be a list of integers, got {short(value)} ({type(value).__name__})"
        )
    out = [integer(x, f"{name}[{i}]", low, high) for i, x in enumerate(value)]
    return np.array(out, dtype=np.int64)


def bits(value: Any, name: str, units: int) -> np.ndarray:
    """One bit per unit from base64, as a bool array (as ``Progress.to_state`` writes them).

    Example:
        >>> bits("gA==", "state['progress']['done']", 3).tolist()
        [True, False, False]
        >>> bits("gA==", "state['progress']['done']", 9)
        Traceback (most recent call last):
        ...
        ValueError: state['progress']['done'] is not one bit per unit in base64: 'gA=='
    """
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a base64 string, got {short(value)}")
    try:
        raw = base64.b64decode(value, validate=True)
    except ValueError:
        raw = None
    if raw is None or len(raw) != -(-units // 8):
        raise ValueError(f"{name} is not one bit per unit in base64: {short(value)}")
    return np.unpackbits(np.frombuffer(raw, np.uint8), count=units).astype(bool)
