"""Streams of one recording side by side: one stream of dict (or tuple) steps."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ._index import slice_bounds, step_index
from ._tree import leaves, num_steps
from .plan.identities import Identities, zipped_offsets, zipped_readers
from .read.handle import ProcessLocal
from .read.ref import describe, file_offset, identity, is_stream, known_length, reader_of
from .read.stream import _is_array_tree
from .stream_table import StreamTable


class _Opened:
    """A part given as an opener: opened lazily, once per process, never pickled open."""

    def __init__(self, opener: Callable[[], Any], length: int | None, name: str):
        self.opener, self.name = opener, name
        self._opened: ProcessLocal | None = None
        #: how it reads (:func:`~streamseq.read.ref.reader_of`), as the opener says
        self.read_options = reader_of(opener)
        if length is None:
            opened = self._stream()
            self.length = len(opened)
            self.read_options = self.read_options or reader_of(opened)
            self.close()  # measured: not kept open for it
        else:
            self.length = length

    def __repr__(self) -> str:
        return describe(self.opener)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_opened": None}

    def _open(self) -> Any:
        stream = self.opener()
        if _is_array_tree(stream) and not isinstance(stream, list):
            stream = zip_streams(stream)
        if not is_stream(stream):
            raise TypeError(
                f"zip_streams: the opener of {self.name} returned {type(stream).__name__}, "
                "not a stream"
            )
        actual = known_length(stream)
        length = getattr(self, "length", None)  # (None while it is measured)
        if length is not None and actual is not None and actual != length:
            raise ValueError(
                f"zip_streams: {self.name} ({describe(self.opener)}): declared length "
                f"{length} but it has {actual} steps"
            )
        return stream

    def _stream(self) -> Any:
        if self._opened is None:
            self._opened = ProcessLocal(close=_close)
        return self._opened.get(self._open)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, key: int | slice) -> Any:
        return self._stream()[key]

    def close(self) -> None:
        """Close the opened stream (the next read opens it again)."""
        if self._opened is not None:
            self._opened.close()


def _close(stream: Any) -> None:
    close = getattr(stream, "close", None)
    if callable(close):
        close()


class _Zip:
    """Streams of one length read together: step ``i`` holds step ``i`` of each."""

    def __init__(self, streams: dict[Any, Any] | tuple[Any, ...], length: int):
        self.streams = streams
        self.length = length

    def __repr__(self) -> str:
        if isinstance(self.streams, dict):
            inner = ", ".join(f"{k!r}: {v!r}" for k, v in self.streams.items())
            return f"zip_streams({{{inner}}})"
        return f"zip_streams(({', '.join(map(repr, self.streams))},))"

    def __len__(self) -> int:
        return self.length

    def known_length(self) -> int:
        """Its number of steps, known without reading (a declared length is checked)."""
        return self.length

    @property
    def file_offset(self) -> int:
        """What names it across runs with its type: a code of every part's key and name.

        Every part is named as it would be alone (its file, where it starts in it, or its
        type), under its key (:func:`~streamseq.plan.identities.zipped_offsets`), so a
        state of zips of some streams is refused by zips of others of the same lengths.
        """
        keys, parts = self._named_parts()
        return int(zipped_offsets(keys, parts)[0])

    @property
    def read_options(self) -> str:
        """How it reads: every part's reader under its key (``""`` when none names one).

        The text :func:`~streamseq.plan.identities.zipped_readers` gives a zip of tables,
        so a list of zips and a zip of tables name the same streams alike.
        """
        readers = zipped_readers(*self._named_parts())
        return "" if readers is None else readers[0]

    def _named_parts(self) -> tuple[list[str], list[Identities]]:
        """Every part's key and what names it alone (file, offset, reader), in order."""
        keys, parts = [], []
        for key, stream in self._items():  # (the parts of one stream)
            source = stream.opener if isinstance(stream, _Opened) else stream
            at = file_offset(source)
            keys.append(_key_name(key, isinstance(self.streams, dict)))
            offsets = np.array([-1 if at is None else at], np.int64)
            reader = reader_of(stream)
            readers = Identities((reader,), None, 1) if reader else None
            parts.append(Identities((identity(source),), None, 1, offsets, readers))
        return keys, parts

    def _items(self) -> list[tuple[Any, Any]]:
        if isinstance(self.streams, dict):
            return list(self.streams.items())
        return list(enumerate(self.streams))

    def _name(self, key: Any) -> str:
        return repr(key) if isinstance(self.streams, dict) else f"stream {key}"

    def _read(self, key: Any, stream: Any, at: int | slice) -> Any:
        try:
            return stream[at]
        except Exception as e:
            where = f"step {at}" if isinstance(at, int) else f"steps {at.start}:{at.stop}"
            e.add_note(f"zip_streams: reading {self._name(key)}, {where} of {self.length}")
            raise

    def _each(self, at: int | slice) -> dict[Any, Any] | tuple[Any, ...]:
        got = [(key, self._read(key, s, at)) for key, s in self._items()]
        if isinstance(at, slice):
            for (key, stream), (_, data) in zip(self._items(), got, strict=True):
                self._check(key, stream, data, at.start, at.stop)
        if isinstance(self.streams, dict):
            return dict(got)
        return tuple(data for _, data in got)

    def _check(self, key: Any, stream: Any, data: Any, start: int, stop: int) -> None:
        """A part's slice has ``stop - start`` steps, else an error naming it and the steps."""
        try:
            steps = num_steps(data) if leaves(data) else 0
        except (TypeError, ValueError) as e:
            raise ValueError(
                f"zip_streams: {self._name(key)} ({describe(stream)}): steps {start}:{stop} "
                f"are not arrays with a step axis: {e}"
            ) from e
        if steps != stop - start:
            raise ValueError(
                f"zip_streams: {self._name(key)} ({describe(stream)}) gave {steps} steps for "
                f"steps {start}:{stop} of {self.length}: its len() says {len(stream)} steps "
                "but it has fewer"
            )

    def __getitem__(self, key: int | slice) -> dict[Any, Any] | tuple[Any, ...]:
        if isinstance(key, slice):
            return self._each(slice(*slice_bounds(key, self.length)))  # clamped like numpy's
        return self._each(step_index(key, self.length))

    def close(self) -> None:
        """Close every stream that can be closed (each reopens on its next read)."""
        values = self.streams.values() if isinstance(self.streams, dict) else self.streams
        for stream in values:
            close = getattr(stream, "close", None)
            if callable(close):
                close()


