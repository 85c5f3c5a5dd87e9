import functools
import warnings

import av
import numpy as np
import pytest
import torch

from streamseq import StreamLoader
from streamseq.errors import StreamError
from streamseq.io import tokens, video
from streamseq.read.ref import StreamRef


def write_video(path, n):
    with av.open(str(path), "w") as out:
        s = out.add_stream("mpeg4", rate=25)
        s.width, s.height, s.pix_fmt = 32, 16, "yuv420p"
        for i in range(n):
            img = np.full((16, 32, 3), 25 * i, np.uint8)
            out.mux(s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")))
        out.mux(s.encode())
    return path


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


def test_streams_of_other_dtypes_are_refused_naming_both():
    arrays = [np.zeros((4, 2), np.uint8), np.zeros(0, np.int64), np.zeros((3, 2), np.float32)]
    with pytest.raises(StreamError) as info:
        StreamLoader(arrays, batch_size=2, tbins=2)
    message = str(info.value)
    assert info.value.index == 2
    assert message.startswith("stream 2 (ndarray(shape=(3, 2), dtype=float32))")
    assert "(stream 0, ndarray(shape=(4, 2), dtype=uint8))" in message
    assert "dtype float32 differs from the first stream's uint8" in message
    assert "transform=" in message


def test_streams_of_other_step_shapes_are_refused():
    arrays = [np.zeros((4, 2, 3)), np.zeros((4, 2, 3)), np.zeros((5, 3, 2))]
    with pytest.raises(StreamError, match=r"step shape \(3, 2\) differs .* \(2, 3\)"):
        StreamLoader(arrays, batch_size=2, tbins=2)
    with pytest.raises(StreamError, match=r"stream 1 .*step shape \(3,\) differs .* \(2,\)"):
        StreamLoader([np.zeros((4, 2)), np.zeros((6, 3))], batch_size=2, tbins=2)


def test_dict_streams_compare_leaf_by_leaf():
    x = {"a": np.zeros(4), "b": np.zeros((4, 2), np.uint8)}
    y = {"a": np.zeros(3), "b": np.zeros((3, 2), np.int8)}
    with pytest.raises(StreamError, match=r"\['b'\]: dtype int8 differs .* uint8"):
        StreamLoader([x, y], batch_size=2, tbins=2)
    with pytest.raises(StreamError, match="steps are a dict with keys"):
        StreamLoader([x, {"a": np.zeros(3)}], batch_size=2, tbins=2)


def test_byte_order_empty_streams_and_transforms_pass():
    StreamLoader([np.arange(4, dtype=">u2"), np.arange(3, dtype="<u2")], 2, 2)
    StreamLoader([np.arange(4), np.zeros(0, np.float32), np.arange(3)], 2, 2)

    def to_float(steps, info):
        return steps.astype(np.float32)

    loader = StreamLoader([np.arange(4), np.arange(3.0)], 2, 2, transform=to_float)
    assert loader[0].data.dtype == torch.float32


def test_arrays_are_compared_without_a_loop_over_the_streams(monkeypatch):
    def refuse(self):
        raise AssertionError("looped over the streams")

    monkeypatch.setattr(StreamRef, "step_spec", refuse)
    for shape in [(), (3,), (3, 2)]:
        StreamLoader([np.zeros((n, *shape)) for n in (5, 4, 6)], batch_size=3, tbins=2)


def test_token_headers_differ(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((5, 2), np.int32))
    np.save(tmp_path / "b.npy", np.zeros((5, 2), np.int64))
    with pytest.raises(
        StreamError,
        match=r"stream 1 \(tokens.*b.npy.*: dtype int64 differs.*\(stream 0, tokens",
    ):
        StreamLoader([tokens(tmp_path / "a.npy"), tokens(tmp_path / "b.npy")], 2, 2)


def test_openers_are_compared_from_their_measure_and_never_reopened(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((5, 2), np.int32))
    np.save(tmp_path / "b.npy", np.zeros((5, 3), np.int32))
    opened = []

    def opener(name):
        opened.append(name)
        return np.load(tmp_path / name, mmap_mode="r")

    openers = [functools.partial(opener, "a.npy"), functools.partial(opener, "b.npy")]
    with pytest.raises(StreamError, match=r"stream 1 .*step shape \(3,\) differs .* \(2,\)"):
        StreamLoader(openers, 2, 2)
    assert opened == ["a.npy", "b.npy"]  # once each, to measure them
    opened.clear()
    StreamLoader(openers, 2, 2, lengths=[5, 5])  # nothing measured: nothing known, nothing opened
    assert opened == []


def test_video_sizes_differ_without_demuxing(tmp_path):
    path = write_video(tmp_path / "clip.mp4", 6)
    videos = [video(path, size=(8, 8), length=6), video(path, size=(8, 16), length=6)]
    with pytest.raises(StreamError, match=r"step shape \(8, 16, 3\) differs .* \(8, 8, 3\)"):
        StreamLoader(videos, 2, 2)
    assert all(v._index is None for v in videos)
