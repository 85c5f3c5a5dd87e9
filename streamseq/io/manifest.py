"""A manifest: a Parquet or CSV table of files of one kind, as a table of streams.

A corpus of a million video files cannot be probed to be planned (a demuxing pass a
file), nor made into a million stream objects to be counted. A manifest lists the files
with their lengths, measured once when the corpus was written: :func:`manifest` reads the
table with pyarrow, checks its columns as arrays, and returns a
:class:`~streamseq.StreamTable` whose lengths are the ``length`` column (no file is opened
to plan) and whose stream ``i`` is made from row ``i`` only when it is read, with the
kind's reader (:func:`~streamseq.io.video`, :func:`~streamseq.io.audio`,
:func:`~streamseq.io.tokens`, :func:`~streamseq.io.events`) and the options given.

The paths are kept as one UTF-8 buffer and one array of offsets (as Arrow keeps them), so
a manifest pickles to a few arrays whatever its number of rows: what a worker receives is
never an object per file. A stream's identity (what names it in states and plan keys) is
its path as the reader gets it, so a manifest and the list of the same ``io.<kind>(path)``
streams plan the same rows and give the same states; a row that is a range of steps of its
file (a ``start``: a step, or a video's window) is named by where it starts too, as the
list of the manifest's rows names it, so two selections of parts of one file refuse each
other's states.

pyarrow is imported only when a manifest is read (``pip install 'streamseq[table]'``).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from streamseq._files import missing
from streamseq._redact import redact_urls
from streamseq._tree import leaves
from streamseq.errors import SourceError
from streamseq.io import remote
from streamseq.io._base import Source
from streamseq.io._options import read_options
from streamseq.io.audio import audio
from streamseq.io.events import events
from streamseq.io.tokens import tokens
from streamseq.io.video import _CHANNELS, start_us, video
from streamseq.plan.identities import BLOCK, Identities
from streamseq.stream_table import StreamTable

#: what starts a URL (``protocol://``), as :func:`streamseq.io.remote.is_url` tells
_URL = remote._URL.pattern
#: the readers a manifest's rows can be read with
READERS = {"audio": audio, "events": events, "tokens": tokens, "video": video}
#: the kinds whose ``start``/``stop`` are the reader's own (seconds), not steps of the file
_WINDOWED = frozenset({"video"})
#: options that a manifest's columns give, row by row
_COLUMN_OPTIONS = frozenset({"length", "start", "stop"})


class _Reading:
    """How every row of a manifest is read: the kind, its reader's options, the check.

    The options (``storage_options`` among them) travel with the manifest to the workers
    and are never shown.

    Example:
        >>> r = _Reading("tokens", {"dtype": "uint16", "storage_options": {"key": "s3cr3t"}})
        >>> r, r.step_spec()
        (<tokens reader: dtype=..., storage_options=...>, (dtype('uint16'), ()))
    """

    __slots__ = ("check_length", "kind", "options")

    def __init__(self, kind: str, options: Mapping[str, Any], check_length: bool = True):
        self.kind, self.options, self.check_length = kind, dict(options), check_length

    def __reduce__(self) -> tuple:
        return (_Reading, (self.kind, self.options, self.check_length))

    def __repr__(self) -> str:
        names = ", ".join(f"{k}=..." for k in sorted(self.options))
        return f"<{self.kind} reader: {names}>"

    @property
    def read_options(self) -> str:
        """How every row is read: what ``io.<kind>(path, **options)`` says of itself.

        Example:
            >>> _Reading("tokens", {"dtype": "uint16", "storage_options": {"k": "s"}}).read_options
            'tokens(dtype=<u2)'
        """
        return read_options(self.kind, self.options)

    def step_spec(self) -> tuple[np.dtype, tuple[int, ...]] | None:
        """The dtype and step shape that the options fix, without a file; else ``None``."""
        o = self.options
        if self.kind == "video" and o.get("size") is not None:
            h, w = (int(x) for x in o["size"])
            fmt = o.get("format", "rgb24")
            if fmt == "yuv420p":
                return np.dtype(np.uint8), (h * 3 // 2, w)
            channels = _CHANNELS.get(fmt)
            return np.dtype(np.uint8), ((h, w) if channels is None else (h, w, channels))
        if self.kind == "events":
            return np.dtype(np.float32), (2, int(o["height"]), int(o["width"]))
        if self.kind == "tokens" and o.get("dtype") is not None:
            return np.dtype(o["dtype"]), ()
        if self.kind == "audio" and isinstance(o.get("layout"), int):
            return np.dtype(np.float32), (int(o.get("frame", 1024)), int(o["layout"]))
        return None

    def open(self, path: str, length: int, start: float | None, stop: float | None) -> Any:
        """The kind's reader of one row's file (it measures what it needs of the file)."""
        options = dict(self.options)
        if self.kind in _WINDOWED:
            options.update(start=start, stop=stop)
        if not self.check_length and self.kind != "tokens" and options.get("fps") is None:
            options["length"] = length + (0 if start is None or self.kind in _WINDOWED else start)
        return READERS[self.kind](path, **options)


class _Row(Source):
    """One row of a manifest: a stream of its declared length, read with the kind's reader.

    The reader is made on the first read in a process (it opens and measures the file
    there, never when the manifest is planned); with the manifest's ``check_length``, a
    file whose length differs from the declared one is a :class:`SourceError` naming it.
    """

    __slots__ = ("_handle", "length", "path", "reading", "start", "stop")

    def __init__(
        self,
        reading: _Reading,
        path: str,
        length: int,
        start: float | None = None,
        stop: float | None = None,
    ):
        super().__init__(close=_close)
        self.reading, self.path, self.length = reading, path, length
        self.start, self.stop = start, stop

    def __reduce__(self) -> tuple:
        return (_Row, (self.reading, self.path, self.length, self.start, self.stop))

    def __repr__(self) -> str:
        window = "" if self.start is None and self.stop is None else f", {self.start}:{self.stop}"
        return f"manifest {self.reading.kind}({redact_urls(self.path)!r}{window})"

    def __len__(self) -> int:
        return self.length

    @property
    def file_offset(self) -> int | None:
        """Where the row starts in its file, when it has a ``start`` (else None).

        Its first step of the file, or for a window (``video``) its start in whole
        microseconds (:func:`_offsets`).
        """
        if self.start is None:
            return None
        if self.reading.kind in _WINDOWED:
            return start_us(self.start)
        return int(self.start)

    @property
    def read_options(self) -> str:
        """How the row is read (:attr:`_Reading.read_options`), as its reader says."""
        return self.reading.read_options

    @property
    def _offset(self) -> int:
        """Steps of the file before this row's first (a range of steps of the file)."""
        if self.start is None or self.reading.kind in _WINDOWED:
            return 0
        return int(self.start)

    def _open(self) -> Any:
        reader = self.reading.open(self.path, self.length, self.start, self.stop)
        if self.reading.check_length:
            try:
                self._check(reader)
            except BaseException:
                _close(reader)
                raise
        return reader

    def _check(self, reader: Any) -> None:
        """Raise when the file's length contradicts the declared one."""
        have = len(reader)
        if self.reading.kind in _WINDOWED or self.start is None:
            if have != self.length:
                raise SourceError(
                    self.path,
                    f"the manifest declares {self.length} steps, the file has {have}",
                )
        elif have < self._offset + self.length:
            raise SourceError(
                self.path,
                f"the manifest declares steps {self._offset}:{self._offset + self.length} "
                f"of the file, which has {have}",
            )

    def _read(self, reader: Any, a: int, b: int) -> Any:
        off = self._offset
        _check_mapped(self.reading, reader)
        data = reader[off + a : off + b]
        if _mapped(self.reading, reader):  # copied, then checked again: read before a change
            data = np.array(data)
            _check_mapped(self.reading, reader)
        if not self.reading.check_length:  # (checked when opened otherwise)
            got = _steps(data)
            if got is not None and got < b - a:
                raise SourceError(
                    self.path,
                    f"the manifest declares {self.length} steps, the file has "
                    f"{a + got}: steps {a}:{b} returned {got}",
                )
        return data

    def _empty(self) -> Any:
        return self._read(self._handle.get(self._open_checked), 0, 0)

    def read_into(self, start: int, stop: int, out: np.ndarray) -> int | None:
        """Write steps ``start:stop`` into ``out`` through the reader, when it can."""
        with self._lock():
            reader = self._handle.get(self._open_checked)
        into = getattr(reader, "read_into", None)
        if into is None:
            return None
        _check_mapped(self.reading, reader)
        written = into(self._offset + start, self._offset + stop, out)
        _check_mapped(self.reading, reader)  # a change during the copy: its steps refused
        return written

    def step_spec(self) -> tuple[np.dtype, tuple[int, ...]] | None:
        """What the manifest's options fix of a step (the same for every row)."""
        return self.reading.step_spec()


