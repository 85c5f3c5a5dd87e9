"""Tables of streams: the same batches, states and row maps as a list of the same streams."""

import functools
import os
import pickle

import numpy as np
import pytest
from helpers import as_numpy, assert_same
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamseq import StreamLoader, StreamTable, interleave_streams, mix
from streamseq.errors import SourceError, StreamError
from streamseq.io import token_corpus
from streamseq.plan.identities import Identities
from streamseq.read.ref import StreamRef, TableRefs, as_refs


def piece(data, start, length):
    """Steps ``start:start + length`` of ``data`` (a table's ``make``)."""
    return data[start : start + length]


def array_table(lengths, width=None, dtype=np.int32):
    """A table of pieces of one array, and the list of the same pieces."""
    lengths = np.asarray(lengths, np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    shape = (int(lengths.sum()),) if width is None else (int(lengths.sum()), width)
    data = (np.arange(int(np.prod(shape))) % 1000).astype(dtype).reshape(shape)
    step = () if width is None else (width,)
    table = StreamTable(functools.partial(piece, data), lengths, [starts], step_spec=(dtype, step))
    return table, [piece(data, int(a), int(n)) for a, n in zip(starts, lengths, strict=True)]


def corpus(tmp_path, lengths, name="c.bin", dtype=np.uint16):
    """A token file of documents of ``lengths`` tokens; its table from the index."""
    lengths = np.asarray(lengths, np.int64)
    path = os.path.join(tmp_path, name)
    (np.arange(int(lengths.sum())) % 500).astype(dtype).tofile(path)
    index = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return token_corpus(path, index=index, dtype=dtype), path


def run(streams, *, epochs=2, **kw):
    loader = StreamLoader(streams, **kw)
    batches = []
    for _ in range(epochs):
        batches += as_numpy(loader)
    return loader, batches


layouts = st.lists(st.integers(0, 40), min_size=1, max_size=30).filter(lambda n: any(n))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lengths=layouts,
    batch_size=st.integers(1, 4),
    tbins=st.integers(1, 6),
    pad=st.sampled_from(["zeros", "pack"]),
    shuffle=st.booleans(),
    segment_length=st.sampled_from([None, 7]),
    world_size=st.sampled_from([1, 2]),
    other=st.integers(1, 5),
    stop=st.integers(0, 5),
)
def test_table_and_list_give_the_same_batches_states_and_row_maps(
    tmp_path_factory,
    lengths,
    batch_size,
    tbins,
    pad,
    shuffle,
    segment_length,
    world_size,
    other,
    stop,
):
    tmp = tmp_path_factory.mktemp("corpus")
    table, _ = corpus(tmp, lengths)
    kw = dict(batch_size=batch_size, tbins=tbins, pad=pad, shuffle=shuffle)
    kw.update(segment_length=segment_length, rank=world_size - 1, world_size=world_size)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (fewer streams than rows)
        a, from_table = run(table, **kw)
        b, from_list = run(list(table), **kw)
        assert type(a.refs) is TableRefs and type(b.refs) is list
        assert_same(from_table, from_list)
        assert a.spec.fingerprint == b.spec.fingerprint
        # a state part-way, resumed on another batch size: the same for both
        ita, itb = iter(a), iter(b)
        for _ in range(min(stop, len(a))):
            next(ita), next(itb)
        sa, sb = a.state_dict(), b.state_dict()
        ita.close(), itb.close()
        assert pickle.dumps(sa) == pickle.dumps(sb)
        kw["batch_size"] = other
        c, d = StreamLoader(table, **kw), StreamLoader(list(table), **kw)
        assert c.row_map(sa) == d.row_map(sb)
        c.load_state_dict(sa), d.load_state_dict(sb)
        assert_same(as_numpy(c), as_numpy(d))


def test_table_and_list_with_two_workers(tmp_path):
    table, _ = corpus(tmp_path, [5, 0, 9, 3, 12, 7, 1, 4])
    kw = dict(batch_size=2, tbins=3, shuffle=True, num_workers=2)
    assert_same(run(table, **kw)[1], run(list(table), **kw)[1])
    assert_same(run(table, **kw)[1], run(table, **{**kw, "num_workers": 0})[1])


