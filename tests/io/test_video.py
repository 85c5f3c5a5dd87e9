import gc
import multiprocessing
import multiprocessing as mp
import operator
import pickle
import sys
import tempfile
import threading
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from media import (
    VIDEO_CLIPS,
    damage_codec_tag,
    plain_video,
    truncate,
    write_vfr_video,
    write_video,
)

from streamseq.errors import SourceError
from streamseq.io import video
from streamseq.io.video import decode_threads


@pytest.fixture(scope="module")
def references(video_clips):
    return {name: plain_video(path) for name, path in video_clips.items()}


@pytest.mark.parametrize("name", VIDEO_CLIPS)
def test_length_and_sequential_read(name, video_clips, references, seeks):
    v = video(video_clips[name])
    ref = references[name]
    assert len(v) == len(ref) == 40
    got = np.concatenate([v[a : a + 7] for a in range(0, len(v), 7)])
    assert got.dtype == np.uint8 and got.shape == (40, 48, 64, 3)
    np.testing.assert_array_equal(got, ref)
    assert seeks == {"seek": 0, "restart": 0}  # one decoder, never repositioned


@pytest.mark.parametrize("name", VIDEO_CLIPS)
@settings(max_examples=12)
@given(reads=st.lists(st.tuples(st.integers(0, 45), st.integers(0, 6)), min_size=1, max_size=8))
def test_random_access_matches_plain_decode(name, video_clips, references, reads):
    v, into = video(video_clips[name]), video(video_clips[name])
    ref = references[name]
    for a, n in reads:
        np.testing.assert_array_equal(v[a : a + n], ref[a : a + n])
        b = min(a + n, len(ref))
        if a < b:  # written straight into a batch's rows: the same frames
            out = np.full((b - a, *ref.shape[1:]), 7, np.uint8)
            assert into.read_into(a, b, out) == b - a
            np.testing.assert_array_equal(out, ref[a:b])


def test_random_access_seeks_instead_of_restarting(video_clips, references, seeks):
    v = video(video_clips["x264_gop5_b2"])
    for a in [30, 10, 35, 20, 25, 5]:
        np.testing.assert_array_equal(v[a : a + 2], references["x264_gop5_b2"][a : a + 2])
    assert seeks["seek"] == 6
    assert seeks["restart"] <= 1  # only the initial open, or a keyframe-0 target


def test_unreliable_timestamps_fall_back_to_counting(video_clips, references):
    # in AVI with B-frames, packet timestamps follow decode order: identification by
    # timestamp would be wrong, reading must notice and count from the start instead
    v = video(video_clips["x264_avi_b2"])
    for a in [35, 3, 20, 19, 38]:
        np.testing.assert_array_equal(v[a : a + 3], references["x264_avi_b2"][a : a + 3])


def test_resize_and_pixel_formats(video_clips):
    path = video_clips["x264_gop12_b2"]
    v = video(path, size=(24, 40))
    assert v[3:6].shape == (3, 24, 40, 3)
    np.testing.assert_array_equal(v[10:20], plain_video(path, size=(24, 40))[10:20])
    gray = video(path, format="gray")
    assert gray[0:2].shape == (2, 48, 64) and gray[0:0].shape == (0, 48, 64)
    np.testing.assert_array_equal(gray[5:8], plain_video(path, format="gray")[5:8])
    assert video(path, format="bgra")[0].shape == (48, 64, 4)
    with pytest.raises(ValueError, match="format"):
        video(path, format="nv12")


def test_yuv420p_planes_at_decode(video_clips):
    path = video_clips["x264_gop12_b2"]
    v = video(path, format="yuv420p", size=(24, 40))
    assert v.step_spec()[1] == (36, 40) and v[2:5].shape == (3, 36, 40)
    with av.open(path) as c:
        frames = [f.reformat(40, 24, "yuv420p").to_ndarray() for f in c.decode(video=0)]
    np.testing.assert_array_equal(v[2:5], np.stack(frames[2:5]))
    with pytest.raises(ValueError, match="even"):
        video(path, format="yuv420p", size=(25, 40))


@pytest.mark.parametrize("threads", [None, 0, 1, 3])
def test_codec_threads_give_the_same_frames(video_clips, references, threads):
    v = video(video_clips["x264_gop12_b2"], threads=threads)
    ref = references["x264_gop12_b2"]
    np.testing.assert_array_equal(v[:], ref)
    np.testing.assert_array_equal(v[30:33], ref[30:33])  # a seek
    np.testing.assert_array_equal(v[5:9], ref[5:9])  # back