def _mapped(reading: _Reading, reader: Any) -> bool:
    """Whether ``reader`` reads a local token file through a memory map."""
    return reading.kind == "tokens" and getattr(reader, "_remote", True) is None


def _check_mapped(reading: _Reading, reader: Any) -> None:
    """Refuse to read a local token file that changed since its reader was made.

    A local token file is read through a memory map, which shows what the file holds
    now: truncated under a running loader, it would read as zeros. One ``stat`` before
    a read (no bus error past the end) and one after its copy (a change during it).
    """
    if _mapped(reading, reader):
        reader._check_unchanged()


def _steps(data: Any) -> int | None:
    """The number of steps of what a reader returned (its first array's), or None."""
    arrays = leaves(data)
    first = arrays[0] if arrays else None
    shape = getattr(first, "shape", None)
    return int(shape[0]) if shape else None


def _close(reader: Any) -> None:
    close = getattr(reader, "close", None)
    if close is not None:
        close()


class _Paths:
    r"""Paths as one UTF-8 buffer, each followed by a NUL: ``data[starts[i]:stops[i]]``.

    What a manifest's rows are made from (with how they are read), and what names them:
    the buffer pickles as one array, never a string per row.

    Example:
        >>> p = _Paths.of(["a.bin", "dir/b.bin"])
        >>> p.path(0, 5), bytes(p.data)
        ('a.bin', b'a.bin\x00dir/b.bin\x00')
    """

    __slots__ = ("data", "reading")

    def __init__(self, data: np.ndarray, reading: _Reading | None = None):
        self.data, self.reading = data, reading

    @classmethod
    def of(cls, paths: list[str], reading: _Reading | None = None) -> _Paths:
        """The buffer of a list of paths (small lists: tests, examples)."""
        joined = "".join(p + "\0" for p in paths).encode()
        return cls(np.frombuffer(joined, np.uint8).copy(), reading)

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Where every path starts and stops (its NUL) in the buffer."""
        small = len(self.data) < np.iinfo(np.int32).max
        stops = np.flatnonzero(self.data == 0).astype(np.int32 if small else np.int64)
        starts = np.empty_like(stops)
        starts[:1] = 0
        starts[1:] = stops[:-1] + 1
        return starts, stops

    def __reduce__(self) -> tuple:
        return (_Paths, (self.data, self.reading))

    def path(self, start: int, stop: int) -> str:
        """The path at ``start:stop`` of the buffer."""
        return self.data[start:stop].tobytes().decode()

    def joined(self, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
        """The bytes of the paths ``starts:stops``, each followed by its NUL, in order."""
        sizes = stops - starts + 1
        ends = np.cumsum(sizes)
        index = np.arange(ends[-1] if len(ends) else 0, dtype=np.int64)
        index += np.repeat(starts - (ends - sizes), sizes)
        return self.data[index]


def _make_row(paths: _Paths, start: int, stop: int, *window: float) -> _Row:
    """Row ``start:stop`` of the path buffer as a stream.

    ``window`` is the row's length, after its ``start`` and ``stop`` (NaN: none) when the
    manifest has them.
    """
    reading = paths.reading
    assert reading is not None
    *bounds, length = window
    first, last = bounds or (math.nan, math.nan)
    a: float | None = None if first != first else first  # (NaN: no start)
    b: float | None = None if last != last else last
    if reading.kind not in _WINDOWED:
        a = None if a is None else int(a)
        b = None if b is None else int(b)
    return _Row(reading, paths.path(start, stop), int(length), a, b)


class PathIdentities(Identities):
    r"""Identities that are the paths of a buffer (one per stream), hashed as the buffer.

    The streams' identities joined by NULs are the buffer itself when the rows are all of
    it in order, so the hash of a million paths is one ``sha256`` of one array; a
    selection of rows gathers its bytes in blocks.

    Example:
        >>> p = _Paths.of(["a.bin", "b.bin"])
        >>> ids = PathIdentities(p, *p.bounds())
        >>> list(ids), ids.digest() == Identities.of(["a.bin", "b.bin"]).digest()
        (['a.bin', 'b.bin'], True)
        >>> list(ids[::-1]), ids[::-1].digest() == Identities.of(["b.bin", "a.bin"]).digest()
        (['b.bin', 'a.bin'], True)
    """

    __slots__ = ("paths", "starts", "stops")

    def __init__(
        self,
        paths: _Paths,
        starts: np.ndarray,
        stops: np.ndarray,
        offsets: np.ndarray | None = None,
        readers: Identities | None = None,
    ):
        self.paths, self.starts, self.stops = paths, starts, stops
        self.count = len(starts)
        self.offsets = offsets  # (the first step of each row's range of its file, or -1)
        self.readers = readers  # (how the rows are read: one reader for all of them)

    def __reduce__(self) -> tuple:
        args = (self.paths, self.starts, self.stops, self.offsets, self.readers)
        return (PathIdentities, args)

    @property  # type: ignore[override]
    def names(self) -> tuple[str, ...]:
        """The distinct identities (made when asked: a string per stream)."""
        return Identities.of(list(self)).names

    @property  # type: ignore[override]
    def codes(self) -> np.ndarray | None:
        """The index of every stream's identity in :attr:`names`."""
        return Identities.of(list(self)).codes

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, (int, np.integer)):
            n = range(self.count)[i]
            return self.paths.path(int(self.starts[n]), int(self.stops[n]))
        offsets = None if self.offsets is None else self.offsets[i]
        readers = None if self.readers is None else self.readers[i]
        return PathIdentities(self.paths, self.starts[i], self.stops[i], offsets, readers)

    def _block(self, a: int, b: int) -> list[str]:
        text = self.paths.joined(self.starts[a:b], self.stops[a:b]).tobytes().decode()
        return text.split("\0")[:-1]

    def sha256(self) -> Any:
        """``hashlib.sha256`` of the paths joined by NULs: the buffer, or its rows gathered."""
        h = hashlib.sha256()
        data = self.paths.data
        whole = (
            self.count
            and self.starts[0] == 0
            and self.stops[-1] == len(data) - 1
            and np.array_equal(self.starts[1:], self.stops[:-1] + 1)
        )
        if whole:
            h.update(memoryview(data)[:-1])
            return h
        for a in range(0, self.count, BLOCK):
            b = min(a + BLOCK, self.count)
            part = self.paths.joined(self.starts[a:b], self.stops[a:b])
            h.update(memoryview(part)[:-1] if b == self.count else memoryview(part))
        return h


