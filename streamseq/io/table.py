"""A Parquet table as one stream per group of rows (an episode), read by row group.

Robot and trajectory datasets (LeRobot's among them) keep every frame of every episode as
one row of a Parquet table, with a column naming the episode. :func:`table` reads that
column once, with the file's row groups, and records for every episode where its rows
are: runs of consecutive rows, each inside one row group. An episode is a small picklable
stream of those runs; reading steps ``a:b`` reads only the row groups that hold them
(``ParquetFile.read_row_group``), in the process that reads, through one reader of the
file per process, shared by the episodes of the file and closed with the last of them
(no module-level cache keeps it open), that keeps the last row groups it decoded, so
consecutive reads decode each once.

A URL is read through :mod:`streamseq.io.remote`, as by the other sources: one fsspec
filesystem per process, made with the ``storage_options`` (which an episode carries, so
that every worker opens its own connection), ranged reads through the block cache
(Parquet reads its footer, then the column chunks of a row group, at any offset), and a
:class:`~streamseq.errors.SourceError` naming the URL when the server does not answer.
The options are never shown: not in a repr, not in an error.

A row group holds rows of several episodes: a data column that numpy cannot hold whole
(a missing value, lists of another length) is kept as pyarrow, and only the episode
whose rows hold the damage fails, naming the step, when it reads them.

pyarrow is imported only here, when a table is opened (``pip install 'streamseq[table]'``).
"""

from __future__ import annotations

import json
import os
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from streamseq._files import missing
from streamseq._redact import redacted_repr
from streamseq.errors import SourceError
from streamseq.io import remote
from streamseq.io._base import Source, changed_error, state_changes
from streamseq.plan.identities import read_code
from streamseq.read.handle import ProcessLocal

#: decoded row groups a reader keeps (the rows of one worker read different episodes)
CACHED_ROW_GROUPS = 8


