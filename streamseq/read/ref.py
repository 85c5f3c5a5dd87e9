"""Streams and file openers, and the reference that reads one of them safely.

A *stream* is a lazy sequence of timesteps (:mod:`.stream`). A *file opener* is a
picklable zero-argument callable returning a stream; it is called lazily, in the process
that reads it.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import _collector
from .._checks import check_int
from .._redact import describe as _describe
from .._redact import redact_urls
from .._tree import leaves, num_steps, tree_map
from ..errors import StreamError, mark_where
from ..plan.identities import Identities
from .handle import ProcessLocal, opening
from .step_spec import step_spec
from .stream import ArrayTree, as_stream, describe, is_stream, known_length


def _kind(source: Any) -> str:
    """What a source is: "path", "table", "stream", "opener" or "neither"."""
    if type(source) is np.ndarray:  # the common case, in short
        return "stream"
    if isinstance(source, (str, bytes, os.PathLike)):
        return "path"
    if _parts(source) is not None:
        return "table"
    if is_stream(source):
        return "stream"
    return "opener" if callable(source) else "neither"


def identity(obj: Any) -> str:
    """What names a stream across runs: its file path when it has one, else its type.

    A source's ``path`` attribute, or the path-like arguments of a ``functools.partial``
    opener, identify it (the credentials of a URL hidden); in-memory streams are
    identified by their type only.

    Example:
        >>> import functools, numpy as np
        >>> identity(functools.partial(np.load, "a.npy", mmap_mode="r"))
        'load:a.npy'
        >>> identity(np.arange(3))
        'ndarray'
    """
    path = getattr(obj, "path", None)
    if path is not None:
        return redact_urls(os.fspath(path))
    if isinstance(obj, functools.partial):
        args = [redact_urls(os.fspath(a)) for a in obj.args if isinstance(a, (str, os.PathLike))]
        name = getattr(obj.func, "__name__", type(obj.func).__name__)
        return f"{name}:{','.join(args)}"
    return type(obj).__name__


def file_offset(obj: Any) -> int | None:
    """Where a stream that is a range of its file starts in it, else None.

    A source that reads part of a file (a document of a
    :func:`~streamseq.io.token_corpus`) says so with an integer ``file_offset``
    attribute: with its :func:`identity` and its length, it names the stream across
    runs, so that two ranges of one file of the same length are told apart.

    Example:
        >>> file_offset(np.arange(3)) is None
        True
    """
    at = getattr(obj, "file_offset", None)
    if isinstance(at, (bool, np.bool_)) or not isinstance(at, (int, np.integer)):
        return None
    return int(at)


def reader_of(obj: Any) -> str:
    """How a stream is read, as its reader says (``read_options``), else ``""``.

    A reader of :mod:`streamseq.io` names its kind and the options of it that change
    the steps (a dtype, a frame size, a sample rate; never credentials): with its
    :func:`identity`, it names the stream across runs, so that one file read two ways is
    two streams.

    An opener, ``functools.partial`` of such a reader (``io.tokens``, ``io.video``, ...),
    says it before it is opened: what the reader it makes would say.

    Example:
        >>> reader_of(np.arange(3))
        ''
        >>> from streamseq.io import tokens
        >>> reader_of(functools.partial(tokens, "a.bin", dtype="uint16"))
        'tokens(dtype=<u2)'
    """
    said = getattr(obj, "read_options", None)
    if said is None and isinstance(obj, functools.partial):
        # an opener of a reader that says how a call of it reads (options as keywords)
        said_of = getattr(obj.func, "read_options_of", None)
        said = said_of(*obj.args, **obj.keywords) if callable(said_of) else None
    return said if isinstance(said, str) else ""


class StreamRef:
    """The stream at ``index`` of the user's list, opened lazily and read with checks.

    Errors while opening, measuring or reading become :class:`StreamError` naming the
    stream, with the original error chained; a stream's or opener's own
    :class:`StreamError` (a :class:`~streamseq.SourceError`) is raised as it is, with
    the stream (and the steps of a read) named in it. A declared length is checked
    against ``len`` where it costs nothing (arrays, lists, dicts and tuples of arrays:
    :func:`known_length`) and otherwise trusted, sparing the probe of a file; a read
    that returns fewer steps than asked is an error in every case. The opened stream is
    cached per process (never shared across a fork) and dropped when pickled.

    Args:
        index: index of the stream in the list the user gave.
        source: a stream or a zero-argument opener.
        length: declared number of steps, or ``None`` to measure it on first use.

    Example:
        >>> import numpy as np
        >>> ref = StreamRef(0, np.arange(10) * 10)
        >>> len(ref), ref.read(2, 5).tolist()
        (10, [20, 30, 40])
    """

    # (no __dict__: a rank holds one reference per stream of its rows, millions)
    __slots__ = ("_measured_spec", "_opened", "index", "length", "source")

    def __init__(self, index: int, source: Any, length: int | None = None):
        kind = _kind(source)
        if kind == "path":
            raise TypeError(
                f"stream {index} ({describe(source)}) is a path, not a stream: give a source such "
                "as streamseq.io.video(path) or streamseq.io.tokens(path, dtype), or an opener"
            )
        if kind == "table":
            raise TypeError(
                f"stream {index} ({source!r}) is a table of streams, not a stream: give the "
                "table itself as the streams, mix() to draw from several tables, or "
                "list(table) to list its streams with others"
            )
        if kind == "neither":
            raise TypeError(
                f"stream {index} ({describe(source)}): expected a stream (len and slicing) "
                f"or a zero-argument opener, got {type(source).__name__}"
            )
        if kind == "stream":
            try:
                source = as_stream(source)
            except ValueError as e:  # a dict or tuple of arrays of different lengths
                shown = _describe(tree_map(describe, source))
                raise ValueError(f"stream {index} ({shown}): {e}") from None
            actual = known_length(source)
            if length is not None and actual is not None and actual != length:
                raise StreamError(
                    f"declared length {length} but the stream has {actual} steps",
                    index,
                    describe(source),
                )
        self.index = index
        self.source = source
        self.length = length
        self._opened: ProcessLocal | None = None  # made on first open (a million refs)
        #: the opener's stream's :func:`step_spec`, kept when its length was measured
        self._measured_spec: Any = None

    def __repr__(self) -> str:
        return f"StreamRef({self.index}, {describe(self.source)})"

    def error(self, message: str) -> StreamError:
        """Build a :class:`StreamError` that names this stream."""
        return StreamError(message, self.index, describe(self.source))

    def locate(self, error: StreamError, steps: tuple[int, int] | None = None) -> None:
        """Name this stream (and ``steps``) in an error of the stream that names none.

        Such an error (a :class:`~streamseq.SourceError` naming a file) is raised as it
        is, never wrapped: see :mod:`streamseq.errors`.
        """
        if error.index is None:
            error.locate(self.index, describe(self.source), steps)

    def open(self) -> Any:
        """Return the stream, calling the opener once per process if needed."""
        opened = self._opened
        if opened is None:
            opened = self._opened = ProcessLocal(close=_close)
        return opened.get(self._open)

    def _open(self) -> Any:
        if is_stream(self.source):
            stream = self.source
        else:
            try:
                with opening():  # a stream made here, to be read at once
                    stream = self.source()
            except StreamError as e:  # the opener's own error (a SourceError): name where
                self.locate(e)
                raise
            except Exception as e:
                raise self.error(f"opening failed: {type(e).__name__}: {e}") from e
            if not is_stream(stream):
                raise self.error(f"the opener returned {type(stream).__name__}, not a stream")
            made_to_read = getattr(stream, "made_to_read", None)
            if made_to_read is not None:  # a source made here to be read now
                made_to_read(self.length)
            stream = as_stream(stream)
        free = hasattr(stream, "shape") or known_length(stream) is not None  # 0-d: fails
        if self.length is None or free:
            try:
                actual = len(stream)
            except StreamError as e:  # the stream's own error: it says what; name where
                self.locate(e)
                raise
            except Exception as e:
                raise self.error(f"len() failed: {type(e).__name__}: {e}") from e
            if self.length is not None and actual != self.length:
                raise self.error(
                    f"declared length {self.length} but the stream has {actual} steps"
                )
            self.length = actual
        return stream

    def close(self) -> None:
        """Forget the opened stream, calling its ``close`` method if it has one.

        Streams given directly are closed too: a stream with ``close`` must reopen on its
        next read (the sources of :mod:`streamseq.io` do).
        """
        if self._opened is not None:
            self._opened.close()

    @property
    def is_open(self) -> bool:
        """Whether this process holds the stream open."""
        return self._opened is not None and self._opened.peek() is not None

    def __len__(self) -> int:
        if self.length is None:
            stream = self.open()
            if not is_stream(self.source):  # measured: do not keep the file open for it
                self._measured_spec = step_spec(stream)  # what its header told, if anything
                self.close()
        return self.length  # type: ignore[return-value]

    def step_spec(self) -> Any:
        """Zero-step arrays with the dtype and step shape of the stream, or ``None``.

        Known without reading a step (see :func:`~streamseq.read.step_spec.step_spec`):
        from a stream given, or from what an opener returned when its length was
        measured; nothing is opened for it.

        Example:
            >>> StreamRef(0, np.zeros((4, 3), np.float32)).step_spec().shape
            (0, 3)
        """
        if is_stream(self.source):
            return step_spec(self.source)
        return self._measured_spec

    @contextlib.contextmanager
    def _reading(self, start: int, stop: int) -> Any:
        """Errors of a read of steps ``start:stop``, told as this stream's."""
        try:
            yield
        except StreamError as e:  # the source's own error: it says what; name where
            self.locate(e, (start, stop))
            raise
        except Exception as e:
            raise self.error(
                f"reading steps {start}:{stop} failed: {type(e).__name__}: {e}"
            ) from e
        except BaseException as e:  # an exit: raised as it is, noting where
            self.mark(e, (start, stop))
            raise

    def mark(self, error: BaseException, steps: tuple[int, int]) -> None:
        """Note on an exit raised reading ``steps`` of this stream where it was raised."""
        where = f"stream {self.index} ({describe(self.source)}), steps {steps[0]}:{steps[1]}"
        mark_where(error, where)

    def read_into(self, start: int, stop: int, out: np.ndarray) -> bool:
        """Write steps ``start:stop`` into ``out`` when the stream can (its ``read_into``).

        Returns:
            False when the stream writes nothing for it (the caller reads with
            :meth:`read`); True once exactly ``stop - start`` steps are in ``out``.

        Raises:
            StreamError: as :meth:`read`, and when another number of steps came.
        """
        stream = self.open()
        into = getattr(stream, "read_into", None)
        if into is None:
            return False
        with self._reading(start, stop):
            got = into(start, stop, out)
        if got is None:
            return False
        if got != stop - start:
            raise self.error(
                f"declared length {self.length} but the stream has "
                f"{'more' if got > stop - start else 'fewer'} steps: steps {start}:{stop} "
                f"returned {got} steps"
            )
        return True

    def read(self, start: int, stop: int) -> Any:
        """Read steps ``start:stop`` and check that exactly that many came back."""
        stream = self.open()
        with self._reading(start, stop):
            data = stream[start:stop]
            if isinstance(data, list):
                data = np.asarray(data)
        try:
            got = num_steps(data) if leaves(data) else 0
        except (TypeError, ValueError) as e:
            raise self.error(f"steps {start}:{stop} are not arrays with a step axis: {e}") from e
        if got != stop - start:
            try:
                actual: int | None = len(stream)
            except Exception:
                actual = None
            if actual is not None and actual == self.length:  # (its length says they exist)
                raise self.error(
                    f"steps {start}:{stop} returned {got} steps, not {stop - start}, though "
                    f"its length is {actual} (its slices return fewer steps than its len() says)"
                )
            has = "fewer steps" if actual is None else f"{actual} steps"
            raise self.error(
                f"declared length {self.length} but the stream has {has}: steps "
                f"{start}:{stop} returned {got} steps"
            )
        return data


