import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamseq import interleave_streams
from streamseq.interleave import Row, assign_rows
from streamseq.read.ref import as_refs
from streamseq.testing import coded_streams, stream_lengths


@given(stream_lengths(max_streams=30), st.integers(1, 8), st.booleans(), st.integers(0, 3))
def test_each_stream_in_exactly_one_row_and_rows_balanced(lengths, rows, shuffle, epoch):
    out = interleave_streams(coded_streams(lengths), rows, shuffle=shuffle, seed=7, epoch=epoch)
    assert len(out) == rows
    ids = np.concatenate([r.stream_ids for r in out])
    assert sorted(ids.tolist()) == [i for i, n in enumerate(lengths) if n > 0]
    totals = [len(r) for r in out]
    assert max(totals) - min(totals) <= max(lengths)
    assert sum(totals) == sum(lengths)


@given(stream_lengths(max_streams=20), st.integers(1, 5))
def test_assignment_is_deterministic_and_lengths_spare_probing(lengths, rows):
    a = interleave_streams(coded_streams(lengths), rows, shuffle=True, seed=3, epoch=2)
    b = interleave_streams(
        coded_streams(lengths), rows, lengths=lengths, shuffle=True, seed=3, epoch=2
    )
    assert [r.stream_ids.tolist() for r in a] == [r.stream_ids.tolist() for r in b]


def test_shuffle_order_changes_with_epoch_and_seed():
    lengths = np.full(40, 5)
    plans = {
        (seed, epoch): tuple(
            np.concatenate(assign_rows(lengths, 4, shuffle=True, seed=seed, epoch=epoch)).tolist()
        )
        for seed in (0, 1)
        for epoch in (0, 1)
    }
    assert len(set(plans.values())) == 4
    unshuffled = np.concatenate(assign_rows(lengths, 4)).tolist()
    assert sorted(unshuffled) == list(range(40))


def test_first_streams_start_rows_in_order():
    rows = interleave_streams([np.arange(n) for n in (5, 5, 5, 5)], 4)
    assert [r.stream_ids.tolist() for r in rows] == [[0], [1], [2], [3]]


def test_openers_are_probed_once_when_lengths_missing():
    calls = []

    def make(n):
        def opener():
            calls.append(n)
            return np.arange(n)

        return opener

    rows = interleave_streams([make(3), make(0), make(2)], 2)
    assert sorted(calls) == [0, 2, 3]
    assert [r.stream_ids.tolist() for r in rows] == [[0], [2]]
    calls.clear()
    interleave_streams([make(3), make(0), make(2)], 2, lengths=[3, 0, 2])
    assert calls == []


@pytest.mark.parametrize("rows", [0, -2])
def test_bad_row_count(rows):
    with pytest.raises(ValueError, match="num_rows"):
        interleave_streams([np.arange(3)], rows)


def test_no_streams():
    with pytest.raises(ValueError, match="no streams"):
        interleave_streams([], 2)


@given(stream_lengths(max_streams=6), st.data())
def test_row_slicing_concatenates_streams(lengths, data):
    streams = coded_streams(lengths)
    row = Row(as_refs(streams))
    flat = np.concatenate(streams)
    a = data.draw(st.integers(0, len(flat)))
    b = data.draw(st.integers(a, len(flat)))
    if b > a:
        assert row[a:b].tolist() == flat[a:b].tolist()
        assert row[a] == flat[a]
    assert len(row) == len(flat)


def test_row_keeps_one_stream_open():
    opened = []

    class Tracked:
        def __init__(self, n):
            self.n = n
            opened.append(self)

        def __len__(self):
            return self.n

        def __getitem__(self, key):
            return np.arange(self.n)[key]

        def close(self):
            opened.remove(self)

    def make(n):
        return lambda: Tracked(n)

    row = Row(as_refs([make(3), make(4), make(2)], [3, 4, 2]))
    for start in range(0, len(row), 2):
        row[start : start + 2]
        assert len(opened) <= 2  # a slice across a boundary touches two streams
    row.release()
    assert len(opened) <= 1


