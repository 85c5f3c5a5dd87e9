"""The state of a run: what it saves, what it checks on loading, and how rows carry over.

A state names the plan it belongs to (the streams, ``tbins``, ``pad``, ``shuffle``,
``seed``, ``segment_length``) and where the run stands: epoch, next batch, the number of
global rows (``batch_size * world_size``) and where every stream of the epoch stands
(:class:`~streamseq.plan.progress.Progress`, one bit per stream plus the streams begun).
A loader with the same global rows resumes at the next batch, identically; one with
other rows plans the rest of the epoch from where every stream stands.

A state is read from a file, so nothing in it is trusted. :func:`read_state` reads it
once, up front, into a checked record (:class:`~streamseq.plan.saved.SavedState`: the
type and range of every field), then goes forward on the record alone: the plan it was
made by must be the loader's; the plan of the state's epoch on the state's rows is made
again, and its number of batches, ``next_batch`` and the progress after ``next_batch``
batches of it must be those the state holds; then the rest of a mixture's epoch is
reweighed if asked. A state of version 1 takes the same path: its rows are the loader's
and its progress is where its plan stands.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._redact import redact_urls
from .cursor import Cursor
from .draws import encode_draw
from .epoch import same_plans
from .fields import short
from .planner import EpochPlan, Epochs, epoch_units, plan_resumed
from .progress import Progress, progress_at
from .reweigh import HOW, mixture_differences, reweigh, spec_of_state
from .saved import STATE_VERSION, SavedState
from .spec import PlanSpec, key_fingerprint


def legacy_fingerprint(spec: PlanSpec) -> str:
    """The fingerprint states of version 1 carry (it covered the batch and world size)."""
    h = hashlib.sha256(spec.lengths.tobytes())
    spec.sources.feed(h)
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
        >>> differences({"streams": 1, "offsets": "c"}, {"streams": 1})
        ["the streams' sources (the state's are ranges of files, this loader's not)"]
        >>> differences({"streams": 1, "readers": "c"}, {"streams": 1, "readers": "d"})
        ["the streams' reader options (a dtype, a frame size or format, a rate, ...)"]
    """
    words = {
        "streams": "the number of streams",
        "lengths": "the streams' lengths",
        "sources": "the streams' sources (file paths or types)",
        "offsets": "the streams' sources (where each starts in its file, or what it zips)",
        "readers": "the streams' reader options (a dtype, a frame size or format, a rate, ...)",
    }
    out = []
    named = ("lengths", "sources", "offsets", "readers")
    same_count = saved.get("streams") == mine.get("streams")
    if "offsets" in saved and "offsets" not in mine and same_count:
        out.append("the streams' sources (the state's are ranges of files, this loader's not)")
    if "readers" in saved and "readers" not in mine and same_count:
        out.append(
            "the streams' reader options (the state's were read by readers that name "
            "them, this loader's not)"
        )
    for k in mine:
        if k in named and saved.get("streams") != mine.get("streams"):
            continue  # (they differ with the number of streams)
        if not same_value(saved.get(k), mine[k]):
            if k in named:
                out.append(words[k])
            else:
                what = words.get(k, k)
                out.append(
                    f"{what} (the state has {short(saved.get(k))}, this loader {mine[k]!r})"
                )
    return out


def same_value(saved: Any, mine: Any) -> bool:
    """Whether a plan setting read from a state is ``mine`` (integers of any type, not bools).

    Example:
        >>> same_value(np.int64(4), 4), same_value(True, 1), same_value(None, None)
        (True, False, True)
    """
    bools = (bool, np.bool_)
    if isinstance(saved, bools) or isinstance(mine, bools):
        return isinstance(saved, bools) and isinstance(mine, bools) and bool(saved) == bool(mine)
    if isinstance(mine, (int, np.integer)):
        return isinstance(saved, (int, np.integer)) and int(saved) == int(mine)
    return type(saved) is type(mine) and saved == mine


@dataclass(frozen=True)
class Resumed:
    """A checked state: where to start, and the plans of the resumed run.

    Attributes:
        epoch: the state's epoch.
        next_batch: the batch of ``epochs.plan(epoch)`` to start at.
        rest: the progress the epoch's plan starts from (None: its fresh plan).
        rows: the state's global rows.
        batch_size: the state's batch size.
        world_size: the state's world size.
        epochs: the plans of the resumed run (the state's epoch planned from ``rest``).
        replan: the state was planned by another version: the rest is planned from its
            progress.
        before: batches of the epoch delivered before ``rest`` was planned.
    """

    epoch: int
    next_batch: int
    rest: Progress | None
    rows: int
    batch_size: int
    world_size: int
    epochs: Epochs
    replan: bool = False
    before: int = 0


