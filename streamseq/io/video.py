"""Video files as streams of decoded frames (PyAV).

The length and a table of presentation timestamps come from one demuxing pass over the
file (packets are read, never decoded). Reading continues the open decoder when the
requested frames come next, and otherwise seeks to the nearest earlier keyframe and decodes
forward, identifying frames by their timestamp. Frame ``i`` is always the ``i``-th frame
that a plain decode of the file from its start gives: whenever the timestamps of a file
turn out not to identify its frames reliably, reading falls back to decoding from the
start and counting.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from streamseq.errors import SourceError
from streamseq.io._base import Source, check_file, open_media

#: channels of the packed pixel formats a video stream can deliver (``None``: no channel axis)
_CHANNELS = {
    "rgb24": 3,
    "bgr24": 3,
    "rgba": 4,
    "bgra": 4,
    "argb": 4,
    "abgr": 4,
    "gray": None,
    "gray8": None,
}


@dataclass(frozen=True)
class _Probe:
    """What one demuxing pass tells about a video stream."""

    pts: np.ndarray  # presentation timestamps in presentation order (frame i has pts[i])
    keys: np.ndarray  # frame indices of the keyframes, increasing
    seek_ts: np.ndarray  # timestamp to seek to for each keyframe
    height: int
    width: int
    exact: bool  # timestamps are present and distinct: they can identify frames

    def __len__(self) -> int:
        return len(self.pts)


class _Inconsistent(Exception):
    """Decoded timestamps do not identify frames: fall back to counting from the start."""


class _Reader:
    """Decoder state of one process: an open container and where its decoder stands."""

    def __init__(self, container: Any, stream: Any):
        self.container = container
        self.stream = stream
        self.frames = container.decode(stream)
        self.last: int | None = -1  # index of the last frame decoded (None: not known yet)
        self.pending: tuple[int, Any] | None = None  # a decoded frame not yet delivered
        self.reformatter = VideoReformatter()  # one scaler for all frames (as each frame's)
        self.counting = True  # decoding from the start: the count is the index

    @property
    def position(self) -> int | None:
        """Index of the frame the next read delivers (None: not known)."""
        if self.pending is not None:
            return self.pending[0]
        return None if self.last is None else self.last + 1

    def close(self) -> None:
        self.frames.close()
        self.container.close()


def _probe(path: str, stream_index: int) -> _Probe:
    container, stream = open_media(path, "video", stream_index)
    try:
        pts: list[int | None] = []
        keys: list[bool] = []
        seek_ts: list[int | None] = []
        end = None  # end time of the last frame, in stream time_base
        packets = 0  # discarded ones included, as in the declared frame count
        try:
            for packet in container.demux(stream):
                if packet.size == 0:  # end of file marker
                    continue
                if packet.is_corrupt:
                    raise SourceError(path, f"corrupt packet after {len(pts)} frames")
                packets += 1
                if packet.is_discard:
                    continue
                pts.append(packet.pts)
                keys.append(bool(packet.is_keyframe))
                ts = [t for t in (packet.pts, packet.dts) if t is not None]
                seek_ts.append(min(ts) if ts else None)
                if packet.pts is not None and packet.duration:
                    stop = packet.pts + packet.duration
                    end = stop if end is None else max(end, stop)
        except av.error.FFmpegError as e:
            raise SourceError(path, f"demuxing failed after {len(pts)} frames: {e}") from e
        declared = stream.frames
        height, width = stream.codec_context.height, stream.codec_context.width
        if not declared:  # no frame count: compare what the packets cover with the duration
            missing = _missing_time(container, stream, end, len(pts))
            if missing is not None:
                raise SourceError(path, f"truncated: {len(pts)} frames cover {missing}")
    finally:
        container.close()
    if not pts:
        raise SourceError(path, "no video frame")
    if declared > packets:
        raise SourceError(path, f"truncated: {packets} frames found, {declared} declared")
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
    return _Probe(sorted_pts, key_idx, key_seek, height, width, exact)


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


class _Video(Source):
    def __init__(
        self,
        path: str,
        size: tuple[int, int] | None,
        format: str,
        length: int | None,
        stream_index: int,
    ):
        super().__init__()
        if format not in _CHANNELS:
            raise ValueError(f"format must be one of {sorted(_CHANNELS)}, got {format!r}")
        if size is not None:
            size = (int(size[0]), int(size[1]))
        self.path = check_file(path)
        self.size = size
        self.format = format
        self.length = None if length is None else int(length)
        self.stream_index = stream_index
        self._info: _Probe | None = None
        self._trusted = True  # timestamps identify frames (until proven otherwise)

    def __repr__(self) -> str:
        return f"video({self.path!r})"

    def probe(self) -> _Probe:
        """Demux the file once (no decoding); the result travels with the object."""
        if self._info is None:
            self._info = _probe(self.path, self.stream_index)
        return self._info

    def __len__(self) -> int:
        if self.length is not None:
            return self.length
        return len(self.probe())

    def _frame_shape(self) -> tuple[int, ...]:
        if self.size is not None:
            h, w = self.size
        else:
            h, w = self.probe().height, self.probe().width
        c = _CHANNELS[self.format]
        return (h, w) if c is None else (h, w, c)

    def _empty(self) -> np.ndarray:
        return np.zeros((0, *self._frame_shape()), np.uint8)

    def _convert(self, reader: _Reader, frame: Any) -> np.ndarray:
        """``frame.to_ndarray(format=..., width=..., height=...)``, reusing one scaler."""
        h, w = self.size if self.size is not None else (None, None)
        return reader.reformatter.reformat(frame, w, h, self.format).to_ndarray()

    # -- decoder management ----------------------------------------------------------------

    def _open(self) -> _Reader:
        container, stream = open_media(self.path, "video", self.stream_index)
        try:
            return _Reader(container, stream)
        except BaseException:
            container.close()
            raise

    def _close(self, handle: _Reader) -> None:
        handle.close()

    def _decode_next(self, reader: _Reader) -> tuple[int, Any]:
        """Decode one frame and identify it; raise SourceError at the end of the file."""
        try:
            frame = next(reader.frames)
        except StopIteration:
            if not reader.counting:
                raise _Inconsistent from None  # let a decode from the start tell
            raise SourceError(
                self.path,
                f"truncated: decoding ends after {reader.last + 1} of {len(self)} frames",
            ) from None
        except av.error.FFmpegError as e:
            raise SourceError(self.path, f"decoding failed after frame {reader.last}: {e}") from e
        info = self._info
        if reader.counting:
            index = reader.last + 1
            if self._trusted and info is not None:
                if index >= len(info) or not info.exact or frame.pts != info.pts[index]:
                    self._trusted = False  # the count is right, the timestamps are not
        else:
            index = int(np.searchsorted(info.pts, frame.pts)) if frame.pts is not None else -1
            if not (0 <= index < len(info) and info.pts[index] == frame.pts):
                raise _Inconsistent
            if reader.last is not None and index != reader.last + 1:
                raise _Inconsistent
        reader.last = index
        return index, frame

    def _take(self, reader: _Reader) -> Any:
        """The next frame (decoded, not converted)."""
        if reader.pending is not None:
            frame = reader.pending[1]
            reader.pending = None
            return frame
        return self._decode_next(reader)[1]

    def _skip_to(self, reader: _Reader, a: int) -> _Reader:
        while reader.position < a:
            self._take(reader)
        return reader

    def _seek(self, reader: _Reader, a: int) -> _Reader:
        """Seek to the last keyframe at or before frame ``a`` and decode up to it."""
        info = self.probe()
        k = int(np.searchsorted(info.keys, a, side="right")) - 1
        for key in range(k, max(k - 3, 0), -1):
            if info.keys[key] == 0:
                break  # as cheap, and exact whatever the file: decode from the start
            try:
                reader.container.seek(
                    int(info.seek_ts[key]), backward=True, any_frame=False, stream=reader.stream
                )
            except av.error.FFmpegError:
                break
            reader.frames = reader.container.decode(reader.stream)
            reader.counting, reader.last, reader.pending = False, None, None
            index, frame = self._decode_next(reader)
            if index > a:  # landed after the keyframe: try an earlier one
                continue
            reader.pending = (index, frame)
            return self._skip_to(reader, a)
        return self._skip_to(self._restart(), a)

    def _position(self, reader: _Reader, a: int) -> _Reader:
        """Make frame ``a`` the next frame delivered, continuing or seeking."""
        pos = reader.position
        if pos == a:
            return reader
        seekable = self._trusted and self.probe().exact
        if pos is not None and pos < a:
            if not seekable:
                return self._skip_to(reader, a)
            keys = self.probe().keys
            k = int(np.searchsorted(keys, a, side="right")) - 1
            if k < 0 or keys[k] <= pos:
                return self._skip_to(reader, a)  # no keyframe in between: decode on
        if not seekable:
            return self._skip_to(self._restart(), a)
        return self._seek(reader, a)

    def _read(self, reader: _Reader, a: int, b: int) -> np.ndarray:
        try:
            reader = self._position(reader, a)
            frames = [self._convert(reader, self._take(reader)) for _ in range(b - a)]
        except _Inconsistent:
            self._trusted = False
            reader = self._skip_to(self._restart(), a)
            frames = [self._convert(reader, self._take(reader)) for _ in range(b - a)]
        return np.stack(frames)  # b > a: never empty


def video(
    path: str | os.PathLike,
    *,
    size: tuple[int, int] | None = None,
    format: str = "rgb24",
    length: int | None = None,
    stream_index: int = 0,
) -> _Video:
    """Stream the frames of a video file, decoded with PyAV.

    Step ``i`` is the ``i``-th frame of a plain decode of the file from its start
    (``container.decode(video=stream_index)``), converted with
    ``frame.to_ndarray(format=format, width=w, height=h)``. Reading consecutive frames keeps
    the decoder going; reading elsewhere seeks to the last keyframe before the frame asked
    for and decodes from there. The file is opened on the first read, separately in each
    process that reads, so the stream can be handed to worker processes (forked or spawned).

    The length comes from one pass over the file that reads its packets without decoding
    them; it also gives the timestamp of every frame, which is how frames are identified
    after a seek (B-frames included). The pass happens on the first call to ``len`` (or
    the first seek), and its result is kept in the object, pickles included.

    Args:
        path: a video file that FFmpeg can read.
        size: ``(height, width)`` to resize the frames to (by the PyAV reformatter);
            ``None`` keeps the size of the file.
        format: pixel format of the arrays: ``"rgb24"`` (``[H, W, 3]``), ``"bgr24"``,
            ``"rgba"``, ``"bgra"``, ``"argb"``, ``"abgr"`` (``[H, W, 4]``) or ``"gray"``
            (``[H, W]``).
        length: the number of frames, when known: it skips the demuxing pass until a seek
            needs it. A file with fewer frames raises :class:`~streamseq.errors.SourceError`
            when the missing frames are read.
        stream_index: which video stream of the file.

    Returns:
        A stream: ``v[a:b]`` is a ``uint8`` array ``[b - a, H, W, 3]`` (for ``rgb24``),
        ``v[i]`` one frame.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        streamseq.errors.SourceError: the file cannot be opened or demuxed, has no video
            stream, or decodes to fewer frames than its length (on the read that finds out).

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
        10 (3, 16, 32, 3) (16, 32, 3)
    """
    return _Video(os.fspath(path), size, format, length, stream_index)
