"""The PyAV differences bridged by streamseq.io._av_compat: both sides of each, on any PyAV."""

import gc
import multiprocessing

import av
import numpy as np
import pytest
from media import plain_video, video_frame, write_audio, write_video

from streamseq.io import _av_compat, audio, video
from streamseq.io._av_compat import major, open_arguments

REAL_OPEN, REAL_MAJOR = av.open, major(av.__version__)


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("12.0.0", {"metadata_errors": "ignore"}),
        ("18.1.0", {"metadata_errors": "ignore"}),
        ("19.0.0", {}),
        ("19.0.2", {}),
        ("20.1.0rc1", {}),
    ],
)
def test_open_arguments_follow_the_release(version, expected):
    assert open_arguments(version) == expected


def pyav_19_open(file, mode="r", **kwargs):
    """av.open as PyAV 19 takes it: ``metadata_errors`` is refused, as a removed argument is."""
    if "metadata_errors" in kwargs or "metadata_encoding" in kwargs:
        raise TypeError("open() got an unexpected keyword argument 'metadata_errors'")
    return REAL_OPEN(file, mode, **kwargs)


def pyav_18_open(calls):
    """av.open as PyAV 18 takes it, recording the keyword arguments of each call."""

    def open_(file, mode="r", **kwargs):
        calls.append(dict(kwargs))
        if REAL_MAJOR >= 19:  # the installed one cannot take the argument
            kwargs.pop("metadata_errors", None)
        return REAL_OPEN(file, mode, **kwargs)

    return open_


@pytest.fixture
def clip(tmp_path):
    return write_video(tmp_path / "clip.mp4", n=9, size=(16, 16))


def test_sources_open_files_with_pyav_19(clip, monkeypatch):
    monkeypatch.setattr(av, "__version__", "19.0.2")
    monkeypatch.setattr(av, "open", pyav_19_open)
    v = video(clip)
    assert len(v) == 9
    assert np.array_equal(v[2:5], plain_video(clip)[2:5])


def test_sources_open_files_with_pyav_18_ignoring_tag_errors(clip, monkeypatch):
    calls, last = [], plain_video(clip)[8]
    monkeypatch.setattr(av, "__version__", "18.1.0")
    monkeypatch.setattr(av, "open", pyav_18_open(calls))
    v = video(clip)
    assert len(v) == 9 and np.array_equal(v[8], last)
    assert calls and all(kwargs == {"metadata_errors": "ignore"} for kwargs in calls)


def test_open_input_passes_what_the_release_takes(clip, monkeypatch):
    calls = []
    monkeypatch.setattr(av, "open", pyav_18_open(calls))
    with _av_compat.open_input(str(clip)) as container:
        assert container.streams.video[0].frames == 9
    assert calls == [open_arguments(av.__version__)]


def write_latin1_tag(path):
    """A Matroska clip whose title tag holds the byte 0xE9 ("é" in Latin-1), not UTF-8."""
    if REAL_MAJOR >= 19:  # tags are written as UTF-8 with surrogateescape
        out, title = av.open(str(path), "w", format="matroska"), "caf\udce9"
    else:
        out = av.open(str(path), "w", format="matroska", metadata_encoding="latin-1")
        title = "caf\xe9"
    with out:
        out.metadata["title"] = title
        stream = out.add_stream("libx264", rate=25)
        stream.height, stream.width, stream.pix_fmt = 16, 16, "yuv420p"
        for i in range(5):
            frame = av.VideoFrame.from_ndarray(video_frame(i, 16, 16), format="rgb24")
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    assert b"caf\xe9" in path.read_bytes()
    return path


def test_a_title_that_is_not_utf8_does_not_stop_the_reading(tmp_path):
    path = write_latin1_tag(tmp_path / "latin1.mkv")
    v = video(path)
    assert len(v) == 5 and v[4].shape == (16, 16, 3)


def test_audio_sources_open_files_with_pyav_19(tmp_path, monkeypatch):
    path = write_audio(tmp_path / "a.wav", n=3000)
    monkeypatch.setattr(av, "__version__", "19.0.2")
    monkeypatch.setattr(av, "open", pyav_19_open)
    a = audio(path, frame=1000)
    assert len(a) == 3 and a[2].shape == (1000, 2)


def _collect():
    gc.collect()


@pytest.mark.timeout(120)
def test_a_forked_child_never_frees_the_resamplers_left_in_garbage(tmp_path):
    # PyAV 19 frees a filter graph only in a collection: in a child, freeing the parent's
    # would wait for the parent's threads forever
    path = write_audio(tmp_path / "a.wav", n=3000)
    gc.collect()
    gc.disable()  # the resampler's graph stays garbage in this process until the fork
    try:
        a = audio(path, sample_rate=8000, frame=100)
        assert a[0:3].shape == (3, 100, 2)
        a.close()
        del a
        child = multiprocessing.get_context("fork").Process(target=_collect)
        child.start()
        child.join(30)
        if child.exitcode is None:
            child.kill()
            child.join()
    finally:
        gc.enable()
        gc.collect()
    assert child.exitcode == 0


def test_two_threads_forking_at_once_leave_the_collector_running():
    from streamseq._fork_count import FORKS

    assert gc.isenabled()
    try:
        FORKS.enter()  # (a thread's fork begins)
        FORKS.enter()  # (another thread's, before the first is done)
        FORKS.leave()
        assert not gc.isenabled()  # (a fork still under way: no collection yet)
        FORKS.leave()
        assert gc.isenabled()
    finally:
        gc.enable()
