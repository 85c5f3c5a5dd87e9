"""Reading the fields of a saved state: strict integers, bits, a draw, a progress.

A state comes from a file: any field may hold anything. Every reader here takes a value
and its name, and returns it checked or raises a ValueError that names the field
(``state['progress']['next'][2]``) and shows the value it found cut short, however large
it is. :meth:`~streamseq.plan.saved.SavedState.parse` reads a whole state with them.
"""

from __future__ import annotations

import base64
import reprlib
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

#: the largest integer a state holds (int64)
MAX_INT = 2**63 - 1

#: the fields of a saved progress (:meth:`~streamseq.plan.progress.Progress.to_state`)
PROGRESS_FIELDS = ("units", "done", "begun", "next", "row")


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


def read_draw(
    value: Any, name: str, most: int, occurrences: int | None = None
) -> tuple[np.ndarray, int]:
    """A draw as :func:`~streamseq.plan.draws.encode_draw` wrote it: occurrences, units.

    It counts at most ``most`` units (their number is checked against a plan later).
    ``occurrences``: how many it must draw, where the state says so (the units of the
    progress saved with it, one bit each in the state); else at most 64 rounds of its
    units. A group weighed up may be read many more rounds than 64 in an epoch.

    Example:
        >>> from streamseq.plan.draws import encode_draw
        >>> draw, units = read_draw(encode_draw(np.array([0, 2, 2]), 3), "d", 5)
        >>> draw.tolist(), units
        ([0, 2, 2], 3)
        >>> read_draw("eJw=", "state['resumed']['draw']", 5)
        Traceback (most recent call last):
        ...
        ValueError: state['resumed']['draw'] is not the count of each of at most 5 units: 'eJw='
    """
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a base64 string, got {short(value)}")
    inflate = zlib.decompressobj()
    try:  # (never more than the counts of ``most`` units inflated)
        raw = inflate.decompress(base64.b64decode(value, validate=True), 4 * most)
    except (ValueError, zlib.error):
        raw = None
    if raw is None or len(raw) % 4 or not inflate.eof or inflate.unconsumed_tail:
        raise ValueError(
            f"{name} is not the count of each of at most {most} units: {short(value)}"
        )
    counts = np.frombuffer(raw, "<u4").astype(np.int64)
    if occurrences is not None and counts.sum() != occurrences:
        raise ValueError(f"{name} draws {counts.sum()} units, its progress has {occurrences}")
    if occurrences is None and counts.sum() > 64 * max(len(counts), 1):
        raise ValueError(
            f"{name} draws {counts.sum()} units, more than 64 rounds of {len(counts)}"
        )
    return np.repeat(np.arange(len(counts), dtype=np.int64), counts), len(counts)


@dataclass(frozen=True, eq=False)
class SavedProgress:
    """A progress as a state saved it, checked on its own (not yet against the units).

    Attributes:
        name: what it is called in errors (``state['progress']``).
        units: the units the state says its epoch has.
        done: per unit, whether the state says it was delivered whole.
        begun: the units begun and not finished (none repeated, none done).
        next: the next step of each, at least 1 (one per begun unit).
        row: the global row reading each, -1 for none (no row reads two).
    """

    name: str
    units: int
    done: np.ndarray
    begun: np.ndarray
    next: np.ndarray
    row: np.ndarray


def read_progress(value: Any, name: str = "state['progress']") -> SavedProgress:
    """A progress (:meth:`~streamseq.plan.progress.Progress.to_state`'s form) checked.

    Example:
        >>> read_progress({"units": 3, "done": "gA==", "begun": [1], "next": [2],
        ...                "row": [0]}).begun.tolist()
        [1]
        >>> read_progress({"units": 3, "done": "gA==", "begun": [0], "next": [2],
        ...                "row": [0]})
        Traceback (most recent call last):
        ...
        ValueError: state['progress']['begun'] holds units marked done in state['progress']['done']
    """
    require(value, name, PROGRESS_FIELDS)
    units = integer(value["units"], f"{name}['units']")
    done = bits(value["done"], f"{name}['done']", units)
    begun = integers(value["begun"], f"{name}['begun']", 0, units - 1)
    if len(np.unique(begun)) != len(begun):
        raise ValueError(f"{name}['begun'] repeats a unit: {short(begun.tolist())}")
    if done[begun].any():
        raise ValueError(f"{name}['begun'] holds units marked done in {name}['done']")
    nxt = integers(value["next"], f"{name}['next']", 1)
    if len(nxt) != len(begun):
        raise ValueError(f"{name}['next'] has {len(nxt)} entries, the begun units {len(begun)}")
    row = integers(value["row"], f"{name}['row']", -1)
    if len(row) != len(begun):
        raise ValueError(f"{name}['row'] has {len(row)} entries, {name}['begun'] {len(begun)}")
    reading = row[row >= 0]
    if len(np.unique(reading)) != len(reading):
        raise ValueError(f"{name}['row'] gives one row two units: {short(row.tolist())}")
    return SavedProgress(name, units, done, begun, nxt, row)
