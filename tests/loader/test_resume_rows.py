"""After a resume on other rows, ``reset`` agrees with ``row_map``: rows that go on keep state."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import as_numpy, assert_same
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamseq import StreamLoader


def _last_steps(batches: list) -> dict[int, tuple[int, int]]:
    """For each global row of a one-rank run, (stream, step) of its last valid step."""
    last = {}
    for b in batches:
        for r in range(b.valid.shape[0]):
            v = b.valid[r].numpy()
            if v.any():
                t = int(np.flatnonzero(v)[-1])
                last[r] = (int(b.stream[r, t]), int(b.step[r, t]))
    return last


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lengths=st.lists(st.integers(1, 40), min_size=1, max_size=9),
    old_rows=st.integers(1, 4),
    new_rows=st.integers(1, 5),
    tbins=st.integers(1, 6),
    stop=st.integers(1, 6),
    pad=st.sampled_from(["zeros", "pack"]),
    shuffle=st.booleans(),
)
def test_first_batch_resets_exactly_the_rows_that_start_afresh(
    lengths, old_rows, new_rows, tbins, stop, pad, shuffle
):
    streams = [np.arange(n) + 1000 * i for i, n in enumerate(lengths)]
    kw = dict(pad=pad, shuffle=shuffle, seed=2)
    run = StreamLoader(streams, old_rows, tbins, **kw)
    it, seen = iter(run), []
    for _ in range(min(stop, len(run) - 1)):
        seen.append(next(it))
    state = run.state_dict()
    last = _last_steps(seen)
    loader = StreamLoader(streams, new_rows, tbins, **kw)
    rows = loader.row_map(state)
    loader.load_state_dict(state)
    batches = list(loader)
    if not batches:
        return
    first = batches[0]
    for r, old in enumerate(rows):
        if not first.valid[r, 0]:
            continue
        at = (int(first.stream[r, 0]), int(first.step[r, 0]))
        goes_on = old in last and at == (last[old][0], last[old][1] + 1)
        # a row goes on with the stream its old row was reading, at its next step, and
        # keeps its state; any other row starts afresh (a stream from its first step, or
        # a begun one whose state has no row to move to)
        assert bool(first.reset[r]) != goes_on, (rows, r, at, last)
        if old >= 0 and old_rows != new_rows:
            assert goes_on
    for b in batches[1:]:  # later batches reset where a row starts a piece, as ever
        starts = b.valid[:, 0] & ((b.step[:, 0] == 0) | ~_same(batches, b))
        assert (b.reset == starts).all() or pad == "pack"


def _same(batches: list, b) -> np.ndarray:
    """Rows of ``b`` that go on with the stream the row read at the end of the batch before."""
    k = next(i for i, x in enumerate(batches) if x is b)
    prev = batches[k - 1]
    t = prev.valid.shape[1] - 1
    return (prev.stream[:, t] == b.stream[:, 0]) & prev.valid[:, t]


def test_rows_that_go_on_have_no_reset_with_workers():
    streams = [np.arange(n) for n in (30, 50, 70, 40, 60, 20, 90)]
    run = StreamLoader(streams, 3, 10, shuffle=True, seed=1)
    it = iter(run)
    for _ in range(3):
        next(it)
    state = run.state_dict()
    loader = StreamLoader(streams, 2, 10, shuffle=True, seed=1, num_workers=2)
    rows = loader.row_map(state)
    loader.load_state_dict(state)
    first = next(iter(loader))
    assert rows == [1, 2]
    assert first.reset.tolist() == [False, False]
    assert first.step[:, 0].tolist() == [30, 30]


def _hidden_per_step(batches, h, cell, at):
    """Run ``cell`` over the batches, as a model does with ``h[reset] = 0``: record the
    hidden state after every valid (stream, step) in ``at``; returns the last ``h``."""
    for b in batches:
        h = h.clone()
        h[b.reset] = 0
        for t in range(b.valid.shape[1]):
            x = b.data[:, t, None].to(torch.float64)
            v = b.valid[:, t, None]
            h = torch.where(v, cell(x, h), h)  # padding leaves the state as it is
            for r in torch.nonzero(b.valid[:, t]).flatten().tolist():
                at[(int(b.stream[r, t]), int(b.step[r, t]))] = h[r].clone()
    return h


def test_a_moved_hidden_state_goes_on_as_if_the_run_had_not_stopped():
    torch.manual_seed(0)
    cell = torch.nn.GRUCell(1, 5).double()
    streams = [np.sin(np.arange(n) / (3 + i)) for i, n in enumerate((30, 50, 70, 40, 60, 20))]
    kw = dict(shuffle=True, seed=1)
    whole, stopped = {}, {}
    with torch.no_grad():
        _hidden_per_step(
            StreamLoader(streams, 3, 10, **kw), torch.zeros(3, 5, dtype=torch.float64), cell, whole
        )
        run = StreamLoader(streams, 3, 10, **kw)
        it = iter(run)
        h = _hidden_per_step(
            [next(it) for _ in range(3)], torch.zeros(3, 5, dtype=torch.float64), cell, stopped
        )
        state = run.state_dict()
        loader = StreamLoader(streams, 2, 10, **kw)
        rows = torch.tensor(loader.row_map(state))
        loader.load_state_dict(state)
        moved = torch.where((rows >= 0)[:, None], h[rows.clamp(min=0)], 0.0)
        resumed = {}
        _hidden_per_step(loader, moved, cell, resumed)
    assert (rows >= 0).sum() == 2
    assert set(stopped) | set(resumed) == set(whole)
    goes_on = {s for s, k in resumed if k > 0 and (s, k - 1) in stopped}
    assert goes_on  # streams cut by the stop, carried over on new rows
    for (s, k), h in resumed.items():
        if s in goes_on:  # the state is that of the uninterrupted run, step by step
            torch.testing.assert_close(h, whole[(s, k)], rtol=0, atol=1e-12)


def test_a_begun_stream_resumed_in_a_packed_row_starts_a_chunk_with_reset():
    # two rows, each a stream begun; resumed on one row, the second begun stream goes on
    # after the first: packed inside the chunk at its step 4, nothing would mark it (a
    # model would carry the first stream's state into it)
    streams = [np.arange(6), np.arange(100, 106)]
    run = StreamLoader(streams, 2, 4, pad="pack")
    next(iter(run))
    loader = StreamLoader(streams, 1, 4, pad="pack")
    loader.load_state_dict(run.state_dict())
    batches = list(loader)
    assert [b.stream.tolist() for b in batches] == [[[0, 0, -1, -1]], [[1, 1, -1, -1]]]
    assert [b.step.tolist() for b in batches] == [[[4, 5, -1, -1]], [[4, 5, -1, -1]]]
    assert [b.reset.tolist() for b in batches] == [[False], [True]]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lengths=st.lists(st.integers(1, 30), min_size=1, max_size=8),
    old_rows=st.integers(1, 4),
    new_rows=st.integers(1, 4),
    tbins=st.integers(1, 5),
    stop=st.integers(1, 6),
    cap=st.sampled_from([None, 1, 2]),
    shuffle=st.booleans(),
)
def test_after_a_packed_resume_every_stream_but_a_row_s_own_is_marked_where_it_starts(
    lengths, old_rows, new_rows, tbins, stop, cap, shuffle
):
    streams = [np.arange(n) + 1000 * i for i, n in enumerate(lengths)]
    kw = dict(pad="pack", shuffle=shuffle, seed=2, max_streams_per_chunk=cap)
    run = StreamLoader(streams, old_rows, tbins, **kw)
    it = iter(run)
    for _ in range(min(stop, len(run) - 1)):
        next(it)
    state = run.state_dict()
    loader = StreamLoader(streams, new_rows, tbins, **kw)
    rows = loader.row_map(state)
    loader.load_state_dict(state)
    seen: set[tuple[int, int]] = set()  # (stream, step) delivered after the resume
    last: dict[int, tuple[int, int]] = {}  # each row's last valid (stream, step)
    for i, b in enumerate(loader):
        for r in range(new_rows):
            for t in np.flatnonzero(b.valid[r].numpy()).tolist():
                at = (int(b.stream[r, t]), int(b.step[r, t]))
                before = last.get(r)
                goes_on = before is not None and at == (before[0], before[1] + 1)
                if t == 0 and not goes_on:
                    # a row that starts anything but its own stream's next step resets,
                    # except the first batch's rows that go on with their old row's
                    assert bool(b.reset[r]) or (i == 0 and rows[r] >= 0), (i, r, at)
                elif t > 0 and not goes_on:  # a stream starts inside a chunk: at step 0
                    assert at[1] == 0, (i, r, t, at, before)
                last[r] = at
                seen.add(at)


#: saved by streamseq 0.3 (plan version 2) one batch into the rest of a packed epoch
#: resumed on 1 row, after 1 batch on 3 rows: that batch read streams 0 and 1 to their
#: ends, stream 1 from its step 4 packed after stream 0 (a state of the loader below)
PACKED_REST_OF_PLAN_VERSION_2 = {
    "version": 3,
    "plan_version": 2,
    "epoch": 0,
    "next_batch": 1,
    "epoch_done": 2,
    "length": 3,
    "fingerprint": "c276f47af4cfd292",
    "plan": {
        "streams": 3,
        "lengths": "d3abb42a9e761a4a",
        "sources": "3aaadac486ccdf1c",
        "tbins": 4,
        "pad": "pack",
        "shuffle": False,
        "seed": 0,
        "segment_length": None,
    },
    "batch_size": 1,
    "world_size": 1,
    "progress": {"units": 3, "done": "wA==", "begun": [2], "next": [4], "row": [-1]},
    "resumed": {
        "units": 3,
        "done": "AA==",
        "begun": [0, 1, 2],
        "next": [4, 4, 4],
        "row": [0, 1, 2],
        "epoch": 0,
    },
}


def test_a_state_of_a_packed_rest_of_plan_version_2_loads_and_delivers_the_rest_once():
    streams = [np.arange(6), np.arange(100, 106), np.arange(200, 210)]
    for rows in (1, 2):
        loader = StreamLoader(streams, rows, 4, pad="pack")
        assert loader.row_map(PACKED_REST_OF_PLAN_VERSION_2) == [-1] * rows
        loader.load_state_dict(PACKED_REST_OF_PLAN_VERSION_2)
        batches = list(loader)
        assert [b.stream[0].tolist() for b in batches] == [[2, 2, 2, 2], [2, 2, -1, -1]]
        assert [b.step[0].tolist() for b in batches] == [[4, 5, 6, 7], [8, 9, -1, -1]]
        assert [b.reset.tolist() for b in batches] == [[True] + [False] * (rows - 1)] + [
            [False] * rows
        ]
        assert loader.state_dict()["plan_version"] == 4


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lengths=st.lists(st.integers(1, 30), min_size=1, max_size=7),
    segment_length=st.integers(1, 10),
    old_rows=st.integers(1, 3),
    new_rows=st.integers(1, 4),
    tbins=st.integers(1, 5),
    stop=st.integers(1, 6),
    shuffle=st.booleans(),
    cap=st.sampled_from([None, 2]),
)
def test_a_packed_state_of_segments_resumes_exactly_the_rest_marked_where_pieces_start(
    lengths, segment_length, old_rows, new_rows, tbins, stop, shuffle, cap
):
    # plan version 4: a state saved inside a packed epoch of segments, resumed on the same
    # rows or on others, delivers exactly the rest, every piece that goes on with a stream
    # from a step other than 0 marked by reset at a chunk (but a row that goes on)
    from streamseq.testing import check_continuity, coded_streams

    streams = coded_streams(lengths)
    kw = dict(pad="pack", segment_length=segment_length, shuffle=shuffle, seed=3)
    kw["max_streams_per_chunk"] = cap
    whole = [_numpy(b) for b in StreamLoader(streams, old_rows, tbins, **kw)]
    run = StreamLoader(streams, old_rows, tbins, **kw)
    it, seen = iter(run), []
    for _ in range(min(stop, len(run) - 1)):
        seen.append(next(it))
    state = run.state_dict()
    assert state["plan_version"] == 4
    loader = StreamLoader(streams, new_rows, tbins, **kw)
    rows = loader.row_map(state)
    loader.load_state_dict(state)
    # (a state saved in the padding that ends the epoch stays in it: a rest of no batch)
    assert loader.progress.epoch == state["epoch"]
    rest = list(loader)
    if new_rows == old_rows:
        assert [_numpy(b) for b in rest] == whole[len(seen) :]
    check = dict(sources=streams, pack=True, segment_length=segment_length)
    check_continuity(rest, lengths, state=state, max_streams_per_chunk=cap, **check)
    last = _last_steps(seen)
    before = {r: last[old] for r, old in enumerate(rows) if old in last}
    for b in rest:
        for r in range(b.valid.shape[0]):
            for t in np.flatnonzero(b.valid[r].numpy()).tolist():
                at = (int(b.stream[r, t]), int(b.step[r, t]))
                goes_on = r in before and at == (before[r][0], before[r][1] + 1)
                marked = at[1] == 0 or (t == 0 and bool(b.reset[r]))
                assert goes_on or marked, (r, t, before.get(r), at)
                before[r] = at


def _numpy(batch) -> list:
    """A batch's fields as lists, to compare batches."""
    return [np.asarray(f).tolist() for f in (batch.data, batch.reset, batch.valid, batch.step)]