def _part(stream: Any, name: str, length: int | None) -> Any:
    """A part as a stream: a dict (or tuple) of arrays zipped, an opener wrapped."""
    if isinstance(stream, Mapping) or (isinstance(stream, tuple) and _is_array_tree(stream)):
        try:
            return zip_streams(stream, length=length)
        except ValueError as e:
            raise ValueError(
                f"zip_streams: {name}: {str(e).removeprefix('zip_streams: ')}"
            ) from None
    if is_stream(stream):
        return stream
    if callable(stream):
        return _Opened(stream, length, name)
    raise TypeError(
        f"zip_streams: {name} ({describe(stream)}) is neither a stream (len and slicing), "
        "a dict of streams nor an opener"
    )


def zip_streams(
    streams: Mapping[Any, Any] | Sequence[Any],
    *,
    length: int | None = None,
) -> _Zip | StreamTable:
    """Put streams of one length side by side: one stream whose steps hold a step of each.

    The streams of one recording (its video, the rows of its table, its labels) become one
    stream, which the loader reads as any other: step ``i`` is a dict ``{key: step i of
    that stream}`` (a tuple for a tuple of streams), and ``s[a:b]`` a dict (or tuple) of
    each stream's slice ``a:b``, so that a batch's ``data`` is a dict of arrays
    ``[B, T, ...]``. A part may be a stream, a dict (or tuple) of arrays or streams (its
    length: theirs, which must agree; its steps: dicts), or a picklable zero-argument
    opener, called in the process that reads (measured here once, unless ``length`` is
    given). The lengths are compared here, once; nothing is read until a step is, and
    every slice read is checked to have its number of steps. The zipped stream is
    picklable when its parts are (the sources of :mod:`streamseq.io` are, and open their
    files in the process that reads), and its ``close`` closes them.

    Args:
        streams: a dict of parts (any key), or a tuple (or list) of parts, of one length.
        length: the declared number of steps: spares opening the opener parts to measure
            them; checked against the parts whose length costs nothing to know.

    Returns:
        A stream of ``len`` the parts' length, of dict (or tuple) steps. A loader's
        declared length (``lengths=``) is checked against it. Tables of streams
        (:class:`~streamseq.StreamTable`) of the same lengths give a table: its stream
        ``i`` zips stream ``i`` of each.

    Raises:
        ValueError: no part given, a part of another length than the first (or than
            ``length``), naming both keys (positions for a tuple) and their lengths; a
            slice read from a part that has fewer steps than its length says, naming the
            part and the steps.
        TypeError: a part that is neither a stream, a dict nor an opener.

    Example:
        >>> import numpy as np
        >>> s = zip_streams({"frame": np.zeros((4, 2, 2), np.uint8), "state": np.arange(4.0)})
        >>> len(s), s[1:3]["state"], s[-1]["frame"].shape
        (4, array([1., 2.]), (2, 2))
        >>> zip_streams((np.arange(4), np.arange(3)))
        Traceback (most recent call last):
        ...
        ValueError: zip_streams: stream 1 has 3 steps, stream 0 has 4
    """
    tables = streams.values() if isinstance(streams, Mapping) else streams
    if tables and all(isinstance(t, StreamTable) for t in tables):
        return _zip_tables(streams, length)
    if isinstance(streams, Mapping):
        given: list[tuple[Any, Any]] = list(dict(streams).items())
        name = repr
    else:
        given = list(enumerate(streams))
        name = "stream {}".format  # noqa: UP032 - applied to each key
    if not given:
        raise ValueError("zip_streams: no stream given")
    if length is not None:
        from ._checks import check_int

        length = int(check_int(length, "length", 0))
    items = [(key, _part(stream, name(key), length)) for key, stream in given]
    first_key, first = items[0]
    if length is not None:
        for key, stream in items:
            if len(stream) != length:
                raise ValueError(
                    f"zip_streams: {name(key)} has {len(stream)} steps, the declared length "
                    f"is {length}"
                )
    size = len(first)
    for key, stream in items[1:]:
        if len(stream) != size:
            raise ValueError(
                f"zip_streams: {name(key)} has {len(stream)} steps, {name(first_key)} has {size}"
            )
    if isinstance(streams, Mapping):
        return _Zip(dict(items), size)
    return _Zip(tuple(stream for _, stream in items), size)