class _Options:
    """``storage_options`` as part of a key: hashable, compared by value, never shown.

    Example:
        >>> o = _Options({"secret": "s3cr3t"})
        >>> o == _Options({"secret": "s3cr3t"}), repr(o)
        (True, '<storage_options>')
    """

    __slots__ = ("options", "_id")

    def __init__(self, options: Mapping[str, Any] | None):
        self.options = dict(options or {})
        self._id = json.dumps(self.options, sort_keys=True, default=repr)

    def __reduce__(self) -> tuple:
        return (_Options, (self.options,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Options) and other._id == self._id

    def __hash__(self) -> int:
        return hash(self._id)

    def __repr__(self) -> str:
        return "<storage_options>" if self.options else "{}"


class _Key(NamedTuple):
    """What a reader of the file is made from, in any process."""

    path: str  # the file or its URL
    columns: tuple[str, ...]
    options: _Options  # of a URL (empty for a path)
    size: int | None  # of a URL, in bytes (not asked again in every worker)
    # of a local file: its size, times and inode when the key was made (a file replaced
    # at the same path gets a reader of its own, never the one of the file it replaced)
    stamp: tuple[int, ...] | None = None


def local_stamp(path: str) -> tuple[int, ...] | None:
    """The size, modification time, inode and ctime of the local file ``path`` (else ``None``).

    Example:
        >>> local_stamp("s3://bucket/a.parquet") is None
        True
    """
    if remote.is_url(path):
        return None
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None  # (opening it tells)
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


class _Readers:
    """The handle of the reader of each file, shared by the sources that read the file.

    A source holds the handle of its file (taken here by key, in every process); the
    handle is gone, and its reader closed, when the last source holding it is: nothing
    here keeps a file open (the handles are held weakly).

    Example:
        >>> readers = _Readers()
        >>> key = _Key("a.parquet", (), _Options(None), None)
        >>> h = readers.of(key)
        >>> h is readers.of(key), len(readers)
        (True, 1)
        >>> del h; len(readers)
        0
    """

    __slots__ = ("_handles",)

    def __init__(self) -> None:
        self._handles: weakref.WeakValueDictionary[_Key, ProcessLocal[_Reader]] = (
            weakref.WeakValueDictionary()
        )

    def __len__(self) -> int:
        return len(self._handles)

    def of(self, key: _Key) -> ProcessLocal[_Reader]:
        """The handle of ``key``, the same for every caller while one holds it."""
        handle = self._handles.get(key)
        if handle is None:
            handle = self._handles.setdefault(key, ProcessLocal(close=_close_reader))
        return handle


def _close_reader(reader: _Reader) -> None:
    reader.close()


#: key -> the reader of this process (held by the sources that read the file)
_READERS = _Readers()


def _pyarrow() -> Any:
    """``pyarrow.parquet``, or an ImportError saying how to install it."""
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise ImportError(
            "streamseq.io.table reads Parquet with pyarrow: pip install 'streamseq[table]'"
        ) from e
    return pq


def _locate(path: str, options: Mapping[str, Any] | None) -> remote.Remote | None:
    """The :class:`~streamseq.io.remote.Remote` of a URL (``None`` for a path)."""
    try:
        return remote.locate(path, options)
    except (FileNotFoundError, IsADirectoryError):
        raise SourceError(path, "no such file") from None


def _open_file(key: _Key) -> tuple[Any, Any]:
    """A ``pyarrow.parquet.ParquetFile`` of a path or URL, and the file it reads.

    The file is a :class:`~streamseq.io.remote.RemoteFile`, or a local file opened by
    pyarrow (a ``pyarrow.OSFile``: its descriptor is the one measured); the caller closes it.
    """
    pq = _pyarrow()
    file = None
    if remote.is_url(key.path):
        file = remote.RemoteFile(key.path, key.options.options, key.size, "blockcache")
    elif not os.path.isfile(key.path):
        raise SourceError(key.path, missing(key.path))
    try:
        if file is None:
            import pyarrow as pa

            file = pa.OSFile(key.path)
        return pq.ParquetFile(file), file
    except Exception as e:  # pyarrow's errors: ArrowInvalid, OSError
        if file is not None:
            file.close()
        if isinstance(e, SourceError):  # the server failed (named by its URL)
            raise
        raise SourceError(key.path, f"cannot open as Parquet: {type(e).__name__}: {e}") from e


def _descriptor(opened: Any, path: str) -> tuple[int, bool]:
    """The descriptor of the local file ``opened`` reads, and whether it was opened here.

    Its own (``fileno()``), or, where pyarrow's ``OSFile`` cannot tell it (``fileno()``
    fails in pyarrow 16), the path opened again: the same file while nothing replaced it,
    which the first check, against the table's stamp, tells.

    Example:
        >>> import tempfile
        >>> class NoFileno:  # (pyarrow 16's OSFile)
        ...     def fileno(self):
        ...         raise AttributeError("'pyarrow.lib.OSFile' object has no attribute 'handle'")
        >>> path = tempfile.mkstemp()[1]
        >>> fd, owned = _descriptor(NoFileno(), path)
        >>> owned, os.fstat(fd).st_ino == os.stat(path).st_ino
        (True, True)
        >>> os.close(fd)
    """
    try:
        return opened.fileno(), False
    except (AttributeError, OSError, NotImplementedError):
        return os.open(path, os.O_RDONLY), True


def _to_numpy(array: Any, path: str, name: str) -> np.ndarray:
    """A column as numpy: lists of one length become a 2-d array ``[rows, k, ...]``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.null_count:
        raise SourceError(path, f"column {name!r} has {array.null_count} missing values")
    kind = array.type
    if pa.types.is_fixed_size_list(kind):
        width = kind.list_size
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        sizes = pc.list_value_length(array).to_numpy()
        width = int(sizes[0]) if len(sizes) else 0
        if len(sizes) and (sizes != width).any():
            raise SourceError(
                path,
                f"column {name!r} holds lists of {sizes.min()} to {sizes.max()} values: "
                "only lists of one length make an array",
            )
    else:
        return array.to_numpy(zero_copy_only=False)
    values = _to_numpy(array.flatten(), path, name)
    return values.reshape(len(array), width, *values.shape[1:])


#: what :func:`_row_flaws` finds in a row
_MISSING, _RAGGED = 1, 2


def _row_flaws(array: Any) -> np.ndarray:
    """Per row of a column: 0, or what keeps it from numpy.

    That is a missing value (at any depth), or a list of another length than most lists
    at its depth in the column.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    flaws = np.where(array.is_null().to_numpy(zero_copy_only=False), _MISSING, 0).astype(np.int8)
    kind = array.type
    fixed = pa.types.is_fixed_size_list(kind)
    if not (fixed or pa.types.is_list(kind) or pa.types.is_large_list(kind)):
        return flaws
    if not fixed:
        sizes = pc.list_value_length(array).fill_null(-1).to_numpy()
        if (sizes >= 0).any():
            width = np.bincount(sizes[sizes >= 0]).argmax()  # most rows have it
            flaws[(sizes >= 0) & (sizes != width)] = _RAGGED
    inner = _row_flaws(array.flatten())
    parents = pc.list_parent_indices(array).to_numpy()
    np.maximum.at(flaws, parents, inner)
    return flaws


class _Flawed(NamedTuple):
    """A column of a row group that numpy cannot hold whole.

    Some rows are missing values or are lists of another length; the other rows are
    decoded when they are read.
    """

    array: Any  # pyarrow
    flaws: np.ndarray  # per row: 0, _MISSING or _RAGGED

    def rows(self, start: int, stop: int, first_step: int, path: str, name: str) -> np.ndarray:
        """Rows ``start:stop`` as numpy; a SourceError naming the step of a flawed row.

        ``first_step`` is the step of the episode that row ``start`` holds.
        """
        bad = np.flatnonzero(self.flaws[start:stop])
        if bad.size:
            row = start + int(bad[0])
            step = first_step + int(bad[0])
            if self.flaws[row] == _MISSING:
                raise SourceError(path, f"column {name!r} has a missing value at step {step}")
            raise SourceError(
                path,
                f"column {name!r} holds {self._list_sizes(row)} at step {step}: only lists "
                "of one length make an array",
            )
        return _to_numpy(self.array.slice(start, stop - start), path, name)

    def _list_sizes(self, row: int) -> str:
        """The length of the list of ``row`` against the most common one, in words."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if not (pa.types.is_list(self.array.type) or pa.types.is_large_list(self.array.type)):
            return "lists of different lengths inside its lists"
        sizes = pc.list_value_length(self.array).fill_null(-1).to_numpy()
        width = np.bincount(sizes[sizes >= 0]).argmax()
        return f"a list of {sizes[row]} values where most rows hold {width}"


def _column(array: Any, path: str, name: str) -> np.ndarray | _Flawed:
    """A column of a row group as numpy, or as :class:`_Flawed` when some rows cannot be."""
    import pyarrow as pa

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    try:
        return _to_numpy(array, path, name)
    except SourceError:
        return _Flawed(array, _row_flaws(array))


class _Reader:
    """A Parquet file and the row groups it decoded last (as numpy columns).

    A column with missing values or lists of different lengths is kept as it is
    (:class:`_Flawed`): the episode whose rows hold them fails when it reads them, not
    another one that reads the same row group.
    """

    def __init__(self, key: _Key):
        self.path, self.columns, self.stamp = key.path, key.columns, key.stamp
        self.file, self.opened = _open_file(key)
        self.groups: OrderedDict[int, dict[str, np.ndarray | _Flawed]] = OrderedDict()
        self.watch: int | None = None  # the descriptor of the local file read, measured
        self.owned = False  # whether ``watch`` was opened here (closed with the reader)
        if self.stamp is not None:
            try:  # (the file read: one replaced since the table was made is refused)
                self.watch, self.owned = _descriptor(self.opened, self.path)
                self.check(opening=True)
            except BaseException:
                self.close()
                raise

    def check(self, opening: bool = False) -> None:
        """Raise when the local file read is not the one the table was made of.

        Opening, its size, modification time and inode must be those of the stamp taken
        when the table was made (a file replaced or rewritten since is refused; not one
        whose metadata alone changed: its mode, its links, its access time); then, before a
        row group is decoded, the open file's size and modification time (a rewrite in
        place under the reader; a file replaced by a rename leaves the open one, the
        rows planned).

        Raises:
            SourceError: naming the file and what changed.
        """
        if self.watch is None or self.stamp is None:
            return
        st = os.fstat(self.watch)
        names = ("size", "mtime_ns", "inode")[: 3 if opening else 2]  # (not the ctime)
        measured = (st.st_size, st.st_mtime_ns, st.st_ino)
        was = dict(zip(names, self.stamp, strict=False))
        now = dict(zip(names, measured, strict=False))
        changes = state_changes(was, now)
        if changes:
            raise changed_error(self.path, changes)

    def close(self) -> None:
        """Close the file (and its connection, for a URL); drop the decoded row groups."""
        self.groups.clear()
        try:
            self.file.close()
        finally:
            if self.owned and self.watch is not None:
                os.close(self.watch)
            self.watch, self.owned = None, False
            self.opened.close()

    def row_group(self, i: int) -> dict[str, np.ndarray | _Flawed]:
        """Row group ``i``: one numpy array per column (or a :class:`_Flawed` column).

        A row group not decoded yet is decoded once the file is found unchanged
        (:meth:`check`), and checked again after: a rewrite during the decoding is
        refused too.
        """
        group = self.groups.get(i)
        if group is not None:
            self.groups.move_to_end(i)
            return group
        self.check()
        data = self.file.read_row_group(i, columns=list(self.columns))
        self.check()
        group = {n: _column(data.column(n), self.path, n) for n in self.columns}
        self.groups[i] = group
        if len(self.groups) > CACHED_ROW_GROUPS:
            self.groups.popitem(last=False)
        return group


class _Episode(Source):
    """The rows of one group of a Parquet table, as a stream of dict steps."""

    def __init__(self, key: _Key, group: Any, runs: np.ndarray, first_row: int | None = None):
        # no Source.__init__: the handle is the file's, shared by all its episodes
        self.key, self.group = key, group
        self.runs = runs  # [n, 3]: row group, first row, end row (in the row group)
        self.offsets = np.concatenate([[0], np.cumsum(runs[:, 2] - runs[:, 1])])
        self.first_row = first_row  # its first row in the file (None: not known)
        self._handle = _READERS.of(key)

    def __reduce__(self) -> tuple:
        return (_Episode, (self.key, self.group, self.runs, self.first_row))

    def _new_handle(self) -> ProcessLocal[_Reader]:
        return _READERS.of(self.key)  # a copy reads through the file's reader too

    @property
    def path(self) -> str:
        """The Parquet file (or its URL)."""
        return self.key.path

    @property
    def file_offset(self) -> int | None:
        """With the file, what names it in a state's plan key: its first row and columns.

        A code of its first row in the file and the columns read
        (:func:`~streamseq.plan.identities.read_code`): two episodes of one file never
        share a first row, so a state of some episodes of a file (or of other columns
        of them) is refused by others of the same lengths.
        """
        if self.first_row is None:
            return None
        return read_code(self.first_row, repr(tuple(self.key.columns)))

    @property
    def row_groups(self) -> list[int]:
        """The row groups that hold the rows of this episode, in row order."""
        return list(dict.fromkeys(self.runs[:, 0].tolist()))

    def __repr__(self) -> str:
        return f"table({redacted_repr(self.key.path)})[{self.group!r}]"

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def _open(self) -> _Reader:
        return _Reader(self.key)

    def _read(self, handle: Any, a: int, b: int) -> dict[str, np.ndarray]:
        first = int(np.searchsorted(self.offsets, a, side="right")) - 1
        last = int(np.searchsorted(self.offsets, b, side="left"))
        parts: dict[str, list[np.ndarray]] = {n: [] for n in self.key.columns}
        steps = []  # the step of the first row of each part
        for j in range(first, last):
            group, lo, _ = (int(x) for x in self.runs[j])
            start = lo + max(a - int(self.offsets[j]), 0)
            stop = lo + min(b, int(self.offsets[j + 1])) - int(self.offsets[j])
            steps.append(max(a, int(self.offsets[j])))
            for name, column in handle.row_group(group).items():
                if isinstance(column, _Flawed):
                    part = column.rows(start, stop, steps[-1], self.key.path, name)
                else:
                    part = column[start:stop]
                parts[name].append(part)
        return {n: self._joined(n, p, steps) for n, p in parts.items()}

    def _joined(self, name: str, parts: list[np.ndarray], steps: list[int]) -> np.ndarray:
        """The parts of a column read from several row groups, as one array.

        Raises:
            SourceError: naming the column and the step from which the parts' steps
                change shape (lists of another length in another row group).
        """
        if len(parts) == 1:
            return parts[0]
        shape = parts[0].shape[1:]
        for part, step in zip(parts, steps, strict=True):
            if part.shape[1:] != shape:
                raise SourceError(
                    self.key.path,
                    f"column {name!r} holds steps of shape {shape} before step {step} and "
                    f"{part.shape[1:]} from step {step}: only lists of one length make an array",
                )
        return np.concatenate(parts)

    def _empty(self) -> dict[str, np.ndarray]:
        return {n: v[:0] for n, v in self._locked_read(0, 1).items()}

    def close(self) -> None:
        """Leave the file's reader open: every episode of the file in this process uses it."""