def _read_table(source: Any, format: str | None, path_column: str) -> tuple[Any, str, str]:
    """The pyarrow table of a manifest, its name in errors and the folder of its paths."""
    import pyarrow as pa

    if isinstance(source, pa.Table):
        return source, "manifest table", os.getcwd()
    path = os.fspath(source)
    if remote.is_url(path):
        raise SourceError(path, "a manifest is read from a local file (its rows may be URLs)")
    fmt = format or ("csv" if path.lower().endswith((".csv", ".csv.gz")) else "parquet")
    if fmt not in ("csv", "parquet"):
        raise ValueError(f"format must be 'parquet' or 'csv', got {format!r}")
    if not os.path.isfile(path):
        reason = missing(path)
        raise SourceError(path, "no such manifest file" if reason == "no such file" else reason)
    try:
        if fmt == "csv":
            import pyarrow.csv as pacsv

            paths_are_text = pacsv.ConvertOptions(column_types={path_column: pa.string()})
            table = pacsv.read_csv(path, convert_options=paths_are_text)
        else:
            import pyarrow.parquet as pq

            table = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        raise SourceError(path, f"cannot read the manifest as {fmt}: {e}") from e
    return table, path, os.path.dirname(os.path.abspath(path))


def _row_error(where: str, paths: Any, row: int, message: str) -> SourceError:
    """An error naming the manifest, the row and its file."""
    name = paths[row].as_py() if row < len(paths) else None
    return SourceError(where, f"row {row} ({redact_urls(str(name))!r}): {message}")