def test_interleave_and_mix_take_tables():
    table, streams = array_table([4, 0, 6, 3, 2], width=2)
    rows = interleave_streams(table, 2, tbins=2, shuffle=True, seed=3)
    same = interleave_streams(streams, 2, tbins=2, shuffle=True, seed=3)
    assert [r[:].tolist() for r in rows] == [r[:].tolist() for r in same]
    other, more = array_table([5, 5], width=2)
    kw = dict(batch_size=2, tbins=2, shuffle=True)
    mixed = mix({"a": table, "b": other}, {"a": 1, "b": 2})
    listed = mix({"a": streams, "b": more}, {"a": 1, "b": 2})
    assert len(mixed) == 7 and np.array_equal(mixed[5], more[0])
    (a, x), (b, y) = run(mixed, **kw), run(listed, **kw)
    assert_same(x, y)
    assert a.state_dict() == b.state_dict()


def test_a_table_makes_no_reference_per_stream_to_plan(tmp_path, monkeypatch):
    table, _ = corpus(tmp_path, np.full(20_000, 3))
    made = []
    real = StreamRef.__init__

    def counted(self, *args, **kw):
        made.append(1)
        real(self, *args, **kw)

    monkeypatch.setattr(StreamRef, "__init__", counted)
    monkeypatch.setattr(StreamRef, "step_spec", lambda self: pytest.fail("per stream"))
    loader = StreamLoader(table, batch_size=4, tbins=8, shuffle=True)
    assert len(loader) > 0 and loader.state_dict()["epoch"] == 0
    assert len(made) < 10  # (the first stream: the data's dtype and step shape)
    assert isinstance(loader.spec.sources, Identities)
    assert len(pickle.dumps(loader.spec)) < 20_000 * 8 * 2 + 5_000


def test_identities_hash_as_the_strings_did():
    names = ["a.bin", "b.bin", "a.bin", "ndarray"] * 50_000
    joined = "\0".join(names).encode()
    import hashlib

    assert Identities.of(names).digest() == hashlib.sha256(joined).hexdigest()
    one = Identities.repeat("a.bin", 100_001)
    assert one.digest() == hashlib.sha256("\0".join(["a.bin"] * 100_001).encode()).hexdigest()
    parts = Identities.concat([one[:7], Identities.of(names)[3:9]])
    assert list(parts) == ["a.bin"] * 7 + names[3:9]
    assert parts.digest() == hashlib.sha256("\0".join(list(parts)).encode()).hexdigest()


@settings(max_examples=30, deadline=None)
@given(
    costs=st.lists(st.integers(0, 4), max_size=300).map(sorted).map(lambda c: c[::-1]),
    runs=st.lists(st.tuples(st.integers(0, 9), st.integers(1, 200)), max_size=6),
    rows=st.integers(1, 9),
)
def test_deal_gives_the_rows_of_one_item_at_a_time(costs, runs, rows):
    import heapq

    from streamseq.plan.rows import deal

    costs = np.array(costs + [c for c, n in runs for _ in range(n)], np.int64)
    want, heap = [], [(0, r) for r in range(rows)]
    for c in costs.tolist():
        total, r = heap[0]
        want.append(r)
        heapq.heapreplace(heap, (total + c, r))
    assert deal(costs, rows).tolist() == want


def test_table_pickles_as_its_arrays_and_memory_maps_as_their_file(tmp_path):
    table, _ = corpus(tmp_path, np.arange(100_000) % 13 + 1)
    data = pickle.dumps(table)
    assert len(data) < 100_000 * 16 + 2_000  # starts and lengths, nothing per document
    assert b"_Document" not in data
    back = pickle.loads(data)
    assert np.array_equal(back.lengths, table.lengths) and back[99_999][:].tolist() == (
        table[99_999][:].tolist()
    )
    path = os.path.join(tmp_path, "lengths.npy")
    np.save(path, np.arange(100_000, dtype=np.int64) % 7)
    mapped = StreamTable(np.zeros, np.load(path, mmap_mode="r"))[1000:]
    data = pickle.dumps(mapped)
    assert len(data) < 2_000
    back = pickle.loads(data)
    assert isinstance(back.lengths, np.memmap)
    assert np.array_equal(back.lengths, np.arange(1000, 100_000) % 7)