def table(
    path_or_url: str | os.PathLike,
    group_by: str = "episode_index",
    columns: Sequence[str] | None = None,
    *,
    sort: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> list[_Episode]:
    """One stream per group of rows of a Parquet table: the episodes of a robot dataset.

    The rows whose ``group_by`` column holds one value are one stream (an episode), in
    row order; step ``i`` is a dict of the ``columns`` of its ``i``-th row, as numpy
    (numbers and booleans as they are; a column of lists of one length, such as a state
    vector, as a 2-d array ``[steps, k]``). The ``group_by`` column is read once, here,
    and gives every episode its runs of rows within the row groups; reading steps ``a:b``
    reads only the row groups holding them, with the columns asked for, in the process
    that reads (one reader per file and process, which keeps its last
    :data:`CACHED_ROW_GROUPS` decoded row groups).

    Args:
        path_or_url: a Parquet file, or its URL (``s3://``, ``gs://``, ``https://``, any
            fsspec protocol; see :mod:`streamseq.io.remote`).
        group_by: the column that names the episode of each row.
        columns: the columns of the steps (all, ``group_by`` included, when ``None``).
        sort: order the episodes by their ``group_by`` value; by default, in the order
            in which they first appear in the file.
        storage_options: for a URL, the options of its fsspec filesystem (credentials,
            endpoint, ...); kept by the episodes, so that every worker connects with them,
            and never shown.

    Returns:
        A list of streams, one per episode: ``len(e)`` is its number of rows, ``e[a:b]`` a
        dict of arrays with ``b - a`` steps, ``e.group`` its ``group_by`` value and
        ``e.row_groups`` the row groups that hold it.

    Raises:
        ImportError: pyarrow is not installed (the ``table`` extra), or fsspec and the
            package of the URL's protocol (the ``remote`` extra).
        ValueError: ``storage_options`` given with a local path.
        streamseq.errors.SourceError: naming the file: it is missing or not Parquet, a
            column is missing, ``group_by`` has missing or NaN values (naming the first
            row) or holds lists or structs; a column has a missing value or lists of
            different lengths, raised by the read of the episode holding it and naming
            its step; for a URL, the server did not answer (after the retries of
            :mod:`streamseq.io.remote`); a local file that changed since the table was
            made (replaced, or rewritten in place: found when the reader of a process
            opens it, and before and after each row group it decodes), raised by the read.

    Example:
        >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq
        >>> path = os.path.join(tempfile.mkdtemp(), "data.parquet")
        >>> pq.write_table(pa.table({"episode_index": [0, 0, 1, 1, 1],
        ...                          "action": [[0.0, 1.0], [2, 3], [4, 5], [6, 7], [8, 9]]}),
        ...                path, row_group_size=2)
        >>> episodes = table(path, columns=["action"])
        >>> [len(e) for e in episodes], episodes[1].row_groups
        ([2, 3], [1, 2])
        >>> episodes[1][1:3]["action"]
        array([[6., 7.],
               [8., 9.]])
    """
    path = os.fspath(path_or_url)
    _pyarrow()
    located = _locate(path, storage_options)
    size = None if located is None else located.size
    key = _Key(path, (), _Options(storage_options), size, local_stamp(path))
    file, opened = _open_file(key)
    try:
        return _episodes(file, key, group_by, columns, sort)
    finally:
        if opened is not None:
            opened.close()


def _episodes(
    file: Any, key: _Key, group_by: str, columns: Sequence[str] | None, sort: bool
) -> list[_Episode]:
    """The episodes of an open table (see :func:`table`)."""
    path = key.path
    names = file.schema_arrow.names
    wanted = tuple(names if columns is None else columns)
    missing = [n for n in (*wanted, group_by) if n not in names]
    if missing:
        raise SourceError(path, f"no column {missing[0]!r}; the columns are {names}")
    if not wanted:
        raise SourceError(path, "no column asked for")
    kind = file.schema_arrow.field(group_by).type
    if _pyarrow_types().is_nested(kind):
        raise SourceError(
            path, f"column {group_by!r} holds {kind}: an episode is named by a number or a string"
        )
    values, firsts = [], [0]
    for i in range(file.metadata.num_row_groups):
        column = file.read_row_group(i, columns=[group_by]).column(0)
        values.append(_group_values(column, path, group_by, firsts[-1]))
        firsts.append(firsts[-1] + len(values[-1]))
    if firsts[-1] == 0:
        raise SourceError(path, "no row")
    rows = np.concatenate(values)
    starts_group = np.zeros(len(rows), bool)
    starts_group[np.asarray(firsts[:-1])] = True
    run_start = np.flatnonzero(starts_group | np.concatenate([[True], rows[1:] != rows[:-1]]))
    run_stop = np.append(run_start[1:], len(rows))
    group = np.searchsorted(np.asarray(firsts), run_start, side="right") - 1
    base = np.asarray(firsts)[group]
    runs = np.stack([group, run_start - base, run_stop - base], axis=1).astype(np.int64)
    uniques, first_run, which = np.unique(rows[run_start], return_index=True, return_inverse=True)
    order = np.arange(len(uniques)) if sort else np.argsort(first_run, kind="stable")
    by_episode = np.argsort(which.ravel(), kind="stable")  # runs of each episode, in order
    bounds = np.concatenate([[0], np.cumsum(np.bincount(which.ravel(), minlength=len(uniques)))])
    key = key._replace(columns=wanted)
    first_row = run_start[by_episode[bounds[:-1]]].tolist()  # (of each episode's first run)
    return [
        _Episode(
            key, _plain(uniques[k]), runs[by_episode[bounds[k] : bounds[k + 1]]], first_row[k]
        )
        for k in order.tolist()
    ]


def _pyarrow_types() -> Any:
    """``pyarrow.types``."""
    import pyarrow.types

    return pyarrow.types


_EVERY_ROW = ": every row needs the episode it belongs to"


def _group_values(column: Any, path: str, name: str, first_row: int) -> np.ndarray:
    """The ``group_by`` values of a row group whose first row is row ``first_row``.

    Raises:
        SourceError: naming the file and the row of a missing or NaN value.
    """
    if column.null_count:
        row = first_row + int(np.flatnonzero(column.is_null().to_numpy())[0])
        raise SourceError(path, f"column {name!r} has a missing value at row {row}{_EVERY_ROW}")
    values = _to_numpy(column, path, name)
    if values.dtype.kind in "fc":
        nan = np.flatnonzero(np.isnan(values))
        if nan.size:
            row = first_row + int(nan[0])
            raise SourceError(path, f"column {name!r} has NaN at row {row}{_EVERY_ROW}")
    return values


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value it holds (other values as they are)."""
    return value.item() if isinstance(value, np.generic) else value
