"""Common machinery of the sources: slicing rules, the per-process handle, file checks.

A source is a picklable sequence of timesteps. Whatever it reads from (a decoder, a
memory map) is its handle: a :class:`~streamseq.read.handle.ProcessLocal`, opened on the
first read in the process that reads, made anew in a forked child (which never frees the
parent's) and dropped when the source is pickled for a spawned worker.

A source that reads a file records, when it is made (when what its length depends on is
measured), what identifies the file: its inode, size and modification time (with what a
source adds, the header of a ``.npy`` file), or the ETag a server gives (else its size and
last modification). The record travels with the source to the workers. Every time a
handle is opened, in any process, the file is measured again (a ``stat``, a request for a
URL) and a file that changed is a :class:`~streamseq.errors.SourceError` saying what
changed, instead of steps read from another file than the one planned. A handle already
open is not checked again: it keeps reading what it opened (a file replaced by a rename
leaves the open one, the planned data, in place; a file rewritten in place under an open
handle is the one change this does not catch, but for a local token file's memory map,
whose open file :func:`~streamseq.io.tokens` measures at every read, and a local media
file's decoder, measured after each decoding).
"""

from __future__ import annotations

import copy
import datetime
import errno
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np

from streamseq._index import slice_bounds, step_index
from streamseq.errors import SourceError
from streamseq.io.remote import is_url
from streamseq.read.handle import ProcessLocal, current_pid

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


def file_state(path: str, st: os.stat_result | None = None) -> dict[str, Any]:
    """What identifies the content of a local file: its size, modification time and inode.

    Args:
        path: the file.
        st: its ``stat`` already taken (an ``os.fstat`` of the file opened), if any.

    Raises:
        FileNotFoundError: the file does not exist.

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile() as f:
        ...     sorted(file_state(f.name))
        ['inode', 'mtime_ns', 'size']
    """
    st = os.stat(path) if st is None else st
    return {"size": int(st.st_size), "mtime_ns": int(st.st_mtime_ns), "inode": int(st.st_ino)}


def _when(ns: int) -> str:
    """A modification time in nanoseconds as an ISO time (UTC, microseconds)."""
    moment = datetime.datetime.fromtimestamp(ns / 1e9, datetime.timezone.utc)
    return moment.isoformat(sep=" ", timespec="microseconds").replace("+00:00", " UTC")


#: how a change of each field of a file's state is told, in this order
_CHANGES: dict[str, Callable[[Any, Any], str]] = {
    "npy": lambda old, new: "no longer a readable .npy file",
    "dtype": lambda old, new: f"dtype {old} -> {new}",
    "shape": lambda old, new: f"shape {old} -> {new}",
    "order": lambda old, new: f"order {old} -> {new}",
    "offset": lambda old, new: f"data offset {old} -> {new} bytes",
    "size": lambda old, new: f"size {old} -> {new} bytes",
    "etag": lambda old, new: "ETag changed",
    "mtime": lambda old, new: f"last modified {old} -> {new}",
    "inode": lambda old, new: "replaced by another file (a new inode)",
    "mtime_ns": lambda old, new: f"modified {_when(old)} -> {_when(new)}",
    "ctime_ns": lambda old, new: "written again at the same size and time (its ctime changed)",
}


