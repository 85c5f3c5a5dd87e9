"""Reading: whether the streams are a store's mapped arrays, answered without a stream each."""

import functools

import numpy as np

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
