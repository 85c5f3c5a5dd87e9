"""pad="pack": a row goes on with its next stream inside a chunk; padding only at row ends."""

import numpy as np
import pytest
from helpers import as_numpy, assert_same
from hypothesis import given, settings
from hypothesis import strategies as st

from streamseq import Batch, StreamLoader, interleave_streams, tbin, zip_batch
from streamseq.plan.epoch import row_chunks
from streamseq.testing import check_continuity, coded_streams, layouts, stream_lengths


@given(stream_lengths(max_streams=6, max_length=30), st.integers(1, 7))
def test_a_packed_row_is_its_streams_back_to_back(lengths, t):
    streams = coded_streams(lengths)
    (row,) = interleave_streams(streams, 1)
    chunks = tbin(row, t, pack=True)
    total = sum(lengths)
    assert len(chunks) == -(-total // t)
    valid = np.concatenate([c.valid for c in chunks]) if len(chunks) else np.zeros(0, bool)
    assert valid[:total].all() and not valid[total:].any()  # padding at the row's end only
    data = np.concatenate([c.data for c in chunks])[:total] if total else []
    expected = [x for s in row.stream_ids.tolist() for x in streams[s].tolist()]
    assert list(data) == expected
    steps = np.concatenate([c.step for c in chunks])[:total] if total else np.zeros(0)
    starts = np.cumsum([0, *(lengths[s] for s in row.stream_ids.tolist())])[:-1]
    nonempty = [a for a, s in zip(starts, row.stream_ids.tolist(), strict=True) if lengths[s]]
    assert sorted(np.flatnonzero(steps == 0).tolist()) == sorted(set(nonempty))
    for i, c in enumerate(chunks):  # reset where a chunk starts with a stream's first step
        assert bool(c.reset) == (bool(c.valid[0]) and int(c.step[0]) == 0), i


@settings(max_examples=40, deadline=None)
@given(layouts(max_streams=10, max_length=40), st.booleans(), st.sampled_from([None, 9]))
def test_packed_batches_deliver_every_stream_whole(layout, shuffle, segment_length):
    lengths = list(layout.lengths)
    streams = coded_streams(lengths, (2,))
    kw = dict(pad="pack", shuffle=shuffle, segment_length=segment_length)
    loader = StreamLoader(streams, layout.batch_size, layout.tbins, **kw)
    planned = len(loader)
    batches = list(loader)
    assert len(batches) == planned
    check_continuity(batches, lengths, sources=streams, pack=True, segment_length=segment_length)
    for b in batches:  # padding only at row ends: once a row pads, it pads for good
        valid = b.valid.numpy()
        assert all((v[: v.sum()]).all() for v in valid)
    last = batches[-1].valid.numpy() if batches else None
    # no batch of padding only at the end, but where a shuffled epoch's length is the
    # most its rows' orders take (segments but a stream's first start a chunk)
    assert last is None or last.any() or (shuffle and segment_length is not None)
    for workers, method in ((2, "process"), (3, "thread")):
        again = StreamLoader(
            streams, layout.batch_size, layout.tbins, num_workers=workers, method=method, **kw
        )
        assert_same(list(again), batches)


def test_packing_pads_less_than_zeros():
    rng = np.random.default_rng(0)
    lengths = np.clip(np.exp(rng.normal(4, 1.2, 200)), 1, 2000).astype(int).tolist()
    streams = coded_streams(lengths)
    padding = {}
    for pad in ("zeros", "pack"):
        batches = as_numpy(StreamLoader(streams, 8, 32, pad=pad))
        padding[pad] = 1 - sum(v.sum() for _, _, v, _, _ in batches) / sum(
            v.size for _, _, v, _, _ in batches
        )
    assert padding["pack"] < padding["zeros"] / 2


def test_packed_resume_and_dict_streams():
    lengths = [13, 4, 9, 1, 22, 6, 3]
    streams = [{"x": s, "y": -s} for s in coded_streams(lengths)]
    reference = as_numpy(StreamLoader(streams, 2, 5, pad="pack", shuffle=True))
    run = StreamLoader(streams, 2, 5, pad="pack", shuffle=True)
    for _, _ in zip(range(3), run, strict=False):
        pass
    resumed = StreamLoader(streams, 2, 5, pad="pack", shuffle=True, num_workers=2)
    resumed.load_state_dict(run.state_dict())
    assert_same(list(resumed), reference[3:])


def test_a_transform_sees_each_packed_piece_in_source_steps():
    lengths = [7, 2, 5]
    streams = coded_streams(lengths)
    seen = []

    def note(steps, info):
        seen.append((info.stream, info.start, info.stop))
        return steps

    batches = list(StreamLoader(streams, 1, 4, pad="pack", transform=note))
    check_continuity(batches, lengths, sources=streams, pack=True)
    covered = {(s, k) for s, a, b in seen for k in range(a, b)}
    assert covered == {(s, k) for s, n in enumerate(lengths) for k in range(n)}
    assert all(b - a <= 4 for _, a, b in seen)  # one piece of one chunk at a time


def test_a_bad_step_names_stream_and_steps():
    streams = [np.arange(6), np.arange(5.0).tolist()]  # a list: checked when read
    with pytest.raises(Exception, match=r"stream 1.*steps 0:"):
        list(StreamLoader(streams, 1, 4, pad="pack"))


def test_zip_batch_pack_takes_packed_parts_only():
    rows = interleave_streams(coded_streams([3, 4]), 2)
    with pytest.raises(ValueError, match="pack=True"):
        zip_batch([tbin(r, 2) for r in rows], pad="pack")
    with pytest.raises(ValueError, match="pack=True"):
        zip_batch([tbin(r, 2, pack=True) for r in rows])
    assert len(zip_batch([tbin(r, 2, pack=True) for r in rows], pad="pack")) == 2


def test_row_chunks_count_packed_rows():
    rows = [np.array([0, 1]), np.array([2])]
    assert row_chunks(np.array([3, 2, 4]), rows, 4).tolist() == [2, 1]
    assert row_chunks(np.array([3, 2, 4]), rows, 4, pack=True).tolist() == [2, 1]
    assert row_chunks(np.array([3, 1, 4]), rows, 4, pack=True).tolist() == [1, 1]


def packed():
    lengths = [5, 3, 2, 6]
    streams = coded_streams(lengths)
    batches = [
        Batch(*(f.numpy().copy() for f in b)) for b in StreamLoader(streams, 2, 4, pad="pack")
    ]
    return batches, lengths, streams


def test_check_continuity_accepts_packed_batches_only_with_pack():
    batches, lengths, streams = packed()
    assert check_continuity(batches, lengths, sources=streams, pack=True) == len(batches)
    with pytest.raises(AssertionError, match="spans two streams"):
        check_continuity(batches, lengths, sources=streams)


def test_check_continuity_catches_broken_packing():
    batches, lengths, streams = packed()
    row = next(r for r in range(2) if (batches[0].step[r, 1:] == 0).any())
    at = int(np.flatnonzero(batches[0].step[row, 1:] == 0)[0]) + 1
    broken = [Batch(*(f.copy() for f in b)) for b in batches]
    broken[0].step[row, at] = 1  # a stream starting inside a chunk without its step 0
    with pytest.raises(AssertionError, match=f"batch 0, row {row}"):
        check_continuity(broken, lengths, sources=streams, pack=True)
    broken = [Batch(*(f.copy() for f in b)) for b in batches]
    broken[0].data[row, at] += 1
    with pytest.raises(AssertionError, match=f"batch 0, row {row}: data of stream"):
        check_continuity(broken, lengths, sources=streams, pack=True)


def test_a_packed_segment_that_follows_another_stream_is_marked_where_it_starts():
    streams = [np.arange(5), np.arange(100, 110), np.arange(200, 203)]
    loader = StreamLoader(streams, 1, 4, pad="pack", segment_length=4, shuffle=True, seed=3)
    for epoch in range(3):
        loader.set_epoch(epoch)
        before = None  # the row's last (stream, step)
        for b in loader:
            for t in np.flatnonzero(b.valid[0].numpy()).tolist():
                at = (int(b.stream[0, t]), int(b.step[0, t]))
                goes_on = before is not None and at == (before[0], before[1] + 1)
                # a model resets its state at step == 0, and at reset (chunk starts)
                marked = at[1] == 0 or (t == 0 and bool(b.reset[0]))
                assert goes_on or marked, (epoch, t, before, at)
                before = at


@settings(max_examples=20, deadline=None)
@given(
    lengths=stream_lengths(max_streams=9, max_length=20),
    rows=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    tbins=st.integers(1, 5),
    cap=st.sampled_from([None, 1, 2, 3]),
    stop=st.integers(0, 6),
    lookahead=st.sampled_from([0, 1]),
)
def test_a_capped_packed_rest_on_other_rows_passes_the_checker(
    lengths, rows, tbins, cap, stop, lookahead
):
    # the rest of a packed epoch (capped or not) resumed on other rows: every stream once,
    # begun ones at a chunk, at most `cap` streams a chunk, every step a target once
    streams = coded_streams(lengths)
    kw = dict(pad="pack", max_streams_per_chunk=cap, shuffle=True, lookahead=lookahead)
    run = StreamLoader(streams, rows[0], tbins, **kw)
    it = iter(run)
    for _ in range(min(stop, len(run) - 1)):
        next(it)
    state = run.state_dict()
    rest = StreamLoader(streams, rows[1], tbins, **kw)
    rest.load_state_dict(state)
    where = rest.progress
    batches = list(rest)
    assert len(batches) == where.total - where.done
    if where.epoch == state["epoch"]:
        check_continuity(
            batches,
            lengths,
            sources=streams,
            pack=True,
            max_streams_per_chunk=cap,
            state=state,
            lookahead=lookahead,
        )


def _check_marked(batches, before: dict, seen: dict, r0: int = 0) -> None:
    """Every step that does not follow its row's step before it (same stream, next step)
    is marked by ``step == 0`` or by ``reset`` at a chunk's start; count every step."""
    for b in batches:
        valid, stream, step = b.valid.numpy(), b.stream.numpy(), b.step.numpy()
        for r in range(valid.shape[0]):
            for t in np.flatnonzero(valid[r]).tolist():
                at = (int(stream[r, t]), int(step[r, t]))
                last = before.get(r0 + r)
                goes_on = last is not None and at == (last[0], last[1] + 1)
                marked = at[1] == 0 or (t == 0 and bool(b.reset[r]))
                assert goes_on or marked, (r0 + r, t, last, at)
                before[r0 + r] = at
                seen[at] = seen.get(at, 0) + 1


@settings(max_examples=25, deadline=None)
@given(
    lengths=stream_lengths(max_streams=8, max_length=30),
    rows=st.integers(1, 3),
    tbins=st.integers(1, 5),
    segment_length=st.integers(1, 12),
    cap=st.sampled_from([None, 1, 2, 3]),
    shuffle=st.booleans(),
    world_size=st.integers(1, 2),
)
def test_every_packed_segment_is_marked_where_it_starts_and_epochs_keep_their_length(
    lengths, rows, tbins, segment_length, cap, shuffle, world_size
):
    streams = coded_streams(lengths)
    kw = dict(pad="pack", segment_length=segment_length, max_streams_per_chunk=cap)
    kw.update(shuffle=shuffle, seed=5, world_size=world_size)
    loaders = [StreamLoader(streams, rows, tbins, rank=k, **kw) for k in range(world_size)]
    expected = {(s, k) for s, n in enumerate(lengths) for k in range(n)}
    counts = set()
    for epoch in range(5):
        before, seen = {}, {}
        for k, loader in enumerate(loaders):
            loader.set_epoch(epoch)
            batches = list(loader)
            assert len(batches) == len(loader) == loader.epoch_length(0)
            counts.add(len(batches))
            _check_marked(batches, before, seen, k * rows)
            if epoch < 2:  # (the loader's own checker agrees)
                check_continuity(
                    batches,
                    lengths,
                    sources=streams,
                    pack=True,
                    segment_length=segment_length,
                    max_streams_per_chunk=cap,
                    complete=world_size == 1,
                )
        assert set(seen) == expected and set(seen.values()) <= {1}, epoch
    assert len(counts) == 1  # every epoch, every rank: the same length


def test_packed_segments_are_marked_alike_with_workers():
    lengths = [23, 5, 17, 9, 2, 31]
    streams = coded_streams(lengths)
    kw = dict(pad="pack", segment_length=7, shuffle=True, seed=1)
    reference = list(StreamLoader(streams, 3, 4, **kw))
    before, seen = {}, {}
    _check_marked(reference, before, seen)
    assert sorted(seen) == [(s, k) for s, n in enumerate(lengths) for k in range(n)]
    for method in ("process", "thread"):
        again = StreamLoader(streams, 3, 4, num_workers=2, method=method, **kw)
        assert_same(list(again), reference)