def _close(stream: Any) -> None:
    """Close a stream that has a ``close`` method."""
    if hasattr(stream, "close"):
        stream.close()


def _collector_paused() -> contextlib.AbstractContextManager[None]:
    """Pause the cyclic garbage collector while making many objects without cycles.

    Its collections would walk every object made so far, again and again: for a million
    streams that is three quarters of the time. Pauses are counted (any thread, nested):
    the collector runs again when the last ends, if it ran when the first began; a child
    forked meanwhile counts only its own (:mod:`streamseq._collector`).
    """
    return _collector.paused()


def _parts(streams: Any) -> list[Any] | None:
    """The tables and lists of a table, or of a mixture holding a table; None otherwise."""
    if getattr(streams, "lengths", None) is not None and hasattr(streams, "make"):
        return [streams]  # a StreamTable
    parts = getattr(streams, "parts", None)  # a Mixture
    if parts is not None and any(_parts(p) is not None for p in parts):
        return list(parts)
    return None


class TableRefs(Sequence):
    """References to the streams of tables (and lists), each made when it is asked for.

    The lengths are one array and the identities one value per table: nothing is made
    per stream until a row reads it. Stream ``i`` of a table is
    ``StreamRef(i, table[i - start], lengths[i])``; the streams of a list part are
    referenced once, as :func:`as_refs` does.

    Args:
        parts: tables of streams, and lists of :class:`StreamRef` (indexed in order).

    Example:
        >>> from streamseq.stream_table import StreamTable
        >>> table = StreamTable(np.zeros, [3, 2], step_spec=(np.float64, ()))
        >>> refs = as_refs(table)
        >>> len(refs), refs.lengths.tolist(), refs[1]
        (2, [3, 2], StreamRef(1, ndarray(shape=(2,), dtype=float64)))
    """

    def __init__(self, parts: Sequence[Any]):
        self.parts = list(parts)
        sizes = np.array([len(p) for p in self.parts], np.int64)
        self.starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        if len(self.parts) == 1:  # a table's lengths, not a copy
            self.lengths = _part_lengths(self.parts[0])
        else:
            self.lengths = np.concatenate(
                [_part_lengths(p) for p in self.parts] or [np.zeros(0, np.int64)]
            ).astype(np.int64, copy=False)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(len(self))[i]]
        n = range(len(self))[i]  # (the IndexError of a list, negatives)
        p = int(np.searchsorted(self.starts, n, side="right")) - 1
        part, at = self.parts[p], n - int(self.starts[p])
        if isinstance(part, list):
            return part[at]
        return StreamRef(n, part[at], int(part.lengths[at]))

    def __iter__(self) -> Any:
        for i in range(len(self)):
            yield self[i]

    def row(self, index: np.ndarray) -> Sequence[StreamRef]:
        """The references of a row reading streams ``index``, made when a reader asks.

        :class:`RowRefs` when the streams are one table's; else :meth:`pick`.
        """
        index = np.asarray(index, dtype=np.int64)
        if len(self.parts) == 1 and not isinstance(self.parts[0], list):
            return RowRefs(self.parts[0], index, index)
        return self.pick(index)

    def pick(self, index: np.ndarray) -> list[StreamRef]:
        """``[self[i] for i in index]``, the streams of each table made together."""
        index = np.asarray(index, dtype=np.int64)
        if len(self.parts) == 1 and not isinstance(self.parts[0], list):
            return _table_refs_at(self.parts[0], index, index)
        part = np.searchsorted(self.starts, index, side="right") - 1
        out: list[Any] = [None] * len(index)
        for p in np.unique(part).tolist():  # (parts, not streams)
            where = np.flatnonzero(part == p)
            at = index[where] - self.starts[p]
            if isinstance(self.parts[p], list):
                got = [self.parts[p][i] for i in at.tolist()]
            else:
                got = _table_refs_at(self.parts[p], at, index[where])
            for w, ref in zip(where.tolist(), got, strict=True):
                out[w] = ref
        return out

    def __repr__(self) -> str:
        return f"TableRefs({len(self)} streams in {len(self.parts)} parts)"

    @property
    def identities(self) -> Identities:
        """What names every stream across runs."""
        return Identities.concat(
            [p.identities if not isinstance(p, list) else _list_identities(p) for p in self.parts]
        )