def test_index_errors_show_the_index_given():
    (row,) = interleave_streams([np.arange(5)], 1)
    with pytest.raises(IndexError, match=r"^step -6 out of range for a row of 5 steps$"):
        row[-6]


class _Writes:
    """A stream that writes its steps into the batch (``read_into``), and counts it."""

    def __init__(self, n, short=False):
        self.steps, self.short, self.writes = np.arange(n) * 10, short, 0

    def __len__(self):
        return len(self.steps)

    def __getitem__(self, key):
        return self.steps[key]

    def read_into(self, start, stop, out):
        self.writes += 1
        got = stop - start - (1 if self.short else 0)
        out[:got] = self.steps[start : start + got]
        return got


def test_row_writes_into_the_batch_only_without_a_transform():
    from streamseq.errors import StreamError

    stream = _Writes(6)
    out = np.zeros(3, np.int64)
    assert Row(as_refs([stream])).read_part_into(0, 2, 5, out) and out.tolist() == [20, 30, 40]
    assert stream.writes == 1
    transformed = Row(as_refs([stream]), transform=lambda ref, i, d, a, b: d + 1)
    assert not transformed.read_part_into(0, 2, 5, out)  # a transform makes its own steps
    assert stream.writes == 1
    with pytest.raises(StreamError, match="steps 0:3 returned 2"):
        Row(as_refs([_Writes(6, short=True)])).read_part_into(0, 0, 3, out)


def test_rows_given_to_a_loader_are_read_as_streams():
    from streamseq import StreamLoader

    streams = [np.arange(9) * 10, np.arange(6) + 100, np.arange(5) + 200]
    rows = interleave_streams(streams, 2)
    batches = list(StreamLoader(rows, batch_size=2, tbins=3))
    for r, row in enumerate(rows):
        got = np.concatenate([b.data[r][b.valid[r]].numpy() for b in batches])
        assert got.tolist() == row[:].tolist()


def test_a_state_of_rows_is_refused_by_rows_of_other_streams_of_equal_lengths(tmp_path):
    from streamseq import StreamLoader
    from streamseq.io import token_corpus

    np.arange(48, dtype=np.uint16).tofile(tmp_path / "a.bin")
    docs = token_corpus(str(tmp_path / "a.bin"), index=np.arange(0, 48, 6))

    def refused(saving, resuming):
        loader = StreamLoader(saving, batch_size=2, tbins=3)
        next(iter(loader))
        try:
            StreamLoader(resuming, batch_size=2, tbins=3).load_state_dict(loader.state_dict())
        except ValueError as e:
            assert "this state was made by another plan" in str(e)
            return True
        return False

    assert refused(interleave_streams(docs[:4], 2), interleave_streams(docs[4:], 2))
    assert not refused(interleave_streams(docs[:4], 2), interleave_streams(docs[:4], 2))


def test_a_state_of_rows_is_refused_by_rows_of_the_same_files_read_another_way(tmp_path):
    import pyarrow as pa
    from helpers import state_refused

    from streamseq.io import manifest, tokens

    paths = []
    for i, n in enumerate([9, 6, 7, 5]):
        paths.append(str(tmp_path / f"{i}.bin"))
        np.arange(n, dtype=np.uint16).tofile(paths[-1])
    rows = pa.table({"path": paths, "length": [9, 6, 7, 5]})

    def listed(dtype):
        return interleave_streams([tokens(p, dtype) for p in paths], 2)

    def tabled(dtype):
        return interleave_streams(manifest(rows, "tokens", dtype=dtype), 2)

    for make in (listed, tabled):
        assert state_refused(make("<u2"), make(">u2"))
        assert state_refused(make("<i2"), make("<u2"))
        assert not state_refused(make("<u2"), make("uint16"))
    assert not state_refused(listed("<i2"), tabled("<i2"))