def _integers(table: Any, column: str, where: str, paths: Any) -> np.ndarray:
    """A column of whole numbers as int64, nulls and fractions refused by row."""
    import pyarrow as pa

    values = table.column(column)
    if values.null_count:
        row = int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0])
        raise _row_error(where, paths, row, f"no {column}")
    if not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
        raise SourceError(where, f"column {column!r} holds {values.type}, not whole numbers")
    array = values.to_numpy()
    if array.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(array) | (array != np.round(array)))
        if len(bad):
            row = int(bad[0])
            raise _row_error(where, paths, row, f"{column} {array[row]} is not a whole number")
    if array.dtype.kind in "fu":  # (an int64 holds every other one)
        big = np.flatnonzero(array >= 2**63)
        if len(big):
            row = int(big[0])
            raise _row_error(where, paths, row, f"{column} {array[row]} is too large")
    return array.astype(np.int64)


def _resolve(paths: Any, folder: str) -> Any:
    """Relative paths joined to ``folder`` (as ``os.path.join``); absolute paths, URLs kept."""
    import pyarrow as pa
    import pyarrow.compute as pc

    paths = paths.cast(pa.large_string())
    kept = pc.or_(pc.starts_with(paths, "/"), pc.match_substring_regex(paths, _URL))
    prefix = folder if folder.endswith(os.sep) else folder + os.sep
    sep = pa.scalar("", pa.large_string())
    joined = pc.binary_join_element_wise(pa.scalar(prefix, pa.large_string()), paths, sep)
    return pc.if_else(kept, paths, joined)