def test_codec_threads_fit_the_process(video_clips):
    for threads, count in ((None, 0), (1, 1), (2, 2)):
        v = video(video_clips["x264_gop12_b2"], threads=threads)
        v[0:2]
        codec = v._handle.peek().stream.codec_context  # the decoder of this process
        assert codec.thread_count == count if count else codec.thread_count != 1
    assert decode_threads(None) == 0 and decode_threads(4) == 4
    with mp.get_context("spawn").Pool(1) as pool:
        assert pool.apply(decode_threads, (None,)) == 1  # a worker: one thread per decoder
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="threads"):
            video(video_clips["x264_gop12_b2"], threads=bad)


def test_slicing_rules(video_clips, references):
    v = video(video_clips["x264_gop5_b2"])
    ref = references["x264_gop5_b2"]
    np.testing.assert_array_equal(v[-3:], ref[-3:])
    np.testing.assert_array_equal(v[35:1000], ref[35:])
    np.testing.assert_array_equal(v[-1], ref[-1])
    np.testing.assert_array_equal(v[np.int64(4)], ref[4])
    assert v[50:60].shape == (0, 48, 64, 3)
    assert v[7:3].shape == (0, 48, 64, 3)
    with pytest.raises(IndexError):
        v[40]
    with pytest.raises(IndexError):
        v[-41]
    with pytest.raises(ValueError, match="step"):
        v[0:10:2]
    with pytest.raises(TypeError):
        v["a"]


def test_declared_length_skips_the_probe(video_clips, references):
    v = video(video_clips["x264_gop12_b2"], length=40)
    assert len(v) == 40
    np.testing.assert_array_equal(v[0:10], references["x264_gop12_b2"][:10])
    assert v._index is None  # reading on from the start needs no timestamp table
    np.testing.assert_array_equal(v[25:27], references["x264_gop12_b2"][25:27])


def test_pickle_before_and_after_reading(video_clips, references):
    v = video(video_clips["x264_gop12_b2"])
    ref = references["x264_gop12_b2"]
    fresh = pickle.loads(pickle.dumps(v))
    np.testing.assert_array_equal(fresh[12:15], ref[12:15])
    v[20:22]  # opens a decoder
    data = pickle.dumps(v)
    assert len(data) < 10_000  # no decoder state, no frames: the path and the probe
    copy = pickle.loads(data)
    assert copy._index is not None  # the probe travels, workers do not demux again
    np.testing.assert_array_equal(copy[2:4], ref[2:4])
    np.testing.assert_array_equal(v[22:24], ref[22:24])


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_read_in_worker_process(method, video_clips, references):
    v = video(video_clips["x264_gop5_b2"])
    ref = references["x264_gop5_b2"]
    v[0:3]  # the parent holds an open decoder: a forked child must not use it
    with multiprocessing.get_context(method).Pool(1) as pool:
        got = pool.starmap(operator.getitem, [(v, slice(3, 9)), (v, slice(30, 33))])
    np.testing.assert_array_equal(got[0], ref[3:9])
    np.testing.assert_array_equal(got[1], ref[30:33])
    np.testing.assert_array_equal(v[3:6], ref[3:6])  # the parent's decoder goes on


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_worker_opening_a_replaced_video_raises(method, tmp_path):
    path = write_video(tmp_path / "a.mp4", 20)
    ref = plain_video(path)
    v = video(path)
    assert len(v) == 20
    v[0:3]  # the open decoder goes on with the file it opened
    write_video(tmp_path / "b.mp4", 30)
    (tmp_path / "b.mp4").replace(path)
    with multiprocessing.get_context(method).Pool(1) as pool:
        with pytest.raises(SourceError, match=r"a.mp4: changed .*replaced by another file"):
            pool.apply(operator.getitem, (v, slice(3, 9)))
    np.testing.assert_array_equal(v[3:6], ref[3:6])  # the former file, still open here
    fps = v.at_fps(10)  # a copy: it opens a decoder of its own, and checks the file
    with pytest.raises(SourceError, match="changed since the source was made"):
        fps[0:2]


def _drop_and_collect(stream):
    stream.close()
    gc.collect()


