"""Packed rows with a cap on the streams of a chunk: the layout and the chunks it takes."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from streamseq import interleave_streams, tbin
from streamseq.plan.packing import capped_end, capped_starts
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
