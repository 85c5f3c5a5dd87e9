"""Reading: whether the streams are a store's mapped arrays, answered without a stream each."""

import functools
import warnings

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import streamseq.read.ref as ref_module
from streamseq import StreamLoader, StreamTable, materialize
from streamseq.read.ref import StreamRef
from streamseq.store import StoredStream, open_store


class _Made:
    """Counts the streams and references made while it is patched in."""

    def __init__(self, monkeypatch):
        self.streams = self.refs = 0
        counter = self

        original = StoredStream.__init__

        def stream_init(self, *args, **kwargs):
            counter.streams += 1
            original(self, *args, **kwargs)

        made_ref, bare = StreamRef.__init__, ref_module._bare_ref

        def ref_init(self, *args, **kwargs):
            counter.refs += 1
            made_ref(self, *args, **kwargs)

        def bare_ref(*args):
            counter.refs += 1
            return bare(*args)

        monkeypatch.setattr(StoredStream, "__init__", stream_init)
        monkeypatch.setattr(StreamRef, "__init__", ref_init)
        monkeypatch.setattr(ref_module, "_bare_ref", bare_ref)


def test_a_store_table_answers_once_whether_it_is_mapped(tmp_path, monkeypatch):
    materialize([np.arange(n) for n in range(1, 41)], tmp_path / "s")
    made = _Made(monkeypatch)
    reading = StreamLoader(open_store(tmp_path / "s"), 4, 3)._reading
    assert reading.in_memory and len(reading.stores) == 1
    assert (made.streams, made.refs) == (0, 0)  # nothing made per stream to answer


def _stored(files, index, offset, length):
    return StoredStream(files, index, offset, length)


def test_a_table_that_does_not_say_makes_no_stream_to_answer(tmp_path, monkeypatch):
    """A table built by hand over a store's streams is not asked stream by stream."""
    store = materialize([np.arange(n) for n in range(1, 41)], tmp_path / "s")
    files = store[0]._files
    lengths = store.lengths if hasattr(store, "lengths") else [len(s) for s in store]
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    table = StreamTable(
        functools.partial(_stored, files),
        lengths,
        [np.arange(len(lengths)), offsets],
        step_spec=(np.int64, ()),
        identities="store",
    )
    reading = StreamLoader(table, 4, 3)._reading
    made = _Made(monkeypatch)
    assert not reading.in_memory and reading.stores == []
    assert (made.streams, made.refs) == (0, 0)


def test_a_list_of_streams_is_mapped_when_every_stream_is(tmp_path):
    store = open_store(materialize([np.arange(5), np.arange(3)], tmp_path / "s")[0].path)

    class Plain:
        def __init__(self, n):
            self.n = n

        def __len__(self):
            return self.n

        def __getitem__(self, key):
            return np.arange(self.n)[key]

    streams = [store[0], Plain(4), store[1], Plain(6)]
    reading = StreamLoader(streams, 2, 3)._reading
    assert not reading.in_memory and len(reading.stores) == 1
    assert StreamLoader([store[0], store[1]], 2, 3)._reading.in_memory


def _piece(data, start, length):
    return data[start : start + length]


def _table(count):
    lengths = np.arange(count) % 7 + 1
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    data = np.arange(int(lengths.sum()))
    make = functools.partial(_piece, data)
    return StreamTable(make, lengths, [starts], step_spec=(data.dtype, ()), identities="d")


def test_the_rows_of_a_pass_hold_no_reference_until_a_stream_is_read(monkeypatch):
    loader = StreamLoader(_table(3000), 8, 4, shuffle=True)
    reading = loader._reading
    made = _Made(monkeypatch)
    rows = reading.rows(loader.plan())
    assert sum(len(r.refs) for r in rows) == 3000
    assert made.refs == 0  # the rows hold indices into the table, not references
    row = rows[0]
    assert row[0 : len(row)].tolist() == [
        s for i in row.stream_ids.tolist() for s in _table(3000)[i].tolist()
    ]
    assert made.refs == len(row.refs)  # one a stream read, made when it is read