def test_forked_child_never_frees_the_parents_decoder(tmp_path):
    # FFmpeg decoders and scalers own threads that a forked child does not have: freeing
    # the parent's in the child would wait for them forever
    v = video(write_video(tmp_path / "big.mp4", 6, size=(480, 640)), size=(240, 320))
    v[0:2]  # the parent now holds a decoder and a scaler, with their threads
    child = multiprocessing.get_context("fork").Process(target=_drop_and_collect, args=(v,))
    child.start()
    child.join(30)
    if child.exitcode is None:
        child.kill()
    assert child.exitcode == 0
    assert v[2:4].shape == (2, 240, 320, 3)


def _collect():
    gc.collect()


def test_forked_child_never_frees_a_decoder_left_in_garbage(tmp_path):
    # a decoder can reach a child outside any source: here in a traceback kept by a
    # reference cycle, that the child's garbage collector frees
    v = video(write_video(tmp_path / "big.mp4", 6, size=(480, 640)), size=(240, 320), length=8)
    gc.disable()
    try:
        with pytest.raises(SourceError, match="6 of 8") as info:
            v[4:8]  # the traceback holds the decoder
        v.close()
        del v
        info.value.cycle = info  # the error and its traceback are garbage once dropped
        del info
        child = multiprocessing.get_context("fork").Process(target=_collect)
        child.start()
        child.join(30)
    finally:
        gc.enable()
    if child.exitcode is None:
        child.kill()
    assert child.exitcode == 0


def _read_and_compare(stream, a, b, expected):
    np.testing.assert_array_equal(stream[a:b], expected)


def test_forked_child_reads_while_a_parent_thread_holds_the_lock(video_clips, references):
    v = video(video_clips["x264_gop5_b2"])
    v[0:3]
    lock = v._handle.lock
    with lock:  # a thread of the parent in the middle of a read, as the fork happens
        child = multiprocessing.get_context("fork").Process(
            target=_read_and_compare, args=(v, 3, 6, references["x264_gop5_b2"][3:6])
        )
        child.start()
        child.join(30)
    if child.exitcode is None:
        child.kill()
    assert child.exitcode == 0


def test_reads_from_threads(video_clips, references):
    v = video(video_clips["x264_gop5_b2"])
    ref = references["x264_gop5_b2"]
    errors = []

    def read(start):
        try:
            for a in range(start, 40, 8):
                np.testing.assert_array_equal(v[a : a + 3], ref[a : a + 3])
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=read, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.parametrize("name", VIDEO_CLIPS)
def test_timestamps_and_fps(name, video_clips):
    v = video(video_clips[name])
    with av.open(str(video_clips[name])) as container:
        times = [frame.time for frame in container.decode(video=0)]
    assert v.timestamps.dtype == np.float64 and len(v.timestamps) == len(v) == 40
    # as a plain decode tells them (in the AVI clip, out of order: in decode order)
    np.testing.assert_allclose(v.timestamps, np.sort(times))
    if name != "x264_avi_b2":  # (an AVI stream starts one frame late)
        np.testing.assert_allclose(v.timestamps, np.arange(40) / 25)
    assert v.fps == 25.0
    with pytest.raises(ValueError):
        v.timestamps[0] = 1.0  # shared by every read: read-only


def test_timestamps_of_a_declared_length_stream(video_clips):
    v = video(video_clips["x264_gop12_b2"], length=40)
    assert v._index is None
    np.testing.assert_allclose(v.timestamps, np.arange(40) / 25)  # demuxed on demand
    copy = pickle.loads(pickle.dumps(v))
    assert copy._index is not None and copy.fps == 25.0


def test_damaged_codec_description(tmp_path):
    path = damage_codec_tag(write_video(tmp_path / "whole.mp4", 10), tmp_path / "damaged.mp4")
    with pytest.raises(SourceError, match="damaged.mp4: no decoder for video stream 0") as info:
        len(video(path))
    assert info.value.path == str(path)
    with pytest.raises(SourceError, match="damaged.mp4"):
        video(path, length=10)[0:2]


def test_missing_file(tmp_path):
    path = tmp_path / "nowhere.mp4"
    with pytest.raises(FileNotFoundError, match="nowhere.mp4"):
        video(path)


def test_garbage_file(tmp_path):
    path = tmp_path / "garbage.mp4"
    path.write_bytes(np.random.default_rng(0).bytes(5000))
    v = video(path)
    with pytest.raises(SourceError, match="garbage.mp4") as info:
        len(v)
    assert info.value.path == str(path)