#: references made at a time from a table (bounds the memory of their temporary lists)
REFS_BLOCK = 1 << 14
#: references a row of a table makes at a time as a reader goes along it (and keeps,
#: with those still open)
ROW_BLOCK = 64


class RowRefs(Sequence):
    """References to streams ``at`` of a table, each made when a reader asks for it.

    What a row of a table holds in place of a reference per stream: two integer
    arrays. ``refs[j]`` makes the reference to stream ``at[j]`` of the table (numbered
    ``ids[j]``, its index in the user's list), as :meth:`TableRefs.pick` does, with
    the next ones of the row (:data:`ROW_BLOCK` at a time, kept with those still open
    until the next block): a reader goes along its row; the next segment of the same stream is
    read by the same reference (its source stays open, as in a list of references).
    Iterating makes them a block at a time.
    Pickled, it is the rows of the table it reads (a table of those streams), never a
    reference per stream.

    Args:
        table: a :class:`~streamseq.StreamTable`.
        at: the streams of the row, as indices into ``table``.
        ids: their indices in the user's list.

    Example:
        >>> from streamseq.stream_table import StreamTable
        >>> refs = RowRefs(StreamTable(np.zeros, [3, 2, 4]), np.array([2, 0]), np.array([7, 5]))
        >>> len(refs), refs[0], refs[1].length
        (2, StreamRef(7, ndarray(shape=(4,), dtype=float64)), 3)
    """

    def __init__(self, table: Any, at: np.ndarray, ids: np.ndarray):
        self.table = table
        self.at = np.asarray(at, dtype=np.int64)
        self.ids = np.asarray(ids, dtype=np.int64)
        self._made: dict[int, StreamRef] = {}

    def __len__(self) -> int:
        return len(self.at)

    def __getitem__(self, j: Any) -> Any:
        if type(j) is int:  # (the reference a reader asks for again and again: made, kept)
            ref = self._made.get(j)
            if ref is not None:
                return ref
        if isinstance(j, slice):
            return [self[k] for k in range(len(self))[j]]
        if type(j) is not int or not 0 <= j < len(self.at):
            j = range(len(self.at))[j]  # (the IndexError of a list, negatives)
        ref = self._made.get(j)
        if ref is None:
            ref = self._make_from(j)
        return ref

    def _make_from(self, j: int) -> StreamRef:
        """Stream ``j``'s reference, made with the next ones of the row.

        The references of streams ``j`` to ``j + ROW_BLOCK`` are made together and kept
        with those still open: a reader goes along its row, one call a block, not a stream.
        """
        b = min(j + ROW_BLOCK, len(self.at))
        kept = {k: r for k, r in self._made.items() if r.is_open}
        before = self._made.get(j - 1)  # (open or not: the segment before, read on)
        made = _table_refs_at(self.table, self.at[j:b], self.ids[j:b])
        if kept or before is not None:
            made = self._settled(made, j, [(j - 1, before)] if before is not None else (), kept)
        kept.update(enumerate(made, j))
        self._made = kept
        return made[0]

    def _settled(
        self, made: list[StreamRef], a: int, also: Any = (), made_before: Any = None
    ) -> list[StreamRef]:
        """``made`` (the references of streams ``a:``), with those made before in their place.

        The segments of a source next to each other (a run of equal ``ids``) are read by
        one reference, in whatever order they are asked for: a run that holds one made
        before (``made_before``, by default all those kept, an open one first; then
        ``also``, pairs) is read by it.
        """
        made_before = self._made if made_before is None else made_before
        if not made_before and not also:
            return made
        given = [*also, *((k, r) for k, r in made_before.items() if not r.is_open)]
        given += [(k, r) for k, r in made_before.items() if r.is_open]  # (last: they win)
        keys = np.fromiter((k for k, _ in given), np.int64, len(given))
        bounds = self._runs
        run = np.searchsorted(bounds, keys, side="right")  # (run i: bounds[i - 1]:bounds[i])
        lo = np.maximum(bounds[run - 1], a)
        hi = np.minimum(bounds[run], a + len(made))
        for i in np.flatnonzero(lo < hi).tolist():  # (the runs in the block only)
            made[lo[i] - a : hi[i] - a] = [given[i][1]] * int(hi[i] - lo[i])
        return made

    @functools.cached_property
    def _runs(self) -> np.ndarray:
        """Where each run of equal ``ids`` (the segments of one source) starts, and the end."""
        starts = np.flatnonzero(self.ids[1:] != self.ids[:-1]) + 1
        return np.concatenate([[0], starts, [len(self.ids)]]).astype(np.int64)

    def __iter__(self) -> Any:
        if len(self.at) <= REFS_BLOCK:  # (a row's references made together, in one pause)
            return iter(self._settled(_table_refs_at(self.table, self.at, self.ids), 0))
        return self._blocks()

    def _blocks(self) -> Any:
        last: Any = ()
        for a in range(0, len(self.at), REFS_BLOCK):  # (blocks of streams, not streams)
            b = a + REFS_BLOCK
            made = self._settled(_table_refs_at(self.table, self.at[a:b], self.ids[a:b]), a, last)
            last = ((a + len(made) - 1, made[-1]),)  # (a run across blocks: one reference)
            yield from made

    def __repr__(self) -> str:
        return f"RowRefs({len(self)} streams of {self.table!r})"

    def __reduce__(self) -> tuple:
        rows = self.table[self.at]  # the row's streams only, as arrays
        return (RowRefs, (rows, np.arange(len(self.at), dtype=np.int64), self.ids))