def _outside(paths: Any, root: str) -> np.ndarray:
    """Which paths leave ``root``: a ``..`` among their parts, or absolute (or URLs) elsewhere.

    Refused, not resolved: ``a/../b`` is refused although it stays inside (a manifest's
    rows need no ``..``). For a URL root, a percent-encoded ``.`` or a backslash
    (``%2e%2e%5c``) counts as what a server may decode it to.
    """
    import pyarrow.compute as pc

    if remote.is_url(root):
        parts = r"(?i)(^|/|\\|%5c)(\.|%2e){2}(/|\\|%5c|$)"
        prefix = root.rstrip("/") + "/"
    else:
        parts = r"(^|/)\.\.(/|$)"
        prefix = root if root.endswith(os.sep) else root + os.sep
    kept = pc.or_(pc.starts_with(paths, "/"), pc.match_substring_regex(paths, _URL))
    elsewhere = pc.and_(kept, pc.invert(pc.starts_with(paths, prefix)))
    out = pc.or_(pc.match_substring_regex(paths, parts), elsewhere)
    return pc.fill_null(out, False).to_numpy(zero_copy_only=False)


def _check_options(kind: str, options: Mapping[str, Any]) -> None:
    """Refuse an unknown kind and options its reader does not take (or columns give)."""
    if kind not in READERS:
        raise ValueError(f"unknown kind {kind!r}: a manifest lists files of {sorted(READERS)}")
    taken = set(inspect.signature(READERS[kind]).parameters) - {"path", "source"}
    given = set(options)
    columns = given & _COLUMN_OPTIONS
    if columns:
        raise ValueError(f"{sorted(columns)} come from the manifest's columns, not from options")
    parameters = inspect.signature(READERS[kind]).parameters.values()
    needed = {p.name for p in parameters if p.kind is p.KEYWORD_ONLY and p.default is p.empty}
    if needed - given:
        raise TypeError(f"io.{kind} needs the options {sorted(needed - given)}")
    unknown = given - taken
    if unknown:
        raise TypeError(
            f"io.{kind} takes no option {sorted(unknown)} "
            f"(it takes {sorted(taken - _COLUMN_OPTIONS)})"
        )


