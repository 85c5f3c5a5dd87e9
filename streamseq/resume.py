"""A loader's state: what it saves, what it checks on loading, and how rows carry over.

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
from typing import TYPE_CHECKING, Any

from ._checks import check_int
from .plan.progress import Progress, progress_at
from .read.ref import identity

if TYPE_CHECKING:
    from .loader import StreamLoader

STATE_VERSION = 2
_PLAN_FIELDS = ("tbins", "pad", "shuffle", "seed", "segment_length")


def plan_key(loader: StreamLoader) -> dict[str, Any]:
    """What decides the plan, except the rows and the epoch: compared field by field.

    Example:
        >>> import numpy as np
        >>> from streamseq import StreamLoader
        >>> key = plan_key(StreamLoader([np.arange(4)], 1, 2))
        >>> {k: key[k] for k in ("streams", "tbins", "pad", "shuffle", "seed")}
        {'streams': 1, 'tbins': 2, 'pad': 'zeros', 'shuffle': False, 'seed': 0}
    """
    sources = hashlib.sha256("\0".join(identity(r.source) for r in loader.refs).encode())
    return {
        "streams": len(loader.refs),
        "lengths": hashlib.sha256(loader.lengths.tobytes()).hexdigest()[:16],
        "sources": sources.hexdigest()[:16],
        "tbins": loader.tbins,
        "pad": loader.pad,
        "shuffle": loader.shuffle,
        "seed": loader.seed,
        "segment_length": loader.segment_length,
    }


def fingerprint(key: dict[str, Any]) -> str:
    """A short hash of :func:`plan_key`."""
    return hashlib.sha256(repr(sorted(key.items())).encode()).hexdigest()[:16]


def legacy_fingerprint(loader: StreamLoader) -> str:
    """The fingerprint states of version 1 carry (it covered the batch and world size)."""
    h = hashlib.sha256(loader.lengths.tobytes())
    h.update("\0".join(identity(r.source) for r in loader.refs).encode())
    key: tuple = (loader.batch_size, loader.tbins, loader.pad, loader.shuffle, loader.seed)
    key += (loader.world_size,)
    if loader.segment_length is not None:
        key += (loader.segment_length,)
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


def make_state(loader: StreamLoader, epoch: int, next_batch: int) -> dict[str, Any]:
    """The state of ``loader`` standing at ``next_batch`` of ``epoch``."""
    plan = loader.plan()
    rest = loader._rest_of(epoch)
    progress = progress_at(
        loader.units[2],
        plan.pieces,
        plan.assignment,
        loader.tbins,
        loader.pad == "pack",
        next_batch,
        None if rest is None else rest.done,
    )
    return {
        "version": STATE_VERSION,
        "epoch": epoch,
        "next_batch": next_batch,
        "length": plan.length,
        "fingerprint": loader.fingerprint,
        "plan": loader.plan_key,
        "batch_size": loader.batch_size,
        "world_size": loader.world_size,
        "progress": progress.to_state(),
        "resumed": None if rest is None else rest.to_state(),
    }


def read_state(loader: StreamLoader, state: Any) -> Resumed:
    """Check ``state`` against ``loader``; raises ValueError naming what is wrong."""
    if not isinstance(state, dict):
        raise ValueError(f"not a StreamLoader state: {type(state).__name__}")
    missing = {"epoch", "next_batch", "fingerprint"} - set(state)
    if missing:
        raise ValueError(f"not a StreamLoader state: missing {sorted(missing)}")
    version = state.get("version", 1)
    if version not in (1, STATE_VERSION):
        raise ValueError(f"state of version {version}, this streamseq reads 1 and {STATE_VERSION}")
    epoch = check_int(state["epoch"], "the state's epoch", 0)
    nxt = check_int(state["next_batch"], "the state's next_batch")
    if version == 1:  # the same rows only, as made
        if state["fingerprint"] != legacy_fingerprint(loader):
            raise ValueError(
                "this state (version 1) was made by a loader with other streams, lengths, "
                "batch size, tbins, pad, shuffle, seed or world size; resuming would "
                "silently change the run"
            )
        rows = loader.batch_size * loader.world_size
        return Resumed(epoch, nxt, None, rows, loader.batch_size, loader.world_size)
    missing = {"plan", "progress", "batch_size", "world_size"} - set(state)
    if missing:
        raise ValueError(f"not a StreamLoader state: missing {sorted(missing)}")
    if state["fingerprint"] != loader.fingerprint:
        differ = differences(state["plan"], loader.plan_key) or ["its fingerprint"]
        raise ValueError(
            f"this state was made by another plan, differing in {'; '.join(differ)}: "
            "resuming would silently change the run"
        )
    b = check_int(state["batch_size"], "the state's batch_size", 1)
    w = check_int(state["world_size"], "the state's world_size", 1)
    lengths = loader.units[2]
    if b * w == loader.batch_size * loader.world_size:
        resumed = state.get("resumed")
        rest = None if resumed is None else Progress.from_state(resumed, lengths)
        return Resumed(epoch, nxt, rest, b * w, b, w)
    if "length" in state and not 0 <= nxt <= check_int(state["length"], "the state's length"):
        raise ValueError(f"next_batch {nxt} out of range for {state['length']} batches")
    return Resumed(epoch, 0, Progress.from_state(state["progress"], lengths), b * w, b, w)


def row_map(loader: StreamLoader, resumed: Resumed) -> list[int]:
    """For each row of ``loader`` (this rank's), the global row of the state it continues.

    -1 where a row starts afresh (a stream from its first step, or one whose row had
    already moved on).
    """
    first = loader.rank * loader.batch_size
    mine = range(first, first + loader.batch_size)
    if resumed.rest is None or resumed.rows == loader.batch_size * loader.world_size:
        return list(mine)
    pieces, assignment, _ = loader._plan_from(resumed.epoch, resumed.rest)
    progress = resumed.rest
    row_of = dict(zip(progress.begun.tolist(), progress.row.tolist(), strict=True))
    out = []
    for g in mine:
        row = -1
        if len(assignment[g]):
            p = int(assignment[g][0])
            if pieces[1][p] > 0:  # a begun stream goes on in this row
                row = row_of.get(int(pieces[0][p]), -1)
        out.append(row)
    return out