def _table_refs_at(table: Any, at: np.ndarray, index: np.ndarray) -> list[StreamRef]:
    """References to streams ``at`` of ``table``, numbered ``index`` in the user's list."""
    out: list[StreamRef] = []
    with _collector_paused():  # many objects without cycles: no collection in between
        # in blocks: the lists of each block's values are freed before the next block's
        # references are made, so they take the same memory (not memory kept fragmented)
        for a in range(0, len(at), REFS_BLOCK):  # (blocks of streams, not streams)
            part = at[a : a + REFS_BLOCK]
            lengths = table.lengths[part].tolist()
            streams = table.streams(part)
            kinds = set(map(type, streams))
            plain = len(kinds) == 1 and _nothing_to_check(streams[0])
            make = _bare_ref if plain else StreamRef
            out.extend(map(make, index[a : a + REFS_BLOCK].tolist(), streams, lengths))
            del lengths, streams
    # (a stream next to itself, the segments of a source: one reference, as in a list,
    # so that a row reads the next segment from the source already open)
    if len(index) > 1:
        for k in (np.flatnonzero(index[1:] == index[:-1]) + 1).tolist():
            out[k] = out[k - 1]
    return out


def _nothing_to_check(stream: Any) -> bool:
    """Whether a :class:`StreamRef` of ``stream`` (and of its type) checks nothing.

    A stream that is not an array, a list, a dict or tuple, has no ``shape`` and no
    ``known_length``: it is referenced as it is, its length the table's (a read of
    fewer steps is an error, as for every stream).
    """
    kind = type(stream)
    plain = (np.ndarray, list, tuple, dict, ArrayTree, str, bytes, os.PathLike)
    return (
        not issubclass(kind, plain)
        and is_stream(stream)
        and not hasattr(stream, "shape")
        and getattr(kind, "known_length", None) is None
    )


