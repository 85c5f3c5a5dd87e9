"""The decoding skeleton of the media sources: open, seek, decode forward, verify, restart.

A media source delivers *units* (the frames of a video, the samples of an audio stream)
that are exactly those of a plain decode of the file from its start. One demuxing pass
(the *probe*, made by the source) tells the timestamp of every packet; reading then

- continues the open decoder when the units asked for come next, or are near;
- otherwise seeks to a point before them (a keyframe, a few packets early) and decodes
  forward, locating each decoded frame by its timestamp: the first one must land at or
  before the target (else an earlier point is tried) and each next one must follow the
  previous one exactly;
- and, whenever the timestamps of a file turn out not to locate its frames, distrusts
  them for good and decodes from the start, counting.

The sources say what is particular to them through a few hooks (see
:class:`MediaSource`); everything else is here, written once.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import av

from streamseq._redact import redacted_repr
from streamseq.errors import SourceError
from streamseq.io._av_compat import open_input
from streamseq.io._base import Source, changed_error, check_file, state_changes
from streamseq.io.remote import Remote, locate
from streamseq.read.handle import current_pid, keep_forever


def open_media(
    path: str, kind: str, stream_index: int, remote: Remote | None = None
) -> tuple[Any, Any]:
    """Open a media file with PyAV and find one of its streams, with a decoder for it.

    Args:
        path: The file (its URL when ``remote`` is given).
        kind: ``"audio"`` or ``"video"``.
        stream_index: Which stream of that kind, counting from 0.
        remote: The file at a URL, opened as a file object (ranged reads, read ahead).

    Returns:
        The open container and the stream; the caller closes the container.

    Raises:
        FileNotFoundError: If the file does not exist.
        SourceError: Naming the file, if PyAV cannot open it, it has no such stream, or
            no decoder can be made for the stream (unknown or damaged codec description).
    """
    if remote is None:
        check_file(path)
    try:
        container = open_input(path if remote is None else remote.open())
    except av.error.FFmpegError as e:
        raise SourceError(path, f"cannot open: {e}") from e
    try:
        stream = getattr(container.streams, kind)[stream_index]
    except IndexError:
        container.close()
        raise SourceError(path, f"no {kind} stream {stream_index}") from None
    if stream.codec_context is None:
        container.close()
        raise SourceError(
            path, f"no decoder for {kind} stream {stream_index}: unknown or damaged codec"
        )
    return container, stream


def packets(path: str, container: Any, stream: Any) -> Iterator[Any]:
    """The packets of ``stream`` that carry frames, checked as they are demuxed.

    The end-of-file marker and the packets marked to be discarded are skipped; after the
    last one, the number of packets is checked against the count the container declares.

    Raises:
        SourceError: naming the file, on a corrupt packet, a demuxing error, or fewer
            packets than declared (a truncated file).
    """
    count = 0  # discarded ones included, as in the declared count
    try:
        for packet in container.demux(stream):
            if packet.size == 0:  # end of file marker
                continue
            if packet.is_corrupt:
                raise SourceError(path, f"corrupt packet after {count} packets")
            count += 1
            if not packet.is_discard:
                yield packet
    except av.error.FFmpegError as e:
        raise SourceError(path, f"demuxing failed after {count} packets: {e}") from e
    if stream.frames > count:
        raise SourceError(path, f"truncated: {count} packets found, {stream.frames} declared")


def decoded(path: str, frames: Iterator[Any]) -> Iterator[Any]:
    """The frames of a decoder, a decoding error being a :class:`SourceError` naming the file."""
    try:
        yield from frames
    except av.error.FFmpegError as e:
        raise SourceError(path, f"decoding failed: {e}") from e


class Inconsistent(Exception):
    """Decoded timestamps do not locate the units: decode from the start, counting."""


class Overshoot(Exception):
    """A seek landed after the position asked for: try an earlier point."""


#: readers made by another process (before a fork), kept here when this process drops them


class Reader:
    """Decoder state of one process: an open decoder, where it stands, what it holds.

    Positions count the source's units. ``chunks`` hold the decoded units from ``start``
    to ``end`` not yet delivered (each chunk a sequence of units: a list of one video
    frame, an array of audio samples); ``in_pos`` is the position, in the decoder's own
    units, of the next frame to decode. After a seek both are unknown (``None``) until a
    frame lands at ``target`` or before it.

    A reader is never freed in a process other than the one that made it: FFmpeg
    decoders and scalers own threads that exist only there, and freeing them in a forked
    child waits for those threads forever. The handle of a source keeps an inherited
    reader for that reason; a reader that reaches a child some other way (held by a
    traceback in garbage that the child collects, say) is kept by :meth:`__del__`.
    """

    def __init__(self, path: str, kind: str, stream_index: int, remote: Remote | None = None):
        self.pid = current_pid()
        self.path = path
        self.container, self.stream = open_media(path, kind, stream_index, remote)
        # a local file opened again, to measure the file the decoder reads (a rewrite in
        # place under it; a file replaced by a rename leaves the open one as it was)
        self.watch = None if remote is not None else os.open(path, os.O_RDONLY)
        self.watched = self._measure()
        self.frames = decoded(path, self.container.decode(self.stream))
        self.counting = True  # decoding from the start: the count is the position
        self.in_pos: int | None = 0
        self.target = 0
        self.chunks: list[Sequence[Any]] = []
        self.start: int | None = 0
        self.end: int | None = 0
        self.done = False  # the decoder reached the end of the file
        self.convert: Any = None  # what the source converts decoded frames with

    def next_frame(self) -> Any | None:
        """The next decoded frame, or ``None`` at the end of the file."""
        return next(self.frames, None)

    def seek(self, timestamp: int, target: int) -> bool:
        """Seek to ``timestamp`` (stream time base) to land at input position ``target``.

        Returns:
            False when the container cannot seek there (the caller starts over).
        """
        try:
            self.container.seek(timestamp, backward=True, any_frame=False, stream=self.stream)
        except av.error.FFmpegError:
            return False
        self.frames = decoded(self.path, self.container.decode(self.stream))
        self.counting, self.in_pos, self.target = False, None, target
        self.chunks, self.start, self.end, self.done = [], None, None, False
        return True

    def emit(self, chunk: Sequence[Any]) -> None:
        """Add decoded units after ``end``."""
        if len(chunk):
            self.chunks.append(chunk)
            self.end += len(chunk)

    def take(self, n: int) -> list[Sequence[Any]]:
        """Remove the first ``n`` units held (at most all of them) and return them as chunks."""
        upto, out = self.start + max(0, n), []
        while self.chunks and self.start + len(self.chunks[0]) <= upto:
            out.append(self.chunks.pop(0))
            self.start += len(out[-1])
        if self.chunks and self.start < upto:
            k = upto - self.start
            out.append(self.chunks[0][:k])
            self.chunks[0] = self.chunks[0][k:]
            self.start = upto
        return out

    def drop(self, upto: int) -> None:
        """Forget the units before ``upto``."""
        self.take(min(upto, self.end) - self.start)

    def _measure(self) -> tuple[int, int] | None:
        if self.watch is None:
            return None
        st = os.fstat(self.watch)
        return st.st_size, st.st_mtime_ns

    def changes(self) -> list[str]:
        """How the local file open changed since the decoder opened it (its size, time)."""
        if self.watch is None or self.watched is None:
            return []
        names = ("size", "mtime_ns")
        was = dict(zip(names, self.watched, strict=True))
        return state_changes(was, dict(zip(names, self._measure() or (), strict=True)))

    def close(self) -> None:
        self.frames.close()
        self.container.close()
        if self.watch is not None:
            os.close(self.watch)
            self.watch = None

    def __del__(self) -> None:
        if self.pid != current_pid():
            keep_forever(self)  # never freed here (see the class's note)


class MediaSource(Source, ABC):
    """A source that decodes one stream of a media file with the skeleton of this module.

    Subclasses set ``kind`` (``"video"`` or ``"audio"``) and implement:

    - ``_demux()``: the probe, an object with ``locate(frame)`` (the input position of a
      decoded frame from its timestamp, or ``None`` when it tells none);
    - ``_begin(reader)``: set up ``reader.convert`` for a decode that starts (from the
      start of the file, or after a seek);
    - ``_units(reader, frame)``: the input units of a decoded frame;
    - ``_assemble(reader, chunks, a, b)``: steps ``a`` to ``b`` made of their units;
    - ``_seek_target(start)``: the input position to land at to deliver from output
      position ``start``, or ``None`` when a seek cannot be exact;
      ``_seek_points(target)``: timestamps to seek to for it, best first (when they run
      out, reading restarts from the start); ``_decode_on(reader, start)``: whether
      decoding on from the reader's position beats a seek;
    - ``_truncated(end, stop)``: the message saying that decoding ended at output unit
      ``end`` instead of ``stop``.

    A source whose output units are not its input units (audio resampled) or whose steps
    are not its units (audio frames of samples) also overrides ``_output(reader, units,
    position)`` (the output units of input units), ``_flush(reader)`` (those still held
    at the end of the file), ``_out_position(position)`` (the output position of an
    input position where a decode after a seek starts delivering), ``_span(a, b)`` (the
    output units that steps ``a`` to ``b`` cover) and ``_short(end, stop)`` (whether
    ending at ``end`` is truncated, the last step being padded).
    """

    kind: ClassVar[str]

    def __init__(
        self,
        path: str,
        stream_index: int,
        length: int | None,
        storage_options: dict[str, Any] | None = None,
    ):
        super().__init__(close=Reader.close)
        self._remote = locate(path, storage_options)
        self.path = path if self._remote is not None else check_file(path)
        self._record_state(None if self._remote is None else dict(self._remote.stat))
        self.stream_index = stream_index
        self.length = None if length is None else int(length)
        self._index: Any = None
        self._trusted = True  # timestamps locate frames (until proven otherwise)

    def __repr__(self) -> str:
        return f"{self.kind}({redacted_repr(self.path)})"

    def probe(self) -> Any:
        """Demux the file once (no decoding); the result travels with the object.

        Raises:
            SourceError: the file changed since the source was made (what the demuxing
                found may be of the new file).
        """
        if self._index is None:
            index = self._demux()
            self._check_unchanged()
            self._index = index
        return self._index

    # -- the skeleton ----------------------------------------------------------------------

    def _open(self) -> Reader:
        reader = Reader(self.path, self.kind, self.stream_index, self._remote)
        try:
            self._begin(reader)
        except BaseException:
            reader.close()
            raise
        return reader

    def _read(self, reader: Reader, a: int, b: int) -> Any:
        start, stop = self._span(a, b)
        reader, chunks = self._decoded(reader, start, stop)
        return self._assemble(reader, chunks, a, b)

    def _decoded(
        self, reader: Reader, start: int, stop: int
    ) -> tuple[Reader, list[Sequence[Any]]]:
        """:meth:`_decode`, refused when the file changed under the decoder.

        A local file rewritten in place while it is decoded (its size or time, measured
        on the file the decoder opened, after the decoding) is an error saying so, never
        frames of other bytes; a decoding that failed on a file that changed since the
        source was made is told as that change.

        Raises:
            SourceError: the file changed, or decoding failed.
        """
        try:
            reader, chunks = self._decode(reader, start, stop)
        except SourceError as e:
            self._check_decoder(reader, e)
            raise
        self._check_decoder(reader)
        return reader, chunks

    def _check_decoder(self, reader: Reader, cause: BaseException | None = None) -> None:
        """Raise the change of the file the decoder reads (or, after ``cause``, of the path)."""
        changes = reader.changes()
        if changes:
            raise changed_error(self.path, changes, "while it was decoded") from cause
        if cause is not None:
            try:
                changed = self._change()
            except Exception:  # measuring failed too: the failure to decode tells more
                return
            if changed is not None:
                raise changed from cause

    def _decode(self, reader: Reader, start: int, stop: int) -> tuple[Reader, list[Sequence[Any]]]:
        """The output units ``start`` to ``stop``, as chunks, and the reader that holds on.

        The reader is another one than the one given when reading had to restart from
        the start of the file.
        """
        try:
            reader = self._position(reader, start)
            self._fill(reader, stop)
        except Inconsistent:
            self._trusted = False
            reader = self._skip_to(self._restart(), start)
            self._fill(reader, stop)
        return reader, reader.take(min(stop, reader.end) - start)

    def _position(self, reader: Reader, start: int) -> Reader:
        """Make output unit ``start`` the first one held, decoding on or seeking."""
        if reader.start is not None and reader.start <= start <= reader.end:
            reader.drop(start)
            return reader
        if reader.end is not None and reader.end < start:
            if self._decode_on(reader, start) or self._seek_target(start) is None:
                return self._skip_to(reader, start)
        elif self._seek_target(start) is None:
            return self._skip_to(self._restart(), start)
        return self._seek(reader, start)

    def _seek(self, reader: Reader, start: int) -> Reader:
        """Seek to a point before output unit ``start`` and decode up to it."""
        target = self._seek_target(start)
        for timestamp in self._seek_points(target):
            if not reader.seek(int(timestamp), target):
                break
            self._begin(reader)
            try:
                while reader.end is None:
                    self._pull(reader)
            except Overshoot:
                continue
            return self._skip_to(reader, start)
        return self._skip_to(self._restart(), start)

    def _skip_to(self, reader: Reader, start: int) -> Reader:
        """Decode on until output unit ``start`` (or the end of the file), dropping."""
        while reader.end < start and self._pull(reader):
            reader.drop(start)
        reader.drop(start)
        return reader

    def _fill(self, reader: Reader, stop: int) -> None:
        """Decode on until the units up to ``stop`` are held; a short file is an error."""
        while reader.end < stop and self._pull(reader):
            pass
        if reader.end < stop and self._short(reader.end, stop):
            if not reader.counting:
                raise Inconsistent  # let a decode from the start tell
            raise SourceError(self.path, self._truncated(reader.end, stop))

    def _pull(self, reader: Reader) -> bool:
        """Decode one more frame into the reader; False at the end of the file."""
        if reader.done:
            return False
        frame = reader.next_frame()
        if frame is None:
            if reader.end is None:
                raise Inconsistent  # a seek found nothing at or before its target
            reader.done = True
            reader.emit(self._flush(reader))
            return False
        units = self._units(reader, frame)
        position = self._locate(reader, frame)
        reader.in_pos = position + len(units)
        if reader.end is None:  # after a seek: deliver from the target on
            if reader.in_pos <= reader.target:
                return True
            units = units[reader.target - position :]
            position = reader.target
            reader.start = reader.end = self._out_position(position)
        reader.emit(self._output(reader, units, position))
        return True

    def _locate(self, reader: Reader, frame: Any) -> int:
        """The input position of a decoded frame, checking the timestamps against the count.

        Raises:
            Overshoot: the first frame after a seek lies after the target.
            Inconsistent: after a seek, the timestamp of a frame locates nothing, or not
                the position that follows the previous frame.
        """
        expected = reader.in_pos
        located = None if self._index is None else self._frame_position(frame, expected)
        if reader.counting:
            if self._index is not None and located != expected:
                self._trusted = False  # the count is right, the timestamps are not
            return expected
        if located is None:
            raise Inconsistent
        if expected is None:
            if located > reader.target:
                raise Overshoot
        elif located != expected:
            raise Inconsistent
        return located

    # -- hooks -----------------------------------------------------------------------------

    def _frame_position(self, frame: Any, expected: int | None) -> int | None:
        """The probe's ``locate(frame)``; ``expected``: where the frame should be, a hint."""
        return self._index.locate(frame)

    @abstractmethod
    def _demux(self) -> Any: ...

    @abstractmethod
    def _begin(self, reader: Reader) -> None: ...

    @abstractmethod
    def _units(self, reader: Reader, frame: Any) -> Sequence[Any]: ...

    def _output(self, reader: Reader, units: Sequence[Any], position: int) -> Sequence[Any]:
        return units

    def _flush(self, reader: Reader) -> Sequence[Any]:
        return ()

    def _out_position(self, position: int) -> int:
        return position

    def _span(self, a: int, b: int) -> tuple[int, int]:
        return a, b

    @abstractmethod
    def _assemble(self, reader: Reader, chunks: list[Sequence[Any]], a: int, b: int) -> Any: ...

    @abstractmethod
    def _seek_target(self, start: int) -> int | None: ...

    @abstractmethod
    def _seek_points(self, target: int) -> Iterator[int]: ...

    @abstractmethod
    def _decode_on(self, reader: Reader, start: int) -> bool: ...

    def _short(self, end: int, stop: int) -> bool:
        return True

    @abstractmethod
    def _truncated(self, end: int, stop: int) -> str: ...
