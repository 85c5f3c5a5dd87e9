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

from dataclasses import dataclass
from typing import Any

import numpy as np

from .epoch import PLAN_VERSIONS
from .fields import SavedProgress, integer, read_draw, read_progress, require, short

#: 3: states name their plan's version (``plan_version``); 2: progress (plans of version 1)
STATE_VERSION = 3

#: the fields of a state, by version
FIELDS = {
    1: ("epoch", "next_batch", "fingerprint"),
    2: ("epoch", "next_batch", "length", "fingerprint", "plan", "batch_size", "world_size")
    + ("progress", "resumed"),
}
FIELDS[3] = FIELDS[2] + ("plan_version", "epoch_done")

#: the most global rows a state may name (beyond a loader's own): planning them is refused
MAX_ROWS = 2**20


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
        plan: the plan's settings, as saved (a copy; None for version 1).
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
        if resumed is not None:  # where it names its epoch (older states do not): the state's
            require(resumed, "state['resumed']", ())
            at = integer(resumed.get("epoch", epoch), "state['resumed']['epoch']")
            if at != epoch:
                raise ValueError(
                    f"state['resumed']['epoch']={short(at)} does not match state['epoch']={epoch}"
                )
            rest = read_progress(resumed, "state['resumed']")
            if "draw" in resumed:  # (as many occurrences as the rest has units)
                draw = read_draw(resumed["draw"], "state['resumed']['draw']", units, rest.units)
            resumed = rest
        return cls(
            version,
            "version" in state,
            epoch,
            nxt,
            fingerprint,
            length,
            dict(plan),
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
