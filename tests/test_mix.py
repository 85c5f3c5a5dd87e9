"""mix(): weighted mixtures of groups of streams, read by StreamLoader deterministically."""

from __future__ import annotations

import json
import math
import warnings
from collections import Counter
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from helpers import as_numpy, assert_same
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from streamseq import Mixture, StreamLoader, interleave_streams, mix
from streamseq.plan.planner import plan_epoch
from streamseq.testing import coded_streams

CODE = 2**32


def runs(batches, pack: bool = False, resumed: bool = False):
    """Every occurrence of a stream the batches deliver: ``(stream, steps)`` per row run.

    Checks on the way that data is the code of (stream, step), padding is zero, and
    without ``pack`` that a run starts at a chunk start with ``reset`` and only there
    (``resumed``: in the first batch a row may go on from a row of the state, unreset).
    """
    out = []
    arrays = as_numpy(batches)
    if not arrays:
        return out
    rows = arrays[0][0].shape[0]
    for r in range(rows):
        current = None
        for i, (data, reset, valid, stream, step) in enumerate(arrays):
            for t in range(valid.shape[1]):
                s, k = int(stream[r, t]), int(step[r, t])
                if not valid[r, t]:
                    assert s == k == -1 and data[r, t] == 0
                    continue
                assert data[r, t] == s * CODE + k + 1
                new = current is None or k == 0 or s != current[0] or k != current[1][-1] + 1
                if not pack and not (resumed and i == 0 and k > 0):
                    assert bool(reset[r]) == (t == 0 and new) or t > 0, (i, r)
                    assert not new or t == 0, (i, r, t)
                if new:
                    current = (s, [k])
                    out.append(current)
                else:
                    current[1].append(k)
    return out


def steps_per_stream(found) -> Counter:
    """Steps delivered of each stream, over the ``(stream, steps)`` runs of :func:`runs`."""
    total = Counter()
    for s, steps in found:
        total[s] += len(steps)
    return total


def occurrences(batches, lengths, pack=False) -> Counter:
    """How many times each stream was delivered whole (every run must be whole)."""
    got = Counter()
    for s, steps in runs(batches, pack):
        assert steps == list(range(lengths[s])), (s, steps[:5])
        got[s] += 1
    return got


@st.composite
def groups_and_weights(draw, max_groups: int = 3):
    """Groups of coded streams (lengths), weights, and loader settings."""
    count = draw(st.integers(1, max_groups))
    sizes = [draw(st.lists(st.integers(0, 25), min_size=1, max_size=6)) for _ in range(count)]
    weights = {}
    for g, lengths in enumerate(sizes):
        w = draw(st.sampled_from([0, 1, 2, 0.5, 3]))
        weights[f"g{g}"] = float(w) if sum(lengths) else 0.0
    assume(any(weights.values()))
    flat = [n for g in sizes for n in g]
    streams = coded_streams(flat)
    groups, at = {}, 0
    for g, lengths in enumerate(sizes):
        groups[f"g{g}"] = streams[at : at + len(lengths)]
        at += len(lengths)
    kw = dict(
        batch_size=draw(st.integers(1, 4)),
        tbins=draw(st.integers(1, 6)),
        shuffle=draw(st.booleans()),
        seed=draw(st.integers(0, 5)),
        pad=draw(st.sampled_from(["zeros", "pack"])),
    )
    return groups, weights, flat, kw


def group_steps(m: Mixture, batches) -> dict[str, int]:
    """Valid steps of each group in ``batches``."""
    out = dict.fromkeys(m.names, 0)
    for b in batches:
        for s, n in Counter(b.stream[b.valid].tolist()).items():
            out[m.group_of(s)] += n
    return out


