import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamseq import Batch, interleave_streams, split_by_worker, tbin, zip_batch
from streamseq.testing import check_continuity, coded_streams, layouts

pads = st.sampled_from(["zeros", "drop", "wrap"])


def chunk_counts(rows, t):
    return [len(tbin(r, t)) for r in rows]


def assert_batches_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        for f, g in zip(x, y, strict=True):
            np.testing.assert_array_equal(f, g)


@given(layouts(), pads, st.integers(1, 4))
def test_zipping_groups_equals_zipping_all_rows(layout, pad, workers):
    rows = interleave_streams(coded_streams(layout.lengths), layout.batch_size)
    flat = zip_batch([tbin(r, layout.tbins) for r in rows], pad=pad)
    groups = [
        zip_batch([tbin(r, layout.tbins) for r in g], pad=pad)
        for g in split_by_worker(rows, workers)
        if g
    ]
    assert_batches_equal(list(flat), list(zip_batch(groups, pad=pad)))


@given(layouts(), pads)
def test_lengths_of_pad_modes(layout, pad):
    rows = interleave_streams(coded_streams(layout.lengths), layout.batch_size)
    counts = chunk_counts(rows, layout.tbins)
    batches = zip_batch([tbin(r, layout.tbins) for r in rows], pad=pad)
    assert len(batches) == (min(counts) if pad == "drop" else max(counts))


@given(layouts())
def test_zeros_mode_delivers_everything_in_order(layout):
    streams = coded_streams(layout.lengths)
    rows = interleave_streams(streams, layout.batch_size)
    batches = zip_batch([tbin(r, layout.tbins) for r in rows])
    check_continuity(batches, layout.lengths, sources=streams)


@given(layouts())
def test_drop_mode_never_has_an_idle_row_and_stays_continuous(layout):
    streams = coded_streams(layout.lengths)
    rows = interleave_streams(streams, layout.batch_size)
    batches = zip_batch([tbin(r, layout.tbins) for r in rows], pad="drop")
    for b in batches:
        assert b.valid.any(axis=1).all()
    check_continuity(batches, layout.lengths, sources=streams, complete=False)


@given(layouts())
def test_wrap_mode_restarts_rows_that_ended(layout):
    streams = coded_streams(layout.lengths)
    rows = interleave_streams(streams, layout.batch_size)
    parts = [tbin(r, layout.tbins) for r in rows]
    batches = zip_batch(parts, pad="wrap")
    assert len(batches) == len(zip_batch(parts))
    for b in batches:
        nonempty = [len(p) > 0 for p in parts]
        assert (b.valid.any(axis=1) == nonempty).all()
    check_continuity(batches, layout.lengths, sources=streams, allow_repeats=True)


def test_forced_length_pads_or_wraps_past_the_end():
    rows = interleave_streams([np.arange(1, 4), np.arange(10, 12)], 2)
    zeros = zip_batch([tbin(r, 2) for r in rows], length=3)
    assert zeros[2].data.tolist() == [[0, 0], [0, 0]]
    assert zeros[2].stream.tolist() == [[-1, -1], [-1, -1]]
    wrap = zip_batch([tbin(r, 2) for r in rows], pad="wrap", length=3)
    assert wrap[2].data.tolist() == [[1, 2], [10, 11]]
    assert wrap[2].reset.tolist() == [True, True]


def test_all_padding_batch_needs_a_spec_only_without_any_data():
    rows = interleave_streams([np.arange(1, 3, dtype=np.float32)], 2)
    batches = zip_batch([tbin(r, 2) for r in rows], length=2)
    assert batches[1].data.dtype == np.float32 and not batches[1].data.any()
    empty = interleave_streams([np.arange(2)], 2)[1]
    with pytest.raises(ValueError, match="spec"):
        zip_batch([tbin(empty, 2)], length=1)[0]
    spec = np.zeros((0, 3), np.uint8)
    got = zip_batch([tbin(empty, 2)], length=1, spec=spec)[0]
    assert got.data.shape == (1, 2, 3) and got.data.dtype == np.uint8


def test_chunk_and_batch_sequences_from_other_code():
    (row,) = interleave_streams([np.arange(1, 6)], 1)
    chunks = list(tbin(row, 2))  # a plain list of Chunk
    batches = zip_batch([chunks, zip_batch([tbin(row, 2)])])
    assert batches[2].data.tolist() == [[5, 0], [5, 0]]
    assert isinstance(batches[0], Batch)


@pytest.mark.parametrize(
    "kwargs, error",
    [({"pad": "circular"}, "unknown pad mode"), ({"length": -1}, "length")],
)
def test_bad_arguments(kwargs, error):
    (row,) = interleave_streams([np.arange(4)], 1)
    with pytest.raises(ValueError, match=error):
        zip_batch([tbin(row, 2)], **kwargs)


def test_no_parts_and_mismatched_chunk_sizes():
    with pytest.raises(ValueError, match="at least one part"):
        zip_batch([])
    (row,) = interleave_streams([np.arange(4)], 1)
    with pytest.raises(ValueError, match="different numbers of steps"):
        zip_batch([tbin(row, 2), tbin(row, 3)])


def test_index_errors():
    (row,) = interleave_streams([np.arange(4)], 1)
    batches = zip_batch([tbin(row, 2)])
    assert batches[-1].data.tolist() == [[2, 3]]
    with pytest.raises(IndexError):
        batches[2]
    with pytest.raises(TypeError):
        batches["0"]


def test_data_of_another_dtype_or_shape_is_an_error_never_cast_or_broadcast():
    from streamseq import StreamError

    rows = interleave_streams([np.ones((4, 3), np.int64), np.ones((2, 1), np.int64)], 2)
    spec = np.zeros((0, 3), np.int64)
    with pytest.raises(StreamError, match=r"stream 1 .*step shape \(1,\) differs"):
        zip_batch([tbin(r, 2) for r in rows], spec=spec)[0]
    (row,) = interleave_streams([np.arange(4), np.full(2, 0.5)], 1)
    with pytest.raises(StreamError, match="stream 1 .*dtype float64 differs"):
        list(zip_batch([tbin(row, 2)]))
    chunks = list(tbin(interleave_streams([np.full(4, 0.5)], 1)[0], 2))
    (ints,) = interleave_streams([np.arange(4)], 1)
    with pytest.raises(ValueError, match="batch 0, row 1"):  # chunks of other code
        zip_batch([tbin(ints, 2), chunks])[0]


def test_index_errors_show_the_index_given():
    (row,) = interleave_streams([np.arange(4)], 1)
    batches = zip_batch([tbin(row, 2)])
    with pytest.raises(IndexError, match=r"^batch -3 out of range for 2 batches$"):
        batches[-3]
