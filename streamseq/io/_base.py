"""Common machinery of the sources: slicing rules, a per-process lazy handle, media files.

A source is a picklable sequence of timesteps. Whatever it reads from (a decoder, a
memory map) is opened on the first read in the process that reads, remembered with that
process id, reopened when the object is used in another process (after a fork) and
dropped when the object is pickled (for a spawned worker).

A forked child must not free what it inherited either: FFmpeg decoders and scalers own
threads that exist only in the parent, and freeing them in the child waits for those
threads forever. Right after a fork, the child therefore detaches the handles of every
live source and keeps them, unused, for its whole life.
"""

from __future__ import annotations

import ctypes
import errno
import operator
import os
import threading
import weakref
from typing import Any

import av

from streamseq.errors import SourceError


def check_file(path: str | os.PathLike) -> str:
    """Return ``path`` as a string, raising :class:`FileNotFoundError` if it does not exist."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    return path


def slice_bounds(key: slice, n: int) -> tuple[int, int]:
    """Clamp ``key`` to ``[0, n]`` like numpy; steps other than 1 raise :class:`ValueError`."""
    if key.step not in (None, 1):
        raise ValueError(f"only contiguous slices are supported, got step {key.step}")
    a, b, _ = key.indices(n)
    return a, max(a, b)


def open_media(path: str, kind: str, stream_index: int) -> tuple[Any, Any]:
    """Open a media file with PyAV and find one of its streams.

    Args:
        path: The file.
        kind: ``"audio"`` or ``"video"``.
        stream_index: Which stream of that kind, counting from 0.

    Returns:
        The open container and the stream; the caller closes the container.

    Raises:
        FileNotFoundError: If the file does not exist.
        SourceError: Naming the file, if PyAV cannot open it or it has no such stream.
    """
    check_file(path)
    try:
        container = av.open(path, metadata_errors="ignore")
    except av.error.FFmpegError as e:
        raise SourceError(path, f"cannot open: {e}") from e
    try:
        return container, getattr(container.streams, kind)[stream_index]
    except IndexError:
        container.close()
        raise SourceError(path, f"no {kind} stream {stream_index}") from None


_LIVE: weakref.WeakSet[Source] = weakref.WeakSet()


def _detach_inherited_handles() -> None:
    """In a forked child: detach the parent's handles without ever freeing them."""
    for source in list(_LIVE):
        handle = source.__dict__.get("_handle")
        if handle is not None:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(handle))  # never deallocated
        source._handle = None
        source._pid = None
        source._lock = threading.Lock()  # may have been held by another thread


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_detach_inherited_handles)


class Source:
    """Base of the sources: dispatches indexing and manages the per-process handle.

    Subclasses implement ``__len__``, ``_open()`` (returns the handle for this process),
    ``_read(handle, a, b)`` (steps ``a`` to ``b``, ``0 <= a < b <= len``) and
    ``_empty()`` (an array with no step); they may override ``_close(handle)``.
    """

    def __init__(self) -> None:
        self._handle: Any = None
        self._pid: int | None = None
        self._lock = threading.Lock()
        _LIVE.add(self)

    def __getitem__(self, key: int | slice) -> Any:
        n = len(self)
        if isinstance(key, slice):
            a, b = slice_bounds(key, n)
            if a == b:
                return self._empty()
            with self._lock:
                return self._read(self._get_handle(), a, b)
        try:
            i = operator.index(key)  # ints and numpy integers, not floats or strings
        except TypeError:
            raise TypeError(
                f"indices must be integers or slices, not {type(key).__name__}"
            ) from None
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {key} out of range for a stream of length {n}")
        with self._lock:
            return _first(self._read(self._get_handle(), i, i + 1))

    def _get_handle(self) -> Any:
        pid = os.getpid()
        if self._handle is None or self._pid != pid:
            if self._handle is not None:  # from another process: never use nor free it
                ctypes.pythonapi.Py_IncRef(ctypes.py_object(self._handle))
            self._handle = self._open()
            self._pid = pid
        return self._handle

    def _set_handle(self, handle: Any) -> None:
        """Replace the handle of this process (closing the old one)."""
        old, self._handle = self._handle, handle
        if old is not None and old is not handle:
            self._close(old)
        self._pid = os.getpid()

    def _restart(self) -> Any:
        """Open a new handle for this process in place of the current one, and return it."""
        handle = self._open()
        self._set_handle(handle)
        return handle

    def close(self) -> None:
        """Release the file handle of this process; the next read opens it again."""
        with self._lock:
            handle, self._handle = self._handle, None
            if handle is not None:
                if self._pid == os.getpid():
                    self._close(handle)
                else:  # from another process: never use nor free it
                    ctypes.pythonapi.Py_IncRef(ctypes.py_object(handle))

    def _close(self, handle: Any) -> None:
        pass

    def _open(self) -> Any:
        raise NotImplementedError

    def _read(self, handle: Any, a: int, b: int) -> Any:
        raise NotImplementedError

    def _empty(self) -> Any:
        raise NotImplementedError

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_handle"] = None
        state["_pid"] = None
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        _LIVE.add(self)

    def __del__(self) -> None:
        try:
            if self._handle is not None and self._pid == os.getpid():
                self._close(self._handle)
        except Exception:  # interpreter shutdown, half-built object
            pass


def _first(x: Any) -> Any:
    """First step of a block of steps (an array, or a tuple or dict of arrays)."""
    if isinstance(x, tuple):
        return tuple(v[0] for v in x)
    if isinstance(x, dict):
        return {k: v[0] for k, v in x.items()}
    return x[0]