def quiet(streams, *args, **kw) -> StreamLoader:
    """A loader, without the warning about rows left empty."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return StreamLoader(streams, *args, **kw)


# --- shares -----------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(groups_and_weights(), st.integers(0, 3))
def test_each_group_gets_its_share_of_the_delivered_steps(case, epoch):
    groups, weights, lengths, kw = case
    m = mix(groups, weights)
    loader = quiet(m, **kw)
    loader.set_epoch(epoch)
    batches = list(loader)
    assert len(batches) == len(loader) == loader.epoch_length(0) == loader.epoch_length(epoch)
    got = occurrences(batches, lengths, pack=kw["pad"] == "pack")
    steps = group_steps(m, batches)
    total = sum(steps.values())
    norm = sum(weights.values())
    for name, w in weights.items():
        assert abs(steps[name] - w / norm * total) <= max(0.01 * total, max(lengths)), name
    assert sum(got.values()) == len(runs(batches, kw["pad"] == "pack"))


@settings(max_examples=40, deadline=None)
@given(groups_and_weights(), st.integers(0, 3))
def test_a_group_not_upsampled_gives_each_stream_at_most_once(case, epoch):
    groups, weights, lengths, kw = case
    m = mix(groups, weights)
    loader = quiet(m, **kw)
    loader.set_epoch(epoch)
    got = occurrences(list(loader), lengths, pack=kw["pad"] == "pack")
    total, norm = sum(lengths), sum(weights.values())
    for name, r in m.ranges.items():
        size = sum(lengths[i] for i in r)
        if weights[name] / norm * total <= size:
            assert all(got[i] <= 1 for i in r), name


@settings(max_examples=30, deadline=None)
@given(groups_and_weights())
def test_weights_proportional_to_sizes_deliver_every_step_once(case):
    groups, _, lengths, kw = case
    m0 = mix(groups)
    sizes = {n: float(sum(lengths[i] for i in r)) for n, r in m0.ranges.items()}
    assume(any(sizes.values()))
    m = mix(groups, sizes)
    a, b = quiet(m, **kw), quiet(list(m), **kw)
    for epoch in range(2):
        a.set_epoch(epoch)
        b.set_epoch(epoch)
        batches = list(a)
        assert_same(batches, list(b))  # the plain loader's batches
        got = occurrences(batches, lengths, kw["pad"] == "pack")
        assert got == Counter({s: 1 for s, n in enumerate(lengths) if n})


@settings(max_examples=30, deadline=None)
@given(groups_and_weights())
def test_without_weights_a_mixture_is_its_list_of_streams(case):
    groups, _, _, kw = case
    m = mix(groups)
    a, b = quiet(m, **kw), quiet(list(m), **kw)
    assert_same(list(a), list(b))
    assert a.state_dict()["plan"]["mixture"]["groups"][0]["name"] == "g0"


def test_an_upsampled_group_reads_each_stream_k_or_k_plus_one_times():
    small = coded_streams([5] * 4)
    big = [s + 10**12 for s in coded_streams([5] * 24)]  # (other codes: not checked here)
    m = mix({"small": small, "big": big}, {"small": 3, "big": 1})
    loader = StreamLoader(m, batch_size=4, tbins=5, shuffle=True)
    extra = set()
    for epoch in range(4):
        loader.set_epoch(epoch)
        counts = Counter()
        for b in loader:
            counts.update(b.stream[b.valid & (b.step == 0)].tolist())
        reads = [counts[i] for i in range(4)]
        assert set(reads) <= {5, 6} and sum(reads) == 21  # 0.75 * 140 steps / 5
        extra.add(tuple(r == 6 for r in reads))
    assert len(extra) > 1  # which streams are read once more changes by epoch


def test_summary_counts_what_the_loader_delivers():
    m = mix({"a": coded_streams([7, 3, 9]), "b": coded_streams([4] * 5)}, {"a": 1, "b": 2})
    loader = StreamLoader(m, batch_size=2, tbins=3, shuffle=True)
    for epoch in range(3):
        loader.set_epoch(epoch)
        summary = m.summary(loader, epoch)
        steps = group_steps(m, list(loader))
        assert {g.group: g.steps for g in summary.groups} == steps
        assert summary.batches == len(loader)
        assert "(row ends)" in str(summary)


def test_a_small_positive_weight_is_read_on_average_over_epochs():
    web = coded_streams([20] * 50)
    books = [s + 50 * CODE for s in coded_streams([60] * 4)]  # (codes of streams 50-53)
    m = mix({"web": web, "books": books}, {"web": 0.98, "books": 0.02})
    loader = StreamLoader(m, batch_size=4, tbins=10, shuffle=True)
    read = []
    for epoch in range(50):
        loader.set_epoch(epoch)
        batches = list(loader)
        assert len(batches) == len(loader)
        read.append(group_steps(m, batches)["books"])
    share = 0.02 * (50 * 20 + 4 * 60)  # 24.8 steps: under half a book
    assert set(read) == {0, 60}  # whole books, in some epochs only
    assert abs(np.mean(read) - share) < 0.5 * share


def row_steps(rows) -> list[list[tuple[int, int]]]:
    """``(stream, step)`` of every step of each of :func:`interleave_streams`' rows."""
    out = []
    for row in rows:
        steps = []
        for j, s in enumerate(row.stream_ids.tolist()):
            first = int(row.starts[j])
            steps += [(s, first + k) for k in range(int(row.lengths[j]))]
        out.append(steps)
    return out


@settings(max_examples=30, deadline=None)
@given(groups_and_weights(), st.integers(0, 3))
def test_interleave_streams_of_a_mixture_reads_the_loaders_rows(case, epoch):
    groups, weights, _, kw = case
    m = mix(groups, weights)
    loader = quiet(m, **kw)
    loader.set_epoch(epoch)
    delivered = [[] for _ in range(loader.batch_size)]
    for b in as_numpy(loader):
        _, _, valid, stream, step = b
        for r in range(len(delivered)):
            got = zip(stream[r][valid[r]].tolist(), step[r][valid[r]].tolist(), strict=True)
            delivered[r] += list(got)
    rows = interleave_streams(
        m,
        kw["batch_size"],
        shuffle=kw["shuffle"],
        seed=kw["seed"],
        epoch=epoch,
        tbins=kw["tbins"],
        pack=kw["pad"] == "pack",
    )
    assert row_steps(rows) == delivered
    # without tbins: the same draw of streams, dealt out in order
    plain = interleave_streams(
        m, kw["batch_size"], shuffle=kw["shuffle"], seed=kw["seed"], epoch=epoch
    )
    drawn = Counter(s for r in delivered for s, k in r if k == 0)
    assert Counter(s for r in row_steps(plain) for s, k in r if k == 0) == drawn