def _bare_ref(index: int, source: Any, length: int) -> StreamRef:
    """``StreamRef(index, source, length)`` for a source with nothing to check."""
    ref = object.__new__(StreamRef)
    ref.index, ref.source, ref.length, ref._opened = index, source, length, None
    ref._measured_spec = None
    return ref


def _part_lengths(part: Any) -> np.ndarray:
    if isinstance(part, list):
        return np.fromiter((len(r) for r in part), np.int64, len(part))
    return np.asarray(part.lengths, np.int64)


def _list_identities(refs: Sequence[StreamRef]) -> Identities:
    names = Identities.of(identity(r.source) for r in refs)
    read = Identities.of(reader_of(r.source) for r in refs)
    readers = read if any(read.names) else None
    at = [file_offset(r.source) for r in refs]
    if all(a is None for a in at):
        return names.with_readers(readers)
    offsets = np.array([-1 if a is None else a for a in at], np.int64)
    return Identities(names.names, names.codes, names.count, offsets, readers)


def lengths_of(refs: Sequence[StreamRef]) -> np.ndarray:
    """The length of every stream: one array (a table's), else ``len`` of every ref.

    Example:
        >>> lengths_of(as_refs([[1, 2], [3]])).tolist()
        [2, 1]
    """
    if isinstance(refs, TableRefs):
        return refs.lengths
    return np.fromiter((len(r) for r in refs), np.int64, len(refs))