def test_slicing_and_indexing_a_table():
    table, streams = array_table([3, 1, 4, 1, 5])
    assert len(table) == 5 and list(map(len, table)) == [3, 1, 4, 1, 5]
    assert np.array_equal(table[-1], streams[-1])
    sub = table[[4, 0]]
    assert isinstance(sub, StreamTable) and sub.lengths.tolist() == [5, 3]
    assert np.array_equal(sub[0], streams[4])
    assert table[table.lengths > 2].lengths.tolist() == [3, 4, 5]
    with pytest.raises(IndexError):
        table[5]
    with pytest.raises(ValueError, match="negative length for stream 1"):
        StreamTable(np.zeros, [2, -1])
    with pytest.raises(ValueError, match="column 0 has"):
        StreamTable(np.zeros, [2, 1], [np.arange(3)])


def test_a_bad_read_names_the_stream_and_the_file(tmp_path):
    table, path = corpus(tmp_path, [4, 4, 4])
    lengths = table.lengths.copy()
    lengths[2] = 9  # more tokens than the file holds
    bad = StreamTable(table.make, lengths, table.columns, step_spec=table.step_spec())
    loader = StreamLoader(bad, batch_size=1, tbins=4)
    name = os.path.basename(path)
    with pytest.raises(
        StreamError, match=rf"stream 2 .*steps 4:8: .*{name}: tokens 12:16 are past"
    ):
        list(loader)
    with pytest.raises(StreamError, match=r"stream 1 .*declared length 5"):
        as_refs(table, [4, 5, 4])


def test_tables_of_other_dtypes_are_refused_once(tmp_path):
    a, _ = corpus(tmp_path, [3, 4], "a.bin", np.uint16)
    b, path = corpus(tmp_path, [5, 2], "b.bin", np.int32)
    with pytest.raises(StreamError, match=r"stream 2 .*b\.bin.*dtype int32 differs.*stream 0"):
        StreamLoader(mix({"a": a, "b": b}), batch_size=2, tbins=2)


def test_zip_streams_of_tables_is_a_table():
    from streamseq import zip_streams

    frames, frame_list = array_table([4, 0, 6, 3], width=3, dtype=np.uint8)
    labels, label_list = array_table([4, 0, 6, 3])
    zipped = zip_streams({"frame": frames, "label": labels})
    assert isinstance(zipped, StreamTable) and zipped.lengths.tolist() == [4, 0, 6, 3]
    pairs = zip(frame_list, label_list, strict=True)
    listed = [zip_streams({"frame": f, "label": y}) for f, y in pairs]
    kw = dict(batch_size=2, tbins=2, shuffle=True)
    (a, x), (b, y) = run(zipped, **kw), run(listed, **kw)
    assert_same(x, y)
    assert a.state_dict() == b.state_dict()
    with pytest.raises(ValueError, match="stream 2 of table 'label' has 5 steps"):
        zip_streams({"frame": frames, "label": array_table([4, 0, 5, 3])[0]})


def token_source(path, length):
    """``io.tokens`` of ``path`` (a table's ``make`` over a column of paths)."""
    from streamseq.io import tokens

    return tokens(path, np.uint16)