def _key_name(key: Any, named: bool) -> str:
    """How a part's key names it in a zip's identity: ``repr`` of a dict's key, a position."""
    return repr(key) if named else str(key)


def _zip_tables(tables: Mapping[Any, Any] | Sequence[Any], length: int | None) -> StreamTable:
    """The table whose stream ``i`` zips stream ``i`` of every table (of equal lengths)."""
    if length is not None:
        raise ValueError("zip_streams: tables of streams have their lengths; give no length")
    if isinstance(tables, Mapping):
        keys: tuple | None = tuple(tables)
        parts = tuple(tables.values())
        name = repr
    else:
        keys, parts = None, tuple(tables)
        name = "stream {}".format  # noqa: UP032 - applied to each key
    first = parts[0]
    for j, part in enumerate(parts[1:], 1):
        key, first_key = (keys[j], keys[0]) if keys is not None else (j, 0)
        if len(part) != len(first):
            raise ValueError(
                f"zip_streams: table {name(key)} has {len(part)} streams, "
                f"{name(first_key)} has {len(first)}"
            )
        differ = np.flatnonzero(part.lengths != first.lengths)
        if len(differ):
            i = int(differ[0])
            raise ValueError(
                f"zip_streams: stream {i} of table {name(key)} has {int(part.lengths[i])} "
                f"steps, that of {name(first_key)} has {int(first.lengths[i])}"
            )
    make = functools.partial(_zipped, keys, parts)
    index = [np.arange(len(first), dtype=np.int64)]
    # every zip is named by its type and what it zips, as a list of zips names them
    # (_Zip.file_offset): the parts' identities, as arrays
    names = [_key_name(k, keys is not None) for k in (keys or range(len(parts)))]
    named = [part.identities for part in parts]
    codes = zipped_offsets(names, named)
    identities = Identities.repeat(_Zip.__name__, len(first), codes)
    identities = identities.with_readers(zipped_readers(names, named))
    return StreamTable(make, first.lengths, index, identities=identities)


def _zipped(keys: tuple | None, parts: tuple, i: int, length: int) -> _Zip:
    """Stream ``i`` of every table of ``parts``, zipped (under ``keys``, when a dict)."""
    streams = [part[i] for part in parts]
    if keys is None:
        return zip_streams(tuple(streams), length=length)  # type: ignore[return-value]
    return zip_streams(dict(zip(keys, streams, strict=True)), length=length)  # type: ignore[return-value]