@pytest.mark.parametrize(
    "kind, fmt, options",
    [
        ("mp4", "mp4", None),  # index at the end: cannot open
        ("mp4", "mp4", {"movflags": "faststart"}),  # index first: packets missing
        ("mkv", "matroska", None),  # no frame count: frames cover less than the duration
    ],
)
def test_truncated_file(tmp_path, kind, fmt, options):
    whole = write_video(tmp_path / f"whole.{kind}", 40, fmt=fmt, options=options)
    for fraction in [0.5, 0.9]:
        path = truncate(whole, tmp_path / f"cut{fraction}.{kind}", fraction)
        with pytest.raises(SourceError, match=f"cut{fraction}"):
            video(path)[0:40]


def test_file_shorter_than_declared(video_clips):
    v = video(video_clips["x264_gop12_b0"], length=45)
    v[30:40]
    with pytest.raises(SourceError, match="truncated: decoding ends after 40 of 45 frames"):
        v[38:42]
    with pytest.raises(SourceError, match="40 of 45"):
        v[44]


def test_source_error_from_worker(tmp_path):
    path = tmp_path / "garbage.mkv"
    path.write_bytes(b"\x1a\x45\xdf\xa3" + bytes(3000))
    v = video(path, length=10)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        with pytest.raises(SourceError, match="garbage.mkv") as info:
            pool.apply(operator.getitem, (v, slice(0, 2)))
    assert info.value.path == str(path)


# -- constant rate -------------------------------------------------------------------------


def player_frames(times_ms, end_ms, fps):
    """What a player shows at the times ``i / fps`` before ``end_ms``, in exact arithmetic."""
    shown, i = [], 0
    while Fraction(i, 1) / Fraction(fps) * 1000 < end_ms:
        t = Fraction(i, 1) / Fraction(fps) * 1000
        shown.append(max(k for k, s in enumerate(times_ms) if s <= t))
        i += 1
    return shown


vfr_times = st.lists(st.integers(1, 120), min_size=1, max_size=14).map(
    lambda gaps: [0, *np.cumsum(gaps).tolist()]
)


@settings(max_examples=12, deadline=None)
@given(
    times_ms=vfr_times,
    last_ms=st.integers(1, 100),
    fps=st.sampled_from([7, 10, 25, 30, 60]),
    bf=st.sampled_from([0, 2]),
    cuts=st.lists(st.integers(1, 9), min_size=1, max_size=6),
)
def test_constant_rate_shows_what_a_player_shows(times_ms, last_ms, fps, bf, cuts):
    with tempfile.TemporaryDirectory() as tmp:
        path = write_vfr_video(Path(tmp) / "vfr.mp4", times_ms, bf=bf, last_ms=last_ms)
        ref = plain_video(path)
        v = video(path, fps=fps)
        end_ms = times_ms[-1] + last_ms
        if bf:  # MP4 keeps durations in decode order: the last frame's may be another's
            end_ms = round(v.duration * 1000)
        assert v.duration == pytest.approx(end_ms / 1000)
        expected = player_frames(times_ms, end_ms, fps)
        assert len(v) == len(expected) and v.fps == fps
        assert v.frame_index.tolist() == expected
        np.testing.assert_allclose(v.timestamps, np.arange(len(v)) / fps)
        # consecutive reads of any sizes: the frames a player shows, none missing
        bounds = np.cumsum([0, *cuts])
        bounds = [int(b) for b in bounds if b < len(v)] + [len(v)]
        got = np.concatenate([v[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)])
        np.testing.assert_array_equal(got, ref[expected])
        # random access (backwards) gives the same
        for a in range(len(v) - 1, -1, -3):
            np.testing.assert_array_equal(v[a], ref[expected[a]])


def test_constant_rate_decodes_forward_and_converts_each_frame_once(tmp_path, seeks, monkeypatch):
    # 10 frames at irregular times, read at 50 steps/s: most frames shown several times
    times = [0, 15, 80, 90, 200, 210, 220, 400, 410, 560]
    path = write_vfr_video(tmp_path / "vfr.mp4", times, last_ms=40)
    converted = []
    real = type(video(path))._convert

    def convert(self, reader, frame):
        converted.append(frame.pts)
        return real(self, reader, frame)

    monkeypatch.setattr(type(video(path)), "_convert", convert)
    v = video(path, fps=50)
    assert len(v) == 30  # 0.6 s
    ref = plain_video(path)
    got = np.concatenate([v[a : a + 4] for a in range(0, 30, 4)])
    np.testing.assert_array_equal(got, ref[v.frame_index])
    assert seeks == {"seek": 0, "restart": 0}
    assert len(converted) == len(set(v.frame_index.tolist())) == 9  # frame 1 never shown