def test_interleave_streams_leaves_out_a_group_of_weight_0():
    m = mix({"a": coded_streams([3, 4]), "b": coded_streams([5])}, {"a": 1, "b": 0})
    for tbins in (None, 2):
        ids = [s for r in interleave_streams(m, 2, tbins=tbins) for s in r.stream_ids.tolist()]
        assert 2 not in ids and set(ids) == {0, 1}  # (a: 12 steps of 7, read again in part)
    up = mix({"a": coded_streams([2, 2]), "b": coded_streams([2, 2])}, {"a": 3, "b": 1})
    for tbins in (None, 2):
        ids = [s for r in interleave_streams(up, 2, tbins=tbins) for s in r.stream_ids.tolist()]
        assert sum(s < 2 for s in ids) == 3 and sum(s >= 2 for s in ids) == 1  # 6 and 2 steps


# --- determinism: workers, resume ------------------------------------------------------


def _mixture():
    lengths = [9, 4, 13, 2, 7, 11, 5, 3, 8, 6]
    streams = coded_streams(lengths)
    m = mix({"a": streams[:3], "b": streams[3:8], "c": streams[8:]}, {"a": 1, "b": 2, "c": 0.5})
    return m, lengths


@pytest.mark.parametrize("pad", ["zeros", "pack"])
def test_workers_change_nothing(pad):
    m, _ = _mixture()
    kw = dict(batch_size=4, tbins=3, shuffle=True, pad=pad)
    expected = []
    plain = StreamLoader(m, **kw)
    for epoch in range(2):
        plain.set_epoch(epoch)
        expected += as_numpy(plain)
    for method in ("thread", "process"):
        loader = StreamLoader(m, num_workers=2, method=method, **kw)
        got = []
        for epoch in range(2):
            loader.set_epoch(epoch)
            got += as_numpy(loader)
        loader.close()
        assert_same(got, expected)


@settings(max_examples=10, deadline=None)
@given(groups_and_weights(), st.sampled_from(["thread", "process"]), st.booleans())
def test_any_number_of_workers_gives_the_same_batches(case, method, persistent):
    groups, weights, _, kw = case
    m = mix(groups, weights)
    plain = quiet(m, **kw)
    workers = quiet(m, num_workers=2, method=method, persistent_workers=persistent, **kw)
    try:
        for epoch in range(2):
            plain.set_epoch(epoch)
            workers.set_epoch(epoch)
            assert_same(list(workers), list(plain))
    finally:
        workers.close()


def test_ranks_share_one_plan_of_the_mixture():
    m, _ = _mixture()
    one = StreamLoader(m, batch_size=4, tbins=3, shuffle=True)
    ranks = [StreamLoader(m, 2, 3, shuffle=True, rank=r, world_size=2) for r in range(2)]
    assert {len(r) for r in ranks} == {len(one)}
    for a, b0, b1 in zip(one, *ranks, strict=True):
        np.testing.assert_array_equal(a.stream.numpy(), np.concatenate([b0.stream, b1.stream]))


def test_persistent_workers_read_the_rest_drawn_with_other_weights():
    m, _ = _mixture()
    groups = {n: list(m[r.start : r.stop]) for n, r in m.ranges.items()}
    run = StreamLoader(m, batch_size=2, tbins=3, shuffle=True)
    it = iter(run)
    for _ in range(5):
        next(it)
    state = run.state_dict()
    new = mix(groups, {"a": 3, "b": 1, "c": 1})
    expected = StreamLoader(new, 3, 3, shuffle=True)
    expected.load_state_dict(state, weights_changed=True)
    workers = StreamLoader(new, 3, 3, shuffle=True, num_workers=2, persistent_workers=True)
    workers.load_state_dict(state, weights_changed=True)
    try:
        assert_same(list(workers), list(expected))
        assert_same(list(workers), list(expected))  # the next epoch, planned by the workers
    finally:
        workers.close()


@settings(max_examples=25, deadline=None)
@given(groups_and_weights(), st.integers(0, 2), st.data())
def test_a_resumed_run_delivers_the_rest_of_the_uninterrupted_one(case, epoch, data):
    groups, weights, lengths, kw = case
    m = mix(groups, weights)
    run = quiet(m, **kw)
    run.set_epoch(epoch)
    whole = as_numpy(run)
    k = data.draw(st.integers(0, len(whole)))
    it = iter(run)
    for _ in range(k):
        next(it)
    state = json.loads(json.dumps(run.state_dict()))
    again = quiet(m, **kw)
    again.load_state_dict(state)
    if k < len(whole):
        assert_same(list(again), whole[k:])
    # other rows: every occurrence delivered whole once, across the resume
    other = quiet(m, **{**kw, "batch_size": kw["batch_size"] % 3 + 1})
    other.load_state_dict(state)
    assert len(other.row_map(state)) == other.batch_size
    rest = list(other) if other.epoch == state["epoch"] else []  # (nothing left: the next)
    pack = kw["pad"] == "pack"
    before = runs(whole[:k], pack)
    after = runs(rest, pack, resumed=True)
    assert steps_per_stream(before + after) == steps_per_stream(runs(whole, pack))


