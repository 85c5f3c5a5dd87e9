"""lookahead=k: every per-step field holds tbins + k steps; every step a next-step target once."""

import warnings
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from streamseq import StreamLoader, interleave_streams, mix, tbin, zip_batch
from streamseq.testing import CODE, check_continuity, coded_streams, layouts


def quiet(streams, *args, **kw):
    """A loader, without the warning about rows left empty."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return StreamLoader(streams, *args, **kw)


def counts(batches, tbins):
    """(delivered, targets): times each (stream, step) is in the first tbins, and a target.

    A target: step t + 1 after input t (t < tbins), both valid, same stream, consecutive
    steps; written without the library's helpers.
    """
    delivered, targets = Counter(), Counter()
    for b in batches:
        v, s, k = (np.asarray(f) for f in (b.valid, b.stream, b.step))
        for r in range(v.shape[0]):
            for t in range(tbins):
                if v[r, t]:
                    delivered[int(s[r, t]), int(k[r, t])] += 1
                nxt = t + 1
                if nxt < v.shape[1] and v[r, t] and v[r, nxt]:
                    if s[r, nxt] == s[r, t] and k[r, nxt] == k[r, t] + 1:
                        targets[int(s[r, nxt]), int(k[r, nxt])] += 1
    return delivered, targets


def lost(delivered, targets):
    """Steps delivered (not a stream's first) minus those used as targets."""
    return sum(n for (s, k), n in delivered.items() if k > 0) - sum(targets.values())


def assert_targets(delivered, targets, firsts=()):
    """Every step but a stream's first a target as often as delivered; ``firsts`` at most."""
    assert set(targets) <= set(delivered), set(targets) - set(delivered)
    for key, n in delivered.items():
        if key in firsts:
            assert targets[key] <= n, key
        else:
            assert targets[key] == (0 if key[1] == 0 else n), (key, targets[key], n)


def assert_coded(batch):
    """Data equals source[s][k] (coded streams) at every valid step, zeros elsewhere."""
    v, s, k = (np.asarray(f) for f in (batch.valid, batch.stream, batch.step))
    want = np.where(v, s * CODE + k + 1, 0)
    np.testing.assert_array_equal(np.asarray(batch.data), want)


def assert_head_is(batch, plain, tbins):
    """The first tbins steps are the batch without look-ahead, field by field."""
    np.testing.assert_array_equal(np.asarray(batch.reset), np.asarray(plain.reset))
    for f in ("data", "valid", "stream", "step"):
        np.testing.assert_array_equal(
            np.asarray(getattr(batch, f))[:, :tbins], np.asarray(getattr(plain, f))
        )


def assert_ahead_follows(batch, tbins, lengths):
    """Positions tbins.. hold the steps after the one at tbins - 1, of its stream, or padding."""
    v, s, k = (np.asarray(f) for f in (batch.valid, batch.stream, batch.step))
    extra = v.shape[1] - tbins
    for r in range(v.shape[0]):
        n = 0
        if v[r, tbins - 1]:
            n = min(extra, lengths[s[r, tbins - 1]] - 1 - k[r, tbins - 1])
        assert v[r, tbins:].tolist() == [j < n for j in range(extra)]
        if n:
            assert (s[r, tbins : tbins + n] == s[r, tbins - 1]).all()
            assert k[r, tbins : tbins + n].tolist() == list(
                range(k[r, tbins - 1] + 1, k[r, tbins - 1] + 1 + n)
            )
        assert (s[r, tbins + n :] == -1).all() and (k[r, tbins + n :] == -1).all()


@settings(max_examples=40)
@given(
    layouts(max_streams=8, max_length=30),
    st.integers(0, 3),
    st.sampled_from(["zeros", "pack"]),
    st.sampled_from([None, 2, 3, 4]),
    st.booleans(),
)
def test_every_step_but_the_first_is_a_target_exactly_once(layout, k, pad, seg, shuffle):
    lengths, t = list(layout.lengths), layout.tbins
    k = min(k, max(lengths))  # (a longer look-ahead is refused)
    streams = coded_streams(lengths)
    kw = dict(pad=pad, segment_length=seg, shuffle=shuffle, seed=3)
    plain = list(quiet(streams, layout.batch_size, t, **kw))
    loader = quiet(streams, layout.batch_size, t, lookahead=k, **kw)
    batches = list(loader)
    assert len(batches) == len(loader) == len(plain)
    for b, p in zip(batches, plain, strict=True):
        assert np.shape(b.valid)[1] == t + k
        assert_head_is(b, p, t)
        assert_ahead_follows(b, t, lengths)
        assert_coded(b)
    check_continuity(
        batches, lengths, sources=streams, pack=pad == "pack", segment_length=seg, lookahead=k
    )
    delivered, targets = counts(batches, t)
    assert sum(delivered.values()) == sum(lengths)
    if k == 0:
        return
    firsts = set()
    if seg is not None and (pad == "pack" or seg % t):  # segment starts after a padded chunk
        firsts = {(s, a) for s, n in enumerate(lengths) for a in range(seg, n, seg)}
    assert_targets(delivered, targets, firsts)


@pytest.mark.parametrize(
    "kw",
    [
        dict(pad="zeros"),
        dict(pad="pack"),
        dict(pad="pack", segment_length=4, seed=5),
        dict(pad="zeros", segment_length=3, persistent_workers=True),
        dict(pad="zeros", method="thread", time_major=True),
    ],
)
def test_workers_give_the_same_look_ahead(kw):
    lengths = [9, 0, 5, 13, 2, 7, 4]
    streams = coded_streams(lengths)
    here = list(quiet(streams, 3, 3, lookahead=2, **kw))
    loader = quiet(streams, 3, 3, lookahead=2, num_workers=2, **kw)
    for _ in range(2):  # persistent workers read a second pass too
        there = list(loader)
        assert len(there) == len(here)
        for a, b in zip(here, there, strict=True):
            for f, g in zip(a, b, strict=True):
                np.testing.assert_array_equal(np.asarray(f), np.asarray(g))
    for i in (0, len(here) - 1, 1):  # random access
        for f, g in zip(loader[i], here[i], strict=True):
            np.testing.assert_array_equal(np.asarray(f), np.asarray(g))
    if kw.get("time_major"):
        assert here[0].data.shape == (5, 3) and here[0].target_mask(2, time_major=True).shape == (
            3,
            3,
        )


@settings(max_examples=25)
@given(
    layouts(max_streams=8, max_length=30, max_batch=4),
    st.integers(1, 3),
    st.sampled_from(["zeros", "pack"]),
    st.integers(1, 4),
    st.integers(1, 5),
    st.sampled_from([None, 4]),
)
def test_targets_exactly_once_across_a_resume_on_another_batch_size(
    layout, k, pad, cut, wider, seg
):
    lengths, t = list(layout.lengths), layout.tbins
    k = min(k, max(lengths))  # (a longer look-ahead is refused)
    streams = coded_streams(lengths)
    kw = dict(pad=pad, segment_length=seg, lookahead=k)
    run = quiet(streams, layout.batch_size, t, **kw)
    cut = min(cut, len(run) - 1)  # a state inside the epoch
    it = iter(run)
    before = [b for _, b in zip(range(cut), it, strict=False)]
    state = run.state_dict()
    it.close()
    again = quiet(streams, wider, t, **kw)
    again.load_state_dict(state)
    after = list(again)
    check_continuity(
        after,
        lengths,
        sources=streams,
        pack=pad == "pack",
        segment_length=seg,
        state=state,
        lookahead=k,
    )
    delivered, targets = counts(before + after, t)
    firsts = set()
    if seg is not None and (pad == "pack" or seg % t):
        firsts = {(s, a) for s, n in enumerate(lengths) for a in range(seg, n, seg)}
    assert_targets(delivered, targets, firsts)
    for b in before + after:
        assert_coded(b)


def test_a_resumed_row_map_keeps_the_look_ahead():
    lengths = [12, 7, 9, 5, 11]
    streams = coded_streams(lengths)
    run = quiet(streams, 3, 4, lookahead=1)
    it = iter(run)
    next(it)
    state = run.state_dict()
    narrow = quiet(streams, 2, 4, lookahead=1)
    narrow.load_state_dict(state)
    rows = narrow.row_map(state)
    first = next(iter(narrow))
    assert len(rows) == 2
    assert_coded(first)
    assert_ahead_follows(first, 4, lengths)


@settings(max_examples=20)
@given(st.lists(st.integers(1, 12), min_size=2, max_size=6), st.integers(1, 3), st.integers(0, 2))
def test_mixtures_make_every_delivered_step_a_target(lengths, k, epoch):
    k = min(k, max(lengths))  # (a longer look-ahead is refused)
    streams = coded_streams(lengths)
    half = len(streams) // 2
    m = mix({"a": streams[:half], "b": streams[half:]}, {"a": 3.0, "b": 1.0})
    loader = quiet(m, 2, 3, lookahead=k, shuffle=True)
    loader.set_epoch(epoch)
    batches = list(loader)
    delivered, targets = counts(batches, 3)
    assert_targets(delivered, targets)  # a stream read twice: a target twice
    for b in batches:
        assert_coded(b)


def test_states_load_across_look_aheads():
    streams = coded_streams([7, 5, 9, 4])
    run = StreamLoader(streams, 2, 3)
    it = iter(run)
    next(it)
    state = run.state_dict()
    ahead = StreamLoader(streams, 2, 3, lookahead=2)
    assert ahead.fingerprint == run.fingerprint
    ahead.load_state_dict(state)
    rest, plain = list(ahead), list(it)
    assert len(rest) == len(plain)
    for a, p in zip(rest, plain, strict=True):
        assert_head_is(a, p, 3)
    back = StreamLoader(streams, 2, 3)
    back.load_state_dict(ahead.state_dict())
    assert ahead.lookahead == 2 and back.lookahead == 0


@pytest.mark.parametrize(
    ("bad", "error"),
    [(-1, ValueError), (True, TypeError), (1.5, TypeError), (1.0, TypeError), ("1", TypeError)],
)
def test_a_bad_lookahead_is_refused_by_name(bad, error):
    streams = [np.arange(5)]
    with pytest.raises(error, match="lookahead"):
        StreamLoader(streams, 1, 2, lookahead=bad)
    (row,) = interleave_streams(streams, 1)
    with pytest.raises(error, match="lookahead"):
        tbin(row, 2, lookahead=bad)


def test_zip_batch_of_look_ahead_parts_and_of_mixed_ones():
    rows = interleave_streams([np.arange(5), np.arange(10, 13)], 2)
    batches = zip_batch([tbin(r, 2, lookahead=1) for r in rows])
    assert [b.data.tolist() for b in batches] == [
        [[0, 1, 2], [10, 11, 12]],
        [[2, 3, 4], [12, 0, 0]],
        [[4, 0, 0], [0, 0, 0]],
    ]
    with pytest.raises(ValueError, match="steps per chunk"):
        zip_batch([tbin(rows[0], 2, lookahead=1), tbin(rows[1], 2)])
    nested = zip_batch([zip_batch([tbin(r, 2, lookahead=1)]) for r in rows])
    for a, b in zip(nested, batches, strict=True):
        for f, g in zip(a, b, strict=True):
            np.testing.assert_array_equal(f, g)


def test_target_mask_is_the_next_step_rule_and_stops_at_documents():
    lengths = [6, 3, 8, 2, 5]
    streams = coded_streams(lengths)
    for pad in ("zeros", "pack"):
        batches = list(StreamLoader(streams, 2, 4, lookahead=1, pad=pad))
        total = 0
        for b in batches:
            mask = b.target_mask()
            assert mask.shape == (2, 4)
            s, k = b.stream, b.step
            want = (s[:, :-1] == s[:, 1:]) & (k[:, 1:] == k[:, :-1] + 1) & b.valid[:, 1:]
            np.testing.assert_array_equal(mask, want)
            total += int(mask.sum())
        assert total == sum(n - 1 for n in lengths)
    b = next(iter(StreamLoader(streams, 2, 4, lookahead=2)))
    tensor = b.like(torch.as_tensor(f) for f in b)
    assert tensor.target_mask(2).tolist() == b.target_mask(2).tolist()
    with pytest.raises(ValueError, match="lookahead"):
        b.target_mask(0)
    with pytest.raises(ValueError, match="no input"):
        type(b)(*b, lookahead=6).target_mask()


def test_look_ahead_steps_are_checked_against_the_batch_naming_the_stream():
    streams = [np.arange(6, dtype=np.int64), np.arange(4, dtype=np.int64)]

    def transform(steps, info):  # the steps from 2 on come as floats
        return steps.astype(np.float32) if info.start >= 2 else steps

    loader = StreamLoader(streams, 2, 2, lookahead=1, transform=transform)
    with pytest.raises(Exception, match=r"stream 0 .*steps 2:3"):
        list(loader)


def test_without_look_ahead_the_first_step_of_every_chunk_is_lost():
    lengths = [10, 7, 9]
    streams = coded_streams(lengths)
    before = counts(StreamLoader(streams, 2, 4), 4)
    after = counts(StreamLoader(streams, 2, 4, lookahead=1), 4)
    assert lost(*before) > 0 and lost(*after) == 0


def test_target_mask_uses_the_look_ahead_the_batch_holds():
    streams = coded_streams([9, 5, 7])
    b2 = next(iter(StreamLoader(streams, 2, 3, lookahead=2)))
    assert b2.lookahead == 2
    assert tuple(b2.target_mask().shape) == (2, 3)  # inputs: the tbins steps
    assert b2.target_mask(2).tolist() == b2.target_mask().tolist()
    with pytest.raises(ValueError, match=r"lookahead=1.*holds lookahead=2"):
        b2.target_mask(1)  # would take [B, tbins + 1] inputs: targets counted twice
    for other in (2.0, True, "2"):
        with pytest.raises(ValueError, match="holds lookahead=2"):
            b2.target_mask(other)
    b0 = next(iter(StreamLoader(streams, 2, 3)))
    assert b0.lookahead == 0
    with pytest.raises(ValueError, match="no look-ahead"):
        b0.target_mask()  # would take the chunk's last step for a look-ahead step
    with pytest.raises(ValueError, match=r"lookahead=1.*holds lookahead=0"):
        b0.target_mask(1)


@pytest.mark.parametrize(
    "kw",
    [
        dict(num_workers=0),
        dict(num_workers=2),
        dict(num_workers=2, pin_memory=True),
        dict(num_workers=0, pin_memory=True, time_major=True),
        dict(num_workers=2, method="thread"),
        dict(num_workers=2, pad="pack", persistent_workers=True),
    ],
)
def test_every_delivered_batch_knows_its_look_ahead(kw):
    import pickle

    streams = coded_streams([9, 0, 5, 13, 2, 7])
    for k in (0, 2):
        loader = quiet(streams, 3, 4, lookahead=k, **kw)
        batches = list(loader) + [loader[1]]
        assert [b.lookahead for b in batches] == [k] * len(batches)
        b = batches[1]
        assert pickle.loads(pickle.dumps(b)).lookahead == k
        assert b.to("cpu").lookahead == k
        assert b._replace(reset=b.reset).lookahead == k
        if k:
            tm = kw.get("time_major", False)
            assert tuple(b.target_mask(time_major=tm).shape) == ((4, 3) if tm else (3, 4))


def test_a_lookahead_longer_than_every_stream_is_refused_by_name():
    streams = coded_streams([9, 0, 5, 13])
    loader = StreamLoader(streams, 2, 3, lookahead=13)  # as long as the longest: allowed
    assert np.shape(next(iter(loader)).valid) == (2, 16)
    for k in (14, 10**12):
        with pytest.raises(ValueError, match=rf"lookahead={k}.*longest stream.*13 steps"):
            StreamLoader(streams, 2, 3, lookahead=k)


@pytest.mark.parametrize(
    "segment_length, pad, warned",
    [(4, "zeros", True), (6, "zeros", False), (6, "pack", True), (None, "pack", False)],
)
def test_segments_that_end_inside_a_chunk_warn_of_the_targets_they_lose(
    segment_length, pad, warned
):
    import warnings

    streams = [np.arange(n) for n in (17, 5, 9, 30)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        StreamLoader(streams, 3, 3, lookahead=2, segment_length=segment_length, pad=pad)
    said = [str(w.message) for w in caught if "segment" in str(w.message)]
    assert bool(said) == warned, said
    if warned:
        assert "lookahead=2" in said[0] and f"segment_length={segment_length}" in said[0]


def mask_targets(batches):
    """(delivered, targets) by the library's ``target_mask``; each target checked to be step
    t + 1 of input t's stream (never padding, never another stream)."""
    delivered, targets = Counter(), Counter()
    for b in batches:
        v, s, k = (np.asarray(f) for f in (b.valid, b.stream, b.step))
        t = v.shape[1] - b.lookahead
        m = np.asarray(b.target_mask())
        for cell in zip(s[:, :t][v[:, :t]].tolist(), k[:, :t][v[:, :t]].tolist(), strict=True):
            delivered[cell] += 1
        assert v[:, 1 : t + 1][m].all() and v[:, :t][m].all()
        assert (s[:, 1 : t + 1][m] == s[:, :t][m]).all(), "a target of another stream"
        assert (k[:, 1 : t + 1][m] == k[:, :t][m] + 1).all()
        for cell in zip(s[:, 1 : t + 1][m].tolist(), k[:, 1 : t + 1][m].tolist(), strict=True):
            targets[cell] += 1
    return delivered, targets


@settings(max_examples=5, deadline=None)
@given(
    layouts(max_streams=6, max_length=20, max_batch=3, max_tbins=5),
    st.integers(1, 3),
    st.sampled_from(["zeros", "pack"]),
    st.sampled_from([None, 5]),
    st.booleans(),
    st.integers(0, 3),
    st.integers(1, 4),
)
def test_with_workers_every_step_is_a_target_of_its_own_stream_once(
    layout, k, pad, seg, mixture, cut, wider
):
    """Workers, mixtures, segments, packing and a resume on another batch size: by
    ``target_mask``, every delivered step but a stream's first is a target as often as it
    is delivered (once, but for a mixture's repeats), always of its own stream."""
    lengths, t = list(layout.lengths), layout.tbins
    k = min(k, max(lengths))
    streams = coded_streams(lengths)
    source = streams
    if mixture and len(streams) > 1:
        half = len(streams) // 2
        assume(sum(lengths[:half]) > 0 and sum(lengths[half:]) > 0)  # (a group of no steps)
        source = mix({"a": streams[:half], "b": streams[half:]}, {"a": 2.0, "b": 1.0})
    kw = dict(pad=pad, segment_length=seg, lookahead=k, shuffle=True, seed=2, num_workers=2)
    run = quiet(source, layout.batch_size, t, **kw)
    cut = min(cut, len(run) - 1)
    it = iter(run)
    before = [b for _, b in zip(range(cut), it, strict=False)]
    state = run.state_dict()
    it.close()
    again = quiet(source, wider, t, **kw)
    again.load_state_dict(state)
    batches = before + list(again)
    for b in batches:
        assert_coded(b)
    delivered, targets = mask_targets(batches)
    if not mixture:
        assert sorted(delivered) == [(s, a) for s, n in enumerate(lengths) for a in range(n)]
        assert set(delivered.values()) <= {1}
    firsts = set()
    starts = (
        set()
        if seg is None
        else {(s, a) for s, n in enumerate(lengths) for a in range(seg, n, seg)}
    )
    if seg is not None and (pad == "pack" or seg % t or mixture):
        # a segment start after a padded chunk; or, in a mixture, one whose segment before
        # it was not drawn this epoch (its first step there is a first), or whose own
        # segment was not drawn: the step after a drawn segment's end is then a target
        # that is no input this epoch
        firsts = starts
    if mixture and seg is not None:
        # a segment start: the look-ahead of the segment before it, as often as that one
        # is drawn, whether or not its own segment is drawn this epoch (checked above to
        # be the next step of its stream)
        delivered = Counter({key: n for key, n in delivered.items() if key not in starts})
        targets = Counter({key: n for key, n in targets.items() if key not in starts})
    assert_targets(delivered, targets, firsts)


@pytest.mark.parametrize("batch_size", [3, 6])  # 6 rows: as many as tbins + lookahead
@pytest.mark.parametrize("kw", [dict(), dict(num_workers=2, pin_memory=True)])
def test_a_time_major_batch_gives_its_target_mask_time_major(batch_size, kw):
    streams = coded_streams([9, 3, 5, 13, 2, 7, 4])
    plain = list(quiet(streams, batch_size, 4, lookahead=2, **kw))
    major = list(quiet(streams, batch_size, 4, lookahead=2, time_major=True, **kw))
    for p, m in zip(plain, major, strict=True):
        want = np.asarray(p.target_mask()).T  # [tbins, B]
        np.testing.assert_array_equal(np.asarray(m.target_mask()), want)
        np.testing.assert_array_equal(np.asarray(m.to("cpu").target_mask()), want)
        np.testing.assert_array_equal(np.asarray(m._replace(reset=m.reset).target_mask()), want)
    b = major[0]
    if batch_size == 3:  # a layout the shapes contradict: refused by name
        with pytest.raises(ValueError, match="time_major"):
            b.target_mask(time_major=False)
        with pytest.raises(ValueError, match="time_major"):
            plain[0].target_mask(time_major=True)


@pytest.mark.parametrize("pad", ["zeros", "pack"])
def test_a_worker_reading_only_first_segments_looks_past_their_end(pad):
    """Row 0 reads segment 0:5 of the only stream, row 1 segment 5:6: a worker given
    row 0 alone still reads step 5 as the look-ahead of step 4 (its source goes on)."""
    streams = coded_streams([6])
    kw = dict(segment_length=5, lookahead=1, pad=pad)
    single = list(quiet(streams, 2, 1, num_workers=0, **kw))
    for workers in (2, 1):
        batches = list(quiet(streams, 2, 1, num_workers=workers, **kw))
        assert len(batches) == len(single)
        for b, want in zip(batches, single, strict=True):
            for f in ("data", "valid", "stream", "step"):
                np.testing.assert_array_equal(
                    np.asarray(getattr(b, f)), np.asarray(getattr(want, f))
                )
    last = single[-1]
    assert last.step[0].tolist() == [4, 5] and bool(last.target_mask()[0, 0])


def test_check_continuity_names_a_lookahead_that_is_not_the_batches():
    lengths = [9, 5, 7]
    streams = coded_streams(lengths)
    batches = list(StreamLoader(streams, 2, 4, lookahead=1))
    assert check_continuity(batches, lengths, sources=streams, lookahead=1) == len(batches)
    with pytest.raises(AssertionError, match=r"lookahead=2.*batch 0 holds lookahead=1"):
        check_continuity(batches, lengths, sources=streams, lookahead=2)
    with pytest.raises(AssertionError, match=r"lookahead=0.*batch 0 holds lookahead=1"):
        check_continuity(batches, lengths, sources=streams)
    for bad, error in ((True, TypeError), (1.0, TypeError), (-1, ValueError)):
        with pytest.raises(error, match="lookahead"):
            check_continuity(batches, lengths, lookahead=bad)


def test_a_batch_with_look_ahead_steps_names_the_steps_it_reads_with_them():
    rows = interleave_streams([np.arange(12)], 1)
    batches = zip_batch([tbin(r, 5, lookahead=1) for r in rows])
    assert batches[1].step.tolist() == [[5, 6, 7, 8, 9, 10]]
    assert batches.describe_item(1).endswith("steps 5:11")
    assert batches.describe_item(2).endswith("steps 10:12")  # (the stream ends: no step after)
    packed = zip_batch([tbin(r, 5, lookahead=1, pack=True) for r in rows], pad="pack")
    assert packed.describe_item(1).endswith("steps 5:11")


NAMED = r"stream (\d+) \(.*?\) steps (\d+):(\d+)"


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(1, 15), min_size=1, max_size=6),
    st.integers(1, 3),
    st.integers(1, 5),
    st.integers(1, 3),
    st.booleans(),
)
def test_a_batch_names_exactly_the_steps_of_each_stream_it_holds(
    lengths, rows, tbins, ahead, pack
):
    import re

    streams = [np.arange(n) for n in lengths]
    parts = [tbin(r, tbins, lookahead=ahead, pack=pack) for r in interleave_streams(streams, rows)]
    batches = zip_batch(parts, pad="pack" if pack else "zeros")
    for i in range(len(batches)):
        b = batches[i]
        held = {(int(s), int(t)) for s, t in zip(b.stream[b.valid], b.step[b.valid], strict=True)}
        named = {
            (int(s), t)
            for s, a, z in re.findall(NAMED, batches.describe_item(i))
            for t in range(int(a), int(z))
        }
        assert named == held
