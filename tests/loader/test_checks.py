import warnings

import numpy as np
import pytest

from streamseq import StreamLoader


def streams(*lengths):
    return [np.arange(n) for n in lengths]


def test_more_rows_than_streams_warns_at_the_callers_line():
    with pytest.warns(UserWarning, match="batch_size=4 gives 4 rows") as record:
        StreamLoader(streams(5, 0, 3), batch_size=4, tbins=2)
    message = str(record[0].message)
    assert "only 2 non-empty streams: 2 rows stay empty" in message
    assert "batch_size=2 or less" in message and "segment_length=" in message
    assert record[0].filename == __file__


def test_one_empty_row_is_told_in_the_singular():
    with pytest.warns(UserWarning, match="1 row stays empty"):
        StreamLoader(streams(5), batch_size=2, tbins=2, pad="pack")


def test_global_rows_count_with_world_size():
    with pytest.warns(UserWarning, match="x world_size=2 gives 6 global rows") as record:
        StreamLoader(streams(5, 4, 3, 2), batch_size=3, tbins=2, rank=1, world_size=2)
    assert "4 non-empty streams: 2 rows stay empty" in str(record[0].message)
    assert "batch_size=2 or less" in str(record[0].message)


def test_segments_count_instead_of_streams():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        StreamLoader(streams(8, 6), batch_size=4, tbins=2, segment_length=4)  # 4 segments
    with pytest.warns(UserWarning, match=r"3 segments \(segment_length=5\) of 2") as record:
        StreamLoader(streams(8, 5), batch_size=4, tbins=2, segment_length=5)
    assert "a shorter segment_length" in str(record[0].message)


def test_enough_streams_is_silent():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        StreamLoader(streams(5, 3), batch_size=2, tbins=2)
        StreamLoader(streams(5, 3, 4, 4), batch_size=2, tbins=2, rank=0, world_size=2)


@pytest.mark.parametrize("pad", ["drop", "wrap"])
def test_drop_and_wrap_still_refuse(pad):
    with pytest.raises(ValueError, match=f"pad='{pad}' needs a stream for every row"):
        StreamLoader(streams(5, 3), batch_size=3, tbins=2, pad=pad)


def test_the_warning_changes_no_batch():
    with pytest.warns(UserWarning):
        loader = StreamLoader(streams(5, 3), batch_size=3, tbins=2)
    (first, *_) = loader
    assert first.data.tolist() == [[0, 1], [0, 1], [0, 0]]
    assert first.valid.tolist() == [[True, True], [True, True], [False, False]]