def test_a_state_of_another_mixture_is_refused_naming_the_group():
    m, _ = _mixture()
    run = StreamLoader(m, batch_size=2, tbins=3)
    next(iter(run))
    state = run.state_dict()
    groups = {n: list(m[r.start : r.stop]) for n, r in m.ranges.items()}
    other = StreamLoader(mix(groups, {"a": 1, "b": 1, "c": 0.5}), batch_size=2, tbins=3)
    with pytest.raises(ValueError, match="group 'b': weight .*weights_changed=True"):
        other.load_state_dict(state)
    fewer = StreamLoader(mix({"a": groups["a"], "b": groups["b"]}, {"a": 1, "b": 1}), 2, 3)
    with pytest.raises(ValueError, match="group 'c' of the state is not in"):
        fewer.load_state_dict(state, weights_changed=True)
    renamed = StreamLoader(mix({"a": groups["a"], "x": groups["b"] + groups["c"]}), 2, 3)
    with pytest.raises(ValueError, match="group 'b' of the state"):
        renamed.load_state_dict(state)
    with pytest.raises(ValueError, match="the mixture \\(the state has groups"):
        StreamLoader(list(m), 2, 3).load_state_dict(state)


@settings(max_examples=25, deadline=None)
@given(groups_and_weights(), st.data())
def test_resuming_with_other_weights_keeps_what_was_delivered(case, data):
    groups, weights, lengths, kw = case
    m = mix(groups, weights)
    run = quiet(m, **kw)
    run.set_epoch(0)
    whole = as_numpy(run)
    k = data.draw(st.integers(0, len(whole)))
    it = iter(run)
    for _ in range(k):
        next(it)
    state = json.loads(json.dumps(run.state_dict()))
    sizes = {n: sum(len(s) for s in groups[n]) for n in groups}
    new = {n: data.draw(st.sampled_from([0, 1, 2, 5])) if sizes[n] else 0 for n in groups}
    assume(any(new.values()))
    kw = {**kw, "batch_size": data.draw(st.integers(1, 4))}  # on these rows or others
    other = quiet(mix(groups, new), **kw)
    other.load_state_dict(state, weights_changed=True)
    assert len(other.row_map(state, weights_changed=True)) == other.batch_size
    rest = list(other)
    pack = kw["pad"] == "pack"
    # begun streams go on from where they stood, nothing delivered is delivered again
    before, after = runs(whole[:k], pack), runs(rest, pack, resumed=True)
    for s, steps in before:
        if steps[-1] + 1 < lengths[s]:  # begun: its rest comes first in some row
            assert any(t == s and st_[0] == steps[-1] + 1 for t, st_ in after), s
    for s, steps in after:
        assert steps[-1] + 1 == lengths[s]  # whole, or the rest of a begun one
    # the steps after the resume follow the new weights
    steps = dict.fromkeys(m.names, 0)
    for s, st_ in after:
        steps[m.group_of(s)] += len(st_)
    total, norm = sum(steps.values()), sum(new.values())
    begun = sum(len(st_) for s, st_ in after if st_[0] > 0)
    if k and k < len(whole):
        for name, w in new.items():
            slack = max(0.01 * total, max(lengths)) + begun
            assert abs(steps[name] - w / norm * total) <= slack, name
    # a state saved after the resume loads again, with the new weights, and goes on
    if rest:
        again = quiet(mix(groups, new), **kw)
        again.load_state_dict(state, weights_changed=True)
        it = iter(again)
        next(it)
        saved = json.loads(json.dumps(again.state_dict()))
        third = quiet(mix(groups, new), **kw)
        third.load_state_dict(saved)
        if third.epoch == saved["epoch"]:  # (else the epoch had ended)
            assert_same(list(third), rest[1:])


@pytest.mark.parametrize("changed", [False, True])
@pytest.mark.parametrize("rows", [1, 3])
def test_a_state_saved_in_the_padding_that_ends_an_epoch_takes_other_weights(rows, changed):
    """Every fresh epoch whose draws vary has the length of the biggest draw: one that
    draws less ends with padding. A state saved in that padding, loaded with other
    weights, has the rest of its epoch drawn anew; a state saved in that rest loads
    again (the same weights, or changed once more; the same rows or others) and goes on
    exactly."""
    streams = coded_streams([20, 2])
    groups = {"a": streams[:1], "b": streams[1:]}
    kw = dict(tbins=1, seed=2)
    whole = list(quiet(mix(groups, {"a": 1, "b": 1}), 1, **kw))
    steps = [int(b.valid.sum()) for b in whole]
    k = sum(steps) + 2
    assert steps[-1] == 0 and steps[k - 1] == 0 and k < len(whole)  # saved in the padding
    run = quiet(mix(groups, {"a": 1, "b": 1}), 1, **kw)
    it = iter(run)
    for _ in range(k):
        next(it)
    state = json.loads(json.dumps(run.state_dict()))
    new = {"a": 0, "b": 1}
    resumed = quiet(mix(groups, new), rows, **kw)
    resumed.load_state_dict(state, weights_changed=True)
    assert resumed.epoch == 0 and resumed.progress.done == k
    rest = list(resumed)
    assert rest and all(s == 1 for s, _ in runs(rest))  # the new weights: b only
    for s, taken in runs(rest):
        assert taken == list(range(len(streams[s])))
    again = {"a": 1, "b": 3} if changed else new
    for j in range(1, len(rest)):
        run = quiet(mix(groups, new), rows, **kw)
        run.load_state_dict(state, weights_changed=True)
        it = iter(run)
        for _ in range(j):
            next(it)
        saved = json.loads(json.dumps(run.state_dict()))
        assert saved["epoch_done"] == k + j
        for b in (rows, rows % 3 + 1):
            third = quiet(mix(groups, again), b, **kw)
            third.load_state_dict(saved, weights_changed=changed)
            assert third.epoch == 0 and third.progress.done == k + j
            after = list(third)
            if b == rows and not changed:
                assert_same(after, rest[j:])
            for s, taken in runs(after, resumed=True):
                assert taken[-1] + 1 == len(streams[s])  # whole, or the rest of a begun one
        with pytest.raises(ValueError, match=r"state\['epoch_done'\]=0 is below"):
            quiet(mix(groups, new), rows, **kw).load_state_dict({**saved, "epoch_done": 0})


