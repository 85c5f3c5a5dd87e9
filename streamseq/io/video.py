"""Video files as streams of decoded frames (PyAV).

The length and a table of presentation timestamps come from one demuxing pass over the
file (packets are read, never decoded). Reading continues the open decoder when the
requested frames come next, and otherwise seeks to the nearest earlier keyframe and decodes
forward, identifying frames by their timestamp (the skeleton of :mod:`streamseq.io._media`).
Frame ``i`` is always the ``i``-th frame that a plain decode of the file from its start
gives: whenever the timestamps of a file turn out not to identify its frames reliably,
reading falls back to decoding from the start and counting.

At a constant rate (``video(path, fps=F)``), step ``i`` is the frame a player shows at
time ``i / F`` from the first frame: the frames that step ``a:b`` shows are decoded once,
forward, each converted once however many steps show it (the last one is kept for the
next read, which may show it again); the frames no step shows are decoded, never
converted.

A window (``video(path, start=a, stop=b)``) is the frames of the file whose timestamps lie
in ``[a, b)`` seconds, as a stream of its own: its first read seeks to the keyframe before
its first frame, and the demuxing pass of the file is made once per process and shared
by all its windows (:data:`CACHED_PROBES` files are kept), so that many windows of one
long file cost one pass, and each decodes little outside itself.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from streamseq._redact import redacted_repr
from streamseq.errors import SourceError
from streamseq.io._media import MediaSource, Reader, open_media, packets
from streamseq.io._options import read_options, reads
from streamseq.io._video_frames import CHANNELS as _CHANNELS
from streamseq.io._video_frames import convert_into, opaque_colour
from streamseq.io.remote import Remote

#: seconds within which a frame counts as shown at a time (float rounding of timestamps)
TIME_TOLERANCE = 1e-6


def start_us(seconds: Any) -> Any:
    """Where a window starts (seconds, or an array of them) in whole microseconds.

    With its file, what names a video window across runs: a list's ``video(path,
    start=...)`` and a manifest's row name it alike.

    Example:
        >>> start_us(0.2), start_us(np.array([0.0, 1.5])).tolist()
        (200000, [0.0, 1500000.0])
    """
    at = np.round(np.asarray(seconds, np.float64) * 1e6)
    return int(at) if at.ndim == 0 else at


#: files whose demuxing pass a process keeps for the windows of the file (the most recent)
CACHED_PROBES = 16


@dataclass(frozen=True)
class _Probe:
    """What one demuxing pass tells about a video stream."""

    pts: np.ndarray  # presentation timestamps in presentation order (frame i has pts[i])
    keys: np.ndarray  # frame indices of the keyframes, increasing
    seek_ts: np.ndarray  # timestamp to seek to for each keyframe
    times: np.ndarray  # seconds of each frame, in presentation order (read-only)
    fps: float  # average frame rate
    height: int
    width: int
    exact: bool  # timestamps are present and distinct: they can identify frames
    end: float = math.nan  # seconds: end of the last frame (NaN: no frame duration known)

    def __len__(self) -> int:
        return len(self.times)

    def locate(self, frame: Any, expected: int | None = None) -> int | None:
        """Index of a decoded frame, from its timestamp (``None``: it tells none).

        ``expected``: the index the frame should have (the one after the previous
        frame), checked first; the timestamps are searched only when it is not that one.

        Example:
            >>> from types import SimpleNamespace as Frame
            >>> p = _Probe(np.array([0, 512, 1024]), np.array([0]), np.array([0]),
            ...            np.array([0.0, 0.04, 0.08]), 25.0, 2, 2, True)
            >>> p.locate(Frame(pts=512), 1), p.locate(Frame(pts=1024), 1)
            (1, 2)
            >>> p.locate(Frame(pts=100)), p.locate(Frame(pts=None), 0)
            (None, None)
        """
        pts = frame.pts
        if not self.exact or pts is None:
            return None
        if expected is not None and 0 <= expected < len(self.pts) and self.pts[expected] == pts:
            return expected  # (timestamps are distinct: no other frame has it)
        index = int(np.searchsorted(self.pts, pts))
        return index if index < len(self.pts) and self.pts[index] == pts else None


def _probe(path: str, stream_index: int, remote: Remote | None = None) -> _Probe:
    container, stream = open_media(path, "video", stream_index, remote)
    try:
        pts: list[int | None] = []
        keys: list[bool] = []
        seek_ts: list[int | None] = []
        end = None  # end time of the last frame, in stream time_base
        for packet in packets(path, container, stream):
            pts.append(packet.pts)
            keys.append(bool(packet.is_keyframe))
            ts = [t for t in (packet.pts, packet.dts) if t is not None]
            seek_ts.append(min(ts) if ts else None)
            if packet.pts is not None and packet.duration:
                stop = packet.pts + packet.duration
                end = stop if end is None else max(end, stop)
        if not stream.frames:  # no frame count: compare what the packets cover with the duration
            missing = _missing_time(container, stream, end, len(pts))
            if missing is not None:
                raise SourceError(path, f"truncated: {len(pts)} frames cover {missing}")
        height, width = stream.codec_context.height, stream.codec_context.width
        rate, time_base, start = stream.average_rate, stream.time_base, stream.start_time
    finally:
        container.close()
    if not pts:
        raise SourceError(path, "no video frame")
    times, fps = _times(pts, time_base, rate, start)
    end_time = math.nan if end is None or None in pts else float(end * time_base)
    exact = None not in pts and len(set(pts)) == len(pts) and None not in seek_ts
    if exact:
        order = np.argsort(np.asarray(pts, np.int64), kind="stable")
        sorted_pts = np.asarray(pts, np.int64)[order]
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        is_key = np.asarray(keys, bool)
        key_idx = rank[is_key]
        key_seek = np.asarray(seek_ts, np.int64)[is_key]
        by_idx = np.argsort(key_idx, kind="stable")
        key_idx, key_seek = key_idx[by_idx], key_seek[by_idx]
    else:
        sorted_pts = np.zeros(len(pts), np.int64)
        key_idx = np.zeros(0, np.int64)
        key_seek = np.zeros(0, np.int64)
    return _Probe(sorted_pts, key_idx, key_seek, times, fps, height, width, exact, end_time)


#: (path, stream, file state) -> probe, in this process: shared by the windows of a file
_PROBES: OrderedDict[tuple[str, int, str], _Probe] = OrderedDict()


def _shared_probe(path: str, stream_index: int, state: Any, remote: Remote | None) -> _Probe:
    """The probe of a file, made once per process for every window of it.

    The key holds what identified the file when its sources were made: a file that
    changed since is probed anew (and its sources find the change).
    """
    key = (path, stream_index, json.dumps(state, sort_keys=True, default=str))
    probe = _PROBES.get(key)
    if probe is None:
        probe = _probe(path, stream_index, remote)
        _PROBES[key] = probe
        while len(_PROBES) > CACHED_PROBES:
            _PROBES.popitem(last=False)
    else:
        _PROBES.move_to_end(key)
    return probe


def _times(
    pts: list[int | None], time_base: Any, rate: Any, start: int | None
) -> tuple[np.ndarray, float]:
    """Seconds of every frame in presentation order, and the average frame rate.

    The times are the timestamps times the time base; a file with frames that have no
    timestamp gets times spaced by the average frame rate from the start of the stream.
    The rate is the one the container gives, else the one of the timestamps (NaN when
    neither tells).
    """
    fps = float(rate) if rate else float("nan")
    if None in pts:
        times = float((start or 0) * time_base) + np.arange(len(pts)) / fps
    else:
        times = np.sort(np.asarray(pts, np.float64)) * time_base.numerator / time_base.denominator
        if not rate and times[-1] > times[0]:
            fps = (len(times) - 1) / (times[-1] - times[0])
    times.flags.writeable = False
    return times, fps


def _missing_time(container: Any, stream: Any, end: int | None, count: int) -> str | None:
    """Describe how much of the declared duration the frames miss, if more than 2 frames."""
    if end is None or count < 2:
        return None
    tb = stream.time_base
    start = stream.start_time or 0
    if stream.duration:
        declared = float(stream.duration * tb)
    elif container.duration and len(container.streams) == 1:
        declared = container.duration / av.time_base - float(start * tb)
    else:
        return None
    covered = float((end - start) * tb)
    frame = covered / count
    if covered < declared - 2 * frame:
        return f"{covered:.3f} s of the {declared:.3f} s declared"
    return None


def duration(times: np.ndarray, end: float, fps: float) -> float:
    """Seconds from the first frame to the end of the last one.

    The last frame ends at ``end`` when the file tells (its timestamp plus its duration),
    else one mean frame interval after its timestamp, else (a single frame) one frame of
    the average rate ``fps``; NaN when nothing tells.

    Example:
        >>> duration(np.array([0.0, 0.25, 0.75]), math.nan, 4.0)
        1.125
        >>> duration(np.array([1.0]), 1.5, 25.0), duration(np.array([1.0]), math.nan, 25.0)
        (0.5, 0.04)
    """
    if not math.isnan(end):
        return end - float(times[0])
    if len(times) > 1:
        return float(times[-1] - times[0]) * len(times) / (len(times) - 1)
    return 1.0 / fps if fps > 0 else math.nan


def grid_steps(seconds: float, fps: float) -> int:
    """The number of times ``i / fps`` (``i >= 0``) before ``seconds``.

    A time less than a millionth of a step before ``seconds`` counts as at it.

    Example:
        >>> grid_steps(1.0, 10.0), grid_steps(1.01, 10.0), grid_steps(0.45, 10.0)
        (10, 11, 5)
    """
    return max(0, math.ceil(seconds * fps - 1e-6))


def decode_threads(threads: int | None) -> int:
    """The number of codec threads a decoder gets (``0``: FFmpeg's choice, one per core).

    ``None`` fits where it runs: one thread in a process started by :mod:`multiprocessing`
    (a worker: the processes already share the cores, and more threads only
    oversubscribe them), FFmpeg's choice in the main process.

    Example:
        >>> decode_threads(None), decode_threads(2)
        (0, 2)
    """
    if threads is not None:
        return threads
    return 1 if multiprocessing.parent_process() is not None else 0


def _first_at(times: np.ndarray, seconds: float) -> int:
    """The first frame whose time is not before ``seconds`` (within :data:`TIME_TOLERANCE`)."""
    return int(np.searchsorted(times, seconds - TIME_TOLERANCE, side="left"))


def shown_frames(times: np.ndarray, times_asked: np.ndarray) -> np.ndarray:
    """The frame a player shows at each time: the last one whose timestamp is not after it.

    Args:
        times: seconds of the frames, sorted.
        times_asked: seconds to look up; a frame up to :data:`TIME_TOLERANCE` after a time
            counts as shown at it.

    Returns:
        The frame index at each time (int64, -1 before the first frame).

    Example:
        >>> shown_frames(np.array([0.0, 0.04, 0.1]), np.array([0.0, 0.05, 0.1, 0.2]))
        array([0, 1, 2, 2])
    """
    index = np.searchsorted(times, np.asarray(times_asked) + TIME_TOLERANCE, side="right")
    return index.astype(np.int64) - 1


class _Video(MediaSource):
    kind = "video"

    def __init__(
        self,
        path: str,
        size: tuple[int, int] | None,
        format: str,
        length: int | None,
        stream_index: int,
        storage_options: dict[str, Any] | None = None,
        fps: float | None = None,
        threads: int | None = None,
        start: float | None = None,
        stop: float | None = None,
    ):
        if format not in _CHANNELS:
            raise ValueError(f"format must be one of {sorted(_CHANNELS)}, got {format!r}")
        if threads is not None and (isinstance(threads, bool) or int(threads) != threads):
            raise ValueError(f"threads must be an integer >= 0 or None, got {threads!r}")
        if threads is not None and threads < 0:
            raise ValueError(f"threads must be an integer >= 0 or None, got {threads!r}")
        if format == "yuv420p" and size is not None and (size[0] % 2 or size[1] % 2):
            raise ValueError(f"yuv420p frames have an even height and width, got size={size}")
        if fps is not None and not fps > 0:
            raise ValueError(f"fps must be positive, got {fps}")
        if fps is not None and length is not None:
            raise ValueError("length counts the frames of the file: give it without fps")
        for name, bound in (("start", start), ("stop", stop)):
            if bound is not None and not math.isfinite(bound):
                raise ValueError(f"{name} must be a finite number of seconds, got {bound}")
        if start is not None and stop is not None and not start < stop:
            raise ValueError(f"the window is empty: start={start} is not before stop={stop}")
        super().__init__(path, stream_index, length, storage_options)
        self.start = None if start is None else float(start)
        self.stop = None if stop is None else float(stop)
        self.size = None if size is None else (int(size[0]), int(size[1]))
        self.format = format
        self.step_rate = None if fps is None else float(fps)  # steps per second, if constant
        self.threads = None if threads is None else int(threads)

    @property
    def read_options(self) -> str:
        """How it reads (:func:`~streamseq.io._options.read_options`): size, format, rate."""
        options = {"size": self.size, "format": self.format, "fps": self.step_rate}
        return read_options("video", {**options, "stream_index": self.stream_index})

    @property
    def file_offset(self) -> int | None:
        """Where its window starts in the file, in whole microseconds (None: no ``start``).

        With the file, what names the stream across runs, as a manifest's row names it.
        """
        return None if self.start is None else start_us(self.start)

    def __repr__(self) -> str:
        rate = "" if self.step_rate is None else f", fps={self.step_rate:g}"
        window = "" if self.start is None else f", start={self.start:g}"
        window += "" if self.stop is None else f", stop={self.stop:g}"
        return f"video({redacted_repr(self.path)}{window}{rate})"

    def __len__(self) -> int:
        if self.step_rate is not None:
            return grid_steps(self.duration, self.step_rate)
        if self.length is not None:
            return self.length
        first, end = self.window_frames
        return end - first

    def made_to_read(self, length: int | None = None) -> None:
        """As :meth:`Source.made_to_read`; a video read from its first frame takes ``length``.

        The length the loader knows becomes the ``length=`` of a video made by an opener
        without one (not a window, nor at a constant rate, nor demuxed yet): its first
        read decodes from the start of the file without a demuxing pass over it first
        (a pass that reads a whole file at a URL). A seek still demuxes it; fewer frames
        than that length are an error when the missing frames are read.
        """
        super().made_to_read(length)
        plain = self.step_rate is None and not self.windowed and self._index is None
        if length is not None and self.length is None and plain:
            self.length = int(length)

    @property
    def windowed(self) -> bool:
        """Whether the stream is a window of the file (``start`` or ``stop`` given)."""
        return self.start is not None or self.stop is not None

    @property
    def window_frames(self) -> tuple[int, int]:
        """The frames of the file in the window: ``(first, end)`` (all of them without one).

        The frames of a plain decode whose timestamps lie in ``[start, stop)`` (within
        :data:`TIME_TOLERANCE`, the same for both bounds: windows that share a bound
        share no frame). The first use demuxes the file.
        """
        times = self.probe().times
        first = 0 if self.start is None else _first_at(times, self.start)
        end = len(times) if self.stop is None else _first_at(times, self.stop)
        return first, max(first, end)

    def _window_times(self) -> np.ndarray:
        first, end = self.window_frames
        return self.probe().times[first:end]

    def at_fps(self, fps: float) -> _Video:
        """The same video at a constant rate: what :func:`video` with ``fps`` gives.

        The copy shares what the file was probed for (no second demuxing pass) and opens
        its own decoder.

        Example:
            >>> v = video("clip.mp4")  # doctest: +SKIP
            >>> v.at_fps(10)  # doctest: +SKIP
            video('clip.mp4', fps=10)
        """
        if not fps > 0:
            raise ValueError(f"fps must be positive, got {fps}")
        self.probe()
        return self.replace(step_rate=float(fps), length=None)

    @property
    def duration(self) -> float:
        """Seconds from the first frame to the end of the last one.

        The end of the last frame is its timestamp plus its duration when the file tells
        it (packet durations), else one mean frame interval after its timestamp. With
        ``fps``, the steps are the times ``i / fps`` (from the first frame) before it.
        """
        info = self.probe()
        if not self.windowed:
            return duration(info.times, info.end, info.fps)
        first, end = self.window_frames
        if first == end:
            return 0.0
        if end < len(info.times):  # the last frame lasts until the next one of the file
            last = float(info.times[end])
        else:
            last = float(info.times[0]) + duration(info.times, info.end, info.fps)
        if self.stop is not None:
            last = min(last, self.stop)
        return last - float(info.times[first])

    @property
    def frame_index(self) -> np.ndarray:
        """The frame of the file that every step shows (int64).

        ``arange(len(self))`` without ``fps``; with it, the last frame whose timestamp is
        not after the step's time (frames repeated or dropped as the timestamps say).
        """
        if self.step_rate is None:
            return np.arange(len(self), dtype=np.int64)
        return self._shown(0, len(self))

    def _shown(self, a: int, b: int) -> np.ndarray:
        """The frames (of the window) that steps ``a`` to ``b`` show, at the constant rate."""
        times = self._window_times()
        return np.maximum(shown_frames(times, times[0] + np.arange(a, b) / self.step_rate), 0)

    @property
    def timestamps(self) -> np.ndarray:
        """Presentation time of every step, in seconds (read-only float64).

        ``timestamps[i]`` is the time of frame ``i`` (presentation order): its timestamp
        times the time base of the stream, so the first is the start time of the stream
        (often 0). A file whose frames lack timestamps gets times spaced by :attr:`fps`.
        With ``fps``, the time of step ``i``: the first frame's plus ``i / fps``.
        The first use demuxes the file, unless :func:`len` already did.
        """
        times = self._window_times() if self.windowed else self.probe().times
        if self.step_rate is None:
            return times
        if not len(times):
            return times
        grid = times[0] + np.arange(len(self)) / self.step_rate
        grid.flags.writeable = False
        return grid

    @property
    def fps(self) -> float:
        """The average frame rate of the stream, in frames per second (``fps`` if given).

        The container's average rate (FFmpeg's ``avg_frame_rate``), else the one of the
        timestamps; NaN when neither tells.
        """
        return self.probe().fps if self.step_rate is None else self.step_rate

    def _frame_shape(self, decoded: tuple[int, int] | None = None) -> tuple[int, ...]:
        """The shape of a frame; ``decoded``: the decoder's (height, width), if known."""
        if self.size is not None:
            h, w = self.size
        else:
            h, w = decoded if decoded is not None else (self.probe().height, self.probe().width)
        if self.format == "yuv420p":
            if h % 2 or w % 2:
                raise SourceError(self.path, f"{h}x{w} frames cannot be yuv420p: give size=")
            return (h + h // 2, w)
        c = _CHANNELS[self.format]
        return (h, w) if c is None else (h, w, c)

    def _empty(self) -> np.ndarray:
        return np.zeros((0, *self._frame_shape()), np.uint8)

    def step_spec(self) -> tuple[np.dtype, tuple[int, ...]] | None:
        """``uint8`` frames of ``size`` (or of the size the probe found) in ``format``.

        ``None`` before the demuxing pass (:meth:`probe`) when no ``size`` was given:
        the size of the frames is not read for this.
        """
        if self.size is None and self._index is None:
            return None
        return np.dtype(np.uint8), self._frame_shape()

    def _read(self, reader: Reader, a: int, b: int) -> np.ndarray:
        offset = 0
        if self.windowed:
            offset, end = self.window_frames
            if self.step_rate is None and b > end - offset:
                raise SourceError(
                    self.path,
                    f"the window [{self.start}, {self.stop}) s holds {end - offset} frames, "
                    f"fewer than its length {len(self)}",
                )
        if self.step_rate is None:
            return super()._read(reader, a + offset, b + offset)
        shown = self._shown(a, b) + offset
        first, last = int(shown[0]), int(shown[-1])
        arrays: dict[int, np.ndarray] = {}
        held = getattr(reader, "shown", None)  # the last frame the previous read showed
        if held is not None and held[0] == first:
            arrays[first] = held[1]
        start = first + len(arrays)
        if start <= last:
            reader, chunks = self._decoded(reader, start, last + 1)
            wanted = set(shown.tolist())
            frames = [f for c in chunks for f in c]
            if len(frames) < last + 1 - start:  # ``_fill`` raised otherwise: a guard
                raise SourceError(self.path, self._truncated(start + len(frames), last + 1))
            size = held[2] if held is not None else (frames[0].height, frames[0].width)
            for k, frame in enumerate(frames, start):
                if k in wanted:
                    if self.size is None:
                        self._check_size(frame, k, size)
                    arrays[k] = self._convert(reader, frame)
                    size = (frame.height, frame.width)
        else:
            size = held[2]
        reader.shown = (last, arrays[last], size)  # (size: the decoded frame's)
        return np.stack([arrays[k] for k in shown.tolist()])

    def read_into(self, start: int, stop: int, out: np.ndarray) -> int | None:
        """Convert frames ``start:stop`` straight into ``out`` (the rows of a batch).

        Each frame is converted by the reused reformatter and its planes copied once,
        into ``out`` (:func:`~streamseq.io._video_frames.convert_into`): no array of the
        chunk nor of the frame. Only for frames read one by one (not at
        ``fps=``, nor a window) of the dtype and shape of ``out``; ``None`` otherwise.
        """
        if self.step_rate is not None or self.windowed or out.dtype != np.uint8:
            return None
        if not 0 <= start < stop <= len(self) or out.shape[:1] != (stop - start,):
            return None
        with self._lock():
            reader = self._handle.get(self._open_checked)
            decoded = None
            if self.size is None and self._index is None:  # (not demuxed: the decoder's)
                codec = reader.stream.codec_context
                decoded = (codec.height, codec.width)
            try:
                shape = self._frame_shape(decoded)
            except SourceError:  # (odd sizes in yuv420p: the plain read says so)
                return None
            if out.shape[1:] != shape:
                return None
            reader, chunks = self._decoded(reader, *self._span(start, stop))
            reformat, fmt = reader.convert.reformat, self.format
            h, w = self.size if self.size is not None else (None, None)
            size = None  # (resized to ``size=``: any size decoded is fine)
            if self.size is None:  # the decoded frames must all be of the rows' size
                size = (shape[0] * 2 // 3 if fmt == "yuv420p" else shape[0], shape[1])
            k, n = 0, len(out)
            for chunk in chunks:
                for frame in chunk:
                    if k == n:
                        return k + 1  # (more than asked: the caller says so)
                    if size is not None:
                        self._check_size(frame, start + k, size)
                    convert_into(reformat, frame, w, h, fmt, out[k])
                    k += 1
            return k

    def _check_size(self, frame: Any, index: int, size: tuple[int, int]) -> None:
        """Refuse a decoded frame that is not ``size`` (height, width): its frames change size.

        Without ``size=``, every frame of a stream must have one size (a batch's rows, a
        read's array): a frame of another is an error, never one broadcast into the rows
        of a batch, nor a row of it repeated.
        """
        if (frame.height, frame.width) != size:
            raise SourceError(
                self.path,
                f"frame {index} is {frame.height}x{frame.width}, not {size[0]}x{size[1]} "
                "like the stream's other frames: the frames of the file change size; give "
                "size= to resize them all to one",
            )

    def _converted(self, reader: Reader, frames: list[Any], first: int) -> list[np.ndarray]:
        """The arrays of ``frames`` (frame ``first`` and on), all of one size."""
        if self.size is None and frames:
            size = (frames[0].height, frames[0].width)
            for k, frame in enumerate(frames):
                self._check_size(frame, first + k, size)
        return [self._convert(reader, f) for f in frames]

    def _convert(self, reader: Reader, frame: Any) -> np.ndarray:
        h, w = self.size if self.size is not None else (None, None)
        reformat = reader.convert.reformat
        colour = opaque_colour(frame, w, h, self.format)
        if colour is None:
            return reformat(frame, w, h, self.format, threads=1).to_ndarray()
        out = np.empty((h or frame.height, w or frame.width, 4), np.uint8)
        convert_into(reformat, frame, w, h, self.format, out)
        return out

    # -- hooks of the decoding skeleton ----------------------------------------------------

    def _frame_position(self, frame: Any, expected: int | None) -> int | None:
        return self._index.locate(frame, expected)

    def _demux(self) -> _Probe:
        if self.windowed:
            return _shared_probe(self.path, self.stream_index, self._file_state, self._remote)
        return _probe(self.path, self.stream_index, self._remote)

    def _begin(self, reader: Reader) -> None:
        # one scaler for all frames, on one thread: the same pixels in every process (the
        # rows of a frame cut among threads are rounded differently at their edges)
        reader.convert = VideoReformatter()
        codec = reader.stream.codec_context
        if not codec.is_open:  # threads are set before the first packet opens the decoder
            threads = decode_threads(self.threads)
            codec.thread_count = threads
            if threads != 1:
                codec.thread_type = "AUTO"  # frames and slices decoded in parallel

    def _units(self, reader: Reader, frame: Any) -> list[Any]:
        return [frame]  # converted when delivered: frames skipped after a seek never are

    def _assemble(self, reader: Reader, chunks: list[Sequence[Any]], a: int, b: int) -> Any:
        return np.stack(self._converted(reader, [f for c in chunks for f in c], a))

    def _seek_target(self, start: int) -> int | None:
        return start if self._trusted and self.probe().exact else None

    def _seek_points(self, target: int) -> Iterator[int]:
        """The last keyframes at or before frame ``target`` (never the first frame)."""
        info = self.probe()
        k = int(np.searchsorted(info.keys, target, side="right")) - 1
        for key in range(k, max(k - 3, 0), -1):
            if info.keys[key] == 0:
                return  # as cheap, and exact whatever the file: decode from the start
            yield int(info.seek_ts[key])

    def _decode_on(self, reader: Reader, start: int) -> bool:
        keys = self.probe().keys
        k = int(np.searchsorted(keys, start, side="right")) - 1
        return k < 0 or keys[k] <= reader.end  # no keyframe in between

    def _truncated(self, end: int, stop: int) -> str:
        frames = len(self.probe()) if self.step_rate is not None else len(self)
        return f"truncated: decoding ends after {end} of {frames} frames"


@reads("video")
def video(
    path: str | os.PathLike,
    *,
    size: tuple[int, int] | None = None,
    format: str = "rgb24",
    length: int | None = None,
    stream_index: int = 0,
    storage_options: dict[str, Any] | None = None,
    fps: float | None = None,
    threads: int | None = None,
    start: float | None = None,
    stop: float | None = None,
) -> _Video:
    """Stream the frames of a video file, decoded with PyAV, as they are or at a constant rate.

    Step ``i`` is the ``i``-th frame of a plain decode of the file from its start
    (``container.decode(video=stream_index)``), converted with
    ``frame.to_ndarray(format=format, width=w, height=h, threads=1)`` (one scaling thread:
    the same pixels in every process). Reading consecutive frames keeps
    the decoder going; reading elsewhere seeks to the last keyframe before the frame asked
    for and decodes from there. The file is opened on the first read, separately in each
    process that reads, so the stream can be handed to worker processes (forked or spawned).

    The length comes from one pass over the file that reads its packets without decoding
    them; it also gives the timestamp of every frame, which is how frames are identified
    after a seek (B-frames included), and is public: ``v.timestamps`` (seconds of every
    frame, in presentation order) and ``v.fps`` (the average frame rate). The pass happens
    on the first call to ``len`` (or the first seek, or use of those two), and its result
    is kept in the object, pickles included.

    **Constant rate.** With ``fps=F``, step ``i`` is the frame a player shows at time
    ``t0 + i / F``, ``t0`` the timestamp of the first frame: the last frame whose timestamp
    is not after that time (within :data:`TIME_TOLERANCE`), so frames are repeated or
    dropped as the timestamps say (a variable-frame-rate file becomes a constant-rate
    stream). The steps are the times before the end of the last frame: its timestamp
    plus its duration when the file gives packet durations, else plus the mean frame
    interval (``v.duration`` is that end minus ``t0``), so ``len(v)`` is the number of
    integers ``i`` with ``i / F < v.duration``. Reading decodes forward and converts each
    frame shown once, however many steps show it; ``v.frame_index`` tells which frame
    every step shows.

    **A window.** With ``start`` and/or ``stop``, the stream is the frames of a plain
    decode whose timestamps lie in ``[start, stop)`` seconds (the times of
    ``video(path).timestamps``; within :data:`TIME_TOLERANCE`, the same at both ends, so
    that windows sharing a bound share no frame): step ``i`` is the ``i``-th of them, and
    ``v.timestamps`` their times. Reading it seeks to the keyframe before its first frame
    and decodes forward; the demuxing pass of the file is made once per process and
    shared by every window of the file, so a long file cut into many windows (one per
    episode) is demuxed once, and reading a window decodes at most about a keyframe
    interval of frames outside it. ``fps`` and ``size`` apply to the window as to a whole
    file: with ``fps=F``, step ``i`` is the frame shown at the window's first frame's time
    plus ``i / F``, until the window's last frame ends (at the next frame of the file, or
    at ``stop`` if that is sooner), and ``v.frame_index`` counts the window's frames.
    With ``length``, the length is not measured (no demuxing to plan); a window holding
    fewer frames is a :class:`~streamseq.errors.SourceError` when it is read.

    Args:
        path: a video file that FFmpeg can read: a local path, or a URL (``s3://``,
            ``gs://``, ``https://``, any fsspec protocol) read in ranges, ahead.
        size: ``(height, width)`` to resize the frames to (by the PyAV reformatter);
            ``None`` keeps the size of the file.
        format: pixel format of the arrays: ``"rgb24"`` (``[H, W, 3]``), ``"bgr24"``,
            ``"rgba"``, ``"bgra"``, ``"argb"``, ``"abgr"`` (``[H, W, 4]``), ``"gray"``
            (``[H, W]``) or ``"yuv420p"`` (``[H * 3 / 2, W]``: the luma plane, then the
            two chroma planes of ``H / 2`` by ``W / 2`` side by side; even sizes only).
            Resizing and conversion are one pass of the reformatter, at decode. Frames
            without alpha read at their own size in a format with alpha are their
            ``"rgb24"`` (``"bgr24"``) colour and alpha 255 (``yuva420p`` frames: that
            colour and their alpha plane): FFmpeg's conversion to these formats leaves
            the last columns of some widths unwritten.
        length: the number of frames, when known: it skips the demuxing pass until a seek
            needs it. A file with fewer frames raises :class:`~streamseq.errors.SourceError`
            when the missing frames are read.
        stream_index: which video stream of the file.
        storage_options: for a URL, the options of its fsspec filesystem (credentials,
            endpoint, ...); see :mod:`streamseq.io.remote`.
        fps: steps per second of a constant-rate stream (see above); ``None`` streams
            every frame of the file once. Not with ``length``.
        threads: codec threads per decoder (``0``: one per core, FFmpeg's choice).
            ``None`` fits where the stream is read: one in a worker process (the
            workers already share the cores; more threads only oversubscribe them), one
            per core in the main process (``num_workers=0``). The frames are the same
            whatever the number.
        start: seconds (file time) where the window starts; ``None``: at the first frame.
        stop: seconds (file time) where the window ends, excluded; ``None``: after the
            last frame.

    Returns:
        A stream: ``v[a:b]`` is a ``uint8`` array ``[b - a, H, W, 3]`` (for ``rgb24``),
        ``v[i]`` one frame; ``v.timestamps`` is a read-only float64 array of the times of
        the steps (in seconds), ``v.fps`` the average frame rate (``fps`` when given) and
        ``v.duration`` the seconds from the first frame to the end of the last.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ImportError: ``path`` is a URL and fsspec (or the package of its protocol) is
            missing: ``pip install 'streamseq[remote]'``.
        streamseq.errors.SourceError: a URL cannot be reached (after a few attempts);
            the file cannot be opened or demuxed, has no video
            stream or no decoder for it (a damaged codec description), or decodes to fewer
            frames than its length (on the read that finds out); the file changed since
            the source was made (found when a process opens it or demuxes it); without
            ``size``, a frame of another size than the stream's (a file whose frames
            change size: give ``size`` to resize them all).

    Example:
        >>> import tempfile, os, av, numpy as np
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     path = os.path.join(tmp, "clip.mp4")
        ...     with av.open(path, "w") as out:
        ...         s = out.add_stream("mpeg4", rate=25)
        ...         s.width, s.height, s.pix_fmt = 32, 16, "yuv420p"
        ...         for i in range(10):
        ...             img = np.full((16, 32, 3), 25 * i, np.uint8)
        ...             out.mux(s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")))
        ...         out.mux(s.encode())
        ...     v = video(path)
        ...     print(len(v), v[2:5].shape, v[-1].shape)
        ...     print(v.fps, v.timestamps[:3])
        ...     slow = video(path, fps=10)  # 0.4 s: 4 steps, showing frames 0, 2, 5, 7
        ...     print(len(slow), slow.frame_index, slow[:].shape)
        ...     window = video(path, start=0.12, stop=0.3)  # frames 3 to 7
        ...     print(len(window), window.timestamps, bool((window[:] == v[3:8]).all()))
        10 (3, 16, 32, 3) (16, 32, 3)
        25.0 [0.   0.04 0.08]
        4 [0 2 5 7] (4, 16, 32, 3)
        5 [0.12 0.16 0.2  0.24 0.28] True
    """
    return _Video(
        os.fspath(path),
        size,
        format,
        length,
        stream_index,
        storage_options,
        fps,
        start=start,
        stop=stop,
        threads=threads,
    )
