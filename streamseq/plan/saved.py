"""A saved state read once: every field of the untrusted dict checked into a typed record.

:func:`~streamseq.plan.state.make_state` writes a dict; a file gives it back, so nothing
in it is trusted. :meth:`SavedState.parse` reads that dict once, up front, and checks the
type and range of every field, and the parts that need nothing but the state itself (a
progress whose begun units repeat, a rest whose epoch is not the state's). What is left
to check needs a plan (the streams' lengths, the position of the state's epoch): that is
:func:`~streamseq.plan.state.read_state`'s, on this record alone.

Every error is a ValueError that names the field (``state['progress']['next'][2]``) and
shows the value it found cut short.
"""

from __future__ import annotations

import base64
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from .epoch import PLAN_VERSIONS
from .fields import bits, integer, integers, require, short

#: 3: states name their plan's version (``plan_version``); 2: progress (plans of version 1)
STATE_VERSION = 3

#: the fields of a state, by version
FIELDS = {
    1: ("epoch", "next_batch", "fingerprint"),
    2: ("epoch", "next_batch", "length", "fingerprint", "plan", "batch_size", "world_size")
    + ("progress", "resumed"),
}
FIELDS[3] = FIELDS[2] + ("plan_version", "epoch_done")

#: the fields of a saved progress (:meth:`~streamseq.plan.progress.Progress.to_state`)
PROGRESS_FIELDS = ("units", "done", "begun", "next", "row")

#: the most global rows a state may name (beyond a loader's own): planning them is refused
MAX_ROWS = 2**20


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


@dataclass(frozen=True, eq=False)
class SavedState:
    """A state, every field checked: what :func:`~streamseq.plan.state.read_state` reads.

    Attributes:
        version: the state's version (1 when it names none).
        named_version: the state names its version (``state['version']``).
        epoch: the state's epoch.
        next_batch: the batch of the epoch's plan it stands at.
        fingerprint: the fingerprint of the state's plan (None: a state of version 1
            whose fingerprint is not a string, so that of no plan).
        length: batches of the state's epoch (None: a state of version 1 without it).
        plan: the plan's settings, as saved (None for version 1).
        batch_size: the state's batch size (None for version 1: its fingerprint covers
            the loader's).
        world_size: the state's world size (None for version 1, as ``batch_size``).
        plan_version: the version of the state's plan (1 when the state names none).
        named_plan_version: the state names it (``state['plan_version']``).
        epoch_done: batches of the epoch delivered, before ``resumed`` and after.
        progress: where the epoch's units stood at ``next_batch`` (None for version 1:
            where its plan stands then).
        resumed: where the epoch was resumed on other rows, or None.
        draw: the unit of every occurrence of a mixture's epoch drawn anew, or None.
        draw_units: the units the draw counts (0 without a draw).
    """

    version: int
    named_version: bool
    epoch: int
    next_batch: int
    fingerprint: str | None
    length: int | None = None
    plan: dict[str, Any] | None = None
    batch_size: int | None = None
    world_size: int | None = None
    plan_version: int = 1
    named_plan_version: bool = False
    epoch_done: int = 0
    progress: SavedProgress | None = None
    resumed: SavedProgress | None = None
    draw: np.ndarray | None = None
    draw_units: int = 0

    @classmethod
    def parse(cls, state: Any, rows: int = 0, units: int = 0) -> SavedState:
        """Every field of ``state`` checked, as a record.

        Args:
            state: what :func:`~streamseq.plan.state.make_state` made, or a state of an
                older version; anything (it comes from a file).
            rows: the global rows of the loader reading it: a state may name more, up
                to :data:`MAX_ROWS`.
            units: the units of the loader reading it: a draw counts no more.

        Raises:
            ValueError: what is wrong, naming the field.

        Example:
            >>> saved = SavedState.parse({"version": 1, "epoch": 2, "next_batch": 5,
            ...                           "fingerprint": "ab"})
            >>> saved.version, saved.epoch, saved.next_batch, saved.length
            (1, 2, 5, None)
            >>> SavedState.parse({"epoch": 2, "next_batch": 5.0, "fingerprint": "ab"})
            Traceback (most recent call last):
            ...
            ValueError: state['next_batch'] must be an integer, got 5.0 (float)
        """
        if not isinstance(state, dict):
            raise ValueError(f"not a StreamLoader state: {short(state)} ({type(state).__name__})")
        version = integer(state.get("version", 1), "state['version']")
        if version not in FIELDS:
            raise ValueError(
                f"state of version {version} (state['version']), "
                f"this streamseq reads 1 to {STATE_VERSION}"
            )
        require(state, "state", FIELDS[version])
        epoch = integer(state["epoch"], "state['epoch']")
        nxt = integer(state["next_batch"], "state['next_batch']")
        fingerprint = state["fingerprint"]
        if version == 1:
            length = state.get("length")
            length = None if length is None else integer(length, "state['length']")
            named = fingerprint if isinstance(fingerprint, str) else None
            return cls(1, "version" in state, epoch, nxt, named, length, epoch_done=nxt)
        if not isinstance(fingerprint, str):
            raise ValueError(f"state['fingerprint'] must be a string, got {short(fingerprint)}")
        plan = state["plan"]
        if not isinstance(plan, dict):
            raise ValueError(
                f"state['plan'] must be a dict, got {short(plan)} ({type(plan).__name__})"
            )
        b = integer(state["batch_size"], "state['batch_size']", 1)
        w = integer(state["world_size"], "state['world_size']", 1)
        limit = max(MAX_ROWS, rows)
        if b * w > limit:
            raise ValueError(
                f"state['batch_size']={short(b)} x state['world_size']={short(w)}: more "
                f"global rows than {limit}"
            )
        planned = integer(state.get("plan_version", 1), "state['plan_version']", 1)
        if planned not in PLAN_VERSIONS:
            raise ValueError(
                f"state['plan_version']={short(planned)} is unknown: this streamseq plans "
                f"versions {PLAN_VERSIONS}"
            )
        length = integer(state["length"], "state['length']")
        done = integer(state.get("epoch_done", nxt), "state['epoch_done']")
        progress = read_progress(state["progress"], "state['progress']")
        resumed, draw = state["resumed"], None
        if resumed is not None:
            draw = _resumed(resumed, epoch, units)
            resumed = read_progress(resumed, "state['resumed']")
        return cls(
            version,
            "version" in state,
            epoch,
            nxt,
            fingerprint,
            length,
            plan,
            b,
            w,
            planned,
            "plan_version" in state,
            done,
            progress,
            resumed,
            None if draw is None else draw[0],
            0 if draw is None else draw[1],
        )


