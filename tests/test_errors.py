"""One failure, one type: a stream's own SourceError is raised as it is, with the stream named."""

import functools
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamseq import StreamLoader
from streamseq.errors import SourceError, StreamError
from streamseq.io import tokens


class Damaged:
    """A stream whose file turns out damaged: on ``len``, on a read, or both."""

    def __init__(self, n, on_len=True, on_read=True):
        self.n, self.on_len, self.on_read = n, on_len, on_read

    def __len__(self):
        if self.on_len:
            raise SourceError("clip.bin", "damaged header")
        return self.n

    def __getitem__(self, key):
        if self.on_read:
            raise SourceError("clip.bin", "damaged header")
        return np.arange(self.n)[key]


def open_damaged(n):
    return Damaged(n)


def open_missing(n):
    raise SourceError("gone.bin", "no such file")


def negative_npy(tmp_path):
    """A .npy file whose header declares a negative dimension."""
    path = tmp_path / "neg.npy"
    np.save(path, np.arange(6, dtype=np.int64))
    data = path.read_bytes().replace(b"'shape': (6,)", b"'shape': (-6,)")
    path.write_bytes(data)
    return path


def test_a_negative_dimension_in_a_npy_header_names_the_file(tmp_path):
    path = negative_npy(tmp_path)
    with pytest.raises(SourceError, match=r"neg\.npy: not a valid \.npy file \(negative") as e:
        tokens(path)
    assert e.value.path == str(path)


@pytest.mark.parametrize("lengths", [None, [4, 6]])
def test_an_opener_failing_on_a_damaged_npy_header_raises_a_source_error(tmp_path, lengths):
    opener = functools.partial(tokens, negative_npy(tmp_path))
    with pytest.raises(SourceError, match=r"stream 1 \(.*\): .*neg\.npy: not a valid") as e:
        list(StreamLoader([np.arange(4), opener], 2, 2, lengths=lengths))
    assert e.value.index == 1


@pytest.mark.parametrize("lengths", [None, [4, 5]])
@pytest.mark.parametrize("source", [Damaged(5), functools.partial(open_damaged, 5)])
def test_a_source_error_while_measuring_or_reading_is_one_type(source, lengths):
    with pytest.raises(SourceError, match=r"stream 1 \(.*\).*: clip\.bin: damaged header") as e:
        list(StreamLoader([np.arange(4), source], 2, 2, lengths=lengths))
    assert e.value.index == 1 and e.value.path == "clip.bin"


@pytest.mark.parametrize("workers", [0, 2])
def test_an_opener_raising_a_source_error_in_a_worker(workers):
    openers = [functools.partial(np.arange, 4), functools.partial(open_missing, 5)]
    loader = StreamLoader(openers, 2, 2, num_workers=workers, lengths=[4, 5])
    with pytest.raises(SourceError, match=r"stream 1 \(.*open_missing.*\): gone\.bin: no such"):
        list(loader)


def test_other_errors_are_still_wrapped_with_the_cause():
    class Broken:
        def __len__(self):
            raise OSError("disk on fire")

        def __getitem__(self, key):
            return np.arange(3)[key]

    with pytest.raises(StreamError, match=r"stream 0 .*len\(\) failed: OSError") as e:
        StreamLoader([Broken()], 1, 2)
    assert not isinstance(e.value, SourceError)
    assert isinstance(e.value.__cause__, OSError)


def test_a_located_source_error_pickles_with_its_stream():
    error = SourceError("a.npy", "truncated")
    error.locate(3, "tokens('a.npy')")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is SourceError and str(copy) == str(error)
    assert str(copy) == "stream 3 (tokens('a.npy')): a.npy: truncated"


@settings(max_examples=20)
@given(
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["stream", "opener"]),
)
def test_a_damaged_file_is_a_source_error_however_it_is_given(on_len, on_read, declared, kind):
    damaged = Damaged(5, on_len, on_read)
    source = damaged if kind == "stream" else functools.partial(lambda d: d, damaged)
    lengths = [3, 5] if declared else None
    try:
        list(StreamLoader([np.arange(3), source], 2, 2, lengths=lengths, pin_memory=False))
    except SourceError as e:
        assert e.index == 1 and e.path == "clip.bin"
    else:  # nothing was damaged where it was looked at
        assert not on_read and (declared or not on_len)
