import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamseq import interleave_streams, tbin
from streamseq.testing import coded_streams, stream_lengths


@given(stream_lengths(max_streams=6, max_length=30), st.integers(1, 7))
def test_chunks_never_span_streams_and_cover_every_step(lengths, t):
    streams = coded_streams(lengths)
    (row,) = interleave_streams(streams, 1)
    chunks = tbin(row, t)
    assert len(chunks) == sum(-(-n // t) for n in lengths)
    seen = []
    for c in chunks:
        assert c.data.shape == (t,)
        n = int(c.valid.sum())
        assert c.valid[:n].all() and not c.valid[n:].any()
        assert len(set(c.stream[:n].tolist())) == 1
        assert (c.data[n:] == 0).all() and (c.stream[n:] == -1).all()
        assert bool(c.reset) == (c.step[0] == 0)
        sid = int(c.stream[0])
        assert c.data[:n].tolist() == streams[sid][c.step[0] : c.step[0] + n].tolist()
        seen.extend(zip(c.stream[:n].tolist(), c.step[:n].tolist(), strict=True))
    expected = [(s, k) for s in row.stream_ids.tolist() for k in range(lengths[s])]
    assert seen == expected


def test_negative_index_and_out_of_range():
    (row,) = interleave_streams([np.arange(5)], 1)
    chunks = tbin(row, 2)
    assert chunks[-1].data.tolist() == [4, 0]
    with pytest.raises(IndexError):
        chunks[3]


@pytest.mark.parametrize("t", [0, -1])
def test_bad_tbins(t):
    (row,) = interleave_streams([np.arange(5)], 1)
    with pytest.raises(ValueError, match="tbins"):
        tbin(row, t)


def test_multi_dimensional_and_dict_steps():
    class DictStream:
        def __len__(self):
            return 3

        def __getitem__(self, key):
            return {"x": np.ones((3, 2, 2))[key], "y": np.arange(3)[key]}

    (row,) = interleave_streams([DictStream()], 1)
    c = tbin(row, 2)[1]
    assert c.data["x"].shape == (2, 2, 2) and c.data["y"].tolist() == [2, 0]
    assert c.data["x"][1].sum() == 0


def test_index_errors_show_the_index_given():
    (row,) = interleave_streams([np.arange(5)], 1)
    with pytest.raises(IndexError, match=r"^chunk -4 out of range for 3 chunks$"):
        tbin(row, 2)[-4]