def test_a_group_added_when_resuming():
    m, lengths = _mixture()
    run = StreamLoader(m, batch_size=2, tbins=3, shuffle=True)
    it = iter(run)
    for _ in range(4):
        next(it)
    state = run.state_dict()
    groups = {n: list(m[r.start : r.stop]) for n, r in m.ranges.items()}
    extra = [s + 100 * CODE for s in coded_streams([6, 6])]
    bigger = mix({"new": extra, **groups}, {"new": 1, "a": 1, "b": 2, "c": 0.5})
    loader = StreamLoader(bigger, batch_size=2, tbins=3, shuffle=True)
    loader.load_state_dict(state, weights_changed=True)
    streams = Counter(bigger.group_of(s) for b in loader for s in b.stream[b.valid].tolist())
    assert streams["new"] > 0


def row_runs(batches) -> list[list[tuple[int, list[int], int, int, bool]]]:
    """Per row, its runs in order: ``(stream, steps, first batch, first t, reset there)``.

    Checks on the way that data is the code of (stream, step) and padding is zero.
    """
    arrays = as_numpy(batches)
    if not arrays:
        return []
    out = []
    for r in range(arrays[0][0].shape[0]):
        found = []
        for i, (data, reset, valid, stream, step) in enumerate(arrays):
            for t in np.flatnonzero(valid[r]).tolist():
                s, k = int(stream[r, t]), int(step[r, t])
                assert data[r, t] == s * CODE + k + 1
                last = found[-1] if found else None
                if last is None or k == 0 or s != last[0] or k != last[1][-1] + 1:
                    found.append((s, [k], i, t, bool(reset[r])))
                else:
                    last[1].append(k)
        out.append(found)
    return out


@st.composite
def weight_changes(draw, groups, lengths):
    """Phases of a run: ``(weights, batch_size, world_size, batches)``, the last to the end."""
    sizes = [sum(lengths[i] for i in r) for r in mix(groups).ranges.values()]
    phases = []
    count = draw(st.integers(2, 4))
    for p in range(count):
        w = {
            n: draw(st.sampled_from([0, 1, 2, 0.5, 5])) if sizes[g] else 0
            for g, n in enumerate(groups)
        }
        assume(any(w.values()))
        k = 10**6 if p == count - 1 else draw(st.integers(0, 5))
        phases.append((w, draw(st.integers(1, 3)), draw(st.sampled_from([1, 1, 2])), k))
    return phases


@settings(max_examples=60, deadline=None)
@given(groups_and_weights(), st.data())
def test_resumes_stay_exact_across_weight_changes_and_rows(case, data):
    """save -> load other weights (and rows) -> run some -> save -> load -> ... :
    every begun stream goes on at its next step, in one row, without reset where
    ``row_map`` carries its row; no stream appears mid-way; every occurrence is whole."""
    groups, _, lengths, kw = case
    phases = data.draw(weight_changes(groups, lengths))
    pack = kw["pad"] == "pack"
    begun: list[tuple[int, int, int | None]] = []  # (stream, next step, global row)
    count: Counter = Counter()  # deliveries of (stream, step) in the epoch
    state, weights = None, None
    for p, (w, b, world, k) in enumerate(phases):
        ranks = [
            quiet(mix(groups, w), **{**kw, "batch_size": b}, rank=r, world_size=world)
            for r in range(world)
        ]
        carried = [-1] * b * world  # the old global row each global row goes on
        if state is not None:
            changed = w != weights
            carried = []
            for loader in ranks:
                loader.load_state_dict(state, weights_changed=changed)
                carried += loader.row_map(state, weights_changed=changed)
            if ranks[0].epoch != state["epoch"]:  # the epoch had ended
                assert not begun
                break
        each = [as_numpy(b_ for _, b_ in zip(range(k), loader, strict=False)) for loader in ranks]
        got = [
            tuple(map(np.concatenate, zip(*parts, strict=True)))
            for parts in zip(*each, strict=True)
        ]
        state, weights = json.loads(json.dumps(ranks[-1].state_dict())), w
        cut = []
        found = [
            (i, t, r, s, steps, reset, j == len(row) - 1)
            for r, row in enumerate(row_runs(got))
            for j, (s, steps, i, t, reset) in enumerate(row)
        ]
        for i, t, r, s, steps, reset, last in sorted(found, key=lambda f: f[:3]):  # by time
            count.update((s, q) for q in steps)
            if steps[0] > 0:  # the rest of a begun stream: one of those the state had
                match = [e for e in begun if e[:2] == (s, steps[0])]
                assert match, f"phase {p} row {r}: stream {s} from step {steps[0]}"
                first = i == t == 0
                pick = ([e for e in match if first and e[2] == carried[r]] or match)[0]
                begun.remove(pick)
                if not pack and first:  # carried on: its old row, no reset
                    assert reset == (carried[r] < 0), (p, r, s, carried)
                    assert carried[r] < 0 or pick[2] in (None, carried[r]), (p, r)
                elif not pack:
                    assert reset and t == 0, (p, r, s)
            elif not pack:
                assert reset and t == 0, (p, r, s)
            if steps[-1] + 1 < lengths[s]:  # cut by the phase's end only
                assert last, (p, r, s, steps)
                cut.append((s, steps[-1] + 1, r))
        begun = [(s, n, None) for s, n, _ in begun] + cut  # (not read: their row moved on)
    assert not begun
    for (s, q), n in count.items():  # whole occurrences: every step as often as the first
        assert n == count[(s, 0)], (s, q, n, count[(s, 0)])