def _resumed(value: Any, epoch: int, units: int) -> tuple[np.ndarray, int] | None:
    """The epoch and the draw of ``state['resumed']`` checked: its draw, or None.

    Where it names its epoch (older states of version 3 do not), that must be the state's.
    """
    require(value, "state['resumed']", ())
    if "epoch" in value:
        at = integer(value["epoch"], "state['resumed']['epoch']")
        if at != epoch:
            raise ValueError(
                f"state['resumed']['epoch']={short(at)} does not match state['epoch']={epoch}"
            )
    if "draw" not in value:
        return None
    return _draw(value["draw"], units, "state['resumed']['draw']")


def _draw(value: Any, most: int, name: str) -> tuple[np.ndarray, int]:
    """A draw as :func:`~streamseq.plan.draws.encode_draw` wrote it: occurrences, units.

    It counts at most ``most`` units (its number checked against the plan later).
    """
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a base64 string, got {short(value)}")
    try:
        raw = zlib.decompressobj().decompress(base64.b64decode(value, validate=True), 4 * most)
    except (ValueError, zlib.error):
        raw = b""
    if len(raw) % 4 or (not raw and most):
        raise ValueError(
            f"{name} is not the count of each of at most {most} units: {short(value)}"
        )
    counts = np.frombuffer(raw, "<u4").astype(np.int64)
    if counts.sum() > 64 * max(len(counts), 1):
        raise ValueError(
            f"{name} draws {counts.sum()} units, more than 64 rounds of {len(counts)}"
        )
    return np.repeat(np.arange(len(counts), dtype=np.int64), counts), len(counts)


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
