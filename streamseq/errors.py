"""Exceptions raised by streamseq.

Every error that concerns one recording names it: :class:`StreamError` carries
the index of the stream in the list the user gave and its description, and
:class:`SourceError` carries the path of the file that failed. The credentials of URLs in
their text are hidden (see :mod:`streamseq._redact`).

One failure, one type: a :class:`StreamError` raised by a stream or an opener itself
(a :class:`SourceError` naming a damaged file, say) is never wrapped in another error,
whether it happens while opening the stream, measuring its length (with or without
``lengths=``), reading it or transforming what was read, in the main process or in a
worker. It is raised as it is, with the stream, and the step range of a read, named in
it (:meth:`StreamError.locate`), so ``except SourceError`` catches a file's failure
wherever it happens. Other errors of a stream (``OSError``, ``ValueError``, ...) become
a :class:`StreamError` naming the stream, with the original error chained.
"""

from __future__ import annotations

from streamseq._redact import redact_urls


class StreamError(RuntimeError):
    """A stream failed to open or to read, or is shorter than its declared length.

    Args:
        message: what went wrong.
        index: index of the stream in the list given by the user (or ``None``).
        stream: description of the stream or opener (:func:`streamseq.read.ref.describe`).

    Example:
        >>> str(StreamError("opening failed", index=3, stream="Opener('a.mp4')"))
        "stream 3 (Opener('a.mp4')): opening failed"
    """

    def __init__(self, message: str, index: int | None = None, stream: str | None = None):
        self.message = redact_urls(message)
        self.index = index
        self.stream = None if stream is None else redact_urls(stream)
        self.steps: tuple[int, int] | None = None
        super().__init__(self._text())

    def _text(self) -> str:
        where = "" if self.index is None else f"stream {self.index} ({self.stream})"
        if self.steps is not None and where:
            where += f", steps {self.steps[0]}:{self.steps[1]}"
        return redact_urls(f"{where}: {self.message}" if where else self.message)

    def locate(self, index: int, stream: str, steps: tuple[int, int] | None = None) -> None:
        """Name the stream (and the step range), for an error raised inside a stream.

        Example:
            >>> e = SourceError("a.mp4", "truncated")
            >>> e.locate(3, "video('a.mp4')", (8, 16)); str(e)
            "stream 3 (video('a.mp4')), steps 8:16: a.mp4: truncated"
        """
        self.index, self.stream, self.steps = index, redact_urls(stream), steps
        self.args = (self._text(),)

    def __reduce__(self):  # keep the fields (and tblib keeps the cause) across processes
        return (_rebuild, (type(self), self._init_args(), self.index, self.stream, self.steps))

    def _init_args(self) -> tuple:
        return (self.message, self.index, self.stream)


class SourceError(StreamError):
    """A file behind a source is missing, truncated, corrupt or shorter than probed.

    Args:
        path: the file concerned.
        message: what went wrong.

    Example:
        >>> str(SourceError("clip.mp4", "truncated: 10 frames decoded, 12 expected"))
        'clip.mp4: truncated: 10 frames decoded, 12 expected'
    """

    def __init__(self, path: str, message: str):
        self.path = redact_urls(str(path))
        self.detail = redact_urls(message)
        super().__init__(f"{self.path}: {self.detail}")

    def _init_args(self) -> tuple:
        return (self.path, self.detail)


def _rebuild(
    cls: type, args: tuple, index: int | None, stream: str | None, steps: tuple | None
) -> StreamError:
    """Unpickle a :class:`StreamError` with the stream and steps it names."""
    error = cls(*args)
    if index is not None and error.index is None:
        error.locate(index, stream or "", steps)  # type: ignore[arg-type]
    return error


class WorkerError(RuntimeError):
    """A worker process died (killed, crashed) or a worker thread stopped unexpectedly."""


class WorkerTimeout(WorkerError):
    """The workers delivered nothing for longer than the ``timeout`` they were given."""