def test_a_row_of_a_table_pickles_as_its_streams_and_reads_the_same():
    import pickle

    from streamseq.read.ref import RowRefs

    loader = StreamLoader(_table(500), 4, 4)
    rows = loader._reading.rows(loader.plan())
    assert all(type(r.refs) is RowRefs for r in rows)
    again = pickle.loads(pickle.dumps(rows))
    for a, b in zip(rows, again, strict=True):
        assert len(b.refs.table) == len(a.refs)  # only the row's streams travel
        assert a[0 : len(a)].tolist() == b[0 : len(b)].tolist()
        assert [r.index for r in a.refs] == [r.index for r in b.refs] == a.stream_ids.tolist()


def test_a_store_read_here_checks_each_of_its_files_before_and_after_a_batch(
    tmp_path, monkeypatch
):
    from streamseq.store.stream import _Files

    materialize([np.arange(40).reshape(20, 2) + i for i in range(3)], tmp_path / "s")
    checks = []
    original = _Files.check

    def check(self):
        checks.append(self)
        original(self)

    monkeypatch.setattr(_Files, "check", check)
    loader = StreamLoader(open_store(tmp_path / "s"), 3, 4)
    batches = list(loader)
    assert len(batches) == 5
    assert len(checks) == 2 * len(batches)  # before and after each batch: one fstat each


def test_a_store_read_here_counts_the_valid_steps_of_the_plan(tmp_path):
    materialize([np.arange(n) for n in (9, 4, 13)], tmp_path / "s")
    loader = StreamLoader(open_store(tmp_path / "s"), 2, 4, pad="wrap")
    it = iter(loader)
    valid = sum(int(b.valid.sum()) for b in it)
    assert it.meter.steps == valid > 0


@settings(max_examples=20, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 30), min_size=1, max_size=8).filter(any),
    batch_size=st.integers(1, 6),
    tbins=st.integers(1, 5),
    pad=st.sampled_from(["zeros", "drop", "wrap", "pack", "pack cap"]),
    lookahead=st.integers(0, 3),
    segment=st.booleans(),
    layout=st.sampled_from(["", "time_major", "pin_memory"]),
    resume=st.tuples(st.integers(1, 6), st.integers(0, 6)) | st.none(),
)
@pytest.mark.filterwarnings("ignore")
def test_a_store_read_here_delivers_its_arrays_batches_and_counts_their_valid_steps(
    tmp_path_factory, lengths, batch_size, tbins, pad, lookahead, segment, layout, resume
):
    """Every batch of a store read in this process equals the one of its arrays, and the
    pass's figures are ``valid`` summed over the batches it delivered, whatever the
    options, also after a resume from another batch size."""
    warnings.simplefilter("ignore")  # (empty rows, pin_memory without CUDA: they say so)
    rng = np.random.default_rng(len(lengths))
    arrays = [rng.integers(0, 99, (n, 2)).astype(np.int16) for n in lengths]
    stored = materialize(arrays, tmp_path_factory.mktemp("s"))
    options = {
        "pad": pad.split()[0],
        "max_streams_per_chunk": 2 if pad == "pack cap" else None,
        "lookahead": min(lookahead, max(lengths)),
        "segment_length": 2 * tbins if segment else None,
        "shuffle": True,
        "seed": 5,
    }
    if layout:
        options[layout] = True
    try:
        StreamLoader(arrays, batch_size, tbins, **options)
    except ValueError:  # (options that do not go together: rows that would idle, ...)
        assume(False)
    loaders = [StreamLoader(s, batch_size, tbins, **options) for s in (stored, arrays)]
    if resume is not None:
        for loader, streams in zip(loaders, (stored, arrays), strict=True):
            try:
                other = StreamLoader(streams, resume[0], tbins, **options)
            except ValueError:
                assume(False)
            it = iter(other)
            for _ in range(resume[1]):
                next(it, None)
            loader.load_state_dict(other.state_dict())
    for _ in range(2):
        got, want = list(loaders[0]), list(loaders[1])
        assert len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
        stats = loaders[0].stats
        assert stats.epoch == loaders[1].stats.epoch and stats.batches == len(got)
        assert stats.steps == sum(int(b.valid.sum()) for b in got)
        assert stats.padding_steps == sum(int((~b.valid).sum()) for b in got)