# --- packing with a cap ----------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(groups_and_weights(), st.integers(1, 3))
def test_packed_chunks_hold_at_most_the_cap(case, cap):
    groups, weights, lengths, kw = case
    kw = {**kw, "pad": "pack"}
    m = mix(groups, weights)
    loader = quiet(m, max_streams_per_chunk=cap, **kw)
    for epoch in range(2):
        loader.set_epoch(epoch)
        batches = list(loader)
        assert len(batches) == loader.epoch_length(0)
        for b in batches:
            for r in range(b.valid.shape[0]):
                v = b.valid[r]
                starts = int((b.step[r][v] == 0).sum())
                carried = int(bool(v[0]) and int(b.step[r][0]) > 0)
                assert starts + carried <= cap
                # padding inside a row only after a chunk of cap streams
                if not v.all() and v.any() and starts + carried < cap:
                    assert not v[int(np.flatnonzero(~v)[0]) :].any()
        occurrences(batches, lengths, pack=True)


def test_the_cap_needs_pack():
    m, _ = _mixture()
    with pytest.raises(ValueError, match='needs pad="pack"'):
        StreamLoader(m, 2, 3, max_streams_per_chunk=2)


def test_a_capped_run_resumes():
    m, lengths = _mixture()
    kw = dict(batch_size=2, tbins=8, pad="pack", max_streams_per_chunk=2, shuffle=True)
    run = StreamLoader(m, **kw)
    run.set_epoch(0)
    whole = as_numpy(run)
    it = iter(run)
    for _ in range(3):
        next(it)
    again = StreamLoader(m, **kw)
    again.load_state_dict(run.state_dict())
    assert_same(list(again), whole[3:])
    wider = StreamLoader(m, **{**kw, "batch_size": 3})
    wider.load_state_dict(run.state_dict())
    got = runs(whole[:3], True) + runs(list(wider), True, resumed=True)
    assert steps_per_stream(got) == steps_per_stream(runs(whole, True))


# --- the list it is, and bad input -----------------------------------------------------


def test_a_mixture_is_the_list_of_its_streams():
    a, b = coded_streams([3, 2]), coded_streams([4])
    m = mix({"a": a, "b": b}, {"a": 1, "b": 2})
    assert len(m) == 3 and m[2] is b[0] and list(m.ranges) == ["a", "b"]
    assert [m.group_of(i) for i in range(3)] == ["a", "a", "b"]
    rows = interleave_streams(mix({"a": a, "b": b}), 2)  # without weights: every stream once
    assert sorted(s for r in rows for s in r.stream_ids.tolist()) == [0, 1, 2]
    assert "a: 2" in repr(m) and m.weights == {"a": 1.0, "b": 2.0}
    with pytest.raises(IndexError):
        m.group_of(3)


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ({"a": 1, "b": 1, "z": 1}, "groups that are not in the mixture: \\['z'\\]"),
        ({"a": 1}, "group 'b' has no weight"),
        ({"a": 1, "b": -1}, "weight of group 'b' must be a finite number >= 0"),
        ({"a": 1, "b": math.nan}, "weight of group 'b' must be a finite"),
        ({"a": math.inf, "b": 1}, "weight of group 'a' must be a finite"),
        ({"a": 0, "b": 0}, "every weight is 0"),
        ({"a": 1, "b": 1, "e": 0}, None),
        ({"a": 1, "b": 1, "e": 2}, "group 'e' has weight 2 but no streams"),
    ],
)
def test_bad_weights_are_refused_naming_the_group(weights, message):
    groups = {"a": coded_streams([3]), "b": coded_streams([2])}
    if "e" in weights:
        groups["e"] = []
    if message is None:
        mix(groups, weights)
        return
    with pytest.raises(ValueError, match=message):
        mix(groups, weights)