def identities_of(refs: Sequence[StreamRef]) -> Identities:
    """What names every stream across runs (:func:`identity`), as one value or array.

    Example:
        >>> list(identities_of(as_refs([[1, 2], np.arange(3)])))
        ['list', 'ndarray']
    """
    if isinstance(refs, TableRefs):
        return refs.identities
    return _list_identities(refs)


def indices_of(refs: Sequence[StreamRef]) -> np.ndarray:
    """The index of every reference in the user's list (``ref.index``), as one array."""
    if isinstance(refs, TableRefs):
        return np.arange(len(refs), dtype=np.int64)
    return np.fromiter((r.index for r in refs), np.int64, len(refs))


def _checked_lengths(lengths: Any, count: int) -> list[int]:
    given = np.asarray(lengths)
    if given.dtype.kind in "iu":
        out = given.tolist()
    else:
        out = [check_int(n, f"lengths[{i}]") for i, n in enumerate(lengths)]
    if len(out) != count:
        raise ValueError(f"{len(out)} lengths given for {count} streams")
    bad = [i for i, n in enumerate(out) if n < 0]
    if bad:
        raise ValueError(f"negative length for stream {bad[0]}: {out[bad[0]]}")
    return out


def _declared_array(lengths: Any) -> np.ndarray:
    """Declared lengths as int64, refused as :func:`_checked_lengths` refuses them.

    Whole numbers (integers, or floats without a fraction) as one array; a fraction, a
    NaN or a negative length is refused by its index, without a loop over the lengths.
    """
    given = np.asarray(lengths)
    if given.dtype.kind == "f" and given.ndim == 1:
        bad = np.flatnonzero(~np.isfinite(given) | (given != np.round(given)))
        if len(bad):
            i = int(bad[0])
            raise TypeError(f"lengths[{i}] must be an integer, got {float(given[i])!r} (float)")
        given = given.astype(np.int64)
    if given.dtype.kind not in "iu" or given.ndim != 1:
        given = np.array(_checked_lengths(lengths, len(lengths)), np.int64)
    negative = np.flatnonzero(given < 0)
    if len(negative):
        i = int(negative[0])
        raise ValueError(f"negative length for stream {i}: {int(given[i])}")
    return given


