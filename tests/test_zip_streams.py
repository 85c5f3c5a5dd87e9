import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import streamseq
from streamseq import zip_streams
from streamseq.testing import check_continuity


def _streams(n):
    return {
        "frame": np.arange(n * 6, dtype=np.uint8).reshape(n, 2, 3),
        "state": np.arange(n, dtype=np.float32) / 2,
    }


def test_dict_steps_and_slices():
    parts = _streams(5)
    s = zip_streams(parts)
    assert len(s) == 5
    step = s[3]
    assert set(step) == {"frame", "state"}
    np.testing.assert_array_equal(step["frame"], parts["frame"][3])
    block = s[1:4]
    np.testing.assert_array_equal(block["state"], parts["state"][1:4])
    assert s[-1]["state"] == parts["state"][-1]
    assert s[4:10]["frame"].shape == (1, 2, 3) and s[7:9]["state"].shape == (0,)


def test_tuple_steps():
    a, b = np.arange(4), np.arange(8).reshape(4, 2)
    s = zip_streams((a, b))
    assert isinstance(s[0], tuple) and isinstance(s[1:3], tuple)
    np.testing.assert_array_equal(s[1:3][1], b[1:3])
    assert s[2][0] == 2 and np.array_equal(s[2][1], b[2])


def test_lengths_are_checked_naming_the_key():
    with pytest.raises(ValueError, match=r"'state' has 4 steps, 'frame' has 5"):
        zip_streams({"frame": np.zeros((5, 2)), "state": np.zeros(4)})
    with pytest.raises(ValueError, match=r"stream 2 has 1 steps, stream 0 has 2"):
        zip_streams([np.zeros(2), np.zeros(2), np.zeros(1)])
    with pytest.raises(ValueError, match="no stream"):
        zip_streams({})


def test_indexing_errors():
    s = zip_streams(_streams(3))
    with pytest.raises(IndexError):
        s[3]
    with pytest.raises(TypeError):
        s[1.5]
    with pytest.raises(ValueError, match="contiguous"):
        s[::2]


def test_pickles_with_its_streams():
    s = zip_streams(_streams(4))
    back = pickle.loads(pickle.dumps(s))
    assert len(back) == 4
    np.testing.assert_array_equal(back[1:3]["frame"], s[1:3]["frame"])
    assert "zip_streams({'frame'" in repr(s)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 12),
    a=st.integers(-15, 15),
    b=st.integers(-15, 15),
    as_tuple=st.booleans(),
)
def test_a_slice_is_the_slices_of_the_streams(n, a, b, as_tuple):
    parts = _streams(n)
    s = zip_streams(tuple(parts.values()) if as_tuple else parts)
    got = s[a:b]
    for i, (key, stream) in enumerate(parts.items()):
        np.testing.assert_array_equal(got[i if as_tuple else key], stream[a:b])
    if n:
        got = s[a % n]
        for i, (key, stream) in enumerate(parts.items()):
            np.testing.assert_array_equal(got[i if as_tuple else key], stream[a % n])


@pytest.mark.parametrize("workers", [0, 2])
def test_the_loader_reads_dict_steps(workers):
    lengths = [5, 9, 3, 7]
    streams = [zip_streams(_streams(n)) for n in lengths]
    loader = streamseq.StreamLoader(streams, 2, 4, num_workers=workers)
    batches = list(loader)
    check_continuity(batches, lengths, sources=streams)
    assert set(batches[0].data) == {"frame", "state"}