def state_changes(before: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """What differs between two states of a file, told in words (fields in both only).

    Example:
        >>> state_changes({"size": 4000, "dtype": "int32"}, {"size": 8000, "dtype": "float32"})
        ['dtype int32 -> float32', 'size 4000 -> 8000 bytes']
        >>> state_changes({"etag": "a", "mtime_ns": 1}, {"etag": "b"})
        ['ETag changed']
    """
    changed = [k for k in before if k in now and before[k] != now[k]]
    order = {k: i for i, k in enumerate(_CHANGES)}
    changed.sort(key=lambda k: order.get(k, len(order)))
    return [_change(k, before[k], now[k]) for k in changed]


def changed_error(where: str, changes: list[str], during: str = "") -> SourceError:
    """The error of a file that changed since its source was made (``changes`` in words).

    ``during``: when it was seen, told after the changes (``"while it was decoded"``).

    Example:
        >>> changed_error("a.bin", ["size 4 -> 2 bytes"], "while it was read").detail[:60]
        'changed since the source was made (size 4 -> 2 bytes, while '
    """
    told = ", ".join([*changes, during] if during else changes)
    return SourceError(
        where,
        f"changed since the source was made ({told}): its steps would not be the ones "
        "planned; make the source again to read the new file",
    )


def _change(field: str, old: Any, new: Any) -> str:
    """How a change of one field of a file's state is told."""
    tell = _CHANGES.get(field)
    return tell(old, new) if tell is not None else f"{field} {old} -> {new}"


#: seconds within which a source made to be read need not measure its file at a URL again
FRESH = 1.0


class Source:
    """Base of the sources: dispatches indexing and holds the per-process handle.

    Subclasses implement ``__len__``, ``_open()`` (returns the handle for this process),
    ``_read(handle, a, b)`` (steps ``a`` to ``b``, ``0 <= a < b <= len``) and
    ``_empty()`` (an array with no step).

    Args:
        close: releases a handle (a plain function, not a method: the handle outlives
            nothing it refers to); ``None`` when dropping the handle is enough.
    """

    #: what identified the file when the source was made (``None``: nothing to check)
    _file_state: dict[str, Any] | None = None
    #: the process and the time (monotonic) of that measure
    _measured: tuple[int, float] = (-1, 0.0)
    #: made by an opener to be read at once (see :meth:`made_to_read`)
    _to_read = False

    def __init__(self, close: Callable[[Any], Any] | None = None) -> None:
        self._handle: ProcessLocal[Any] = ProcessLocal(close=close)

    @property
    def on_network(self) -> bool:
        """Whether reading may wait on a network, not only on this process's work.

        False for a source of a local file (its ``path``, not a URL); True for a file at
        a URL, and for a source that names no file (what it waits on is not known).

        Example:
            >>> import os, tempfile
            >>> import numpy as np
            >>> from streamseq.io import tokens
            >>> path = os.path.join(tempfile.mkdtemp(), "tokens.npy")
            >>> np.save(path, np.arange(4))
            >>> tokens(path).on_network
            False
        """
        if getattr(self, "_remote", None) is not None:
            return True
        path = getattr(self, "path", None)
        return not isinstance(path, str) or is_url(path)

    def __getitem__(self, key: int | slice) -> Any:
        n = len(self)
        if isinstance(key, slice):
            a, b = slice_bounds(key, n)
            if a == b:
                return self._empty()
            return self._locked_read(a, b)
        i = step_index(key, n)
        return _first(self._locked_read(i, i + 1))

    def _locked_read(self, a: int, b: int) -> Any:
        with self._lock():
            return self._read(self._handle.get(self._open_checked), a, b)

    def read_into(self, start: int, stop: int, out: np.ndarray) -> int | None:
        """Write steps ``start:stop`` straight into ``out``, when this source can.

        The loader gives the rows of a batch (in shared memory with workers) to a source
        read without a transform, so that its steps are made where they are delivered,
        without an array of their own and a copy of it. ``out`` is of ``stop - start``
        steps of the batch's dtype and step shape.

        Returns:
            The steps written (fewer: the stream ended early), or ``None`` when the
            source writes nothing for this (another dtype or step shape, a kind of read
            it does not write in place): the caller then reads with ``source[start:stop]``.

        Example:
            >>> Source().read_into(0, 2, np.empty((2,), np.int64)) is None  # (the default)
            True
        """
        return None

    def _open_checked(self) -> Any:
        """A new handle (:meth:`_open`), once the file is found unchanged since it was made.

        The file is measured after it is opened: a change before then is seen (a file
        replaced by a rename after the opening is reported too, although the handle reads
        the former one). A failure to open a file that changed is reported as the change.

        Raises:
            SourceError: the file changed (the handle just opened is released).
        """
        try:
            handle = self._open()
        except Exception as e:
            try:
                changed = self._change()
            except Exception:  # measuring failed too: the failure to open tells more
                raise e from None
            if changed is not None:
                raise changed from e
            raise
        try:
            if not self._just_measured():
                self._check_unchanged()
        except BaseException:
            self._handle.set(handle)  # released with the source's close function
            self._handle.close()
            raise
        return handle

    def made_to_read(self, length: int | None = None) -> None:
        """Say that this source was made to be read at once, in this process.

        The loader says it of the sources its openers make in the process that reads
        them. The first handle opened then spares a second measure of a file at a URL
        (a request) when the source measured it in this process less than
        :data:`FRESH` seconds before.

        Args:
            length: the steps the loader was told the stream has (``lengths=``, or
                measured by :func:`~streamseq.io.probe_lengths`); a source that would
                otherwise measure its length to read may take it instead (a video its
                ``length=``).
        """
        self._to_read = True

    def _just_measured(self) -> bool:
        """Whether the file at a URL was measured here just now, for a source made to read.

        True at most once: the next handle measures the file again.
        """
        pid, when = self._measured
        fresh = (
            self._to_read
            and getattr(self, "_remote", None) is not None
            and pid == current_pid()
            and time.monotonic() - when < FRESH
        )
        self._to_read = False
        return fresh

    def _record_state(self, state: dict[str, Any] | None = None) -> None:
        """Record what identifies the file now (``state`` when measured already)."""
        self._file_state = self._current_state() if state is None else state
        self._measured = (current_pid(), time.monotonic())

    def _current_state(self) -> dict[str, Any]:
        """What identifies the file of the source now: a ``stat``, or a request for a URL.

        Sources with a file set ``path`` (and ``_remote`` for a URL); a source adds what
        it reads of the file (a header) by extending this.
        """
        remote = getattr(self, "_remote", None)
        if remote is not None:
            return remote.current_state()
        return file_state(self.path)  # type: ignore[attr-defined]

    def _check_unchanged(self) -> None:
        """Raise a :class:`SourceError` when the file differs from the one recorded.

        Nothing is checked for a source that recorded nothing (no file).
        """
        changed = self._change()
        if changed is not None:
            raise changed

    def _change(self) -> SourceError | None:
        """The error saying how the file changed since it was recorded, or ``None``.

        Raises:
            OSError, SourceError: the file could not be measured (a URL that cannot be
                reached, say).
        """
        if self._file_state is None:
            return None
        try:
            changes = state_changes(self._file_state, self._current_state())
        except FileNotFoundError:
            changes = ["the file no longer exists"]
        if not changes:
            return None
        remote = getattr(self, "_remote", None)
        where = remote.public_url if remote is not None else self.path  # type: ignore[attr-defined]
        return changed_error(where, changes)

    def _lock(self) -> Any:
        """The lock of this process's handle.

        A handle inherited through a fork is dropped first, and with it a lock that a
        thread of the parent may have held.
        """
        self._handle.peek()
        return self._handle.lock

    def _restart(self) -> Any:
        """Open a new handle for this process in place of the current one, and return it."""
        handle = self._open_checked()
        self._handle.set(handle)
        return handle

    def close(self) -> None:
        """Release the handle of this process; the next read opens it again."""
        with self._lock():
            self._handle.close()

    def replace(self: _S, **changes: Any) -> _S:
        """A copy of this source with the given attributes changed, and a handle of its own.

        The copy shares everything else with this source (what its file was probed for,
        the record of the file it checks when it opens it, the settings left as they
        are) but nothing open: it opens its own handle (a decoder, a file, a memory map)
        on its first read in a process, as a new source does, whether it is read here,
        in a forked worker or after pickling. Reading either one never moves the other.
        This source is left unchanged.

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