def test_constant_rate_drops_frames(video_clips, references):
    v = video(video_clips["x264_gop12_b2"], fps=10)  # 40 frames at 25/s: 1.6 s
    assert len(v) == 16
    assert v.frame_index.tolist() == [int(i * 2.5) for i in range(16)]
    np.testing.assert_array_equal(v[3:9], references["x264_gop12_b2"][v.frame_index[3:9]])
    same = video(video_clips["x264_gop12_b2"], fps=25)
    np.testing.assert_array_equal(same[:], references["x264_gop12_b2"])


def test_at_fps_shares_the_probe_and_pickles_small(video_clips, references):
    v = video(video_clips["x264_gop5_b2"])
    v[0:2]
    slow = v.at_fps(5)
    assert slow._index is v._index and slow._handle is not v._handle
    assert repr(slow) == f"video({str(video_clips['x264_gop5_b2'])!r}, fps=5)"
    assert len(slow) == 8 and len(v) == 40
    copy = pickle.loads(pickle.dumps(slow))
    assert len(pickle.dumps(slow)) < 10_000
    np.testing.assert_array_equal(copy[2:4], references["x264_gop5_b2"][[10, 15]])


def test_constant_rate_arguments(video_clips):
    with pytest.raises(ValueError, match="without fps"):
        video(video_clips["x264_gop5_b2"], fps=10, length=40)
    with pytest.raises(ValueError, match="positive"):
        video(video_clips["x264_gop5_b2"], fps=0)


def test_step_spec_is_known_from_size_or_probe_only(video_clips):
    path = video_clips["x264_gop12_b2"]
    v = video(path, length=40)
    assert v.step_spec() is None and v._index is None  # never demuxed for it
    assert video(path, size=(8, 16), format="gray", length=40).step_spec() == (
        np.dtype(np.uint8),
        (8, 16),
    )
    v = video(path)
    len(v)  # the probe: the frame size with it
    assert v.step_spec() == (np.dtype(np.uint8), (48, 64, 3))
    assert v[0].shape == v.step_spec()[1]


# -- windows -------------------------------------------------------------------------------

WINDOW_CLIPS = ["x264_gop12_b2", "x264_gop5_b2", "mpeg4_gop5_b2", "x264_mkv_b2"]


def _in_window(times, start, stop):
    """What a window keeps of a plain decode: the times in ``[start, stop)``."""
    return (times >= start - 1e-6) & (times < stop - 1e-6)


@pytest.mark.parametrize("name", WINDOW_CLIPS)
@pytest.mark.parametrize("bounds", [(0.0, 0.3), (0.3, 0.9), (0.9, 5.0), (0.41, 0.43)])
def test_window_frames_are_those_of_a_plain_decode_in_it(name, bounds, video_clips):
    from media import plain_video_times

    frames, times = plain_video_times(video_clips[name])
    start, stop = bounds
    want = frames[_in_window(times, start, stop)]
    w = video(video_clips[name], start=start, stop=stop)
    assert len(w) == len(want)
    np.testing.assert_allclose(w.timestamps, times[_in_window(times, start, stop)])
    got = np.concatenate([w[a : a + 4] for a in range(0, len(w), 4)] or [w[:0]])
    np.testing.assert_array_equal(got, want)


def test_adjacent_windows_share_no_frame_and_cover_the_file(video_clips, references):
    path = video_clips["x264_gop12_b2"]
    bounds = [0.0, 0.12, 0.44, 0.8, 1.6]  # frame times are multiples of 0.04
    windows = [video(path, start=a, stop=b) for a, b in zip(bounds, bounds[1:], strict=False)]
    assert [len(w) for w in windows] == [3, 8, 9, 20]
    got = np.concatenate([w[:] for w in reversed(windows)][::-1])
    np.testing.assert_array_equal(got, references["x264_gop12_b2"])
    only_start, only_stop = video(path, start=0.8), video(path, stop=0.12)
    np.testing.assert_array_equal(only_start[:], windows[-1][:])
    np.testing.assert_array_equal(only_stop[:], windows[0][:])


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_window_read_anywhere_seeks_inside_it(data, video_clips, references):
    path = video_clips["x264_gop5_b2"]
    w = video(path, start=0.4, stop=1.4)  # frames 10 to 34
    want = references["x264_gop5_b2"][10:35]
    assert len(w) == 25
    for _ in range(4):
        a = data.draw(st.integers(0, 24))
        b = data.draw(st.integers(a + 1, 25))
        np.testing.assert_array_equal(w[a:b], want[a:b])


