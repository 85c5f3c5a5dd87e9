"""Elastic resume: a state loads into any batch size, world size and number of workers."""

import json
import time

import numpy as np
import pytest
from helpers import as_numpy
from hypothesis import given, settings
from hypothesis import strategies as st

from streamseq import StreamLoader
from streamseq.testing import coded_streams, layouts, stream_lengths

TOPOLOGIES = st.tuples(st.integers(1, 4), st.integers(1, 3))  # (batch_size, world_size)


def global_batches(streams, topology, stop=None, state=None, **kw):
    """Batches of every rank, rows side by side (global row order), from ``state``.

    Returns the batches, as (data, reset, valid, stream, step) arrays, and the state of
    rank 0 after ``stop`` batches (None: the whole epoch; the state is then the next
    epoch's start).
    """
    b, world = topology
    per_rank, states = [], []
    for rank in range(world):
        loader = StreamLoader(streams, b, rank=rank, world_size=world, **kw)
        if state is not None:
            loader.load_state_dict(json.loads(json.dumps(state)))
        it = iter(loader)
        got = []
        while stop is None or len(got) < stop:
            batch = next(it, None)
            if batch is None:
                break
            got.append(tuple(f.numpy().copy() for f in batch))
        per_rank.append(got)
        states.append(loader.state_dict())
    assert all(s == states[0] for s in states[1:])  # every rank stands at the same place
    merged = [
        tuple(np.concatenate(fields) for fields in zip(*parts, strict=True))
        for parts in zip(*per_rank, strict=True)
    ]
    return merged, states[0]


def global_row_map(streams, topology, state, **kw):
    """``row_map`` of every rank, rows side by side (global row order)."""
    b, world = topology
    rows = []
    for rank in range(world):
        rows += StreamLoader(streams, b, rank=rank, world_size=world, **kw).row_map(state)
    return rows


def steps_of(batches):
    """(stream, step) pairs in delivery order: batch by batch, each row in time order."""
    out = []
    for _, _, valid, stream, step in batches:
        for r in range(valid.shape[0]):
            v = valid[r]
            out += zip(stream[r][v].tolist(), step[r][v].tolist(), strict=True)
    return out