def make_state(
    spec: PlanSpec, plan: EpochPlan, next_batch: int, before: int = 0
) -> dict[str, Any]:
    """The state of a run of ``spec`` standing at ``next_batch`` of ``plan``'s epoch.

    ``before``: batches of the epoch delivered before ``plan`` (the rest of an epoch
    resumed on other rows); the state's ``epoch_done`` counts them with ``next_batch``.

    Example:
        >>> from streamseq.plan.planner import plan_epoch
        >>> spec = PlanSpec(np.array([6]), batch_size=1, tbins=2)
        >>> state = make_state(spec, plan_epoch(spec, 0), 1)
        >>> state["epoch"], state["next_batch"], state["length"], state["progress"]["next"]
        (0, 1, 3, [2])
    """
    rest = plan.rest
    resumed = None
    if rest is not None:
        resumed = {**rest.to_state(), "epoch": plan.epoch}
        if rest.draw is not None:
            resumed["draw"] = encode_draw(rest.draw, len(spec.units[2]))
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
        "progress": _progress_at(spec, plan, next_batch).to_state(),
        "resumed": resumed,
    }


def _progress_at(spec: PlanSpec, plan: EpochPlan, batches: int) -> Progress:
    """Where the units of ``plan``'s epoch stand after ``batches`` of its batches."""
    lengths, pack = (spec.units if plan.units is None else plan.units)[2], spec.pad == "pack"
    done = None if plan.rest is None else plan.rest.done
    cap = spec.max_streams_per_chunk if pack else None
    flags = plan_resumed(spec, plan.pieces, plan.rest, plan.units)  # (start a chunk)
    pieces, rows, t = plan.pieces, plan.assignment, spec.tbins
    return progress_at(lengths, pieces, rows, t, pack, batches, done, cap, False, flags)


def read_state(
    spec: PlanSpec, state: Any, per_epoch: bool = False, weights_changed: bool = False
) -> Resumed:
    """Check ``state`` against ``spec``, and its parts against each other.

    The state is read once (:meth:`~streamseq.plan.saved.SavedState.parse`: every field
    of its type and range), then checked forward: the plan must be ``spec``'s; the
    state's epoch planned again on the state's rows (from ``state['resumed']``) must have
    ``state['length']`` batches, and after ``state['next_batch']`` of them its units must
    stand where ``state['progress']`` says; then the rest is reweighed if asked.

    Args:
        spec: the plan of the loader resuming.
        state: what :func:`make_state` made (or a state of an older version).
        per_epoch: the loader's rows differ by epoch even without shuffle (see
            :class:`~streamseq.plan.planner.Epochs`).
        weights_changed: the state may be of the same mixture with other weights, or
            with fewer groups: the rest of its epoch follows ``spec``'s weights
            (:mod:`~streamseq.plan.reweigh`).

    Raises:
        ValueError: what is wrong, naming the field (``state['progress']['next']``).

    Example:
        >>> from streamseq.plan.planner import plan_epoch
        >>> spec = PlanSpec(np.array([6, 4]), batch_size=1, tbins=2)
        >>> state = make_state(spec, plan_epoch(spec, 0), 1)
        >>> read_state(spec, state).next_batch
        1
        >>> state["next_batch"] = 2
        >>> read_state(spec, state)
        Traceback (most recent call last):
        ...
        ValueError: state['progress']['next'] does not match state['next_batch']=2 of ...
    """
    saved = SavedState.parse(state, spec.rows, len(spec.units[2]))
    old = _plan_of(spec, saved, weights_changed)
    resumed, progress = _resume(old, saved, per_epoch)
    if old is spec:
        return resumed
    return _reweighed(old, spec, saved, resumed, progress, per_epoch)


