"""Packed rows with a cap on the streams of a chunk: the layout and the chunks it takes."""

from __future__ import annotations

import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamseq import interleave_streams, tbin
from streamseq.plan import packing
from streamseq.plan.packing import capped_end, capped_starts, row_spans
from streamseq.plan.rows import row_cost
from streamseq.testing import coded_streams

LENGTHS = st.lists(st.integers(0, 12), max_size=12)


@given(LENGTHS, st.integers(1, 6), st.integers(1, 4))
def test_a_chunk_holds_at_most_cap_streams_and_pads_only_after_cap(lengths, t, cap):
    lengths = np.array(lengths, dtype=np.int64)
    starts = capped_starts(lengths, t, cap)
    ends = starts + lengths
    nonempty = lengths > 0
    s, e = starts[nonempty], ends[nonempty]
    assert (s[1:] >= e[:-1]).all()  # in order, no overlap
    chunks = -(-int(e.max(initial=0)) // t)
    for c in range(chunks):
        touching = int(((s < (c + 1) * t) & (e > c * t)).sum())
        assert touching <= cap
    for j in range(1, len(s)):  # a gap only where the chunk before held cap streams
        if s[j] > e[j - 1]:
            c = e[j - 1] // t
            assert int(((s < (c + 1) * t) & (e > c * t)).sum()) == cap
            assert s[j] % t == 0


@given(LENGTHS, st.integers(1, 6), st.integers(1, 4))
def test_a_capped_row_takes_between_packed_and_unpacked_chunks(lengths, t, cap):
    lengths = np.array(lengths, dtype=np.int64)
    chunks = -(-capped_end(lengths, t, cap) // t)
    assert -(-int(lengths.sum()) // t) <= chunks <= int((-(-lengths // t)).sum())
    cost = int(row_cost(lengths, t, pack=True, cap=cap).sum())
    bound = cost if cap == 1 else -(-cost // ((cap - 1) * t))
    assert chunks <= bound  # what the plan's length bound relies on


@given(LENGTHS.filter(any), st.integers(1, 6), st.integers(1, 4))
def test_tbin_reads_the_capped_layout(lengths, t, cap):
    streams = coded_streams(lengths)
    (row,) = interleave_streams(streams, 1)
    chunks = tbin(row, t, pack=True, max_streams_per_chunk=cap)
    starts = capped_starts(row.lengths, t, cap)
    assert len(chunks) == -(-capped_end(row.lengths, t, cap) // t)
    data = np.concatenate([c.data for c in chunks])
    valid = np.concatenate([c.valid for c in chunks])
    for j, s in enumerate(row.stream_ids.tolist()):
        n = lengths[s]
        assert (data[starts[j] : starts[j] + n] == streams[s]).all()
        assert valid[starts[j] : starts[j] + n].all()
    assert valid.sum() == sum(lengths)


def reference_starts(lengths, tbins, cap):
    """The layout of a capped packed row, stream by stream: the reference model."""
    starts = np.empty(len(lengths), np.int64)
    at = touching = 0  # the next free step, and the streams in its chunk
    for j, n in enumerate(np.asarray(lengths).tolist()):
        if at % tbins == 0:
            touching = 0
        if n and touching >= cap:
            at += tbins - at % tbins
            touching = 0
        starts[j] = at
        if n:
            end = at + n
            touching = touching + 1 if end // tbins == at // tbins else 1
            at = end
    return starts


ROWS = st.lists(st.lists(st.integers(0, 12), max_size=10), min_size=1, max_size=6)


@settings(max_examples=200)
@given(ROWS, st.integers(1, 6), st.integers(1, 4))
def test_rows_laid_out_together_are_laid_out_as_each_alone(rows, t, cap):
    lengths = np.array([n for r in rows for n in r], np.int64)
    sizes = np.array([len(r) for r in rows], np.int64)
    start, end = row_spans(lengths, sizes, t, cap)
    want = [reference_starts(np.array(r, np.int64), t, cap) for r in rows]
    assert start.tolist() == [int(s) for w in want for s in w]
    assert (end - start).tolist() == lengths.tolist()
    for r in rows:
        assert capped_starts(np.array(r, np.int64), t, cap).tolist() == (
            reference_starts(np.array(r, np.int64), t, cap).tolist()
        )


def _lines_run(lengths, sizes, t, cap, flags=None):
    """Lines of streamseq.plan.packing run to lay out the rows (a count, not a time);
    ``flags``: the pieces that start a chunk."""
    count = [0]
    where = packing.__file__

    def trace(frame, event, arg):
        if frame.f_code.co_filename != where:
            return None
        if event == "line":
            count[0] += 1
        return trace

    sys.settrace(trace)
    try:
        row_spans(lengths, sizes, t, cap, flags)
    finally:
        sys.settrace(None)
    return count[0]


def test_many_rows_are_laid_out_in_steps_of_their_longest_row_not_of_their_streams():
    rng = np.random.default_rng(0)
    per_row = 30
    few = rng.integers(0, 9, 4 * per_row)
    many = rng.integers(0, 9, 64 * per_row)
    lines_few = _lines_run(few, np.full(4, per_row), 8, 2)
    lines_many = _lines_run(many, np.full(64, per_row), 8, 2)
    assert lines_many <= lines_few + 10  # 16 times the streams, not 16 times the steps


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 12), st.booleans()), max_size=10),
    st.integers(1, 6),
    st.sampled_from([None, 1, 2, 3]),
    st.randoms(use_true_random=False),
)
def test_most_chunks_bounds_a_row_with_pieces_at_chunks_in_any_order(pieces, t, cap, rnd):
    # pieces flagged start a chunk: the chunks a row takes depend on its order, never
    # past the bound, which no order (among those tried) may pass and the unpacked row caps
    from streamseq.plan.packing import most_chunks, placed_cap

    lengths = np.array([n for n, _ in pieces], np.int64)
    flags = np.array([f for _, f in pieces], bool)
    bound = most_chunks(lengths, t, cap, flags)
    assert bound <= int((-(-lengths // t)).sum())
    assert most_chunks(lengths, t, cap) <= bound  # (flags never lower it)
    orders = [np.arange(len(lengths))] + [
        np.array(rnd.sample(range(len(lengths)), len(lengths)), np.int64) for _ in range(8)
    ]
    for order in orders:
        n, f = lengths[order], flags[order]
        sizes = np.array([len(n)], np.int64)
        start, end = row_spans(n, sizes, t, placed_cap(cap, t), f)
        chunks = -(-int(end.max(initial=0)) // t)
        assert chunks <= bound, (order.tolist(), start.tolist())
        for s, k, flagged in zip(start.tolist(), n.tolist(), f.tolist(), strict=True):
            assert not (flagged and k) or s % t == 0  # a flagged piece starts a chunk


def test_most_chunks_of_flagged_pieces_is_reached():
    from streamseq.plan.packing import most_chunks

    # 9, 9 (flagged), 1 (flagged) in chunks of 2: 5 + 5 + 1 in this order, the bound
    lengths, flags = np.array([9, 9, 1]), np.array([False, True, True])
    assert most_chunks(lengths, 2, None, flags) == 11
    assert row_spans(lengths, np.array([3]), 2, 3, flags)[1].tolist() == [9, 19, 21]


def test_uncapped_rows_with_pieces_at_chunks_are_laid_out_by_arrays_not_piece_by_piece():
    # packed segments (every one but a stream's first starts a chunk), uncapped: planning
    # millions of them must not step through the pieces of a row one at a time
    rng = np.random.default_rng(0)
    lines = []
    for rows, per_row in ((1, 30), (1, 600), (8, 30), (8, 600)):
        lengths = rng.integers(0, 9, rows * per_row)
        flags = rng.random(rows * per_row) < 0.3
        uncapped = packing.placed_cap(None, 4)
        lines.append(_lines_run(lengths, np.full(rows, per_row), 4, uncapped, flags))
    assert max(lines) <= min(lines) + 10  # 20 times the pieces, not 20 times the steps


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(st.tuples(st.integers(0, 12), st.booleans()), max_size=10), max_size=6),
    st.integers(1, 6),
    st.integers(1, 3),
)
def test_uncapped_rows_are_laid_out_as_piece_by_piece(rows, t, over):
    # a cap above tbins is never reached: the layout by arrays is the one of the rule
    lengths = np.array([n for r in rows for n, _ in r], np.int64)
    flags = np.array([f for r in rows for _, f in r], bool)
    sizes = np.array([len(r) for r in rows], np.int64)
    start, end = row_spans(lengths, sizes, t, t + over, flags)
    want = []
    for r in rows:
        n = np.array([k for k, _ in r], np.int64)
        f = np.array([g for _, g in r], bool)
        want += packing._lay_out(n, 0, 0, t, t + over, f)
    assert start.tolist() == want
    assert (end - start).tolist() == lengths.tolist()
