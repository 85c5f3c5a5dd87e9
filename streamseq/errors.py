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

No error raised by streamseq shows a credential (see :mod:`streamseq._redact`): not in
its message, its ``args``, its ``repr``, its pickled form, nor in the errors chained to
it (``__cause__``, ``__context__``), which :func:`redact_error` hides in place (another
library's error that names a URL keeps its type and its message, credentials hidden). A
:class:`StreamError` made while another error is handled hides that error's chain, the
one it is raised from.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterable
from typing import Any

from streamseq._redact import HIDDEN, redact, redact_urls


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
        handled = sys.exc_info()[1]
        if handled is not None:  # what this error is raised from, or within
            redact_error(handled)
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

    def _hide(self, secrets: Iterable[str]) -> None:
        """Hide ``secrets`` in every field (see :func:`redact_error`)."""
        for name in ("message", "stream", "path", "detail"):
            value = getattr(self, name, None)
            if isinstance(value, str):
                setattr(self, name, redact(value, secrets))
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


class RedactedError(Exception):
    """An error of another library shown with its type's name and its message redacted.

    What an error whose credentials could not be hidden in place becomes when it is
    pickled (sent from a worker).

    Example:
        >>> str(RedactedError("aiohttp.ClientResponseError", "500, url='http://***@h/a'"))
        "aiohttp.ClientResponseError: 500, url='http://***@h/a'"
    """

    def __init__(self, kind: str, message: str):
        super().__init__(kind, message)
        self.kind, self.message = kind, message

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


#: errors chained to an error that :func:`redact_error` looks at, at most
MAX_CHAIN = 32


def redact_error(error: BaseException, secrets: Iterable[str] = ()) -> BaseException:
    """Hide every credential in ``error`` and in the errors chained to it, in place.

    Each error of the chain (``__cause__``, ``__context__``, their own, ...) has the
    credentials of URLs (and each of ``secrets``) hidden in its ``args``, its message and
    file names (an :class:`OSError`), its notes and its fields (a field that shows one
    becomes its redacted text: a request's headers); one that shows its text another way
    (a ``__str__`` of its own over other fields) becomes an instance of a subclass of its
    type that shows the redacted text (its fields kept, for ``except`` and for the code
    that looks at them), pickled as a :class:`RedactedError`.

    Args:
        error: the error, changed in place.
        secrets: literal values to hide as well (:func:`streamseq._redact.secrets_of`).

    Returns:
        ``error``, to raise.

    Example:
        >>> try:
        ...     raise FileNotFoundError("https://me:pw@host/a.npy?sig=abc")
        ... except OSError as e:
        ...     caught = e
        >>> redact_error(caught) is caught, caught
        (True, FileNotFoundError('https://***@host/a.npy?sig=***'))
    """
    secrets = tuple(secrets)
    todo, seen = [error], set()
    while todo and len(seen) < MAX_CHAIN:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        _hide(e, secrets)
        todo += [e.__context__, e.__cause__]
    return error


def _hide(error: BaseException, secrets: tuple[str, ...]) -> None:
    """Hide the credentials of one error (not of those chained to it), in place."""
    notes = getattr(error, "__notes__", None)
    if isinstance(notes, list):
        error.__notes__ = [redact(n, secrets) if isinstance(n, str) else n for n in notes]
    if isinstance(error, StreamError):
        if secrets:
            error._hide(secrets)
        return
    args = tuple(_hidden(a, secrets) for a in error.args)
    if args != error.args:
        error.args = args
    if isinstance(error, OSError):
        for name in ("filename", "filename2", "strerror"):
            value = getattr(error, name, None)
            if isinstance(value, str) and redact(value, secrets) != value:
                setattr(error, name, redact(value, secrets))
    try:
        text, shown = str(error), repr(error)
    except Exception:
        text = shown = f"{type(error).__qualname__} (its text failed)"
    changed = False
    fields = getattr(error, "__dict__", {})
    for name, value in list(fields.items()):
        hidden = _hidden(value, secrets)
        if hidden is not value and not (isinstance(value, str) and hidden == value):
            fields[name], changed = hidden, True  # (a request's headers, say: their text)
    if changed or redact(text, secrets) != text or redact(shown, secrets) != shown:
        _redacted_text(error, redact(text, secrets), redact(shown, secrets))


def _hidden(value: Any, secrets: tuple[str, ...]) -> Any:
    """An argument of an error with credentials hidden (one that shows them: its text)."""
    if isinstance(value, str):
        return redact(value, secrets)
    try:
        shown = repr(value)
    except Exception:
        return HIDDEN
    return value if redact(shown, secrets) == shown else redact(shown, secrets)


def _redacted_text(error: BaseException, text: str, shown: str) -> None:
    """Make ``error`` show ``text`` (``str``) and ``shown`` (``repr``), whatever its fields."""
    try:
        error.__class__ = _showing(type(error))
    except TypeError:  # a built-in type: its text is its args
        error.args = (text,)
        return
    error._redacted = (text, shown)  # type: ignore[attr-defined]


@functools.cache
def _showing(cls: type) -> type:
    """A subclass of ``cls`` whose instances show their redacted text."""
    return type(
        cls.__name__,
        (cls,),
        {
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "__str__": lambda self: self._redacted[0],
            "__repr__": lambda self: self._redacted[1],
            "__reduce__": lambda self: (
                RedactedError,
                (f"{cls.__module__}.{cls.__qualname__}", self._redacted[0]),
            ),
        },
    )


def mark_where(error: BaseException, where: str) -> None:
    """Note on an exit (``SystemExit``, ``KeyboardInterrupt``) where it was raised, once.

    An exit raised by a stream or a transform is not wrapped in a :class:`StreamError`
    (in the main process it must go on as itself); a worker that stops it names the
    stream and the steps from this note (:func:`where_marked`). The innermost place
    wins: an outer one never replaces it.

    Example:
        >>> e = SystemExit(2)
        >>> mark_where(e, "stream 3 (a.mp4), steps 8:16")
        >>> mark_where(e, "stream 9 (b.mp4), steps 0:8")
        >>> where_marked(e), where_marked(KeyboardInterrupt())
        ('stream 3 (a.mp4), steps 8:16', None)
    """
    if where_marked(error) is None:
        try:
            error._streamseq_where = redact_urls(where)  # type: ignore[attr-defined]
        except AttributeError:  # (an exception type that takes no attributes)
            pass


def where_marked(error: BaseException) -> str | None:
    """Where :func:`mark_where` noted that ``error`` was raised, or ``None``."""
    where = getattr(error, "_streamseq_where", None)
    return where if isinstance(where, str) else None


class WorkerError(RuntimeError):
    """A worker process died (killed, crashed) or a worker thread stopped unexpectedly."""


class WorkerTimeout(WorkerError):
    """The workers delivered nothing for longer than the ``timeout`` they were given."""