def _plan_of(spec: PlanSpec, saved: SavedState, weights_changed: bool) -> PlanSpec:
    """The plan the state was made by: ``spec``'s settings, and its fingerprint theirs.

    Returns ``spec``, or with ``weights_changed`` the spec of the state's mixture when
    only its weights differ or groups were added.
    """
    plan = saved.plan
    if plan is None:  # (version 1: the fingerprint alone names the plan)
        if saved.fingerprint != legacy_fingerprint(spec):
            raise ValueError(
                f"this state of version 1 ({_named_version(saved)}) was made by a loader "
                "with other streams, lengths, batch size, tbins, pad, shuffle, seed or "
                "world size, or its state['fingerprint'] is not theirs: resuming would "
                "silently change the run"
            )
        return spec
    mixed, allowed = [], False
    if "mixture" in plan or spec.mixture is not None:
        mixed, allowed = mixture_differences(plan.get("mixture"), spec.key.get("mixture"))
        if mixed and allowed and weights_changed:
            spec = spec_of_state(spec, plan["mixture"])
            mixed, allowed = mixture_differences(plan.get("mixture"), spec.key.get("mixture"))
    key, fingerprint = spec.key, spec.fingerprint
    unnamed = tuple(k for k in ("offsets", "readers") if k in key and k not in plan)
    if unnamed:
        # saved before streams were named by their place or by how they are read:
        # checked by the key it has
        key = spec.key_without(unnamed)
        fingerprint = key_fingerprint(key)
    differ = differences(plan, key)
    if mixed:  # named by group: not again as the mixture's key or all the streams
        covered = ("mixture", "the number of streams", "the streams'")
        differ = mixed + [d for d in differ if not d.startswith(covered)]
    if differ:
        hint = f" ({HOW})" if allowed and len(differ) == len(mixed) else ""
        named = [
            d for d in differ if d.startswith(("the streams' sources", "the streams' reader"))
        ]
        raise ValueError(
            f"this state was made by another plan, differing in {'; '.join(differ)}: "
            f"resuming would silently change the run{hint}"
            + (f" ({_files_of(spec)})" if named else "")
            + (
                f" ({_readers_of(spec)})"
                if any(d.startswith("the streams' reader") for d in differ)
                else ""
            )
        )
    if set(plan) != set(key):
        raise ValueError(
            f"state['plan'] has the fields {sorted(short(k) for k in plan)}, "
            f"this streamseq's plans {sorted(key)}"
        )
    if saved.fingerprint != fingerprint:
        raise ValueError(
            f"state['fingerprint']={short(saved.fingerprint)} is not that of state['plan'] "
            f"({fingerprint!r}): resuming would silently change the run"
        )
    return spec


#: the files (or types) a refusal names
SHOWN = 3


def _files_of(spec: PlanSpec) -> str:
    """The files (or types) of ``spec``'s streams, in words: the first :data:`SHOWN`.

    Their URLs' credentials hidden (:func:`~streamseq._redact.redact_urls`).

    Example:
        >>> spec = PlanSpec(np.array([4, 4]), 1, 2, sources=("a.bin", "ndarray"))
        >>> _files_of(spec)
        "this loader's streams are of 'a.bin', 'ndarray'"
    """
    names = spec.sources.names
    shown = ", ".join(repr(redact_urls(n)) for n in names[:SHOWN])
    more = f" and {len(names) - SHOWN} other files or types" if len(names) > SHOWN else ""
    return f"this loader's streams are of {shown}{more}"


def _readers_of(spec: PlanSpec) -> str:
    """How ``spec``'s streams are read, in words: the first :data:`SHOWN` readers.

    A reader names only the options that change the steps (never credentials), and any
    URL in it is hidden as well.

    Example:
        >>> from streamseq.plan.identities import Identities
        >>> ids = Identities.repeat("a.bin", 2, reader="tokens(dtype=<i2)")
        >>> _readers_of(PlanSpec(np.array([4, 4]), 1, 2, sources=ids))
        'this loader reads them as tokens(dtype=<i2)'
    """
    readers = spec.sources.readers
    names = [n for n in (() if readers is None else readers.names) if n]
    if not names:
        return "this loader's readers name no options"
    shown = ", ".join(redact_urls(n) for n in names[:SHOWN])
    more = f" and {len(names) - SHOWN} other readers" if len(names) > SHOWN else ""
    return f"this loader reads them as {shown}{more}"


