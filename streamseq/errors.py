"""Exceptions raised by streamseq.

Every error that concerns one recording names it: :class:`StreamError` carries
the index of the stream in the list the user gave and its ``repr``, and
:class:`SourceError` carries the path of the file that failed.
"""

from __future__ import annotations


class StreamError(RuntimeError):
    """A stream failed to open or to read, or is shorter than its declared length.

    Args:
        message: what went wrong.
        index: index of the stream in the list given by the user (or ``None``).
        stream: ``repr`` of the stream or opener.

    Example:
        >>> str(StreamError("opening failed", index=3, stream="Opener('a.mp4')"))
        "stream 3 (Opener('a.mp4')): opening failed"
    """

    def __init__(self, message: str, index: int | None = None, stream: str | None = None):
        self.message = message
        self.index = index
        self.stream = stream
        prefix = "" if index is None else f"stream {index} ({stream}): "
        super().__init__(prefix + message)

    def __reduce__(self):  # keep the fields (and tblib keeps the cause) across processes
        return (type(self), (self.message, self.index, self.stream))


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
        self.path = str(path)
        super().__init__(f"{path}: {message}")
        self.message = message

    def __reduce__(self):
        return (type(self), (self.path, self.message))


class WorkerError(RuntimeError):
    """A worker process died (killed, crashed) or a worker thread stopped unexpectedly."""