def test_a_table_of_several_files_names_each_as_a_list_does(tmp_path):
    paths = []
    for k in range(4):
        paths.append(str(tmp_path / f"f{k}.bin"))
        np.arange(20, dtype=np.uint16).tofile(paths[-1])
    other = str(tmp_path / "other.bin")
    np.arange(20, dtype=np.uint16).tofile(other)
    from streamseq.io import tokens

    def table_of(files):
        return StreamTable(token_source, [20] * 4, [np.array(files)], step_spec=(np.uint16, ()))

    table = table_of(paths)
    assert list(table.identities) == paths
    assert list(table[1:3].identities) == paths[1:3]
    assert list(pickle.loads(pickle.dumps(table))[::-1].identities) == paths[::-1]
    kw = dict(batch_size=2, tbins=5)
    listed = StreamLoader([tokens(p, np.uint16) for p in paths], **kw)
    tabled = StreamLoader(table, **kw)
    for loader in (listed, tabled):
        next(iter(loader))
    assert tabled.state_dict() == listed.state_dict()
    elsewhere = StreamLoader(table_of(paths[:1] + [other] * 3), **kw)
    with pytest.raises(ValueError, match="sources"):
        elsewhere.load_state_dict(tabled.state_dict())


@pytest.mark.parametrize(
    ("index", "error", "match"),
    [
        (np.array([[0, 1]]), IndexError, "1-d"),
        (np.zeros((2, 2), bool), IndexError, "1-d|mask"),
        (1.0, TypeError, "integers"),
        ("a", TypeError, "integers"),
        (None, TypeError, "integers"),
        ([0.5], TypeError, "integers"),
        ([0, 7], IndexError, "7"),
    ],
)
def test_a_table_refuses_an_index_a_list_would_refuse(index, error, match):
    table, _ = array_table([3, 1, 4, 1])
    with pytest.raises(error, match=match):
        table[index]


def test_a_memory_map_whose_file_changed_is_not_reopened_as_other_values(tmp_path):
    path = os.path.join(tmp_path, "lengths.npy")
    np.save(path, np.arange(1000, dtype=np.int64) % 7)
    data = pickle.dumps(StreamTable(np.zeros, np.load(path, mmap_mode="r")))
    np.save(path, np.arange(1000, dtype=np.int64) % 5)  # rewritten before a worker reopens it
    os.utime(path, ns=(1, 1))
    with pytest.raises(SourceError, match=r"lengths.npy.*changed"):
        pickle.loads(data)


def test_a_uint64_length_past_int64_is_too_large_not_negative():
    with pytest.raises(ValueError, match=r"stream 1, 18446744073709551615, is too large"):
        StreamTable(np.zeros, np.array([1, 2**64 - 1], np.uint64))


def test_a_table_inside_a_list_is_refused_not_read_as_one_stream():
    table, streams = array_table([3, 3])
    for listed in ([table, table], [*streams, table]):
        with pytest.raises(TypeError, match=r"stream \d \(StreamTable\(2 streams.*is a table"):
            StreamLoader(listed, batch_size=2, tbins=2)


def test_streams_takes_integers_only():
    """A mask or fractions given to streams() would be read as the indices 0, 1 or 1."""
    table = StreamTable(np.arange, [2, 1, 3])
    assert [s.tolist() for s in table.streams(np.array([2, -3]))] == [[0, 1, 2], [0, 1]]
    assert table.streams([]) == []
    for index in (np.array([True, False, True]), [1.5], np.array([0.0]), ["1"]):
        with pytest.raises(TypeError, match="integers"):
            table.streams(index)
    for index in ([3], [-4]):
        with pytest.raises(IndexError):
            table.streams(index)
    with pytest.raises(IndexError, match="1-d"):
        table.streams(np.zeros((1, 1), np.int64))


