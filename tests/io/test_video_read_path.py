"""The read path of video streams: frames written straight into the rows of a batch, and
frames located by the timestamp expected before any search."""

import av
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from media import (
    count_seeks,
    plain_video,
    truncate,
    write_resized_video,
    write_vfr_video,
    write_video,
)

from streamseq.errors import SourceError
from streamseq.io import video
from streamseq.io._video_frames import copy_frame, plane_view
from streamseq.io.video import _Probe

# -- one copy a frame --------------------------------------------------------------------

PACKED_CHANNELS = {"rgb24": 3, "bgr24": 3, "rgba": 4, "bgra": 4, "argb": 4, "abgr": 4, "gray": 1}


@settings(max_examples=40, deadline=None)
@given(
    format=st.sampled_from([*PACKED_CHANNELS, "gray8", "yuv420p"]),
    height=st.integers(1, 21),
    width=st.integers(1, 37),
    seed=st.integers(0, 2**16),
)
def test_copy_frame_writes_the_bytes_of_to_ndarray(format, height, width, seed):
    if format == "yuv420p":  # even sizes only (as streamseq's yuv420p frames)
        height, width = 2 * height, 2 * width
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    frame = av.VideoFrame.from_ndarray(image, format="rgb24").reformat(format=format)
    expected = frame.to_ndarray()
    out = np.full(expected.shape, 7, np.uint8)
    copy_frame(frame, out, format)
    np.testing.assert_array_equal(out, expected)
    # into the rows of a batch that are not contiguous (every other row of a larger one)
    rows = np.full((2 * expected.shape[0], *expected.shape[1:]), 7, np.uint8)
    copy_frame(frame, rows[::2], format)
    np.testing.assert_array_equal(rows[::2], expected)
    assert (rows[1::2] == 7).all()


def test_copy_frame_refuses_a_shape_as_assignment_does():
    frame = av.VideoFrame.from_ndarray(np.zeros((4, 6, 3), np.uint8), format="rgb24")
    with pytest.raises(ValueError):
        copy_frame(frame, np.zeros((4, 5, 3), np.uint8), "rgb24")
    yuv = frame.reformat(format="yuv420p")
    out = np.full((6, 6), 7, np.uint8)
    copy_frame(yuv, out, "yuv420p")
    np.testing.assert_array_equal(out, yuv.to_ndarray())
    with pytest.raises(ValueError):
        copy_frame(yuv, np.zeros((6, 4), np.uint8), "yuv420p")


@pytest.fixture(scope="module")
def clip(video_clips):
    return video_clips["x264_gop5_b2"]


@pytest.fixture(scope="module")
def plain(clip):
    cache = {}

    def get(size, format):
        if (size, format) not in cache:
            cache[size, format] = plain_video(clip, size=size, format=format)
        return cache[size, format]

    return get


