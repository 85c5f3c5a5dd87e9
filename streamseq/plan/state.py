"""The state of a run: what it saves, what it checks on loading, and how rows carry over.

A state names the plan it belongs to (the streams, ``tbins``, ``pad``, ``shuffle``,
``seed``, ``segment_length``) and where the run stands: epoch, next batch, the number of
global rows (``batch_size * world_size``) and where every stream of the epoch stands
(:class:`~streamseq.plan.progress.Progress`, one bit per stream plus the streams begun).
A loader with the same global rows resumes at the next batch, identically; one with
other rows plans the rest of the epoch from where every stream stands.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from .._checks import check_int
from .epoch import PLAN_VERSIONS
from .planner import EpochPlan, Epochs, plan_epoch
from .progress import Progress, progress_at
from .spec import PlanSpec

#: 3: states name their plan's version (``plan_version``); 2: progress (plans of version 1)
STATE_VERSION = 3


def legacy_fingerprint(spec: PlanSpec) -> str:
    """The fingerprint states of version 1 carry (it covered the batch and world size)."""
    h = hashlib.sha256(spec.lengths.tobytes())
    h.update("\0".join(spec.sources).encode())
    key: tuple = (spec.batch_size, spec.tbins, spec.pad, spec.shuffle, spec.seed)
    key += (spec.world_size,)
    if spec.segment_length is not None:
        key += (spec.segment_length,)
    h.update(repr(key).encode())
    return h.hexdigest()[:16]


def differences(saved: dict[str, Any], mine: dict[str, Any]) -> list[str]:
    """What differs between two plan keys, in words.

    Example:
        >>> differences({"tbins": 4, "pad": "zeros"}, {"tbins": 8, "pad": "zeros"})
        ['tbins (the state has 4, this loader 8)']
        >>> differences({"streams": 3, "lengths": "a"}, {"streams": 3, "lengths": "b"})
        ["the streams' lengths"]
    """
    words = {
        "streams": "the number of streams",
        "lengths": "the streams' lengths",
        "sources": "the streams' sources (file paths or types)",
    }
    out = []
    for k in mine:
        if k in ("lengths", "sources") and saved.get("streams") != mine.get("streams"):
            continue  # (they differ with the number of streams)
        if saved.get(k) != mine[k]:
            if k in ("lengths", "sources"):
                out.append(words[k])
            else:
                what = words.get(k, k)
                out.append(f"{what} (the state has {saved.get(k)!r}, this loader {mine[k]!r})")
    return out


@dataclass(frozen=True)
class Resumed:
    """A checked state: where to start, and the progress to plan the epoch's rest from."""

    epoch: int
    next_batch: int
    rest: Progress | None  # None: the fresh plan of the epoch
    rows: int  # the state's global rows
    batch_size: int
    world_size: int
    replan: bool = False  # planned by another version: the rest is planned from the progress
    before: int = 0  # batches of the epoch delivered before the rest is planned


def make_state(
    spec: PlanSpec, plan: EpochPlan, next_batch: int, before: int = 0
) -> dict[str, Any]:
    """The state of a run of ``spec`` standing at ``next_batch`` of ``plan``'s epoch.

    ``before``: batches of the epoch delivered before ``plan`` (the rest of an epoch
    resumed on other rows); the state's ``epoch_done`` counts them with ``next_batch``.

    Example:
        >>> import numpy as np
        >>> spec = PlanSpec(np.array([6]), batch_size=1, tbins=2)
        >>> state = make_state(spec, plan_epoch(spec, 0), 1)
        >>> state["epoch"], state["next_batch"], state["length"], state["progress"]["next"]
        (0, 1, 3, [2])
    """
    rest = plan.rest
    progress = progress_at(
        spec.units[2],
        plan.pieces,
        plan.assignment,
        spec.tbins,
        spec.pad == "pack",
        next_batch,
        None if rest is None else rest.done,
    )
    return {
        "version": STATE_VERSION,
        "plan_version": spec.version,
        "epoch": plan.epoch,
        "next_batch": next_batch,
        "epoch_done": before + next_batch,
        "length": plan.length,
        "fingerprint": spec.fingerprint,
        "plan": dict(spec.key),
        "batch_size": spec.batch_size,
        "world_size": spec.world_size,
        "progress": progress.to_state(),
        "resumed": None if rest is None else rest.to_state(),
    }