def _tail_state(streams, rows, tbins, kw, epoch):
    """A state saved in the batches of padding only that end a shuffled packed epoch."""
    run = StreamLoader(streams, rows, tbins, **kw)
    run.set_epoch(epoch)
    batches = list(run)
    tail = [i for i, b in enumerate(batches) if not b.valid.any()]
    assert tail and tail[-1] == len(batches) - 1  # (the epoch ends in padding only)
    again = StreamLoader(streams, rows, tbins, **kw)
    again.set_epoch(epoch)
    it = iter(again)
    for _ in range(tail[0]):
        next(it)
    return again.state_dict(), batches


@pytest.mark.parametrize("new_rows", [1, 3])
def test_a_state_saved_in_the_padding_that_ends_an_epoch_stays_in_it_on_other_rows(new_rows):
    # every step of the epoch was delivered, batches of padding were left: on other rows
    # the rest is empty, and the loader stands in the state's epoch, as the trainer does
    # (set_epoch of that epoch keeps it); it used to start the next epoch, so that a
    # trainer setting the epoch it resumed read that whole epoch again
    lengths = [24, 8, 18, 6, 15, 29, 11, 7]
    streams = [np.arange(n) + 1000 * (s + 1) for s, n in enumerate(lengths)]
    kw = dict(pad="pack", shuffle=True, seed=1, segment_length=3, max_streams_per_chunk=2)
    state, _ = _tail_state(streams, 2, 2, kw, epoch=1)
    assert state["next_batch"] < state["length"]
    loader = StreamLoader(streams, new_rows, 2, **kw)
    assert loader.row_map(state) == [-1] * new_rows
    loader.load_state_dict(state)
    assert (loader.epoch, len(loader)) == (1, 0)
    assert loader.progress.epoch == 1
    assert list(loader) == []
    assert loader.epoch == 2
    trainer = StreamLoader(streams, new_rows, 2, **kw)
    trainer.load_state_dict(state)
    trainer.set_epoch(1)  # (the epoch it resumes)
    assert len(trainer) == 0 and list(trainer) == []
    fresh = StreamLoader(streams, new_rows, 2, **kw)
    fresh.set_epoch(2)
    assert_same(as_numpy(loader), as_numpy(fresh))


@pytest.mark.parametrize("new_rows", [1, 3])
def test_a_state_saved_at_the_end_of_its_epoch_starts_the_next_on_other_rows(new_rows):
    lengths = [9, 4, 7]
    streams = [np.arange(n) + 1000 * (s + 1) for s, n in enumerate(lengths)]
    kw = dict(pad="pack", shuffle=True, seed=1, segment_length=4)
    run = StreamLoader(streams, 2, 2, **kw)
    list(run)
    state = run.state_dict()
    loader = StreamLoader(streams, new_rows, 2, **kw)
    assert loader.row_map(state) == [-1] * new_rows  # (no row of the state's goes on)
    loader.load_state_dict(state)
    fresh = StreamLoader(streams, new_rows, 2, **kw)
    fresh.set_epoch(1)
    assert loader.epoch == 1 and len(loader) == len(fresh)
    assert_same(as_numpy(loader), as_numpy(fresh))
