"""Look-ahead steps written in place: one read per row with its chunk, equal to the rule."""

import tempfile
import warnings
from unittest import mock

import numpy as np
import pytest
from helpers import assume_rows_filled
from hypothesis import given, settings
from hypothesis import strategies as st

from streamseq import StreamError, StreamLoader, interleave_streams, tbin
from streamseq.gather import ahead, writer
from streamseq.gather.positions import packed_pieces
from streamseq.testing import CODE, coded_streams, layouts

fill = pytest.importorskip("streamseq.gather._gather").fill

from test_writer import drawn_variants  # noqa: E402


def quiet(streams, *args, **kw):
    """A loader, without the warning about rows left empty."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return StreamLoader(streams, *args, **kw)


def spied(loader):
    """The batches of ``loader`` and what the compiled pass returned with the data's width."""
    calls = []

    def spy(*args):
        calls.append((fill(*args), args[4].shape[1]))
        return calls[-1][0]

    with mock.patch.object(writer, "fill", spy):
        return list(loader), calls


@settings(max_examples=25, deadline=None)
@given(layouts(max_streams=8, max_length=30), st.integers(1, 3), st.sampled_from([None, 3]))
def test_look_ahead_of_arrays_is_written_by_the_compiled_pass_in_place(layout, k, seg):
    assume_rows_filled(layout, "zeros")
    k = min(k, max(layout.lengths))
    streams = coded_streams(layout.lengths)
    loader = quiet(streams, layout.batch_size, layout.tbins, lookahead=k, segment_length=seg)
    out, calls = spied(loader)
    assert len(calls) == len(out)
    assert calls == [(-1, layout.tbins + k)] * len(out)  # the wide batch, at once


def test_look_ahead_of_trees_is_read_with_the_chunk():
    streams = [{"x": s, "y": s * 2.0} for s in coded_streams([9, 5, 7])]
    loader = quiet(streams, 2, 3, lookahead=2)
    boom = mock.Mock(side_effect=AssertionError("the look-ahead read on its own"))
    with mock.patch.object(ahead, "_read_into", boom):
        out, calls = spied(loader)
    assert calls and {c for c in calls} == {(-1, 5)}
    for b in out:
        v = np.asarray(b.valid)
        want = np.where(v, np.asarray(b.stream) * CODE + np.asarray(b.step) + 1, 0)
        np.testing.assert_array_equal(np.asarray(b.data["x"]), want)
        np.testing.assert_array_equal(np.asarray(b.data["y"]), want * 2.0)


@settings(max_examples=15, deadline=None)
@given(
    layouts(max_streams=6, max_length=20),
    st.integers(1, 3),
    st.sampled_from(["zeros", "wrap"]),
    st.sampled_from([((), "int64"), ((3,), "float32")]),
    st.data(),
)
def test_compiled_look_ahead_equals_numpy_path(layout, k, pad, step, data):
    assume_rows_filled(layout, pad)
    k = min(k, max(layout.lengths))
    with tempfile.TemporaryDirectory() as folder:
        streams = drawn_variants(layout.lengths, step, data, folder)
        got = {}
        for compiled in (True, False):
            loader = quiet(streams, layout.batch_size, layout.tbins, pad=pad, lookahead=k)
            with mock.patch.object(writer, "fill", fill if compiled else None):
                got[compiled] = [tuple(f.numpy().copy() for f in b) for b in loader]
        assert len(got[True]) == len(got[False])
        assert all(b[2].shape[1] == layout.tbins + k for b in got[True])  # (valid)
        for x, y in zip(got[True], got[False], strict=True):
            for f, g in zip(x, y, strict=True):
                assert f.dtype == g.dtype
                np.testing.assert_array_equal(f, g)
        del streams  # memmaps closed before the folder goes


def reference(chunks, i):
    """The look-ahead reads of packed batch ``i``, row by row from the pieces (the rule)."""
    t, found = chunks.tbins, []
    for r, (row, placed) in enumerate(zip(chunks.rows, chunks.placed, strict=True)):
        pieces = packed_pieces(row, i, t, placed)
        if pieces and pieces[-1][3] + pieces[-1][2] == t:
            j, a, n, _ = pieces[-1]
            p = chunks.first_list[r] + j
            a = a + n + int(chunks.shifts[p])
            n = min(chunks.lookahead, len(row.refs[j]) - a)
            if n > 0:
                found.append((r, p, a, n))
    return found


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 12), min_size=1, max_size=10),
    st.integers(1, 4),
    st.integers(1, 3),
    st.integers(1, 3),
    st.sampled_from([None, 1, 2]),
)
def test_packed_look_ahead_of_all_rows_at_once_is_the_rule(lengths, t, k, rows, cap):
    streams = [np.arange(n) for n in lengths]
    parts = [
        tbin(r, t, pack=True, max_streams_per_chunk=cap, lookahead=k)
        for r in interleave_streams(streams, rows)
    ]
    chunks = writer.BatchWriter(parts, "pack", t)
    for i in range(int(chunks.counts.max(initial=0)) + 1):
        got = [
            tuple(int(x[j]) for x in ahead.ahead_of(chunks, i))
            for j in range(len(ahead.ahead_of(chunks, i)[0]))
        ]
        assert got == reference(chunks, i), i


class Lying:
    """Arrays that say they hold more steps than they do."""

    def __init__(self, a, n):
        self.a, self.n = a, n

    def __len__(self):
        return self.n

    def __getitem__(self, s):
        return self.a[s]

    def as_arrays(self):
        return self.a


@pytest.mark.parametrize(("k", "steps"), [(0, "6:8"), (1, "3:7")])
def test_a_stream_shorter_than_its_length_is_named_with_its_steps(k, steps):
    streams = [np.arange(10), Lying(np.arange(6), 8)]
    loader = quiet(streams, 2, 3, lookahead=k)
    with pytest.raises(StreamError, match=rf"stream 1 .*steps {steps}: the stream holds 6"):
        list(loader)