def test_tables_are_concatenated_with_plus_as_lists_were(tmp_path):
    """``a + b`` of tables (two stores, a table and a list) gives the streams of both."""
    from streamseq import materialize

    first, second = array_table([3, 1, 4])[1], array_table([2, 5])[1]
    a, b = materialize(first, tmp_path / "a"), materialize(second, tmp_path / "b")
    both = first + second
    for got in (a + b, a + list(b), list(a) + b, a[:2] + a[2:] + b, (a + b)[::-1][::-1]):
        assert [np.asarray(s[:]).tolist() for s in got] == [s.tolist() for s in both]
    joined = a[2:] + a[:2]  # (one store's: still a table of it)
    assert isinstance(joined, type(a)) and joined.lengths.tolist() == [4, 3, 1]
    assert [s.index for s in joined] == [2, 0, 1]
    loader = StreamLoader(a + b, 2, 3, seed=1, shuffle=True)
    expected = StreamLoader(list(a) + list(b), 2, 3, seed=1, shuffle=True)
    for x, y in zip(loader, expected, strict=True):
        assert_same(x, y)
    for other in (1, ()):
        with pytest.raises(TypeError):
            a + other


class _Opener:
    """A stream opened by a call (counted in ``opened``)."""

    def __init__(self, opened, i, n):
        self.opened, self.i, self.n = opened, i, n

    def __len__(self):
        return self.n

    def __call__(self):
        self.opened.append(self.i)
        return np.arange(self.n) + 1000 * self.i


@pytest.mark.parametrize(
    "options",
    [dict(segment_length=8), dict(pad="pack", max_streams_per_chunk=2, segment_length=5)],
)
def test_a_table_opens_a_source_of_segments_once_as_a_list_does(options):
    """The next segment of a source in a row reads the source already open, not a new one.

    (One row: every source's segments follow one another in it.)
    """
    lengths = [50, 3, 40, 7, 33, 21] * 3
    opened = {"list": [], "table": []}
    streams = [_Opener(opened["list"], i, n) for i, n in enumerate(lengths)]
    table = StreamTable(
        functools.partial(_Opener, opened["table"]), lengths, [np.arange(len(lengths))]
    )
    got = {}
    for name, s in (("list", streams), ("table", table)):
        got[name] = list(StreamLoader(s, 1, 4, lengths=lengths, **options))
    for x, y in zip(got["list"], got["table"], strict=True):
        assert_same(x, y)
    # (each source opened once to read; stream 0 also before, to learn the steps' dtype)
    assert opened["table"] == opened["list"] == [0, *range(len(lengths))]


def test_a_tables_arrays_cannot_be_changed_through_it(tmp_path):
    """``table.lengths.sort()`` (a look at the lengths) must not change what the table reads."""
    from streamseq import materialize

    table, streams = array_table([5, 3, 7])
    given = np.array([5, 3, 7], np.int64)
    own = StreamTable(functools.partial(piece, table.make.args[0]), given, table.columns)
    stored = materialize(streams, tmp_path / "s")
    for t in (table, own, stored, stored[1:], stored[[2, 0]], stored[:1] + stored[1:]):
        t = pickle.loads(pickle.dumps(t)) if t is stored else t
        for array in (t.lengths, *t.columns):
            with pytest.raises(ValueError, match="read-only"):
                array.sort()
    given[0] = 1  # (the caller's own array is still theirs to change)
    assert [len(s) for s in stored] == [5, 3, 7]
    assert [np.asarray(s[:]).tolist() for s in stored] == [s.tolist() for s in streams]


def _document(docs, first, i, length):
    return docs[first + i]


def test_a_table_names_its_streams_by_where_they_start_in_their_file_as_a_list_does(tmp_path):
    from helpers import state_refused

    path = str(tmp_path / "a.bin")
    np.arange(48, dtype=np.uint16).tofile(path)
    docs = token_corpus(path, index=np.arange(0, 48, 6))

    def table(first):
        make = functools.partial(_document, docs, first)
        return StreamTable(make, [6] * 4, [np.arange(4)])  # (no identities: its streams')

    def listed(first):
        return [docs[first + i] for i in range(4)]

    # other documents of one file, of the same lengths: refused, as a list's are
    assert state_refused(table(0), table(4)) and state_refused(listed(0), listed(4))
    # the same documents, as a table or as a list: one stream each way
    assert not state_refused(table(0), listed(0)) and not state_refused(listed(4), table(4))
    from streamseq.read.ref import identities_of

    assert table(2).identities == identities_of(as_refs(listed(2)))