def test_window_seeks_to_the_keyframe_before_it(video_clips, references, seeks):
    path = video_clips["x264_gop5_b2"]
    w = video(path, start=0.6, stop=1.2)
    np.testing.assert_array_equal(w[10:], references["x264_gop5_b2"][25:30])
    np.testing.assert_array_equal(w[:3], references["x264_gop5_b2"][15:18])
    assert seeks["seek"] == 2 and seeks["restart"] == 0


@pytest.mark.parametrize("fps", [10.0, 25.0, 60.0])
def test_window_composes_with_fps_and_size(fps, video_clips):
    from media import plain_video_times

    path = video_clips["x264_gop12_b2"]
    frames, times = plain_video_times(path, size=(24, 32))
    start, stop = 0.3, 1.1  # frames 8 (0.32 s) to 27 (1.08 s)
    inside = _in_window(times, start, stop)
    wframes, wtimes = frames[inside], times[inside]
    w = video(path, start=start, stop=stop, fps=fps, size=(24, 32))
    seconds = 1.1 - wtimes[0]  # the last frame lasts until the next (1.12 s), cut at stop
    assert w.duration == pytest.approx(seconds)
    assert len(w) == int(np.ceil(seconds * fps - 1e-6))
    shown = np.searchsorted(wtimes, wtimes[0] + np.arange(len(w)) / fps + 1e-6, "right") - 1
    np.testing.assert_array_equal(w.frame_index, shown)
    got = np.concatenate([w[a : a + 3] for a in range(0, len(w), 3)])
    assert got.shape[1:] == (24, 32, 3)
    np.testing.assert_array_equal(got, wframes[shown])
    np.testing.assert_array_equal(w.at_fps(fps)[:], got)


def _count_decoded(monkeypatch):
    """Record the time of every frame a media reader decodes."""
    from streamseq.io._media import Reader

    decoded = []
    real = Reader.next_frame

    def next_frame(self):
        frame = real(self)
        if frame is not None:
            decoded.append(float(frame.time))
        return frame

    monkeypatch.setattr(Reader, "next_frame", next_frame)
    return decoded


@pytest.mark.parametrize(("name", "gop"), [("x264_gop12_b0", 12), ("x264_gop5_b2", 5)])
def test_a_window_decodes_at_most_a_keyframe_interval_outside_it(name, gop, video_clips,
                                                                 monkeypatch):  # fmt: skip
    decoded = _count_decoded(monkeypatch)
    path = video_clips[name]
    halves = [video(path, start=0.0, stop=0.8), video(path, start=0.8, stop=1.6)]
    for w in reversed(halves):  # the second one first: a seek into the middle
        decoded.clear()
        w[:]
        outside = ~_in_window(np.array(decoded), w.start, w.stop)
        assert len(decoded) - outside.sum() == 20
        # a seek lands on a keyframe at or before the one before the window (x264 puts
        # keyframes of a small gop irregularly): about one keyframe interval, never half
        # the file
        assert outside.sum() <= 2 * gop


def test_windows_of_a_file_share_one_demuxing_pass(video_clips, monkeypatch, tmp_path):
    video_module = sys.modules["streamseq.io.video"]
    path = write_video(tmp_path / "shared.mp4", 40)
    calls = []
    real = video_module._probe

    def probe(*args):
        calls.append(args[0])
        return real(*args)

    monkeypatch.setattr(video_module, "_probe", probe)
    windows = [video(path, start=k * 0.4, stop=(k + 1) * 0.4, length=10) for k in range(4)]
    assert [len(w) for w in windows] == [10] * 4 and calls == []  # planning reads nothing
    windows = [pickle.loads(pickle.dumps(w)) for w in windows]  # as a worker gets them
    assert [w[0].shape for w in windows] == [(48, 64, 3)] * 4
    assert calls == [str(path)]