@settings(
    max_examples=16, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    format=st.sampled_from(["rgb24", "gray", "bgra", "yuv420p"]),
    size=st.one_of(st.none(), st.tuples(st.integers(3, 30), st.integers(3, 41))),
    start=st.integers(0, 36),
    count=st.integers(1, 9),
)
def test_read_into_gives_the_bytes_of_to_ndarray(clip, plain, format, size, start, count):
    """Odd widths (rows padded in the frame), gray and colour, resized or not."""
    if format == "yuv420p" and size is not None:
        size = (2 * (size[0] // 2 + 1), 2 * (size[1] // 2 + 1))
    expected = plain(size, format)[start : start + count]
    v = video(clip, size=size, format=format)
    out = np.full(expected.shape, 7, np.uint8)
    assert v.read_into(start, start + len(expected), out) == len(expected)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(v[start : start + count], expected)  # the plain read too


# -- locating frames: the expected one first, the search when it is not ------------------


def searched(probe, frame):
    """Where the probe's search alone locates a frame (the lookup before the shortcut)."""
    if not probe.exact or frame.pts is None:
        return None
    index = int(np.searchsorted(probe.pts, frame.pts))
    return index if index < len(probe.pts) and probe.pts[index] == frame.pts else None


class Frame:
    def __init__(self, pts):
        self.pts = pts


@settings(max_examples=60, deadline=None)
@given(
    pts=st.lists(st.integers(-50, 400), min_size=1, max_size=30, unique=True).map(sorted),
    asked=st.one_of(st.none(), st.integers(-60, 420)),
    expected=st.one_of(st.none(), st.integers(-3, 33)),
    exact=st.booleans(),
)
def test_locate_with_a_hint_finds_what_the_search_finds(pts, asked, expected, exact):
    n = len(pts)
    probe = _Probe(
        np.asarray(pts, np.int64),
        np.zeros(1, np.int64),
        np.zeros(1, np.int64),
        np.arange(n, dtype=np.float64),
        25.0,
        2,
        2,
        exact,
    )
    frame = Frame(asked)
    assert probe.locate(frame, expected) == searched(probe, frame)
    for k in (0, n - 1):  # a frame of the table, whatever the hint says
        frame = Frame(pts[k])
        assert probe.locate(frame, expected) == (k if exact else None)


def reads_with(locate, monkeypatch, make, reads):
    """Frames, errors, seeks and restarts of ``reads`` with ``_Probe.locate`` as given."""
    monkeypatch.setattr(_Probe, "locate", locate)
    counts = count_seeks(monkeypatch)
    v, results = make(), []
    for a, b, into in reads:
        try:
            if into:
                out = np.full((b - a, 48, 64, 3), 7, np.uint8)
                results.append((v.read_into(a, b, out), out))
            else:
                results.append(v[a:b])
        except SourceError as e:
            results.append(str(e))
    monkeypatch.undo()
    return results, counts, v._trusted


def damaged_table(clip, index):
    """The clip's stream, its timestamp table altered at ``index`` (a frame it lacks)."""

    def make():
        v = video(clip)
        probe = v.probe()
        pts = probe.pts.copy()
        pts[index] += 1  # between two frames (ticks of 512): no frame has it
        v._index = _Probe(pts, probe.keys, probe.seek_ts, probe.times, probe.fps,
                          probe.height, probe.width, probe.exact, probe.end)  # fmt: skip
        return v

    return make


@pytest.mark.parametrize("case", ["lying_timestamps", "gaps", "table_lacks_a_frame", "short"])
@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    reads=st.lists(
        st.tuples(st.integers(0, 39), st.integers(1, 8), st.booleans()), min_size=1, max_size=6
    )
)
def test_reads_locate_frames_as_the_search_alone_did(
    case, video_clips, tmp_path_factory, monkeypatch, reads
):
    """A file whose timestamps do not identify its frames, or with gaps in them, or a
    table that lacks a frame, or a truncated file: the same frames, the same errors,
    the same seeks and restarts as with the search alone."""
    if case == "lying_timestamps":  # AVI with B-frames: timestamps in decode order
        path = video_clips["x264_avi_b2"]
        make = lambda: video(path)  # noqa: E731
    elif case == "gaps":
        folder = tmp_path_factory.mktemp("gaps")
        times = [0, 40, 80, 500, 540, 1400, 1440, 1480, 3000] + [3040 + 40 * k for k in range(31)]
        path = str(write_vfr_video(folder / "gaps.mp4", times, bf=2, last_ms=40))
        make = lambda: video(path)  # noqa: E731
    elif case == "table_lacks_a_frame":
        make = damaged_table(video_clips["x264_gop5_b2"], 17)
    else:
        folder = tmp_path_factory.mktemp("short")
        path = str(truncate(video_clips["x264_gop12_b2"], folder / "short.mp4", 0.6))
        make = lambda: video(path, length=40)  # noqa: E731
    reads = [(a, min(a + n, 40), into) for a, n, into in reads if a < 40]

    def search_only(probe, frame, expected=None):
        return searched(probe, frame)

    old = reads_with(search_only, monkeypatch, make, reads)
    new = reads_with(_Probe.locate, monkeypatch, make, reads)
    assert old[1:] == new[1:]  # seeks, restarts, trust in the timestamps
    assert len(old[0]) == len(new[0])
    for was, now in zip(old[0], new[0], strict=True):
        if isinstance(was, str):
            assert now == was
        elif isinstance(was, tuple):
            assert now[0] == was[0]
            np.testing.assert_array_equal(now[1], was[1])
        else:
            np.testing.assert_array_equal(now, was)


# -- frames that change size within a file ---------------------------------------------


@pytest.fixture(scope="module")
def resized(tmp_path_factory):
    """6 frames of 16x32, then 6 of 1x32 (one row: it broadcasts into 16)."""
    folder = tmp_path_factory.mktemp("resized")
    return str(write_resized_video(folder / "resized.mkv", [((16, 32), 6), ((1, 32), 6)]))


@pytest.mark.parametrize("format", ["rgb24", "gray"])
def test_read_into_refuses_a_frame_of_another_size(resized, format):
    """A frame whose size is not the stream's is an error naming the file and the frame,
    never a row broadcast into the batch."""
    v = video(resized, format=format)
    v.probe()
    shape = v.step_spec()[1]
    assert shape[:2] == (16, 32)
    out = np.full((len(v), *shape), 7, np.uint8)
    with pytest.raises(SourceError, match=r"resized\.mkv.*frame 6 is 1x32, not 16x32"):
        v.read_into(0, len(v), out)
    with av.open(resized) as container:
        first = [f.to_ndarray(format=format) for f in container.decode(video=0)][:6]
    np.testing.assert_array_equal(out[:6], np.stack(first))
    v = video(resized, format=format)
    assert v.read_into(0, 4, out[:4]) == 4
    with pytest.raises(SourceError, match=r"frame 6 is 1x32, not 16x32"):
        v.read_into(4, 8, out[4:8])  # (decoding on: the frames after 5 change size)


def test_reads_refuse_frames_of_other_sizes_by_name(resized):
    """The plain read and a read at a constant rate say which frames differ, and where."""
    with pytest.raises(SourceError, match=r"resized\.mkv.*frame 6 is 1x32, not 16x32"):
        video(resized)[4:8]
    with pytest.raises(SourceError, match=r"resized\.mkv.*frame 7 is 1x32, not 16x32"):
        video(resized, fps=10)[:]  # (frames 0, 2, 5, 7, ... shown: 7 is the first of 1x32)
    with pytest.raises(SourceError, match=r"frame 6 is 1x32, not 16x32.*size="):
        video(resized, format="yuv420p", size=None)[4:8]
    # resized to one size, every frame is read: the sizes of the file do not matter
    expected = plain_video(resized, size=(4, 6))
    v = video(resized, size=(4, 6))
    np.testing.assert_array_equal(v[:], expected)
    out = np.full(expected.shape, 7, np.uint8)
    assert v.read_into(0, len(v), out) == len(v)
    np.testing.assert_array_equal(out, expected)


# -- colour with an opaque alpha -----------------------------------------------------------


@pytest.mark.parametrize("format", ["rgba", "bgra", "argb", "abgr"])
@pytest.mark.parametrize(
    "codec,width", [("libx264", 18), ("libx264", 20), ("libx264", 34), ("libx264", 64),
                    ("libvpx-vp9", 25), ("libvpx-vp9", 9)]
)  # fmt: skip
def test_alpha_formats_are_the_colour_of_rgb24_and_an_opaque_alpha(tmp_path, format, codec, width):
    """Frames without alpha read in a format with alpha: the colour of rgb24 (bgr24),
    alpha 255, every column. (FFmpeg's unscaled yuv conversion to these formats leaves the
    last columns of some widths unwritten on x86, odd ones among them: whatever memory
    held, different from read to read.)"""
    path = write_video(tmp_path / "clip.mkv", 6, codec, "matroska", 3, 0, (10, width))
    colour = plain_video(path, format="bgr24" if "bgr" in format else "rgb24")
    expected = np.full((*colour.shape[:3], 4), 255, np.uint8)
    expected[..., slice(1, 4) if format[0] == "a" else slice(0, 3)] = colour
    for _ in range(3):  # (garbage differs from read to read: every one must be right)
        np.testing.assert_array_equal(video(path, format=format)[:], expected)
        out = np.full(expected.shape, 7, np.uint8)
        assert video(path, format=format).read_into(0, len(out), out) == len(out)
        np.testing.assert_array_equal(out, expected)
        resized = plain_video(path, size=(7, width - 3), format=format)  # (scaled: written)
        np.testing.assert_array_equal(video(path, size=(7, width - 3), format=format)[:], resized)


@pytest.mark.parametrize("format", ["rgba", "bgra", "argb", "abgr"])
@pytest.mark.parametrize("width", [17, 19, 49])
def test_yuva420p_reads_as_its_colour_and_its_alpha_plane(tmp_path, format, width):
    """Frames with alpha (yuva420p, as FFV1 stores it) in a format with alpha: the colour
    of rgb24 (bgr24) and the frame's alpha plane, every column (FFmpeg's unscaled
    conversion leaves the last column of some widths unwritten on x86)."""
    path = str(tmp_path / "alpha.mkv")
    rng = np.random.default_rng(width)
    with av.open(path, "w", format="matroska") as out:
        stream = out.add_stream("ffv1", rate=25)
        stream.height, stream.width, stream.pix_fmt = 6, width, "yuva420p"
        for _ in range(4):
            image = rng.integers(0, 256, (6, width, 4), dtype=np.uint8)
            out.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgba")))
        out.mux(stream.encode())
    with av.open(path) as container:
        alpha = np.stack(
            [plane_view(f.planes[3], 6, width, 1).copy() for f in container.decode(video=0)]
        )
    colour = plain_video(path, format="bgr24" if "bgr" in format else "rgb24")
    expected = np.empty((*colour.shape[:3], 4), np.uint8)
    expected[..., slice(1, 4) if format[0] == "a" else slice(0, 3)] = colour
    expected[..., 0 if format[0] == "a" else 3] = alpha
    for _ in range(3):  # (garbage differs from read to read: every one must be right)
        np.testing.assert_array_equal(video(path, format=format)[:], expected)
        out = np.full(expected.shape, 7, np.uint8)
        assert video(path, format=format).read_into(0, len(out), out) == len(out)
        np.testing.assert_array_equal(out, expected)


@settings(max_examples=30, deadline=None)
@given(
    source=st.sampled_from(["yuv420p", "yuvj420p", "yuv422p", "nv12", "yuv444p", "yuva420p"]),
    format=st.sampled_from([*PACKED_CHANNELS, "yuv420p"]),
    width=st.integers(1, 40).map(lambda k: 2 * k),
    odd=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_convert_into_writes_every_byte(source, format, width, odd, seed):
    """After memory filled with different bytes is freed, a conversion at the frame's own
    size writes the same array: nothing of what the memory held is left (the converted
    frame is allocated where such a freed frame was, most often)."""
    from av.video.reformatter import VideoReformatter

    from streamseq.io._video_frames import convert_into

    width -= odd and format != "yuv420p" and source != "nv12"
    image = np.random.default_rng(seed).integers(0, 256, (4, width, 4), dtype=np.uint8)
    frame = av.VideoFrame.from_ndarray(image, format="rgba").reformat(format=source)
    shape = frame.reformat(format=format).to_ndarray().shape
    outs = []
    for fill in (0, 255, 7):
        freed = av.VideoFrame(width, 4, format)
        for plane in freed.planes:
            plane.update(bytes([fill]) * plane.buffer_size)
        del freed
        out = np.full(shape, fill, np.uint8)
        convert_into(VideoReformatter().reformat, frame, None, None, format, out)
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])
