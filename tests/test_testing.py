import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamseq import Batch, StreamLoader, interleave_streams, tbin, zip_batch
from streamseq.testing import Layout, check_continuity, coded_streams, layouts

LENGTHS = [5, 3, 4, 2]


def good():
    streams = coded_streams(LENGTHS)
    rows = interleave_streams(streams, 2)
    return [
        Batch(*(np.array(f, copy=True) for f in b)) for b in zip_batch([tbin(r, 2) for r in rows])
    ], streams


def test_accepts_a_correct_run():
    batches, streams = good()
    assert check_continuity(batches, LENGTHS, sources=streams) == len(batches)


def mutate(fn):
    batches, streams = good()
    fn(batches)
    return batches, streams


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda b: b[1].step.__setitem__((0, 0), 3), r"batch 1, row 0: .*not consecutive|jumps"),
        (lambda b: b[1].reset.__setitem__(0, True), r"batch 1, row 0: reset set in the middle"),
        (lambda b: b[0].reset.__setitem__(1, False), r"batch 0, row 1: stream 1 starts without"),
        (lambda b: b[0].data.__setitem__((0, 0), 77), r"batch 0, row 0: data of stream 0"),
        (lambda b: b[2].valid.__setitem__((0, 0), False), r"batch 2, row 0"),
    ],
)
def test_names_the_first_broken_batch_and_row(change, message):
    batches, streams = mutate(change)
    with pytest.raises(AssertionError, match=message):
        check_continuity(batches, LENGTHS, sources=streams)


def test_lost_batch_is_a_jump():
    batches, _ = good()
    del batches[1]
    with pytest.raises(AssertionError, match="batch 1, row 0: stream 0 jumps from step 2 to 4"):
        check_continuity(batches, LENGTHS)


def test_duplicated_batch_is_caught():
    batches, _ = good()
    batches.insert(1, batches[1])
    with pytest.raises(AssertionError, match="batch 2, row 0: stream 0 jumps from step 4 to 2"):
        check_continuity(batches, LENGTHS)


def test_stream_split_across_rows_is_caught():
    batches, _ = good()
    b = batches[1]
    b.stream[1], b.step[1], b.valid[1], b.reset[1] = [0, 0], [2, 3], [True, True], False
    with pytest.raises(AssertionError, match="batch 1, row 1: stream 0 appears at step 2"):
        check_continuity(batches, LENGTHS)


def test_incomplete_stream_is_caught_unless_allowed():
    batches, _ = good()
    with pytest.raises(AssertionError, match="not delivered whole"):
        check_continuity(batches[:2], LENGTHS)
    check_continuity(batches[:2], LENGTHS, complete=False)


def test_nonzero_padding_is_caught():
    batches, _ = good()
    i, r, t = next(
        (i, *np.argwhere(~b.valid)[0]) for i, b in enumerate(batches) if (~b.valid).any()
    )
    batches[i].data[r, t] = 5
    with pytest.raises(AssertionError, match="padding data is not zero"):
        check_continuity(batches, LENGTHS)


def test_repeated_stream_is_caught_unless_wrapping():
    streams = coded_streams(LENGTHS)
    rows = interleave_streams(streams, 2)
    wrapped = list(zip_batch([tbin(r, 2) for r in rows], pad="wrap", length=6))
    with pytest.raises(AssertionError, match="delivered twice"):
        check_continuity(wrapped, LENGTHS)
    check_continuity(wrapped, LENGTHS, sources=streams, allow_repeats=True)


@given(layouts())
def test_strategies_give_valid_layouts(layout):
    assert isinstance(layout, Layout)
    assert any(layout.lengths) and layout.batch_size >= 1 and layout.tbins >= 1


def test_coded_streams_are_never_zero():
    streams = coded_streams([3, 2], shape=(2,))
    assert all((s != 0).all() for s in streams)
    assert streams[1][1].tolist() == [2**32 + 2] * 2


class Keyed:
    """A stream whose slices are dicts ``{"x": code, "y": -code}`` listing keys in ``order``."""

    def __init__(self, code, order=("x", "y")):
        self.parts, self.order = {"x": code, "y": -code}, order

    def __len__(self):
        return len(self.parts["x"])

    def __getitem__(self, key):
        return {name: self.parts[name][key] for name in self.order}


def dict_run(lengths):
    streams = [Keyed(c) for c in coded_streams(lengths)]
    streams[1].order = ("y", "x")  # another order than the first stream
    return [Batch(*b) for b in StreamLoader(streams, 2, 2)], streams