def _table_refs(parts: list[Any], lengths: Any) -> TableRefs:
    """:class:`TableRefs` of ``parts``, the declared ``lengths`` checked against tables."""
    if lengths is not None:
        lengths = _declared_array(lengths)
    made, at = [], 0
    for part in parts:
        n = len(part)
        if _parts(part) is None:  # a list: referenced as as_refs does
            declared = None if lengths is None else lengths[at : at + n]
            made.append(_refs_of(list(part), declared, at))
        else:
            if lengths is not None:
                declared = np.asarray(lengths[at : at + n])
                differ = np.flatnonzero(declared != part.lengths)
                if len(differ):
                    i = int(differ[0])
                    raise StreamError(
                        f"declared length {int(declared[i])} but the stream has "
                        f"{int(part.lengths[i])} steps",
                        at + i,
                        describe(part[i]),
                    )
            made.append(part)
        at += n
    return TableRefs(made)


def _refs_of(streams: list[Any], lengths: Any, offset: int = 0) -> list[StreamRef]:
    if lengths is not None:
        lengths = _checked_lengths(lengths, len(streams))
    else:
        lengths = [None] * len(streams)
    with _collector_paused():
        return [
            s if isinstance(s, StreamRef) else StreamRef(offset + i, s, n)
            for i, (s, n) in enumerate(zip(streams, lengths, strict=True))
        ]


def as_refs(streams: Sequence[Any], lengths: Sequence[int] | None = None) -> Sequence[StreamRef]:
    """Wrap the user's streams or openers (and optional declared lengths) in references.

    A table of streams (:class:`~streamseq.StreamTable`, or a mixture with one among
    its groups) gives :class:`TableRefs`: its lengths as they are, a reference made
    only when a stream is asked for.

    Raises:
        ValueError: no streams, or ``lengths`` of the wrong size or negative.
        TypeError: a length that is not an integer.
        StreamError: a declared length that differs from the length of an array, a list,
            a dict or tuple of arrays, or a table's.

    Example:
        >>> [len(r) for r in as_refs([[1, 2], [3]])]
        [2, 1]
    """
    parts = _parts(streams)
    if parts is not None:
        if not len(streams):
            raise ValueError("no streams given")
        if lengths is not None and len(lengths) != len(streams):
            raise ValueError(f"{len(lengths)} lengths given for {len(streams)} streams")
        return _table_refs(parts, lengths)
    streams = list(streams)
    if not streams:
        raise ValueError("no streams given")
    return _refs_of(streams, lengths)