def manifest(
    path_or_table: Any,
    kind: str,
    *,
    path_column: str = "path",
    length_column: str = "length",
    root: str | os.PathLike | None = None,
    format: str | None = None,
    check_length: bool = True,
    **options: Any,
) -> StreamTable:
    """Read a manifest (a table of files with their lengths) as a table of streams.

    A manifest is a Parquet or CSV file (or a ``pyarrow.Table``) with one row per file
    of one ``kind``: a column of paths or URLs, a column of lengths (steps, as the
    kind's reader counts them with the options given), and optionally ``start`` and
    ``stop``. Nothing is opened to plan: ``len(table[i])`` is the declared length, and
    stream ``i`` is ``io.<kind>(path, **options)`` made on its first read, in the
    process that reads it. With ``check_length`` (the default), that reader measures its
    file and a length that differs from the declared one is a
    :class:`~streamseq.errors.SourceError`, which the loader reports with the stream and
    the steps it was reading; without it, the declared length is given to the reader
    (``length=``, which skips the measurement of a video or an audio file) and a file
    that ends early fails on the read that finds out.

    **Paths.** A relative path is joined to the manifest's folder, as
    :func:`os.path.join` does: ``../`` is kept and may leave that folder (a manifest is
    then the user's own list of files). Absolute paths and URLs (``s3://...``;
    ``storage_options`` apply to every row) are kept as they are. Given ``root`` (a
    folder or a URL), relative paths are joined to it instead, and every row must stay
    inside it: a path with a ``..`` part, or an absolute path or URL that does not start
    with ``root``, is refused (a :class:`~streamseq.errors.SourceError` naming the row).
    Pass ``root`` for a manifest that you did not write (a download): its rows then
    cannot read ``/etc/passwd``, nor send the ``storage_options`` to another host.
    A stream's identity, which names it in states and plan keys, is that joined path (a
    URL's credentials hidden), as ``io.<kind>(path)`` gives: a manifest and the list of
    the same streams give the same batches and states.

    **start and stop.** For ``video`` they are the reader's window, in seconds (``NaN``
    or empty: none). For the other kinds they are steps of the file: the stream is
    steps ``start:stop`` of it, and ``length`` must equal ``stop - start``. A row's
    ``start`` names it in states with its path (``state['plan']['offsets']``).

    Args:
        path_or_table: a ``.parquet`` or ``.csv`` (``.csv.gz``) file, or a
            ``pyarrow.Table`` (relative paths then join ``root`` or the working folder).
        kind: ``"video"``, ``"audio"``, ``"tokens"`` or ``"events"``: the reader.
        path_column: the column of paths or URLs.
        length_column: the column of lengths (whole numbers >= 0).
        root: the folder (or URL) relative paths are joined to and every row must stay
            in (default: the manifest's folder, which rows may leave).
        format: ``"parquet"`` or ``"csv"``; by default from the file's extension.
        check_length: measure each file when it is opened and compare (see above).
        **options: given to the reader of every row: ``size=``, ``fps=`` for video,
            ``dtype=`` for tokens, ``window_us=``, ``height=``, ``width=`` for events,
            ``storage_options=`` for URLs, ... (never shown in a message or a repr).

    Returns:
        A :class:`~streamseq.StreamTable`: ``lengths`` is the length column,
        ``identities`` the paths, and ``step_spec()`` what the options fix (a video's
        ``size``, a token ``dtype``; else ``None``, and every stream says it when read).
        It pickles to its arrays (a buffer of the paths, the lengths), not to a stream
        per row.

    Raises:
        ValueError: an unknown ``kind`` or ``format``, or an option that a column gives.
        TypeError: an option the kind's reader does not take.
        streamseq.errors.SourceError: naming the manifest (and the row and its file): no
            such file or not readable, a missing column, no rows, a missing path or
            length, a negative or fractional length, ``start > stop``, a range of steps
            that is not the length, a row outside ``root``.

    Example:
        >>> import os, tempfile, numpy as np, pyarrow as pa, pyarrow.parquet as pq
        >>> folder = tempfile.mkdtemp()
        >>> for name, n in [("a.bin", 5), ("b.bin", 3)]:
        ...     np.arange(n, dtype=np.uint16).tofile(os.path.join(folder, name))
        >>> where = os.path.join(folder, "files.parquet")
        >>> pq.write_table(pa.table({"path": ["a.bin", "b.bin"], "length": [5, 3]}), where)
        >>> files = manifest(where, "tokens", dtype=np.uint16)
        >>> len(files), files.lengths.tolist(), files[1][:].tolist()
        (2, [5, 3], [0, 1, 2])
        >>> files.identities[0] == os.path.join(folder, "a.bin"), files.step_spec()
        (True, (dtype('uint16'), ()))
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    _check_options(kind, options)
    table, where, folder = _read_table(path_or_table, format, path_column)
    folder = folder if root is None else os.fspath(root)
    for name in (path_column, length_column, "start", "stop"):
        if table.column_names.count(name) > 1:
            raise SourceError(
                where, f"column {name!r} {table.column_names.count(name)} times: which one?"
            )
    missing = [c for c in (path_column, length_column) if c not in table.column_names]
    if missing:
        raise SourceError(
            where, f"no column {missing[0]!r} (the columns are {table.column_names})"
        )
    if table.num_rows == 0:
        raise SourceError(where, "no rows: a manifest lists at least one file")
    paths = table.column(path_column).combine_chunks()
    if str(paths.type) not in ("string", "large_string"):
        raise SourceError(where, f"column {path_column!r} holds {paths.type}, not paths")
    empty = pc.fill_null(pc.equal(pc.utf8_length(paths), 0), True).to_numpy(zero_copy_only=False)
    if empty.any():
        raise _row_error(where, paths, int(np.flatnonzero(empty)[0]), "no path")
    nul = pc.fill_null(pc.match_substring(paths, "\0"), False).to_numpy(zero_copy_only=False)
    if nul.any():  # (no file has one, and it ends a path in the buffer of paths)
        raise _row_error(where, paths, int(np.flatnonzero(nul)[0]), "a NUL character in the path")
    lengths = _integers(table, length_column, where, paths)
    negative = np.flatnonzero(lengths < 0)
    if len(negative):
        row = int(negative[0])
        raise _row_error(where, paths, row, f"negative length {lengths[row]}")
    starts = stops = None
    if "start" in table.column_names or "stop" in table.column_names:
        starts, stops = _windows(table, kind, lengths, where, paths)
    if root is not None:
        outside = np.flatnonzero(_outside(paths, folder))
        if len(outside):
            raise _row_error(
                where,
                paths,
                int(outside[0]),
                f"outside the root {redact_urls(folder)!r}: refused (with root=, every row "
                "is a path inside it, without '..')",
            )
    resolved = _resolve(paths, folder)
    reading = _Reading(kind, options, check_length)
    files = _Paths(_nul_joined(resolved), reading)
    starts_at, stops_at = files.bounds()
    named = files
    urls = pc.match_substring_regex(resolved, _URL)
    if pc.any(urls).as_py():  # their secrets hidden, as identity() hides them
        shown = [redact_urls(u) for u in resolved.filter(urls).to_pylist()]
        if shown != resolved.filter(urls).to_pylist():
            public = pc.replace_with_mask(resolved, urls, pa.array(shown, resolved.type))
            named = _Paths(_nul_joined(public))
    offsets = None if starts is None else _offsets(starts, kind)
    bounds = (starts_at, stops_at) if named is files else named.bounds()
    read_by = Identities.repeat(reading.read_options, len(lengths))
    ids = PathIdentities(named, *bounds, offsets, read_by)
    columns = [starts_at, stops_at] + ([] if starts is None else [starts, stops])
    pa.default_memory_pool().release_unused()  # (the table read, now freed)
    return StreamTable(
        functools.partial(_make_row, files),
        lengths,
        columns,
        step_spec=reading.step_spec(),
        identities=ids,
    )


def _offsets(starts: np.ndarray, kind: str) -> np.ndarray | None:
    """Where every row starts in its file (-1: no ``start``), or None when none has one.

    A row that is part of its file is named by its path and this (with its length): its
    first step of the file, or for a window (``video``, in seconds) its start in whole
    microseconds, so that rows of one file at other places are told apart.

    Example:
        >>> _offsets(np.array([np.nan, 0.2]), "video").tolist()
        [-1, 200000]
        >>> _offsets(np.array([3.0, np.nan]), "tokens").tolist()
        [3, -1]
        >>> _offsets(np.array([np.nan]), "audio") is None
        True
    """
    given = ~np.isnan(starts)
    if not given.any():
        return None
    at = start_us(starts) if kind in _WINDOWED else starts
    return np.where(given, at, -1).astype(np.int64)


def _nul_joined(paths: Any) -> np.ndarray:
    """The UTF-8 bytes of an Arrow string array, each string followed by a NUL."""
    import pyarrow as pa
    import pyarrow.compute as pc

    with_nul = pc.binary_join_element_wise(
        paths, pa.scalar("\0", pa.large_string()), pa.scalar("", pa.large_string())
    )
    with_nul = with_nul.combine_chunks() if isinstance(with_nul, pa.ChunkedArray) else with_nul
    _, offsets, data = with_nul.buffers()
    n = len(with_nul)
    at = np.frombuffer(offsets, np.int64, n + 1, with_nul.offset * 8)
    return np.frombuffer(data, np.uint8)[at[0] : at[-1]].copy()


def _windows(
    table: Any, kind: str, lengths: np.ndarray, where: str, paths: Any
) -> tuple[np.ndarray, np.ndarray]:
    """The ``start`` and ``stop`` columns as float64 (NaN: none), checked."""
    n = len(lengths)

    def column(name: str) -> np.ndarray:
        if name not in table.column_names:
            return np.full(n, np.nan)
        values = table.column(name)
        try:
            return values.to_numpy(zero_copy_only=False).astype(np.float64)
        except (TypeError, ValueError) as e:
            raise SourceError(where, f"column {name!r} holds {values.type}, not numbers") from e

    starts, stops = column("start"), column("stop")
    later = np.flatnonzero(starts > stops)
    if len(later):
        row = int(later[0])
        raise _row_error(where, paths, row, f"start {starts[row]} > stop {stops[row]}")
    if kind in _WINDOWED:
        return starts, stops
    for name, values in (("start", starts), ("stop", stops)):
        bad = np.flatnonzero(~np.isnan(values) & ((values < 0) | (values != np.round(values))))
        if len(bad):
            row = int(bad[0])
            raise _row_error(
                where,
                paths,
                row,
                f"{name} {values[row]} is not a step of the file (a whole number >= 0)",
            )
    first = np.where(np.isnan(starts), 0, starts)
    span = np.where(np.isnan(stops), first + lengths, stops) - first
    wrong = np.flatnonzero(span != lengths)
    if len(wrong):
        row = int(wrong[0])
        raise _row_error(
            where,
            paths,
            row,
            f"length {lengths[row]} but steps {int(first[row])}:{int(first[row] + span[row])} "
            f"are {int(span[row])}",
        )
    return starts, np.where(np.isnan(stops), first + lengths, stops)