def test_dict_sources_are_compared_by_key_not_order():
    batches, streams = dict_run(LENGTHS)
    assert list(batches[0].data) == ["x", "y"]
    assert list(streams[1][0:1]) == ["y", "x"]
    assert check_continuity(batches, LENGTHS, sources=streams) == len(batches)


def test_dicts_of_arrays_are_sources_too():
    batches, streams = dict_run(LENGTHS)
    arrays = [{"y": s.parts["y"], "x": s.parts["x"]} for s in streams]
    assert check_continuity(batches, LENGTHS, sources=arrays) == len(batches)


def test_dict_data_differing_under_one_key_is_named():
    batches, streams = dict_run(LENGTHS)
    batches[0].data["y"][1, 0] = 5
    with pytest.raises(AssertionError, match=r"batch 0, row 1: data of stream 1 .* at \['y'\]"):
        check_continuity(batches, LENGTHS, sources=streams)


def test_dict_keys_missing_from_the_source_are_caught():
    batches, streams = dict_run(LENGTHS)
    streams[0].order = ("x",)
    with pytest.raises(AssertionError, match=r"batch 0, row 0: .*keys \['x', 'y'\], source"):
        check_continuity(batches, LENGTHS, sources=streams)


@given(
    layouts(max_streams=10),
    st.integers(1, 6),
    st.sampled_from(["zeros", "pack"]),
    st.sampled_from([None, 4]),
    st.data(),
)
def test_a_resumed_run_is_checked_from_its_state(layout, batch_size, pad, seg, data):
    streams = coded_streams(layout.lengths)

    def make(b):
        return StreamLoader(streams, b, layout.tbins, pad=pad, segment_length=seg, shuffle=True)

    run = make(layout.batch_size)
    stop = data.draw(st.integers(0, len(run) - 1), label="stop")  # (the last: next epoch)
    it = iter(run)
    before = [next(it) for _ in range(stop)]
    state = run.state_dict()
    resumed = make(batch_size)
    resumed.load_state_dict(state)
    rest = list(resumed)
    kw = dict(sources=streams, segment_length=seg, pack=pad == "pack")
    check_continuity(rest, layout.lengths, state=state, **kw)
    begun = state["progress"]["begun"]
    if begun:  # without the state, the streams begun before it appear without their start
        with pytest.raises(AssertionError):
            check_continuity(rest, layout.lengths, complete=False, **kw)
    if stop and batch_size == layout.batch_size:  # the same rows: before + rest is one run
        check_continuity(before + rest, layout.lengths, **kw)


def test_a_state_marks_streams_done_before_it():
    streams = coded_streams(LENGTHS)
    run = StreamLoader(streams, 2, 2)
    batches = list(run)
    it = iter(run)
    for _ in range(3):
        next(it)
    state = run.state_dict()
    with pytest.raises(AssertionError, match="delivered twice"):
        check_continuity(batches, LENGTHS, state=state)


def ahead_batches(k=2):
    streams = coded_streams(LENGTHS)
    loader = StreamLoader(streams, 2, 2, lookahead=k)
    return [Batch(*(np.array(f, copy=True) for f in b)) for b in loader], streams


def test_accepts_a_correct_run_with_look_ahead():
    batches, streams = ahead_batches()
    assert check_continuity(batches, LENGTHS, sources=streams, lookahead=2) == len(batches)


def test_catches_look_ahead_steps_of_another_stream():
    batches, streams = ahead_batches()
    batches[0].stream[0, 2] = 1  # a target of another stream
    with pytest.raises(AssertionError, match="look-ahead"):
        check_continuity(batches, LENGTHS, sources=streams, lookahead=2)


def test_catches_look_ahead_data_that_is_not_the_source():
    batches, streams = ahead_batches()
    batches[0].data[0, 3] += 1
    with pytest.raises(AssertionError, match="differ from the source"):
        check_continuity(batches, LENGTHS, sources=streams, lookahead=2)


def test_catches_steps_never_a_target():
    batches, streams = good()  # no look-ahead: the first step of each chunk is lost
    wide = [
        Batch(
            np.pad(b.data, ((0, 0), (0, 1))),
            b.reset,
            np.pad(b.valid, ((0, 0), (0, 1))),
            np.pad(b.stream, ((0, 0), (0, 1)), constant_values=-1),
            np.pad(b.step, ((0, 0), (0, 1)), constant_values=-1),
        )
        for b in batches
    ]
    with pytest.raises(AssertionError, match="look-ahead|target"):
        check_continuity(wide, LENGTHS, sources=streams, lookahead=1)


