"""What crosses a worker process's pipes: messages, items packed for pickling, errors.

Errors travel as themselves with their chain of causes, and the worker's traceback as a
note; one that would not unpickle in the main process arrives as a
:class:`~streamseq.errors.WorkerError` describing it, never as an unrelated error.
"""

from __future__ import annotations

import multiprocessing.connection
import pickle
import select
import traceback
from typing import Any

import numpy as np

from ..errors import WorkerError

MAX_CAUSES = 8


def message(value: Any) -> bytes:
    """``value`` (ints, tuples, bytes) as the bytes of one message on a pipe.

    Plain pickle: ``Connection.send`` builds a ``ForkingPickler`` for each message,
    copying the table of reducers that torch registers (~10 us).

    Example:
        >>> pickle.loads(message((3, None)))
        (3, None)
    """
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


class Packed:
    """A tuple of arrays (a :class:`~streamseq.Batch`), pickled as buffers and specs.

    Its buffers, dtypes and shapes: four times cheaper than numpy's reduction of each
    array; the main process gets the same views of the slot as with numpy's.
    """

    def __init__(self, value: tuple):
        self.value = value

    def __reduce__(self) -> tuple:
        v = self.value
        buffers = [pickle.PickleBuffer(a) for a in v]
        specs = [(a.dtype.str, a.shape) for a in v]
        own = getattr(v, "__dict__", None) or None  # (a Batch's lookahead)
        return _unpack, (type(v), buffers, specs, own)


def _unpack(
    cls: type, buffers: list[Any], specs: list[tuple[str, tuple]], own: dict | None = None
) -> tuple:
    arrays = [np.frombuffer(b, d).reshape(s) for b, (d, s) in zip(buffers, specs, strict=True)]
    out = cls._make(arrays) if hasattr(cls, "_make") else cls(arrays)
    if own:
        out.__dict__.update(own)
    return out


def pack(value: Any) -> Any:
    """``value``, wrapped in :class:`Packed` when it is a tuple of plain arrays.

    Example:
        >>> type(pack((np.zeros(2), np.ones(3)))).__name__, pack([1])
        ('Packed', [1])
    """
    if isinstance(value, tuple) and value:
        for a in value:
            if (
                type(a) is not np.ndarray
                or not a.flags.c_contiguous
                or not a.dtype.isbuiltin
                or a.dtype.hasobject
            ):
                return value
        return Packed(value)
    return value


def _alone(error: BaseException, text: str) -> tuple[bytes, bool]:
    """``error`` pickled without its cause, context and traceback, checked to unpickle.

    Returns the payload and whether it is a description instead: an exception whose
    ``__init__`` takes other arguments than its ``args`` pickles but fails to unpickle;
    it is replaced by a WorkerError describing it, with the worker's traceback ``text``.
    """
    links = error.__cause__, error.__context__, error.__traceback__
    error.__cause__ = error.__context__ = error.__traceback__ = None
    try:
        payload = pickle.dumps(error, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(payload)
        return payload, False
    except Exception as e:
        why = f"not sent as itself: {type(e).__name__}: {e}"
        described = WorkerError(f"{type(error).__qualname__}: {error} ({why})\n{text}")
        return pickle.dumps(described, protocol=pickle.HIGHEST_PROTOCOL), True
    finally:
        error.__cause__, error.__context__, error.__traceback__ = links


def dump_error(error: BaseException) -> bytes:
    """``error``, its causes and its traceback as bytes for :func:`load_error`.

    Example:
        >>> try:
        ...     raise KeyError("frame") from OSError("disk")
        ... except KeyError as e:
        ...     again = load_error(dump_error(e))
        >>> again, again.__cause__
        (KeyError('frame'), OSError('disk'))
    """
    text = "".join(traceback.format_exception(error)).rstrip()
    chain, e = [], error
    while e is not None and len(chain) < MAX_CAUSES:
        chain.append(_alone(e, text))
        e = e.__cause__
    return pickle.dumps((chain, text), protocol=pickle.HIGHEST_PROTOCOL)


def load_error(payload: bytes) -> BaseException:
    """The error that :func:`dump_error` sent, causes chained, the worker's traceback noted.

    An error that would not unpickle arrives described (a WorkerError whose message has
    the worker's traceback); so does one whose class the main process cannot import.

    Example:
        >>> again = load_error(dump_error(KeyError("frame 3")))
        >>> again, again.__notes__[0].splitlines()[0]
        (KeyError('frame 3'), 'raised in a worker process:')
    """
    chain, text = pickle.loads(payload)
    try:
        errors = [pickle.loads(link) for link, _ in chain]
    except Exception as e:
        return WorkerError(f"an error that did not unpickle ({type(e).__name__}: {e}):\n{text}")
    for error, cause in zip(errors, errors[1:], strict=False):
        error.__cause__ = cause
    first, described = errors[0], chain[0][1]
    if not described:  # (shown by tracebacks from Python 3.11 on)
        first.__notes__ = [
            *getattr(first, "__notes__", ()),
            f"raised in a worker process:\n{text}",
        ]
    return first


class Poller:
    """Wait until pipes can be read, with one poll object made once.

    ``multiprocessing.connection.wait`` builds and tears down a selector at every call
    (tens of microseconds, per item on both ends of a pipe); where ``select.poll`` is
    missing it is used all the same. A pipe whose other end closed counts as readable
    (its next read raises EOFError).
    """

    def __init__(self, pipes: list[Any]):
        self.pipes = list(pipes)
        self.poller = select.poll() if hasattr(select, "poll") else None
        self.by_fd = {}
        for pipe in self.pipes:
            if self.poller is not None:
                self.poller.register(pipe.fileno(), select.POLLIN)
            self.by_fd[pipe.fileno()] = pipe

    def wait(self, timeout: float) -> list[Any]:
        """The pipes readable within ``timeout`` seconds (empty: none)."""
        if self.poller is None:
            return multiprocessing.connection.wait(self.pipes, timeout)
        return [self.by_fd[fd] for fd, _ in self.poller.poll(timeout * 1000)]