def _resume(spec: PlanSpec, saved: SavedState, per_epoch: bool) -> tuple[Resumed, Progress]:
    """A state of ``spec``'s plan: its epoch planned on its rows, its position checked.

    The state's rows are ``spec``'s where it does not name them (version 1); its
    progress, where it has none (version 1), is where its plan stands at ``next_batch``.

    Returns:
        The resumed run, and where the units of the state's epoch stand.
    """
    epoch, nxt, done = saved.epoch, saved.next_batch, saved.epoch_done
    b = spec.batch_size if saved.batch_size is None else saved.batch_size
    w = spec.world_size if saved.world_size is None else saved.world_size
    old = spec.replace(batch_size=b, world_size=w, rank=0, version=saved.plan_version)
    draw = saved.draw
    if draw is not None and spec.mixture is None:
        raise ValueError("state['resumed']['draw'] names units drawn by a mixture")
    if draw is not None and saved.draw_units != len(spec.units[2]):
        raise ValueError(
            f"state['resumed']['draw'] is the count of each of {saved.draw_units} units, "
            f"this plan has {len(spec.units[2])}"
        )
    lengths = epoch_units(spec, epoch, draw)[2]
    rest = None if saved.resumed is None else Progress.from_state(saved.resumed, lengths, draw)
    progress = None
    if saved.progress is not None:
        progress = Progress.from_state(saved.progress, lengths, draw)
    pack = spec.pad == "pack"
    segments = pack and spec.segment_length is not None
    alike = same_plans(old.version, spec.version, pack and rest is not None, segments)
    same = old.rows == spec.rows and alike
    # on the same rows, the loader's plans: the state's plan is kept for the pass reading it
    at = None if rest is None else (epoch, rest)
    planned = Epochs(spec if same else old, at, per_epoch, done - nxt)
    plan = planned.plan(epoch)
    where = _where(saved, old)
    length = plan.length if saved.length is None else saved.length
    _check_position(length, nxt, plan.length, where)
    expected = _progress_at(old, plan, nxt)
    if progress is None:
        progress = expected
    _check_progress(progress, expected, where)
    _check_epoch_done(done, nxt, rest, lengths)
    if same:
        return Resumed(epoch, nxt, rest, old.rows, b, w, planned, before=done - nxt), progress
    if nxt >= length:  # saved at the end of its epoch: the next one, on this loader's rows
        fresh = Epochs(spec, None, per_epoch)
        return Resumed(epoch + 1, 0, None, old.rows, b, w, fresh), progress
    # not at its end: the rest stays in the state's epoch, even where every unit is done
    # (the padding that ends a shuffled packed epoch): its rest then has no batch
    epochs = Epochs(spec, (epoch, progress), per_epoch, before=done)
    replan = not alike
    resumed = Resumed(epoch, 0, progress, old.rows, b, w, epochs, replan=replan, before=done)
    return resumed, progress


def _check_epoch_done(done: int, nxt: int, rest: Progress | None, lengths: np.ndarray) -> None:
    """The batches of the state's epoch delivered: ``next_batch`` and those before ``rest``.

    A batch delivers at least one step, except the padding that ends a fresh epoch of a
    mixture whose draws vary (its length is that of any draw): once every unit of the
    draw is done, the epoch's last batches deliver nothing. Such an epoch goes on past
    them only when the weights changed there and the rest was drawn anew (``rest.draw``).
    So those before a rest are at most the steps ``rest`` says were delivered, and
    unbounded by them where the rest was drawn anew (the padding came from weights and
    steps the state no longer names).
    """
    name = "state['epoch_done']"
    if rest is None and done != nxt:
        raise ValueError(
            f"{name}={short(done)} does not match state['next_batch']={nxt}: "
            "without state['resumed'], the epoch was planned once"
        )
    if done < nxt:
        raise ValueError(f"{name}={short(done)} is below state['next_batch']={nxt}")
    if rest is None or rest.draw is not None:
        return
    most = nxt + int(lengths[rest.done].sum() + rest.next.sum())
    if done > most:
        raise ValueError(
            f"{name}={short(done)} is out of range [{nxt}, {most}]: state['next_batch']={nxt} "
            f"after the {most - nxt} steps state['resumed'] says were delivered"
        )


def _named_version(saved: SavedState) -> str:
    """How a state of version 1 names its version, in words."""
    return "state['version']=1" if saved.named_version else "no state['version']"