@pytest.mark.parametrize("flags", [[True], [False, True, True, True], [[True, False, True]]])
def test_a_row_refuses_resumed_flags_that_are_not_one_a_stream(flags):
    refs = interleave_streams(coded_streams([3, 4, 2]), 1)[0].refs
    with pytest.raises(ValueError, match=r"resumed.* one flag a stream: 3 streams"):
        Row(refs, resumed=flags)


@pytest.mark.parametrize(
    "options, problem",
    [
        ({"lengths": [-1, 4]}, "lengths"),
        ({"lengths": [2.5, 4]}, "lengths"),
        ({"lengths": [np.nan, 4]}, "lengths"),
        ({"lengths": [3]}, "lengths"),
        ({"lengths": [[3, 4]]}, "lengths"),
        ({"stream_ids": [0]}, "stream_ids"),
        ({"starts": [0]}, "starts"),
        ({"starts": [-1, 0]}, "starts"),
        ({"starts": [0.5, 0]}, "starts"),
    ],
)
def test_a_row_refuses_lengths_starts_or_ids_that_are_not_one_whole_number_a_stream(
    options, problem
):
    # (a negative length read other steps, a length of 2.5 was cut to 2, a list one
    # short left the last stream out, all silently; starts one short failed unnamed)
    streams = [np.arange(3), np.arange(10, 14)]
    with pytest.raises(ValueError, match=rf"Row\({problem}="):
        Row(as_refs(streams), **options)
    row = Row(as_refs(streams), lengths=np.array([3, 4.0]), starts=[0, 0], stream_ids=[0, 1])
    assert row[0:7].tolist() == [0, 1, 2, 10, 11, 12, 13]


@pytest.mark.parametrize(
    "options, name, i",
    [
        ({"lengths": np.array([2**63, 4], np.uint64)}, "lengths", 0),
        ({"lengths": [1e19, 4]}, "lengths", 0),
        ({"starts": [0, 1e30]}, "starts", 1),
        ({"starts": np.array([0, 2**64 - 1], np.uint64)}, "starts", 1),
        ({"stream_ids": [0, 2**63]}, "stream_ids", 1),
        ({"stream_ids": [-1e300, 1]}, "stream_ids", 0),
    ],
)
def test_a_row_refuses_whole_numbers_past_int64_naming_them(options, name, i):
    # (they wrapped when cast to int64: a start of 1e30 read from -2**63, an id of 2**63
    # named stream -2**63, a length of 2**63 failed as "__len__() should return >= 0")
    streams = [np.arange(3), np.arange(10, 14)]
    with pytest.raises(ValueError, match=rf"Row\({name}=.*int64.*{name}\[{i}\]"):
        Row(as_refs(streams), **options)


@pytest.mark.parametrize(
    "flags", [[0.5, 0, 0], [2, 0, 0], [np.nan, 0, 0], ["no", "", "x"], [None, True, False]]
)
def test_a_row_refuses_resumed_flags_that_are_not_true_or_false(flags):
    # a flag of 0.5, 2, NaN or "no" was taken as True ("" and None as False), silently:
    # a piece it left unflagged packed inside a chunk, where nothing marks where it starts
    refs = interleave_streams(coded_streams([3, 4, 2]), 1)[0].refs
    with pytest.raises(ValueError, match=r"Row\(resumed=...\) takes True or False a stream"):
        Row(refs, resumed=flags)


def test_a_row_takes_resumed_flags_of_bools_or_zeros_and_ones():
    refs = interleave_streams(coded_streams([3, 4, 2]), 1)[0].refs
    for flags in ([False, True, False], [0, 1, 0], np.array([0, 1, 0], np.uint8)):
        assert Row(refs, resumed=flags).resumed.tolist() == [False, True, False]
