"""Audio files as streams of fixed-size frames of samples (PyAV).

The samples are those of a plain decode of the file from its start, converted to float32
in the requested channel layout by ``av.AudioResampler(format="flt", layout=layout)`` and,
when a sample rate is given, resampled by ``av.AudioResampler(format="flt", layout=layout,
rate=sample_rate)`` fed with the converted samples. Step ``k`` holds samples
``k * frame`` to ``(k + 1) * frame``; the last step is padded with zeros.

Reading consecutive steps keeps the decoder going. Reading elsewhere seeks a few packets
before the position (enough for the decoder to be exact again, for the codecs whose
decoder state is known to be short: PCM, FLAC, ALAC, WavPack, AAC, MP2/MP3, Vorbis,
AC-3) and, when resampling, restarts the resampler a fixed number of samples early at a
position where its phase is the same as in a decode from the start. Files with other
codecs, or whose timestamps do not locate samples exactly, are read again from the start
on such reads: slower, still exact.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import av
import numpy as np

from streamseq.errors import SourceError
from streamseq.io._media import MediaSource, Reader, decoded, open_media, packets
from streamseq.io._options import read_options, reads
from streamseq.io.remote import Remote

#: packets to decode before the position sought, for the codecs whose decoder
#: state after that many packets is the same as in a decode from the start
_PREROLL = {
    "flac": 0,
    "alac": 0,
    "wavpack": 0,
    "tta": 0,
    "aac": 2,
    "mp2": 3,
    "mp2float": 3,
    "mp3": 12,
    "mp3float": 12,
    "vorbis": 2,
    "ac3": 2,
    "ac3_fixed": 2,
    "eac3": 2,
}
_MAX_PHASES = 1 << 15  # resampling ratios with a longer period are not restarted mid-file
_CONTINUE_SECONDS = 5.0  # decode on rather than seek for gaps up to this long


def _preroll(codec: str) -> int | None:
    if codec.startswith("pcm_"):
        return 0
    return _PREROLL.get(codec)


#: containers whose audio stream duration is written by the muxer, not estimated
_EXACT_DURATION = ("wav", "w64", "flac", "mov", "mp4", "ogg", "aiff", "caf", "matroska")


def _sample_offset(
    pts: int | None, first_pts: int | None, time_base: Fraction, rate: int
) -> int | None:
    """Sample offset of a timestamp from the first sample, if it is an exact sample."""
    if pts is None or first_pts is None:
        return None
    x = (pts - first_pts) * time_base * rate
    return int(x) if x.denominator == 1 else None


@dataclass(frozen=True)
class _Table:
    """What demuxing tells about an audio stream, and where its first sample lies."""

    rate: int  # sample rate of the file
    layout: str  # channel layout of the file
    codec: str
    first_pts: int | None  # timestamp of the first decoded sample
    time_base: Fraction
    offsets: np.ndarray  # sample offset of each packet, in file order
    seek_ts: np.ndarray  # timestamp of each packet
    exact: bool  # packet timestamps locate samples exactly
    declared: int | None  # number of samples the container declares, if it is reliable

    def locate(self, frame: Any) -> int | None:
        """Sample offset of a decoded frame, if its timestamp is an exact sample."""
        return _sample_offset(
            frame.pts, self.first_pts, frame.time_base or self.time_base, self.rate
        )


def _declared_samples(container: Any, stream: Any) -> int | None:
    names = container.format.name.split(",")
    if not any(name in _EXACT_DURATION for name in names):
        return None
    rate = stream.codec_context.sample_rate
    if stream.duration:
        return round(stream.duration * stream.time_base * rate)
    if container.duration and len(container.streams) == 1:
        return round(container.duration * rate / av.time_base)
    return None


def _demux_table(path: str, stream_index: int, remote: Remote | None = None) -> _Table:
    container, stream = open_media(path, "audio", stream_index, remote)
    try:
        rate, layout = stream.codec_context.sample_rate, stream.codec_context.layout.name
        codec, time_base = stream.codec_context.name, stream.time_base
        first = next(decoded(path, container.decode(stream)), None)
        if first is None:
            raise SourceError(path, "no audio sample")
        first_pts = first.pts
        if first.time_base is not None and first.time_base != time_base:
            first_pts = None  # frames and packets do not share a time base: no seeking
    finally:
        container.close()
    # afresh: seeking back could skip leading packets
    container, stream = open_media(path, "audio", stream_index, remote)
    try:
        pts = [packet.pts for packet in packets(path, container, stream)]
        declared = _declared_samples(container, stream)
    finally:
        container.close()
    offsets = [_sample_offset(p, first_pts, time_base, rate) for p in pts]
    exact = bool(pts) and None not in offsets
    exact = exact and all(x < y for x, y in zip(offsets[:-1], offsets[1:], strict=True))
    return _Table(
        rate=rate,
        layout=layout,
        codec=codec,
        first_pts=first_pts,
        time_base=time_base,
        offsets=np.asarray(offsets if exact else [-1] * len(pts), np.int64),
        seek_ts=np.asarray([-1 if p is None else p for p in pts], np.int64),
        exact=exact,
        declared=declared,
    )


def _count_samples(
    path: str, stream_index: int, table: _Table, remote: Remote | None = None
) -> int:
    """Number of samples a plain decode of the file gives.

    It is read from the last packets when their timestamps locate samples exactly, and
    counted by decoding the whole file otherwise.
    """
    container, stream = open_media(path, "audio", stream_index, remote)
    try:
        tail = len(table.offsets) - 8
        if table.exact and tail > 0:
            container.seek(int(table.seek_ts[tail]), backward=True, stream=stream)
            end = None
            for frame in decoded(path, container.decode(stream)):
                offset = table.locate(frame)
                end = None if offset is None else offset + frame.samples
            if end is not None:
                return end
            container.seek(0, stream=stream)
        return sum(frame.samples for frame in decoded(path, container.decode(stream)))
    finally:
        container.close()


def _frame_to_array(frames: list[Any], channels: int) -> np.ndarray:
    if not frames:
        return np.zeros((0, channels), np.float32)
    return np.concatenate([f.to_ndarray().reshape(-1, channels) for f in frames])


def _array_to_frame(x: np.ndarray, layout: str, rate: int, pts: int) -> Any:
    frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(x).reshape(1, -1), "flt", layout)
    frame.sample_rate = rate
    frame.pts = pts
    frame.time_base = Fraction(1, rate)
    return frame


def _resampled_count(n: int, rate_in: int, rate_out: int, layout: str) -> int:
    """Samples the resampler gives (flushed) for ``n`` input samples.

    The count is periodic: ``p`` more input samples give ``q`` more output samples
    (``p / q`` the reduced ratio), so only a short run of silence is resampled.
    """
    g = math.gcd(rate_in, rate_out)
    p, q = rate_in // g, rate_out // g
    base = 4096 + p
    k = max(0, (n - base) // p)
    n0 = n - k * p
    resampler = av.AudioResampler(format="flt", layout=layout, rate=rate_out)
    channels = av.AudioLayout(layout).nb_channels
    count = 0
    for start in range(0, n0, 1 << 16):
        x = np.zeros((min(1 << 16, n0 - start), channels), np.float32)
        count += sum(
            f.samples for f in resampler.resample(_array_to_frame(x, layout, rate_in, start))
        )
    count += sum(f.samples for f in resampler.resample(None))
    return count + k * q


class _Conversion:
    """The conversion of decoded audio: to float32 in the output layout, then to its rate.

    The first stage is ``av.AudioResampler(format="flt", layout=layout)``, the second
    (when resampling) ``av.AudioResampler(format="flt", layout=layout, rate=rate_out)``
    fed with what the first gives; the second keeps state, so a decode that restarts
    (after a seek) gets a new conversion.
    """

    def __init__(self, layout: str, rate_in: int, rate_out: int | None):
        self.layout, self.rate_in = layout, rate_in
        self.channels = av.AudioLayout(layout).nb_channels
        self.convert = av.AudioResampler(format="flt", layout=layout)
        self.resampler = (
            None
            if rate_out is None
            else av.AudioResampler(format="flt", layout=layout, rate=rate_out)
        )

    def samples(self, frame: Any) -> np.ndarray:
        """The samples of a decoded frame, ``[n, channels]``."""
        return _frame_to_array(self.convert.resample(frame), self.channels)

    def resample(self, x: np.ndarray, position: int) -> np.ndarray:
        """The output samples of samples ``x`` that start at input sample ``position``."""
        if self.resampler is None:
            return x
        frame = _array_to_frame(x, self.layout, self.rate_in, position)
        return _frame_to_array(self.resampler.resample(frame), self.channels)

    def flush(self) -> np.ndarray:
        """The output samples the resampler still holds at the end of the input."""
        if self.resampler is None:
            return np.zeros((0, self.channels), np.float32)
        return _frame_to_array(self.resampler.resample(None), self.channels)


class _Audio(MediaSource):
    kind = "audio"

    def __init__(
        self,
        path: str,
        sample_rate: int | None,
        frame: int,
        layout: str | int | None,
        length: int | None,
        stream_index: int,
        storage_options: dict[str, Any] | None = None,
    ):
        if frame < 1:
            raise ValueError(f"frame must be positive, got {frame}")
        if isinstance(layout, int):
            layout = av.AudioLayout(f"{layout}c").name
        elif layout is not None:
            layout = av.AudioLayout(layout).name  # validates the name
        super().__init__(path, stream_index, length, storage_options)
        self.sample_rate = None if sample_rate is None else int(sample_rate)
        self.frame = int(frame)
        self.layout = layout
        self._samples: int | None = None  # output samples, when counted

    @property
    def read_options(self) -> str:
        """How it reads (:func:`~streamseq.io._options.read_options`): rate, frame, layout."""
        options = {"sample_rate": self.sample_rate, "frame": self.frame, "layout": self.layout}
        return read_options("audio", {**options, "stream_index": self.stream_index})

    @property
    def rate(self) -> int:
        """Sample rate of the output."""
        return self.sample_rate or self.probe().rate

    @property
    def channels(self) -> int:
        """Number of channels of the output."""
        return av.AudioLayout(self._layout()).nb_channels

    def _layout(self) -> str:
        return self.layout or self.probe().layout

    def _resampling(self) -> bool:
        return self.sample_rate is not None and self.sample_rate != self.probe().rate

    def num_samples(self) -> int:
        """Number of samples of the output (the last step is padded beyond it)."""
        if self._samples is None:
            table = self.probe()
            n = _count_samples(self.path, self.stream_index, table, self._remote)
            self._check_unchanged()  # the count is of the file recorded
            if table.declared is not None:
                spacing = np.diff(table.offsets)
                # up to a packet of slack: encoder delay counted in some declared durations
                tolerance = int(np.median(spacing)) if table.exact and len(spacing) else 2048
                if n < table.declared - tolerance:
                    raise SourceError(
                        self.path, f"truncated: {n} samples decoded, {table.declared} declared"
                    )
            if self._resampling():
                n = _resampled_count(n, table.rate, self.sample_rate, self._layout())
            self._samples = n
        return self._samples

    def __len__(self) -> int:
        if self.length is not None:
            return self.length
        return -(-self.num_samples() // self.frame)

    def _empty(self) -> np.ndarray:
        return np.zeros((0, self.frame, self.channels), np.float32)

    # -- hooks of the decoding skeleton ----------------------------------------------------

    def _demux(self) -> _Table:
        return _demux_table(self.path, self.stream_index, self._remote)

    def _begin(self, reader: Reader) -> None:
        rate_out = self.sample_rate if self._resampling() else None
        reader.convert = _Conversion(self._layout(), self.probe().rate, rate_out)

    def _units(self, reader: Reader, frame: Any) -> np.ndarray:
        return reader.convert.samples(frame)

    def _output(self, reader: Reader, units: np.ndarray, position: int) -> np.ndarray:
        return reader.convert.resample(units, position)

    def _flush(self, reader: Reader) -> np.ndarray:
        return reader.convert.flush()

    def _out_position(self, position: int) -> int:
        if not self._resampling():
            return position
        g = math.gcd(self.probe().rate, self.sample_rate)
        return position // (self.probe().rate // g) * (self.sample_rate // g)

    def _span(self, a: int, b: int) -> tuple[int, int]:
        stop = b * self.frame
        return a * self.frame, stop if self.length is not None else min(stop, self.num_samples())

    def _assemble(self, reader: Reader, chunks: list[np.ndarray], a: int, b: int) -> np.ndarray:
        out = np.zeros(((b - a) * self.frame, self.channels), np.float32)
        if chunks:
            x = np.concatenate(chunks)
            out[: len(x)] = x
        return out.reshape(b - a, self.frame, self.channels)

    def _seek_target(self, start: int) -> int | None:
        """Input sample to restart from to deliver output sample ``start`` (None: the start)."""
        table = self.probe()
        if not (self._trusted and table.exact) or _preroll(table.codec) is None:
            return None
        if not self._resampling():
            return start
        g = math.gcd(table.rate, self.sample_rate)
        p, q = table.rate // g, self.sample_rate // g
        if p > _MAX_PHASES:
            return None
        margin = max(2048, 64 * -(-table.rate // self.sample_rate))
        return max(0, (start * p // q - margin) // p * p)

    def _seek_points(self, target: int) -> Iterator[int]:
        """A few packets before the one that holds input sample ``target``, then earlier."""
        table = self.probe()
        preroll = _preroll(table.codec)
        j = int(np.searchsorted(table.offsets, target, side="right")) - 1 - preroll
        for _ in range(3):
            if target == 0 or j <= 0:
                return
            yield int(table.seek_ts[j])
            j -= preroll + 2

    def _decode_on(self, reader: Reader, start: int) -> bool:
        return start - reader.end <= _CONTINUE_SECONDS * self.rate

    def _short(self, end: int, stop: int) -> bool:
        return self.length is None or end <= (self.length - 1) * self.frame

    def _truncated(self, end: int, stop: int) -> str:
        expected = f"{len(self)} steps" if self.length is not None else f"{stop} samples"
        return f"truncated: decoding ends at sample {end}, expected {expected}"


@reads("audio")
def audio(
    path: str | os.PathLike,
    *,
    sample_rate: int | None = None,
    frame: int = 1024,
    layout: str | int | None = None,
    length: int | None = None,
    stream_index: int = 0,
    storage_options: dict[str, Any] | None = None,
) -> _Audio:
    """Stream an audio file as frames of ``frame`` samples, decoded with PyAV.

    The samples are those of a plain decode of the file from its start (``container.decode``),
    converted to float32 in ``layout`` by ``av.AudioResampler(format="flt", layout=layout)``
    and then, if ``sample_rate`` is given and differs from the file's, resampled by
    ``av.AudioResampler(format="flt", layout=layout, rate=sample_rate)``. Step ``k`` holds
    samples ``k * frame`` to ``(k + 1) * frame``; **the last step is padded with zeros**
    when the number of samples is not a multiple of ``frame``. The file is opened on the
    first read, separately in each process that reads.

    The length comes from demuxing the file (no decoding) and decoding its first and last
    few packets; when the timestamps of the file do not locate samples exactly, the whole
    file is decoded once instead. This happens on the first ``len`` and is kept in the
    object, pickles included.

    Args:
        path: an audio file (or a video file with an audio stream) that FFmpeg can read:
            a local path, or a URL (``s3://``, ``gs://``, ``https://``, any fsspec
            protocol) read in ranges, ahead.
        sample_rate: output sample rate; ``None`` keeps the rate of the file.
        frame: samples per step.
        layout: output channel layout (``"mono"``, ``"stereo"``, ...) or number of
            channels; ``None`` keeps the layout of the file.
        length: the number of steps, when known: it skips the measurement. A file that
            ends before the last step raises :class:`~streamseq.errors.SourceError` on
            the read that finds out.
        stream_index: which audio stream of the file.
        storage_options: for a URL, the options of its fsspec filesystem (credentials,
            endpoint, ...); see :mod:`streamseq.io.remote`.

    Returns:
        A stream: ``s[a:b]`` is a float32 array ``[b - a, frame, channels]``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ImportError: ``path`` is a URL and fsspec (or the package of its protocol) is
            missing: ``pip install 'streamseq[remote]'``.
        streamseq.errors.SourceError: a URL cannot be reached (after a few attempts);
            the file cannot be opened, demuxed or decoded, or ends before its length;
            the file changed since the source was made (found when a process opens it).

    Example:
        >>> import tempfile, os, av, numpy as np
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     path = os.path.join(tmp, "tone.wav")
        ...     with av.open(path, "w") as out:
        ...         s = out.add_stream("pcm_s16le", rate=8000, layout="mono")
        ...         x = np.sin(np.arange(3000) * 0.1).astype(np.float32)[None]
        ...         f = av.AudioFrame.from_ndarray(x, format="flt", layout="mono")
        ...         f.sample_rate = 8000
        ...         out.mux(s.encode(f))
        ...         out.mux(s.encode())
        ...     a = audio(path, frame=1000)
        ...     b = audio(path, frame=512, sample_rate=16000)
        ...     print(len(a), a[1:3].shape, b.num_samples(), len(b))
        3 (2, 1000, 1) 6000 12
    """
    return _Audio(
        os.fspath(path), sample_rate, frame, layout, length, stream_index, storage_options
    )
