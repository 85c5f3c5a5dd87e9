"""A table of streams: many streams whose lengths are one array, made on access.

Millions of streams (the documents of a corpus, the episodes of a dataset) cost one
Python object each when given as a list, and a loader checks, measures and names them
one by one. A :class:`StreamTable` holds them as arrays instead: the lengths as one
``int64`` array, what makes stream ``i`` as columns of arrays and one picklable
function, the dtype and step shape once, and what names the streams across runs as one
value or one array. ``table[i]`` makes stream ``i`` when asked; slicing gives a smaller
table (arrays sliced, no stream made); pickling sends the arrays (a memory map as its
file and offset, so processes share its pages; a file that changed in between is an
error when it is reopened, not other values), never an object per stream.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .errors import SourceError
from .plan.identities import BLOCK, Identities
from .read.ref import file_offset, identity, reader_of


def file_stamp(path: str) -> tuple[int, int, int]:
    """What tells that ``path`` changed: its size, modification time and inode."""
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns, st.st_ino


def _reopen(
    path: str,
    dtype: str,
    offset: int,
    shape: tuple[int, ...],
    stamp: tuple[int, int, int] | None = None,
) -> np.ndarray:
    """A read-only memory map of ``shape`` items of ``dtype`` at ``offset`` of ``path``.

    Raises:
        SourceError: ``path`` is no longer the file it was when pickled (``stamp``): its
            map would give other values than the pickled table had.
    """
    if stamp is not None:
        try:
            now = file_stamp(path)
        except OSError as e:
            raise SourceError(path, f"a table's column file changed since: {e}") from e
        if now != tuple(stamp):
            raise SourceError(
                path,
                "a table's column file changed since the table was pickled (size, time or "
                "inode): its memory map would give other values",
            )
    if not shape[0]:
        return np.zeros(shape, dtype)
    return np.memmap(path, np.dtype(dtype), mode="r", offset=offset, shape=shape)


def _file_place(array: np.ndarray) -> tuple[str, str, int, tuple[int, ...], Any] | None:
    """(path, dtype, byte offset, shape, stamp) of a contiguous read-only memory map."""
    if not isinstance(array, np.memmap) or array.ndim != 1 or not array.flags.c_contiguous:
        return None
    m, path = getattr(array, "_mmap", None), getattr(array, "filename", None)
    if m is None or path is None or array.flags.writeable or not len(array):
        return None
    base = np.frombuffer(m, np.uint8)  # the map starts at a multiple of the granularity
    start = array.offset - array.offset % mmap.ALLOCATIONGRANULARITY
    at = start + array.ctypes.data - base.ctypes.data
    path = os.fspath(path)
    return path, array.dtype.str, int(at), array.shape, file_stamp(path)


def _column(array: np.ndarray) -> Any:
    """What pickles ``array``: its file and offset when it is a read-only memory map."""
    place = _file_place(array)
    if place is not None:
        return (_reopen, place)
    base = array.base
    if (
        type(base) is np.ndarray
        and base.dtype == array.dtype
        and base.shape == array.shape
        and base.strides == array.strides
        and base.ctypes.data == array.ctypes.data
    ):  # (the table's read-only view of an array: the array, pickled once where shared)
        return base
    return np.asarray(array)  # (a memory map that is not one: its values)


def _loaded(column: Any) -> np.ndarray:
    if isinstance(column, tuple):
        return column[0](*column[1])
    return column


def _frozen(array: np.ndarray) -> np.ndarray:
    """A read-only view of ``array``: what reads a table cannot be changed through it.

    (``table.lengths.sort()`` would otherwise change the steps every stream reads; the
    caller's own array stays writable.)
    """
    if not array.flags.writeable:
        return array
    view = array.view()
    view.flags.writeable = False
    return view


def _lengths(lengths: npt.ArrayLike) -> np.ndarray:
    array = lengths if isinstance(lengths, np.ndarray) else np.asarray(lengths)
    if array.ndim != 1 or (array.dtype.kind not in "iu" and len(array)):
        raise ValueError(f"lengths must be a 1-d integer array, got {array.dtype} {array.shape}")
    if array.dtype == np.uint64 and len(array):  # (past int64, a cast would wrap it)
        big = np.flatnonzero(array > np.iinfo(np.int64).max)
        if len(big):
            i = int(big[0])
            raise ValueError(f"the length of stream {i}, {int(array[i])}, is too large")
    if array.dtype != np.int64:
        array = array.astype(np.int64)
    if len(array) and int(array.min()) < 0:
        i = int(np.flatnonzero(array < 0)[0])
        raise ValueError(f"negative length for stream {i}: {int(array[i])}")
    return array


class StreamTable(Sequence):
    """Streams whose lengths are one array, made one at a time when indexed.

    Stream ``i`` is ``make(*(column[i] for column in columns), lengths[i])`` (each value a
    Python ``int`` or ``str``): ``make`` and the columns must be picklable (a module-level
    function or a ``functools.partial`` of one; numpy arrays). ``table.lengths`` and
    ``table.columns`` are read-only views of them.

    Args:
        make: makes one stream from its row of the columns and its length.
        lengths: the number of steps of every stream (any integer array; kept as int64).
        columns: arrays with one value per stream, given to ``make``.
        step_spec: ``(dtype, step shape)`` of every stream's steps, or None when unknown
            (each stream is then asked, when it is read).
        identities: what names the streams across runs: one string for all (a file
            path), one string per stream, or :class:`~streamseq.plan.identities.Identities`.
            By default, that of stream ``0`` (:func:`~streamseq.read.ref.identity`: its
            file, else its type) for every stream: give them when the streams are of
            several files, for a state to name them as a list of them would.

    Raises:
        ValueError: lengths that are not a 1-d array of non-negative integers, or columns
            or identities of another size.

    Example:
        >>> import functools, numpy as np
        >>> data = np.arange(10)
        >>> def piece(data, start, length):
        ...     return data[start : start + length]
        >>> table = StreamTable(functools.partial(piece, data), [3, 0, 7], [np.array([0, 3, 3])],
        ...                     step_spec=(data.dtype, ()), identities="data")
        >>> len(table), table.lengths.tolist(), table[2].tolist()
        (3, [3, 0, 7], [3, 4, 5, 6, 7, 8, 9])
        >>> sub = table[::2]
        >>> type(sub).__name__, sub.lengths.tolist(), [s.tolist() for s in sub]
        ('StreamTable', [3, 7], [[0, 1, 2], [3, 4, 5, 6, 7, 8, 9]])
    """

    def __init__(
        self,
        make: Callable[..., Any],
        lengths: npt.ArrayLike,
        columns: Sequence[npt.ArrayLike] = (),
        *,
        step_spec: tuple[Any, tuple[int, ...]] | None = None,
        identities: str | Sequence[str] | Identities | None = None,
    ):
        self.make = make
        self.lengths = _frozen(_lengths(lengths))
        n = len(self.lengths)
        self.columns = tuple(
            _frozen(c if isinstance(c, np.ndarray) else np.asarray(c)) for c in columns
        )
        for j, c in enumerate(self.columns):
            if c.shape[:1] != (n,):
                raise ValueError(f"column {j} has {c.shape[:1]} values for {n} streams")
        if step_spec is not None:
            step_spec = (np.dtype(step_spec[0]), tuple(int(d) for d in step_spec[1]))
        self._spec = step_spec
        self._identities: Identities | None = None
        if identities is None:
            return  # every stream's own, when asked (:attr:`identities`)
        if isinstance(identities, str):
            identities = Identities.repeat(identities, n)
        elif not isinstance(identities, Identities):
            identities = Identities.of(identities)
        if len(identities) != n:
            raise ValueError(f"{len(identities)} identities for {n} streams")
        self._identities = identities

    @property
    def identities(self) -> Identities:
        """What names every stream across runs (given, or every stream's own).

        Every stream's own: its file (or type), where it starts in it and how it is read,
        as a list of the same streams names them.
        """
        if self._identities is None:
            names: dict[str, int] = {}
            read: dict[str, int] = {}
            codes: list[np.ndarray] = []
            read_codes: list[np.ndarray] = []
            starts: list[np.ndarray] = []
            for block in self._own_streams():  # (one code a stream, no string kept)
                n = len(block)
                found = (names.setdefault(identity(x), len(names)) for x in block)
                codes.append(np.fromiter(found, np.int64, n))
                how = (read.setdefault(reader_of(x), len(read)) for x in block)
                read_codes.append(np.fromiter(how, np.int64, n))
                at = (-1 if (a := file_offset(x)) is None else a for x in block)
                starts.append(np.fromiter(at, np.int64, n))
            offsets = np.concatenate(starts) if starts else np.zeros(0, np.int64)
            ranges = len(offsets) and int(offsets.max()) >= 0  # (of files: where each starts)
            readers = Identities.coded(read, read_codes, len(self)) if any(read) else None
            self._identities = Identities.coded(
                names, codes, len(self), offsets if ranges else None, readers
            )
        return self._identities

    def _own_streams(self) -> Iterator[list[Any]]:
        """Every stream, made a block at a time (to name them: :attr:`identities`)."""
        for a in range(0, len(self), BLOCK):
            yield self.streams(np.arange(a, min(a + BLOCK, len(self)), dtype=np.int64))

    def step_spec(self) -> tuple[np.dtype, tuple[int, ...]] | None:
        """``(dtype, step shape)`` of the steps of every stream, or None when unknown."""
        return self._spec

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, (int, np.integer)):
            n = range(len(self.lengths))[i]  # (the IndexError of a list, negatives)
            row = [c[n].item() for c in self.columns]
            return self.make(*row, int(self.lengths[n]))
        if isinstance(i, slice):
            index: Any = i
        else:
            index = np.asarray(i)
            if index.dtype.kind not in "iub" or index.ndim != 1:
                if index.ndim == 1 and not len(index):
                    return self._sub(index.astype(np.int64))  # ([]: no stream)
                if index.dtype.kind in "iub":
                    raise IndexError(f"tables are indexed by 1-d arrays, not {index.shape}")
                raise TypeError(
                    "tables are indexed by integers, slices, integer arrays or masks, "
                    f"not {type(i).__name__} ({index.dtype})"
                )
            if index.dtype == bool:
                if index.shape != self.lengths.shape:
                    raise IndexError(f"a mask of {index.shape} for {len(self)} streams")
                index = np.flatnonzero(index)
            index = index.astype(np.int64)
        return self._sub(index)

    def streams(self, index: npt.ArrayLike) -> list[Any]:
        """The streams at ``index`` (integers), made together: ``[self[i] for i in index]``.

        Example:
            >>> StreamTable(np.zeros, [2, 1, 3]).streams([2, 0])
            [array([0., 0., 0.]), array([0., 0.])]

        Raises:
            TypeError: an index that is not of integers (a mask, fractions, text).
            IndexError: an index past either end, or not 1-d.
        """
        given = np.asarray(index)
        if given.size and given.dtype.kind not in "iu":
            raise TypeError(
                f"streams() takes integers, not {given.dtype} (a mask: table[mask] gives a table)"
            )
        if given.ndim != 1:
            raise IndexError(f"streams() takes a 1-d array of indices, not {given.shape}")
        index = given.astype(np.int64)
        rows = [c[index].tolist() for c in self.columns]
        return list(map(self.make, *rows, self.lengths[index].tolist()))

    def _sub(self, index: Any) -> StreamTable:
        sub = object.__new__(type(self))  # (a table of a store stays one)
        sub.make = self.make
        sub.lengths = _frozen(self.lengths[index])
        sub.columns = tuple(_frozen(c[index]) for c in self.columns)
        sub._spec = self._spec
        given = self._identities
        sub._identities = None if given is None else given[index]
        return sub

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self[i]

    def __add__(self, other: Any) -> Any:
        """The streams of both, as ``+`` of two lists gives them.

        A table of the same ``make`` (two slices of one table, of one store) gives a
        table of the same kind; another table or a list gives the list of the streams.

        Example:
            >>> table = StreamTable(np.zeros, [3, 1, 2])
            >>> (table[2:] + table[:1]).lengths.tolist(), len(table + [np.ones(4)])
            ([2, 3], 4)
        """
        if isinstance(other, StreamTable) and _joinable(self, other):
            return _joined(self, other)
        if isinstance(other, (list, StreamTable)):
            return [*self, *other]
        return NotImplemented

    def __radd__(self, other: Any) -> Any:
        if isinstance(other, list):  # (``list + table``: the list of the streams)
            return [*other, *self]
        return NotImplemented

    def __repr__(self) -> str:
        spec = "" if self._spec is None else f", dtype={self._spec[0]}, step={self._spec[1]}"
        return f"{type(self).__name__}({len(self)} streams{spec})"

    def __reduce__(self) -> tuple:
        arrays = (_column(self.lengths), *map(_column, self.columns))
        args = (self.make, arrays, self._spec, self._identities)
        if type(self) is StreamTable:
            return (_rebuilt, args)
        return (_rebuilt, (*args, type(self)))


def _rebuilt(
    make: Any,
    arrays: tuple,
    spec: Any,
    identities: Identities | None,
    kind: type[StreamTable] | None = None,
) -> StreamTable:
    """A table (of ``kind``, a subclass) from what :meth:`StreamTable.__reduce__` gave."""
    table = object.__new__(StreamTable if kind is None else kind)
    loaded = [_frozen(_loaded(a)) for a in arrays]
    table.make, table.lengths, table.columns = make, loaded[0], tuple(loaded[1:])
    table._spec, table._identities = spec, identities
    return table


def _joinable(a: StreamTable, b: StreamTable) -> bool:
    """Whether ``b``'s rows are rows of ``a``'s kind: the same ``make``, columns and steps."""
    return (
        type(a) is type(b)
        and a.make == b.make
        and a._spec == b._spec
        and [c.dtype for c in a.columns] == [c.dtype for c in b.columns]
        and [c.shape[1:] for c in a.columns] == [c.shape[1:] for c in b.columns]
    )


def _joined(a: StreamTable, b: StreamTable) -> StreamTable:
    """The table of the streams of ``a``, then those of ``b`` (see :func:`_joinable`)."""
    table = object.__new__(type(a))
    table.make, table._spec = a.make, a._spec
    table.lengths = _frozen(np.concatenate([a.lengths, b.lengths]))
    table.columns = tuple(
        _frozen(np.concatenate(pair)) for pair in zip(a.columns, b.columns, strict=True)
    )
    given = a._identities is not None and b._identities is not None
    table._identities = Identities.concat([a._identities, b._identities]) if given else None
    return table


def is_table(obj: Any) -> bool:
    """Whether ``obj`` is a :class:`StreamTable`."""
    return isinstance(obj, StreamTable)