def _where(saved: SavedState, old: PlanSpec) -> str:
    """The plan a state's position is checked against, in words naming its fields."""
    if saved.version == 1:
        return (
            f"state['next_batch']={saved.next_batch} of state['epoch']={saved.epoch} "
            f"({_named_version(saved)})"
        )
    version = "state['plan_version']" if saved.named_plan_version else "the state's version"
    return (
        f"state['next_batch']={saved.next_batch} of state['epoch']={saved.epoch}, "
        f"planned on state['batch_size']={old.batch_size} x "
        f"state['world_size']={old.world_size} global rows by plan version "
        f"{old.version} ({version}), "
        + (
            "from state['resumed']"
            if saved.resumed is not None
            else "afresh (state['resumed'] is None)"
        )
    )


def _check_position(length: int, nxt: int, n: int, where: str) -> None:
    """The state's length must be the plan's, and ``next_batch`` within it."""
    if length != n:
        raise ValueError(f"state['length']={short(length)} is not the {n} batches of {where}")
    if nxt > n:
        raise ValueError(
            f"state['next_batch']={short(nxt)} is out of range: {n} batches in {where}"
        )


def _check_progress(saved: Progress, expected: Progress, where: str) -> None:
    """The state's progress must be where the plan stands after ``next_batch`` batches."""
    for field in ("done", "begun", "next", "row"):
        got, want = getattr(saved, field), getattr(expected, field)
        if got.shape == want.shape and (got == want).all():
            continue
        if field == "done":
            what = f"units {short(np.flatnonzero(got != want).tolist())} differ"
        else:
            what = f"expected {short(want.tolist())}, got {short(got.tolist())}"
        raise ValueError(f"state['progress'][{field!r}] does not match {where}: {what}")


def _reweighed(
    old: PlanSpec,
    spec: PlanSpec,
    saved: SavedState,
    checked: Resumed,
    progress: Progress,
    per_epoch: bool,
) -> Resumed:
    """A state of ``old``'s mixture (``checked`` against it) resumed under ``spec``'s weights.

    ``progress``: where the units of the state's epoch stand (checked).

    The rest of the state's epoch is drawn anew (:func:`~streamseq.plan.reweigh.reweigh`)
    and planned on ``spec``'s rows; a state saved at the end of its epoch starts the next.
    The end is that of the state's own plan (``length``), on any rows: a state saved in
    the padding that ends a fresh epoch (every unit done, batches left) is not at its end,
    and its rest is drawn anew, as on the state's rows.
    """
    epoch, nxt = checked.epoch, checked.next_batch
    assert saved.length is not None  # (version 2 on)
    draw = saved.draw
    if draw is None:
        draw = old.draws.of(epoch)  # type: ignore[union-attr]
    if draw is None:
        draw = np.arange(len(old.units[2]), dtype=np.int64)
    b, w, rows = checked.batch_size, checked.world_size, checked.rows
    cursor = Cursor.from_state(epoch, saved.next_batch, saved.length)
    if cursor.epoch != epoch:  # saved at the end of its epoch (both fields checked)
        return Resumed(cursor.epoch, cursor.next, None, rows, b, w, Epochs(spec, None, per_epoch))
    rest = reweigh(old, spec, epoch, progress, draw)
    done = checked.before + nxt
    epochs = Epochs(spec, (epoch, rest), per_epoch, before=done)
    return Resumed(epoch, 0, rest, rows, b, w, epochs, replan=True, before=done)


def row_map(spec: PlanSpec, resumed: Resumed) -> list[int]:
    """For each row of ``spec``'s rank, the global row of the state it continues.

    -1 where a row starts afresh (a stream from its first step, or one whose row had
    already moved on).
    """
    if resumed.rest is None and resumed.rows != spec.rows:
        return [-1] * spec.batch_size  # the state's epoch had ended: every row starts afresh
    if resumed.rest is None or (resumed.rows == spec.rows and not resumed.replan):
        first = spec.rank * spec.batch_size
        rows = list(range(first, first + spec.batch_size))
        if resumed.rest is not None and resumed.next_batch == 0:
            # saved before the first batch of a rest planned anew: a row that batch resets
            # (its stream on no row of the run before) carries nothing
            goes_on = resumed.epochs.plan(resumed.epoch).continued(spec)
            rows = [r if c >= 0 else -1 for r, c in zip(rows, goes_on, strict=True)]
        return rows
    return resumed.epochs.plan(resumed.epoch).continued(spec)