def read_state(spec: PlanSpec, state: Any) -> Resumed:
    """Check ``state`` against ``spec``; raises ValueError naming what is wrong."""
    if not isinstance(state, dict):
        raise ValueError(f"not a StreamLoader state: {type(state).__name__}")
    missing = {"epoch", "next_batch", "fingerprint"} - set(state)
    if missing:
        raise ValueError(f"not a StreamLoader state: missing {sorted(missing)}")
    version = state.get("version", 1)
    if version not in (1, 2, STATE_VERSION):
        raise ValueError(f"state of version {version}, this streamseq reads 1 to {STATE_VERSION}")
    epoch = check_int(state["epoch"], "the state's epoch", 0)
    nxt = check_int(state["next_batch"], "the state's next_batch")
    if version == 1:  # the same rows only, as made
        if state["fingerprint"] != legacy_fingerprint(spec):
            raise ValueError(
                "this state (version 1) was made by a loader with other streams, lengths, "
                "batch size, tbins, pad, shuffle, seed or world size; resuming would "
                "silently change the run"
            )
        return _legacy(spec, epoch, nxt)
    missing = {"plan", "progress", "batch_size", "world_size"} - set(state)
    if missing:
        raise ValueError(f"not a StreamLoader state: missing {sorted(missing)}")
    if state["fingerprint"] != spec.fingerprint:
        differ = differences(state["plan"], spec.key) or ["its fingerprint"]
        raise ValueError(
            f"this state was made by another plan, differing in {'; '.join(differ)}: "
            "resuming would silently change the run"
        )
    b = check_int(state["batch_size"], "the state's batch_size", 1)
    w = check_int(state["world_size"], "the state's world_size", 1)
    planned = check_int(state.get("plan_version", 1), "the state's plan_version", 1)
    if planned not in PLAN_VERSIONS:
        raise ValueError(f"the state's plan_version {planned} is unknown: {PLAN_VERSIONS}")
    lengths = spec.units[2]
    if b * w == spec.rows and planned == spec.version:
        resumed = state.get("resumed")
        if resumed is None:
            return Resumed(epoch, nxt, None, b * w, b, w)
        rest = Progress.from_state(resumed, lengths)
        return Resumed(epoch, nxt, rest, b * w, b, w, before=_done(state, nxt) - nxt)
    if "length" in state and not 0 <= nxt <= check_int(state["length"], "the state's length"):
        raise ValueError(f"next_batch {nxt} out of range for {state['length']} batches")
    done = _done(state, nxt)
    progress = Progress.from_state(state["progress"], lengths)
    replan = planned != spec.version
    return Resumed(epoch, 0, progress, b * w, b, w, replan=replan, before=done)


def _done(state: dict[str, Any], next_batch: int) -> int:
    """The batches of the state's epoch delivered, at least ``next_batch``."""
    return check_int(state.get("epoch_done", next_batch), "the state's epoch_done", next_batch)


def _legacy(spec: PlanSpec, epoch: int, nxt: int) -> Resumed:
    """A state of version 1 (no progress): the epoch as planned then, from batch ``nxt``."""
    old = spec.replace(version=1)
    if spec.version == old.version:
        return Resumed(epoch, nxt, None, spec.rows, spec.batch_size, spec.world_size)
    plan = plan_epoch(old, epoch)
    if not 0 <= nxt <= plan.length:
        raise ValueError(f"next_batch {nxt} out of range for {plan.length} batches")
    pack = spec.pad == "pack"
    progress = progress_at(spec.units[2], plan.pieces, plan.assignment, spec.tbins, pack, nxt)
    rows, b, w = spec.rows, spec.batch_size, spec.world_size
    return Resumed(epoch, 0, progress, rows, b, w, replan=True, before=nxt)


def row_map(spec: PlanSpec, resumed: Resumed) -> list[int]:
    """For each row of ``spec``'s rank, the global row of the state it continues.

    -1 where a row starts afresh (a stream from its first step, or one whose row had
    already moved on).
    """
    if resumed.rest is None or (resumed.rows == spec.rows and not resumed.replan):
        first = spec.rank * spec.batch_size
        return list(range(first, first + spec.batch_size))
    return plan_epoch(spec, resumed.epoch, resumed.rest).continued(spec)


def check_resumable(epochs: Epochs, resumed: Resumed, state: dict[str, Any]) -> None:
    """On the same global rows, check the state's position against the plan it resumes.

    ``epochs`` are the plans of the resumed run (with the state's rest): the plan of the
    state's epoch is made here once, and kept for the pass that reads it.

    Raises:
        ValueError: the state's epoch has another number of batches, or its next batch
            is out of range.
    """
    if resumed.rows != epochs.spec.rows or resumed.replan:
        return  # the rest of the epoch is planned from the progress
    n = epochs.plan(resumed.epoch).length
    if "length" in state and check_int(state["length"], "the state's length") != n:
        raise ValueError(f"the state's epoch has {state['length']} batches, this loader's {n}")
    if not 0 <= resumed.next_batch <= n:
        raise ValueError(f"next_batch {resumed.next_batch} out of range for {n} batches")