@pytest.mark.parametrize(
    "weight",
    [
        2,
        2.0,
        Fraction(2, 1),
        Decimal("2"),
        np.float32(2),
        np.int64(2),
        np.float64(2),
        np.uint8(2),
    ],
)
def test_a_weight_may_be_any_real_number(weight):
    m = mix({"a": coded_streams([3]), "b": coded_streams([2, 4])}, {"a": weight, "b": 1})
    assert m.weights == {"a": 2.0, "b": 1.0}
    assert all(type(w) is float for w in m.weights.values())
    loader = StreamLoader(m, 1, 2)
    assert [g.weight for g in m.summary(loader, 0).groups] == [2 / 3, 1 / 3]


def test_a_negative_zero_weight_is_zero():
    m = mix({"a": coded_streams([3]), "b": coded_streams([2])}, {"a": -0.0, "b": 1})
    assert math.copysign(1, m.weights["a"]) == 1 and "-0" not in repr(m)
    loader = StreamLoader(m, 1, 2)
    assert "-0" not in str(m.summary(loader, 0))
    same = StreamLoader(mix({"a": m[:1], "b": m[1:]}, {"a": 0, "b": 1}), 1, 2)
    same.load_state_dict(loader.state_dict())  # the same mixture


@pytest.mark.parametrize(
    "weight",
    [
        -1,
        Fraction(-1, 2),
        Decimal("-0.5"),
        np.float32(-1),
        math.nan,
        Decimal("NaN"),
        math.inf,
        -math.inf,
        Decimal("Infinity"),
        np.float64("inf"),
        Decimal("1e400"),
    ],
)
def test_a_negative_or_non_finite_weight_is_refused_naming_the_group(weight):
    with pytest.raises(ValueError, match="weight of group 'b'"):
        mix({"a": coded_streams([3]), "b": coded_streams([2])}, {"a": 1, "b": weight})


@pytest.mark.parametrize("weight", ["1", None, True, np.bool_(True), 1j, [1]])
def test_a_weight_that_is_not_a_real_number_is_refused(weight):
    with pytest.raises(TypeError, match="weight of group 'a' must be a real number"):
        mix({"a": coded_streams([3])}, {"a": weight})


def test_the_summary_shows_huge_and_tiny_weights_as_shares():
    streams = coded_streams([4, 4, 4])
    groups = {"a": streams[:1], "b": streams[1:2], "c": streams[2:]}
    for weights, tiny in [
        ({"a": 1e308, "b": 1e308, "c": 1}, 5e-309),
        ({"a": 1, "b": 1, "c": 1e-10}, 5e-11),
    ]:
        m = mix(groups, weights)
        summary = m.summary(StreamLoader(m, 1, 2), 0)
        assert [g.weight for g in summary.groups] == pytest.approx([0.5, 0.5, tiny], rel=1e-9)
        lines = str(summary).splitlines()
        assert " 0.500 " in lines[2] and " 0.500 " in lines[3]
        assert f"{tiny:.1e}" in lines[4]  # not 0.000


def test_a_positive_weight_below_any_float_share_is_shown_positive():
    m = mix({"a": coded_streams([5] * 4), "b": coded_streams([5])}, {"a": 1e300, "b": 1e-300})
    summary = m.summary(StreamLoader(m, 2, 5), 0)
    assert summary.groups[1].weight > 0
    assert "<1e-323" in str(summary).splitlines()[3]


def test_a_weight_past_any_float_is_refused_naming_the_group():
    from fractions import Fraction

    with pytest.raises(ValueError, match="weight of group 'a' is too large for a float"):
        mix({"a": coded_streams([3]), "b": coded_streams([3])}, {"a": Fraction(10**400), "b": 1})


def test_a_weight_that_is_not_a_number_is_refused():
    with pytest.raises(TypeError, match="weight of group 'a' must be a real number"):
        mix({"a": coded_streams([3])}, {"a": "1"})


def test_a_group_of_empty_streams_with_weight_is_refused():
    m = mix({"a": coded_streams([3]), "b": coded_streams([0, 0])}, {"a": 1, "b": 1})
    with pytest.raises(ValueError, match="group 'b' has weight 1 but no steps"):
        StreamLoader(m, 1, 2)


def test_the_summary_takes_the_plan_not_the_loader():
    m = mix({"a": coded_streams([7, 3, 9]), "b": coded_streams([4] * 5)}, {"a": 1, "b": 2})
    loader = StreamLoader(m, batch_size=2, tbins=3, shuffle=True)
    for epoch in range(3):
        of_loader = m.summary(loader, epoch)
        assert m.summary(loader.spec, epoch) == of_loader  # a PlanSpec
        assert m.summary(loader.spec, plan_epoch(loader.spec, epoch)) == of_loader  # a plan
    assert m.summary(loader.spec) == m.summary(loader)  # epoch 0, where the loader stands
    with pytest.raises(TypeError, match="a PlanSpec"):
        m.summary([7, 3, 9], 0)
    other = mix({"a": coded_streams([7, 3, 9]), "b": coded_streams([4] * 5)}, {"a": 2, "b": 1})
    with pytest.raises(ValueError, match="does not read this mixture"):
        other.summary(loader.spec, 0)