def assert_each_step_once_in_order(parts, lengths, segment_length=None):
    """Every step of every stream once; in order within a stream (or a segment: segments
    of one stream may be read side by side)."""
    n = segment_length or max(lengths, default=1) or 1
    seen = {}
    for part in parts:  # parts in time order
        for s, k in steps_of(part):
            seen.setdefault((s, k // n), []).append(k)
    for s, total in enumerate(lengths):
        for u in range(-(-total // n)):
            want = list(range(u * n, min(total, (u + 1) * n)))
            assert seen.get((s, u)) == want, f"stream {s} ({u}): {seen.get((s, u), [])[:20]}"
    assert sum(map(len, seen.values())) == sum(lengths)


def first_steps(batches):
    """For each row: (stream, step) of its first valid step in the first batch it has one."""
    out = {}
    for _, _, valid, stream, step in batches:
        for r in range(valid.shape[0]):
            if r not in out and valid[r].any():
                t = int(np.argmax(valid[r]))
                out[r] = (int(stream[r, t]), int(step[r, t]), bool(valid[r, 0] and t == 0))
    return out


@settings(max_examples=60, deadline=None)
@given(
    stream_lengths(max_streams=12, max_length=30),
    st.integers(1, 5),
    TOPOLOGIES,
    TOPOLOGIES,
    TOPOLOGIES,
    st.sampled_from(["zeros", "pack"]),
    st.booleans(),
    st.sampled_from([None, 7]),
    st.data(),
)
def test_every_step_once_in_order_across_topologies(
    lengths, tbins, first, second, third, pad, shuffle, segment_length, data
):
    if not any(lengths):
        lengths = [*lengths, 3]
    streams = coded_streams(lengths)
    kw = dict(tbins=tbins, pad=pad, shuffle=shuffle, segment_length=segment_length)
    whole, _ = global_batches(streams, first, **kw)
    k1 = data.draw(st.integers(0, max(0, len(whole) - 1)), label="stop in the first run")
    part1, state1 = global_batches(streams, first, stop=k1, **kw)
    assert_same_batches(part1, whole[:k1])
    rest, _ = global_batches(streams, second, state=state1, **kw)
    k2 = data.draw(st.integers(0, max(0, len(rest) - 1)), label="stop in the second run")
    part2, state2 = global_batches(streams, second, stop=k2, state=state1, **kw)
    part3, _ = global_batches(streams, third, state=state2, **kw)
    assert_each_step_once_in_order([part1, part2, part3], lengths, segment_length)
    if first[0] * first[1] == second[0] * second[1]:  # the same global rows: the same run
        assert_same_batches(part1 + rest, whole)
    if second[0] * second[1] == third[0] * third[1]:
        assert_same_batches(part2 + part3, rest)
    # a stream resumed on new rows goes on at the start of a row, without reset where
    # row_map moves its row's state there, with reset elsewhere
    if pad != "pack" and k1 < len(whole) and first[0] * first[1] != second[0] * second[1]:
        moved = global_row_map(streams, second, state1, **kw)
        for r, (s, k, at_start) in first_steps(rest[:1]).items():
            if k > 0 and (segment_length is None or k % segment_length):
                assert at_start and rest[0][1][r] == (moved[r] < 0), (r, s, k)


def assert_same_batches(got, want):
    assert len(got) == len(want)
    for i, (x, y) in enumerate(zip(got, want, strict=True)):
        for f, g in zip(x, y, strict=True):
            np.testing.assert_array_equal(f, g, err_msg=f"batch {i}")


@pytest.mark.parametrize("workers, method", [(2, "process"), (3, "thread")])
def test_workers_and_persistent_workers_resume_on_other_rows(workers, method):
    lengths = [23, 5, 17, 9, 30, 2, 11, 14]
    streams = coded_streams(lengths)
    run = StreamLoader(streams, 4, 3, shuffle=True)
    it = iter(run)
    before = [tuple(f.numpy().copy() for f in next(it)) for _ in range(3)]
    state = run.state_dict()
    reference = StreamLoader(streams, 3, 3, shuffle=True)
    reference.load_state_dict(state)
    expected = as_numpy(reference)
    again = StreamLoader(
        streams, 3, 3, shuffle=True, num_workers=workers, method=method, persistent_workers=True
    )
    again.load_state_dict(state)
    got = as_numpy(again)
    assert_same_batches(got, expected)
    assert_each_step_once_in_order([before, got], lengths)
    # the next epoch is the new loader's own, from the same persistent workers
    fresh = StreamLoader(streams, 3, 3, shuffle=True)
    fresh.set_epoch(1)
    assert again.epoch == 1
    assert_same_batches(as_numpy(again), as_numpy(fresh))
    again.close()


def test_row_map_names_the_old_row_each_new_row_continues():
    lengths = [40, 37, 33, 31, 20, 18, 9, 6]
    streams = coded_streams(lengths)
    run = StreamLoader(streams, 4, 4)
    it = iter(run)
    before = [tuple(f.numpy().copy() for f in next(it)) for _ in range(3)]
    state = run.state_dict()
    last = before[-1]
    for b in (2, 4, 6):
        loader = StreamLoader(streams, b, 4)
        rows = loader.row_map(state)
        loader.load_state_dict(state)
        after = as_numpy(loader)
        assert len(rows) == b
        for r, old in enumerate(rows):
            stream, step = after[0][3][r, 0], after[0][4][r, 0]
            if old >= 0:  # row r goes on with what old row `old` was reading
                assert (stream, step) == (last[3][old, -1], last[4][old, -1] + 1)
                assert not after[0][1][r]  # no reset: the state moves with the stream
            else:
                assert step <= 0
                assert after[0][1][r] == (step == 0)
    assert sorted(StreamLoader(streams, 2, 4).row_map(state)) == [0, 1]
    assert StreamLoader(streams, 1, 4, rank=1, world_size=4).row_map(state) == [1]
    assert StreamLoader(streams, 4, 4).row_map(state) == [0, 1, 2, 3]


def test_a_finished_epoch_resumes_into_the_next_on_other_rows():
    streams = coded_streams([5, 8, 3, 9])
    run = StreamLoader(streams, 2, 2, shuffle=True)
    list(run)
    state = run.state_dict()
    assert (state["epoch"], state["next_batch"]) == (1, 0)
    wider = StreamLoader(streams, 3, 2, shuffle=True)
    wider.load_state_dict(state)
    assert wider.epoch == 1
    fresh = StreamLoader(streams, 3, 2, shuffle=True)
    fresh.set_epoch(1)
    assert_same_batches(as_numpy(wider), as_numpy(fresh))


def test_a_million_streams_save_and_load_quickly():
    lengths = np.random.default_rng(0).integers(1, 50, 1_000_000)
    opener = _Zeros()
    loader = StreamLoader([opener] * len(lengths), 256, 8, lengths=lengths.tolist())
    loader.plan()  # the epoch's plan is made once per epoch anyway
    start = time.perf_counter()
    loader.state_dict()  # the first also hashes the streams' identities (once per loader)
    first = time.perf_counter() - start
    start = time.perf_counter()
    state = loader.state_dict()
    saved = time.perf_counter() - start
    text = json.dumps(state)
    assert len(text) < 400_000  # one bit per stream, plus the streams begun
    other = StreamLoader([opener] * len(lengths), 128, 8, lengths=lengths.tolist())
    start = time.perf_counter()
    other.load_state_dict(json.loads(text))
    loaded = time.perf_counter() - start
    print(f"first save {first:.3f} s, save {saved:.3f} s, load {loaded:.3f} s, {len(text)} B")


class _Zeros:
    def __call__(self):
        return np.zeros(50, np.uint8)


def test_a_malformed_progress_is_named():
    streams = coded_streams([5, 8, 3, 9])
    run = StreamLoader(streams, 2, 2)
    it = iter(run)
    next(it)
    state = run.state_dict()
    for edit, message in [
        (lambda s: s["progress"].update(done="%%"), r"\['done'\] is not one bit per unit"),
        (
            lambda s: s["progress"].update(begun=[7] * len(s["progress"]["row"])),
            r"\['begun'\]\[0\]=7 is out of range",
        ),
        (
            lambda s: s["progress"].update(next=[99] * len(s["progress"]["begun"])),
            r"\['next'\]\[0\]=99 is out of range",
        ),
        (lambda s: s["progress"].pop("row"), r"state\['progress'\] is missing \['row'\]"),
    ]:
        broken = json.loads(json.dumps(state))
        edit(broken)
        with pytest.raises(ValueError, match=message):
            StreamLoader(streams, 3, 2).load_state_dict(broken)


@settings(max_examples=40)
@given(layouts(max_streams=12), st.integers(1, 5), st.integers(1, 5), st.data())
def test_progress_counts_the_whole_epoch_across_resumes(layout, b2, b3, data):
    streams = coded_streams(layout.lengths)

    def make(b):
        return StreamLoader(streams, b, layout.tbins, shuffle=True, seed=4)

    run = make(layout.batch_size)
    total = len(run)
    assert run.progress == (0, 0, total)
    for b in (b2, b3):  # two resumes in a row, on other rows or the same
        where = run.progress
        k = data.draw(st.integers(0, where.total - where.done - 1), label="batches")
        it = iter(run)
        for _ in range(k):
            next(it)
        assert run.progress.done == where.done + k
        state = run.state_dict()
        assert state["epoch_done"] == where.done + k
        run = make(b)
        run.load_state_dict(state)
        assert run.progress.epoch == 0 and run.progress.done == where.done + k
        if b == layout.batch_size == b2:  # the same plan all along: the same total
            assert run.progress.total == total
    where = run.progress
    assert len(list(run)) == where.total - where.done
    assert run.progress.epoch == 1  # the pass ended: the next epoch, from its start
    assert run.progress.done == 0


def test_a_state_saved_after_the_last_batch_resumes_at_the_next_epoch():
    streams = coded_streams([5, 3, 8, 2])
    run = StreamLoader(streams, 2, 2, shuffle=True)
    batches = list(run)  # (the pass ends: the loader moves on to epoch 1)
    it = iter(StreamLoader(streams, 2, 2, shuffle=True))
    run = StreamLoader(streams, 2, 2, shuffle=True)
    it = iter(run)
    for _ in batches:
        next(it)
    state = run.state_dict()  # after the last batch, before the end of the pass
    assert (state["epoch"], state["next_batch"]) == (0, len(batches))
    again = StreamLoader(streams, 2, 2, shuffle=True)
    again.load_state_dict(state)
    assert again.epoch == 1 and again.progress.done == 0
    run.set_epoch(1)
    assert_same = [b.stream.tolist() for b in run]
    assert [b.stream.tolist() for b in again] == assert_same
