"""Common machinery of the sources: slicing rules and the per-process handle.

A source is a picklable sequence of timesteps. Whatever it reads from (a decoder, a
memory map) is its handle: a :class:`~streamseq.read.handle.ProcessLocal`, opened on the
first read in the process that reads, made anew in a forked child (which never frees the
parent's) and dropped when the source is pickled for a spawned worker.
"""

from __future__ import annotations

import copy
import errno
import operator
import os
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from streamseq.read.handle import ProcessLocal

_S = TypeVar("_S", bound="Source")


def check_file(path: str | os.PathLike) -> str:
    """Return ``path`` as a string, raising :class:`FileNotFoundError` if it does not exist.

    Example:
        >>> check_file("no/such/file")
        Traceback (most recent call last):
        ...
        FileNotFoundError: [Errno 2] No such file or directory: 'no/such/file'
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    return path


def slice_bounds(key: slice, n: int) -> tuple[int, int]:
    """Clamp ``key`` to ``[0, n]`` like numpy; steps other than 1 raise :class:`ValueError`.

    Example:
        >>> slice_bounds(slice(-3, None), 10), slice_bounds(slice(7, 2), 10)
        ((7, 10), (7, 7))
    """
    if key.step not in (None, 1):
        raise ValueError(f"only contiguous slices are supported, got step {key.step}")
    a, b, _ = key.indices(n)
    return a, max(a, b)


class Source:
    """Base of the sources: dispatches indexing and holds the per-process handle.

    Subclasses implement ``__len__``, ``_open()`` (returns the handle for this process),
    ``_read(handle, a, b)`` (steps ``a`` to ``b``, ``0 <= a < b <= len``) and
    ``_empty()`` (an array with no step).

    Args:
        close: releases a handle (a plain function, not a method: the handle outlives
            nothing it refers to); ``None`` when dropping the handle is enough.
    """

    def __init__(self, close: Callable[[Any], Any] | None = None) -> None:
        self._handle: ProcessLocal[Any] = ProcessLocal(close=close)

    def __getitem__(self, key: int | slice) -> Any:
        n = len(self)
        if isinstance(key, slice):
            a, b = slice_bounds(key, n)
            if a == b:
                return self._empty()
            return self._locked_read(a, b)
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
        return _first(self._locked_read(i, i + 1))

    def _locked_read(self, a: int, b: int) -> Any:
        with self._lock():
            return self._read(self._handle.get(self._open), a, b)

    def _lock(self) -> Any:
        """The lock of this process's handle.

        A handle inherited through a fork is dropped first, and with it a lock that a
        thread of the parent may have held.
        """
        self._handle.peek()
        return self._handle.lock

    def _restart(self) -> Any:
        """Open a new handle for this process in place of the current one, and return it."""
        handle = self._open()
        self._handle.set(handle)
        return handle

    def close(self) -> None:
        """Release the handle of this process; the next read opens it again."""
        with self._lock():
            self._handle.close()

    def replace(self: _S, **changes: Any) -> _S:
        """A copy of this source with the given attributes changed, and a handle of its own.

        The copy shares everything else with this source (what its file was probed for,
        the settings left as they are) but nothing open: it opens its own handle (a
        decoder, a file, a memory map) on its first read in a process, as a new source
        does, whether it is read here, in a forked worker or after pickling. Reading
        either one never moves the other. This source is left unchanged.

        Attributes are set as given: what a source derives from them when it is made is
        not derived again (change it too, e.g. ``length``).

        Args:
            **changes: names of attributes of the source and their new values.

        Returns:
            The copy, of the type of this source.

        Raises:
            AttributeError: a name is not an attribute of the source.

        Example:
            >>> import numpy as np
            >>> from streamseq.io import events
            >>> ev = np.zeros(3, [("t", "<i8"), ("x", "<u2"), ("y", "<u2"), ("p", "i1")])
            >>> ev["t"] = [0, 5, 25]
            >>> e = events(ev, window_us=10, height=1, width=1)
            >>> wide = e.replace(window_us=20, length=2)
            >>> (len(e), e.window_us), (len(wide), wide.window_us)
            ((3, 10), (2, 20))
            >>> float(wide[0].sum()), wide._handle is e._handle
            (2.0, False)
        """
        for name in changes:
            if not _has_attribute(self, name):
                raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        other = copy.copy(self)
        for name, value in changes.items():
            setattr(other, name, value)
        other._handle = other._new_handle()
        return other

    def _new_handle(self) -> ProcessLocal[Any]:
        """A handle for a copy of this source (see :meth:`replace`): none open yet."""
        return copy.copy(self._handle)

    def step_spec(self) -> tuple[np.dtype, tuple[int, ...]] | None:
        """The dtype and shape of one step, when known without reading; else ``None``.

        What the source learnt when it was made (a file header) or from a probe already
        done; it never opens, decodes or demuxes anything. The loader compares the
        streams with it when it is built. Sources that deliver one array per step
        override it; this default knows nothing.

        Example:
            >>> Source().step_spec() is None
            True
        """
        return None

    def _open(self) -> Any:
        raise NotImplementedError

    def _read(self, handle: Any, a: int, b: int) -> Any:
        raise NotImplementedError

    def _empty(self) -> Any:
        raise NotImplementedError


def _has_attribute(obj: Any, name: str) -> bool:
    """Whether ``obj`` has the data attribute ``name`` (a property is never evaluated)."""
    if name in getattr(obj, "__dict__", {}):
        return True
    slots = (getattr(cls, "__slots__", ()) for cls in type(obj).__mro__)
    return any(name in ((s,) if isinstance(s, str) else s) for s in slots) and hasattr(obj, name)


def _first(x: Any) -> Any:
    """First step of a block of steps (an array, or a tuple or dict of arrays)."""
    if isinstance(x, tuple):
        return tuple(v[0] for v in x)
    if isinstance(x, dict):
        return {k: v[0] for k, v in x.items()}
    return x[0]