def test_a_window_shorter_than_its_length_fails_when_read(video_clips):
    w = video(video_clips["x264_gop12_b2"], start=1.2, stop=2.0, length=12)  # 10 frames
    assert len(w) == 12
    w[:10]
    with pytest.raises(SourceError, match="holds 10 frames, fewer than its length 12"):
        w[8:12]


def test_window_arguments_are_checked(video_clips):
    path = video_clips["x264_gop12_b2"]
    with pytest.raises(ValueError, match="empty"):
        video(path, start=1.0, stop=1.0)
    with pytest.raises(ValueError, match="finite"):
        video(path, start=float("nan"))
    assert repr(video(path, start=0.5, stop=1)).endswith("start=0.5, stop=1)")


def test_an_opener_video_with_a_known_length_reads_without_demuxing(video_clips, monkeypatch):
    import functools

    from streamseq import StreamLoader
    from streamseq.io.video import _Video

    demuxed = []
    real = _Video._demux
    monkeypatch.setattr(_Video, "_demux", lambda self: demuxed.append(1) or real(self))
    path = video_clips["x264_gop12_b2"]
    n = len(video(path))
    demuxed.clear()
    opener = functools.partial(video, path)
    loader = StreamLoader([opener], 1, 8, lengths=[n], pin_memory=False)
    frames = np.concatenate([b.data[0][b.valid[0]].numpy() for b in loader])
    np.testing.assert_array_equal(frames, plain_video(path))
    assert demuxed == []  # read from the start, never demuxed
    loader = StreamLoader([opener], 1, 8, lengths=[n + 3], pin_memory=False)
    with pytest.raises(SourceError, match="truncated"):
        list(loader)  # a length the file does not have: an error, not padding
    given = video(path)
    StreamLoader([given], 1, 8, lengths=[n], pin_memory=False)[0]
    assert given.length is None  # a stream the user made is never changed


def test_read_into_declines_what_it_does_not_write(video_clips):
    path = video_clips["x264_gop12_b2"]
    frames = np.empty((3, 48, 64, 3), np.uint8)
    assert video(path).read_into(0, 3, np.empty((3, 48, 64, 3), np.float32)) is None
    assert video(path).read_into(0, 3, np.empty((3, 24, 64, 3), np.uint8)) is None
    assert video(path, fps=10).read_into(0, 3, frames) is None  # frames picked by time
    assert video(path, start=0.2).read_into(0, 3, frames) is None  # a window
    assert video(path, format="gray").read_into(0, 3, frames) is None  # its own step shape
    known = video(path, length=40)  # not demuxed: the decoder tells the frame size
    assert known.read_into(0, 3, frames) == 3 and known._index is None
    np.testing.assert_array_equal(frames, plain_video(path)[0:3])
    small = video(path, size=(24, 40))  # frames resized at decode, written in place
    out = np.empty((2, 24, 40, 3), np.uint8)
    assert small.read_into(4, 6, out) == 2
    np.testing.assert_array_equal(out, plain_video(path, size=(24, 40))[4:6])


def test_read_into_of_a_short_file_names_the_stream(tmp_path):
    import streamseq

    path = write_video(tmp_path / "short.mp4", 12)
    loader = streamseq.StreamLoader([video(str(path), length=20, size=(16, 16))], 1, 8)
    with pytest.raises(SourceError, match="short.mp4"):
        list(loader)


def test_a_state_of_videos_is_refused_by_the_videos_decoded_to_other_steps(video_clips):
    from streamseq import StreamLoader

    paths = [video_clips["x264_gop12_b0"], video_clips["x264_gop5_b2"]]

    def loader(**options):
        return StreamLoader([video(p, **options) for p in paths], batch_size=2, tbins=4)

    saving = loader(size=(48, 64))
    next(iter(saving))
    state = saving.state_dict()
    others = [
        {"size": (24, 32)},
        {"size": (48, 64), "format": "gray"},
        {"size": (48, 64), "fps": 25},  # (the same frames, but told apart: another grid)
    ]
    for options in others:
        with pytest.raises(ValueError, match="the streams' reader options"):
            loader(**options).load_state_dict(state)
    same = loader(size=(48, 64), threads=2)  # (threads change no step)
    same.load_state_dict(state)
    assert [b.data.tolist() for b in same] == [b.data.tolist() for b in list(saving)[1:]]