def test_the_strategies_without_hypothesis_name_the_extra(monkeypatch):
    import sys

    from streamseq import testing

    monkeypatch.setitem(sys.modules, "hypothesis", None)
    monkeypatch.setitem(sys.modules, "hypothesis.strategies", None)
    for strategy in (testing.layouts, testing.stream_lengths):
        with pytest.raises(ImportError, match=r"streamseq\[testing\]"):
            strategy()


def _one_row(stream, step, reset):
    stream, step = np.array([stream]), np.array([step])
    valid = stream >= 0
    data = np.where(valid, stream * (1 << 32) + step + 1, 0)
    return Batch(data, np.array([reset]), valid, stream, step)


def test_a_packed_row_going_on_after_a_chunk_of_padding_is_caught():
    streams = coded_streams([2, 2])
    padded = [_one_row([0, 0], [0, 1], True), _one_row([-1, -1], [-1, -1], False)]
    batches = [*padded, _one_row([1, 1], [0, 1], True)]
    with pytest.raises(AssertionError, match=r"batch 2, row 0: data after padding"):
        check_continuity(batches, [2, 2], sources=streams, pack=True)
    assert check_continuity(batches, [2, 2], sources=streams) == 3  # (unpacked: right)


@pytest.mark.parametrize("cap", [1, 2, 3])
def test_accepts_packed_rows_with_a_cap_on_the_streams_of_a_chunk(cap):
    lengths = [5, 1, 2, 1, 7, 3, 1, 1, 4]
    streams = coded_streams(lengths)
    loader = StreamLoader(streams, 2, 3, pad="pack", max_streams_per_chunk=cap, shuffle=True)
    batches = list(loader)
    kw = dict(sources=streams, pack=True)
    assert check_continuity(batches, lengths, max_streams_per_chunk=cap, **kw) == len(loader)
    if cap < 3:  # (padded inside rows: an error for packing without a cap)
        with pytest.raises(AssertionError, match="data after padding in a packed row"):
            check_continuity(batches, lengths, **kw)
    row = [_one_row([0, 1], [0, 0], True), _one_row([2, -1], [0, -1], True)]
    lengths, streams = [1, 1, 1], coded_streams([1, 1, 1])
    with pytest.raises(AssertionError, match=r"batch 0, row 0: 2 streams in a chunk, at most 1"):
        check_continuity(row, lengths, sources=streams, pack=True, max_streams_per_chunk=1)
    assert check_continuity(row, lengths, sources=streams, pack=True, max_streams_per_chunk=2)


def test_a_packed_segment_that_starts_inside_a_chunk_is_refused():
    # segment 1 of stream 1 (steps 2:4, segment_length 2) packed right after stream 0:
    # neither step == 0 nor reset marks where it starts, so a model carries stream 0's
    # state into it
    streams, lengths = coded_streams([2, 4]), [2, 4]
    kw = dict(sources=streams, pack=True, segment_length=2)
    inside = [
        _one_row([0, 0, 1, 1], [0, 1, 2, 3], True),
        _one_row([1, 1, -1, -1], [0, 1, -1, -1], True),
    ]
    with pytest.raises(
        AssertionError, match=r"batch 0, row 0: stream 1 segment 1 starts at step 2 inside"
    ):
        check_continuity(inside, lengths, **kw)
    # at the start of the next chunk, after padding, with reset: marked
    marked = [
        _one_row([0, 0, -1, -1], [0, 1, -1, -1], True),
        _one_row([1, 1, 1, 1], [2, 3, 0, 1], True),
    ]
    assert check_continuity(marked, lengths, **kw) == 2
    unmarked = [marked[0], _one_row([1, 1, 1, 1], [2, 3, 0, 1], False)]
    with pytest.raises(AssertionError, match=r"batch 1, row 0: stream 1 segment 1 starts without"):
        check_continuity(unmarked, lengths, **kw)
    # a stream's first segment (step 0) still packs inside a chunk
    first = [
        _one_row([0, 0, 1, 1], [0, 1, 0, 1], True),
        _one_row([1, 1, -1, -1], [2, 3, -1, -1], True),
    ]
    assert check_continuity(first, lengths, **kw) == 2
