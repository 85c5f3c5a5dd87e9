import multiprocessing
import operator
import pickle

import numpy as np
import pytest
from media import write_audio

from streamseq.io import audio, events, synthetic_events, token_corpus
from streamseq.io._base import Source

H, W = 8, 12


@pytest.fixture(scope="module")
def events_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("base") / "events.npy"
    np.save(path, synthetic_events(height=H, width=W, duration_us=200_000, seed=5))
    return path


def test_replace_changes_the_copy_only(events_file):
    e = events(events_file, window_us=1000, height=H, width=W, t0=0, length=200)
    wide = e.replace(window_us=4000, length=50)
    assert type(wide) is type(e)
    assert (e.window_us, len(e)) == (1000, 200)
    assert (wide.window_us, len(wide)) == (4000, 50)
    assert (wide.path, wide.t0, wide.height, wide.width) == (e.path, e.t0, e.height, e.width)
    np.testing.assert_array_equal(wide[3], e[12:16].sum(axis=0))
    assert e.replace() is not e and len(e.replace()) == len(e)


def test_replace_gives_a_handle_of_its_own_with_nothing_open(events_file):
    e = events(events_file, window_us=1000, height=H, width=W)
    before = e[5:9]
    opened = e._handle.peek()
    assert opened is not None
    other = e.replace(length=10)
    assert other._handle is not e._handle and other._handle.peek() is None
    assert other._handle.lock is not e._handle.lock
    np.testing.assert_array_equal(other[5:9], before)
    assert other._handle.peek() is not None and e._handle.peek() is opened  # each its own
    other.close()
    assert other._handle.peek() is None and e._handle.peek() is opened
    np.testing.assert_array_equal(e[5:9], before)


def test_replace_shares_what_is_not_changed():
    ev = synthetic_events(height=H, width=W, duration_us=50_000, seed=1)
    e = events(ev, window_us=1000, height=H, width=W)
    assert e.replace(length=3).array is e.array  # in memory: not copied


def write_tokens(folder):
    path = folder / "tokens.bin"
    np.array([1, 2, 4, 5, 6, 7, 4], dtype=np.uint16).tofile(path)
    return path


def test_replace_refuses_unknown_attributes(events_file, tmp_path):
    e = events(events_file, window_us=1000, height=H, width=W)
    with pytest.raises(AttributeError, match="_Events has no attribute 'window'"):
        e.replace(window=10)
    docs = token_corpus(write_tokens(tmp_path), eod=4)
    with pytest.raises(AttributeError, match="'path'"):
        docs[0].replace(path="other.bin")  # a property, not an attribute


def test_replace_pickles_and_reads_in_workers(events_file):
    e = events(events_file, window_us=1000, height=H, width=W, t0=0, length=200)
    other = e.replace(window_us=2000, length=100)
    expected = other[20:30]  # opened here first
    copy = pickle.loads(pickle.dumps(other))
    assert copy._handle.peek() is None and copy.window_us == 2000
    np.testing.assert_array_equal(copy[20:30], expected)
    for method in ["fork", "spawn"]:
        with multiprocessing.get_context(method).Pool(1) as pool:
            got = pool.apply(operator.getitem, (other, slice(20, 30)))
        np.testing.assert_array_equal(got, expected)


def test_replace_of_a_media_source_opens_its_own_decoder(tmp_path):
    path = write_audio(tmp_path / "tone.wav", 8000, rate=8000)
    a = audio(path, frame=100)
    first = a[3:5]
    shorter = a.replace(frame=50, length=None)
    assert shorter._index is a._index  # probed once
    assert len(shorter) == 2 * len(a) and shorter.frame == 50
    np.testing.assert_array_equal(shorter[6:10], first.reshape(4, 50, -1))
    assert shorter._handle.peek() is not a._handle.peek()


def test_replace_of_a_document_keeps_the_map_of_its_file(tmp_path):
    docs = token_corpus(write_tokens(tmp_path), eod=4)
    first = docs[1].replace(stop=docs[1].start + 2)
    assert first._handle is docs[1]._handle  # one map per file and process
    np.testing.assert_array_equal(first[:], [5, 6])


def test_source_is_the_base_of_the_sources(events_file):
    assert isinstance(events(events_file, window_us=1000, height=H, width=W), Source)