def test_the_summary_of_a_loader_is_where_its_state_stands_and_takes_loader_by_keyword():
    m = mix({"a": coded_streams([7, 3, 9]), "b": coded_streams([4] * 5)}, {"a": 1, "b": 2})
    loader = StreamLoader(m, batch_size=2, tbins=3, shuffle=True)
    next(iter(loader))  # a peek: the next pass reads epoch 1, a state resumes epoch 0
    assert (loader.epoch, loader.state_dict()["epoch"]) == (1, 0)
    assert m.summary(loader) == m.summary(loader.spec, loader.plan())
    assert m.summary(loader).epoch == 0
    assert m.summary(loader, 1) == m.summary(loader.spec, 1)
    assert m.summary(loader=loader) == m.summary(loader)  # the keyword of 0.3
    assert m.summary(loader=loader, epoch=2) == m.summary(loader.spec, 2)
    with pytest.raises(TypeError, match="not both"):
        m.summary(loader.spec, loader=loader)


def test_a_state_resumed_with_new_weights_loads_back_when_a_group_is_read_many_rounds():
    """A small group weighed up is read hundreds of times an epoch: its draw, saved with
    the rest of an epoch resumed under new weights, is read back by the next resume."""
    big = [np.arange(400, dtype=np.int32) for _ in range(20)]
    small = [np.arange(5, dtype=np.int32)]
    before = mix({"a": big, "b": small}, {"a": 1, "b": 100})
    after = mix({"a": big, "b": small}, {"a": 1, "b": 200})
    first = StreamLoader(before, 4, 8, shuffle=True)
    assert before.spec.weights and first.spec.draws.rounds[1] > 64 * len(big + small)
    it = iter(first)
    for _ in range(10):
        next(it)
    resumed = StreamLoader(after, 3, 8, shuffle=True)
    resumed.load_state_dict(first.state_dict(), weights_changed=True)
    it = iter(resumed)
    for _ in range(5):
        next(it)
    state = resumed.state_dict()
    assert "draw" in state["resumed"]
    rest = [b.stream.numpy().copy() for b in it]
    again = StreamLoader(after, 3, 8, shuffle=True)
    again.load_state_dict(state)
    got = [b.stream.numpy() for b in again]
    assert len(got) == len(rest)
    assert all(np.array_equal(a, b) for a, b in zip(got, rest, strict=True))


def test_row_map_agrees_with_the_reset_after_a_state_saved_with_no_batch_on_new_weights():
    groups = {"g0": [np.array([1, 2])]}
    kw = dict(tbins=1, shuffle=False, seed=0, pad="zeros")
    phases = [({"g0": 1}, 1, 1, 1), ({"g0": 1}, 2, 1, 0), ({"g0": 2}, 2, 1, 0)]
    state, weights = None, None
    for w, b, world, k in phases:
        loader = StreamLoader(mix(groups, w), batch_size=b, world_size=world, rank=0, **kw)
        if state is not None:
            loader.load_state_dict(state, weights_changed=w != weights)
        it = iter(loader)
        for _ in range(k):
            next(it)
        state, weights = json.loads(json.dumps(loader.state_dict())), w
    ranks = [
        StreamLoader(mix(groups, weights), batch_size=1, world_size=2, rank=r, **kw)
        for r in range(2)
    ]
    for r, loader in enumerate(ranks):
        loader.load_state_dict(state)
        carried = loader.row_map(state)
        first = next(iter(loader))
        if first.reset[0]:  # a row that continues one has no reset; one reset carries nothing
            assert carried[0] < 0, (r, carried, first.reset)
        assert carried[0] < 0 or bool(first.valid[0].any()), (r, carried)


# --- packed segments ----------------------------------------------------------------


@settings(max_examples=15, deadline=None)
@given(
    st.lists(st.integers(1, 30), min_size=1, max_size=4),
    st.lists(st.integers(1, 30), min_size=1, max_size=4),
    st.sampled_from([(1, 1), (1, 3), (2.5, 1), (1, 0.4)]),
    st.integers(1, 9),
    st.integers(1, 3),
    st.integers(1, 5),
    st.sampled_from([None, 2]),
)
def test_packed_segments_of_a_mixture_are_marked_where_they_start(a, b, w, seg, rows, t, cap):
    # a segment but a stream's first starts a chunk, with reset, in every drawn epoch;
    # every epoch has the length the loader says
    m = mix({"a": coded_streams(a), "b": coded_streams(b)}, {"a": w[0], "b": w[1]})
    kw = dict(pad="pack", segment_length=seg, shuffle=True, max_streams_per_chunk=cap)
    loader = quiet(m, batch_size=rows, tbins=t, **kw)
    for epoch in range(3):
        loader.set_epoch(epoch)
        batches = list(loader)
        assert len(batches) == loader.epoch_length(epoch) == loader.epoch_length(0)
        before = {}
        for b_ in batches:
            for r in range(b_.valid.shape[0]):
                for k in np.flatnonzero(b_.valid[r].numpy()).tolist():
                    at = (int(b_.stream[r, k]), int(b_.step[r, k]))
                    last = before.get(r)
                    goes_on = last is not None and at == (last[0], last[1] + 1)
                    marked = at[1] == 0 or (k == 0 and bool(b_.reset[r]))
                    assert goes_on or marked, (epoch, r, k, last, at)
                    before[r] = at
