"""segment_length: long streams cut into segments planned as streams of their own."""

import dataclasses

import numpy as np
import pytest
from helpers import as_numpy, assert_same, assume_rows_filled
from hypothesis import given, settings
from hypothesis import strategies as st

from streamseq import StreamLoader
from streamseq.plan.segments import segments
from streamseq.testing import check_continuity, coded_streams, layouts


@given(st.lists(st.integers(0, 50), min_size=1, max_size=10), st.integers(1, 12))
def test_segments_cover_each_source_exactly_once(lengths, n):
    source, start, length = segments(np.array(lengths), n)
    for s, total in enumerate(lengths):
        mine = source == s
        assert (length[mine] <= n).all() and (length[mine] > 0).all()
        covered = [
            k for a, m in zip(start[mine], length[mine], strict=True) for k in range(a, a + m)
        ]
        assert covered == list(range(total))  # in order, no gap, no overlap


@settings(max_examples=30)
@given(
    layouts(max_streams=8, max_length=40),
    st.integers(1, 15),
    st.sampled_from(["zeros", "drop", "wrap"]),
    st.booleans(),
)
def test_every_segment_is_delivered_whole_with_its_source_steps(layout, n, pad, shuffle):
    lengths = list(layout.lengths)
    segmented = [*(min(n, total - a) for total in lengths for a in range(0, total, n))]
    assume_rows_filled(dataclasses.replace(layout, lengths=tuple(segmented)), pad)
    streams = coded_streams(lengths, (2,))
    loader = StreamLoader(
        streams, layout.batch_size, layout.tbins, pad=pad, shuffle=shuffle, segment_length=n
    )
    batches = list(loader)
    check_continuity(
        batches,
        lengths,
        sources=streams,
        segment_length=n,
        complete=pad != "drop",
        allow_repeats=pad == "wrap",
    )
    for workers, method in ((2, "process"), (3, "thread")):
        again = StreamLoader(
            streams,
            layout.batch_size,
            layout.tbins,
            pad=pad,
            shuffle=shuffle,
            segment_length=n,
            num_workers=workers,
            method=method,
        )
        assert_same(list(again), batches)


def test_segments_resume_and_keep_a_transform_in_source_steps():
    streams = coded_streams([90, 7, 33, 12, 61])
    kw = dict(segment_length=20, shuffle=True, transform=add_step_code)
    reference = as_numpy(StreamLoader(streams, 3, 8, **kw))
    run = StreamLoader(streams, 3, 8, **kw)
    for _, _ in zip(range(4), run, strict=False):
        pass
    resumed = StreamLoader(streams, 3, 8, num_workers=2, **kw)
    resumed.load_state_dict(run.state_dict())
    assert_same(list(resumed), reference[4:])
    for data, _, valid, _, step in reference:  # the transform saw source steps
        assert (data[valid] % 2**32 - 1 == step[valid] * 2).all()


def add_step_code(steps, info):
    return steps + np.arange(info.start, info.stop)


def test_segments_balance_the_ranks():
    lengths = (400, 30, 20, 25, 35, 28)

    def padding(segment_length):
        out = []
        for rank in (0, 1):
            batches = list(
                StreamLoader(
                    coded_streams(lengths),
                    2,
                    16,
                    rank=rank,
                    world_size=2,
                    segment_length=segment_length,
                )
            )
            out.append(sum(int(not b.valid.any()) for b in batches))
        return out

    assert padding(None)[1] == 21  # rank 1: 21 of 25 batches all padding
    assert padding(48) == [0, 0]


def test_a_state_records_the_segment_length():
    streams = coded_streams([50, 30])
    state = StreamLoader(streams, 1, 4, segment_length=10).state_dict()
    with pytest.raises(ValueError, match="segment_length .the state has 10, this loader None"):
        StreamLoader(streams, 1, 4).load_state_dict(state)
