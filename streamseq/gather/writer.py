"""The one batch writer: the chunks of ``tbin`` parts as arrays, written into a batch."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .._tree import leaves, tree_map
from .._writing import writing, writing_here
from ..batch import Batch
from ..errors import StreamError
from ..read.handle import ProcessLocal
from ..read.ref import StreamRef, describe
from ..read.stream import ArrayTree
from ..workers import shm as _shm
from . import ahead as _ahead
from . import meta
from .check import put, spec_mismatch
from .chunkmap import ChunkMap, Part
from .positions import Positions, packed_pieces
from .warm import first_reads, in_memory

try:  # the compiled batch assembly (built with the package; optional)
    from ._gather import Copy, block, fill
except ImportError:  # pragma: no cover - a build without a C compiler
    Copy = block = fill = None

#: batch arrays of this many bytes or more are made over kept memory (:func:`new_array`)
KEPT_FROM = 64 << 10


def new_array(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A new batch array (a batch its user holds never changes), without page faults.

    A large array (``KEPT_FROM`` bytes or more) is made over a block of memory the
    compiled pass keeps, once every view of the array before it is gone, for the next
    array of its size: the allocator would give it back to the system between batches
    and fault it in again, a page at a time. Others are :func:`numpy.empty`, and so is
    one whose memory cannot be had (numpy's error names its size, shape and dtype).

    Example:
        >>> a = new_array((256, 512), np.dtype(np.float32))
        >>> a.shape, a.dtype, a.flags.c_contiguous, a.flags.writeable
        ((256, 512), dtype('float32'), True, True)
    """
    n = 1
    for d in shape:
        n *= int(d)  # (exact: a numpy integer's product wraps round)
    if block is None or dtype.hasobject or n * dtype.itemsize < KEPT_FROM:
        return np.empty(shape, dtype)
    try:
        kept = block(n * dtype.itemsize)
    except (MemoryError, OverflowError):  # (numpy's error names the size, shape and dtype)
        return np.empty(shape, dtype)
    return np.frombuffer(kept, dtype, n).reshape(shape)


_NOTHING = np.zeros(0)

Written = tuple[Any, meta.Meta, int, "int | None"]
"""A batch as written: ``(data, (reset, valid, stream, step), lookahead, valid steps)``;
the valid steps None where the plan does not say (packed rows: count ``valid``)."""


class BatchWriter(ChunkMap):
    """The one batch writer: the chunks of ``tbin`` parts, read into batches in few steps.

    A :class:`~.chunkmap.ChunkMap` (built once per zip from the rows' stream lengths,
    O(streams) memory) that reads. The read positions of a
    block of consecutive batches come from one binary search over all rows
    (:class:`~.positions.Positions`). Rows of arrays are copied, and the metadata
    written, by one compiled pass (:mod:`streamseq.gather._gather`) when it was built.
    Otherwise reading a batch slices the open stream of each row and copies the slices
    with one :func:`numpy.concatenate` straight into the output, which is allocated in
    the worker's shared-memory slot when there is one (:mod:`streamseq.workers.shm`),
    and :mod:`.meta` writes the metadata.

    Args:
        parts: the rows, each from :func:`~streamseq.tbin`.
        pad: the pad mode of the zip (``"pack"`` for packed rows).
        tbins: steps per chunk.

    Example:
        >>> from streamseq import interleave_streams, tbin
        >>> rows = interleave_streams([np.arange(3), np.arange(2)], 2)
        >>> writer = BatchWriter([tbin(r, 2) for r in rows], "zeros", 2)
        >>> writer.batch(1, rows[0].read(0, 0, 0)).data
        array([[2, 0],
               [0, 0]])
    """

    def __init__(self, parts: Sequence[Part], pad: str, tbins: int):
        super().__init__(parts, pad, tbins)
        longest = int(self.lengths.max(initial=0))
        self.step_tables = meta.StepTables(tbins, longest, self.segmented)
        self.block_size = max(1, 4096 // max(1, len(self.rows)))
        self.shape = (len(self.rows), tbins + self.lookahead)  # (with the look-ahead steps)
        self._state = ProcessLocal(functools.partial(_ReadState, len(self.rows)))
        self._lock = ProcessLocal(threading.Lock)  # a forked child's own: the parent's may be held

    def forget(self) -> None:
        """Drop the references to open streams (the rows closed them, or will)."""
        self._state.close()

    def batch(self, i: int, spec: Any) -> Batch:
        """Batch ``i`` (``data`` None when ``spec`` is None).

        Safe to call from several threads: one batch is written at a time. With
        ``lookahead`` its per-step fields hold ``tbins + lookahead`` steps
        (:mod:`.ahead`).
        """
        with self._writing():
            data, m, la, _ = self._write(i, spec)
        return Batch(data, *m, la)

    def written(self, i: int, spec: Any, copy: Any = None) -> Written:
        """Batch ``i`` as its arrays, its look-ahead and its valid steps (None: not known).

        What :meth:`batch` writes, without a :class:`Batch` around it: its caller builds
        one of its own (tensors, :mod:`streamseq.deliver`). The valid steps come from
        the plan (the reads of its rows), not from counting ``valid``.

        With ``copy`` (a ``Copy`` of the compiled pass), the rows that pass copies are
        left to ``copy``: they are written once it is started and waited for, while
        the caller goes on. Everything else is written before this returns.

        Example:
            >>> from streamseq import interleave_streams, tbin
            >>> rows = interleave_streams([np.arange(3), np.arange(2)], 2)
            >>> writer = BatchWriter([tbin(r, 2) for r in rows], "zeros", 2)
            >>> data, (reset, valid, stream, step), lookahead, steps = writer.written(0, None)
            >>> steps, int(valid.sum()), data
            (4, 4, None)
        """
        with self._writing():
            return self._write(i, spec, copy)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """One batch written at a time (the lock), noted as this thread's (:mod:`._writing`).

        A batch of this writer asked for by the thread writing one is asked by that
        batch's own reads (a transform or a source asking the loader for a batch): a
        RuntimeError (the read's error, naming its stream and steps), where it waited for
        the lock its own thread holds for ever.
        """
        if writing_here(self):
            raise RuntimeError(
                "a batch was asked for while one is written, in the same thread: a read of "
                "a batch (a transform, a source) cannot ask the loader for a batch"
            )
        with self._lock.get(), writing(self):
            yield

    def positions(self, first: int, size: int) -> Positions:
        """Where every row reads in batches ``first`` to ``first + size - 1``."""
        return Positions(self, first, size)

    def _write(self, i: int, spec: Any, copy: Any = None) -> Written:
        """Batch ``i`` (:data:`Written`), its steps allocated once and written in place.

        ``copy``: see :meth:`written`.
        """
        st = self._state.get()
        bt, la = self.shape, self.lookahead
        here = _shm.current() is None
        empty = np.empty if here else _shm.empty
        m = meta.allocate(*bt, empty)  # (once: they may be in shm)
        new = new_array if here else empty
        if type(spec) is np.ndarray:  # (the common case, in short)
            data = new((*bt, *spec.shape[1:]), spec.dtype)
        elif spec is None:
            data = None
        else:  # (each leaf as an array's data)
            data = tree_map(lambda s: new((*bt, *s.shape[1:]), s.dtype), spec)
        if self.pad == "pack":
            self._read_packed(st, i, spec, data, m)
            if la:
                reads = _ahead.ahead_of(self, i)
                r, p, a, n = reads
                _ahead.write_meta(m, self.tbins, n, self.ids[p], a, r)
                if data is not None:
                    _ahead.read_rows(self, data, spec, reads)
            return data, m, la, None
        first = i - i % self.block_size
        blk = st.block
        if blk is None or blk.first != first:
            blk = st.block = self.positions(first, self.block_size)
            if la:  # the rows' reads, with the steps after their chunks
                blk.ahead = _ahead.block_counts(self, blk)
                blk.reads = blk.count + blk.ahead
                blk.totals = blk.reads.sum(axis=1).tolist()
        k = i - first
        steps = blk.totals[k]
        if spec is None:
            self._write_meta(m, blk, k)
            return None, m, la, steps
        ahead = None
        if not st.started:  # the first batch here: rows open (and read) concurrently
            st.started = True
            if self.arrays is None:  # (arrays given as they are: nothing to wait for)
                ahead = first_reads(self.rows, self.first_list, blk, k)
        if self.transformed or not self._open_arrays(st, blk, k, i, spec):
            self._read_checked(st, data, blk, k, spec, ahead)  # read and check row by row
            if la:
                r = np.flatnonzero(blk.ahead[k])
                reads = r, blk.pos[k, r], blk.source_start[k, r] + self.tbins, blk.ahead[k, r]
                _ahead.read_rows(self, data, spec, reads)
        elif type(spec) is np.ndarray:
            if self._copy(data, st.open, blk, k, m, copy):
                return data, m, la, steps
        else:  # a tree: each leaf of every stream, copied as an array stream
            parts = [_leaves_as(spec, s) for s in st.open]
            for n, out in enumerate(leaves(data)):
                streams = [_NOTHING if p is None else p[n] for p in parts]
                self._copy(out, streams, blk, k, None, copy)
        self._write_meta(m, blk, k)
        return data, m, la, steps

    def _write_meta(self, m: meta.Meta, blk: Positions, k: int) -> None:
        """Write the metadata of batch ``k`` of ``blk``: its chunks', then its look-ahead's."""
        t = self.tbins
        if not self.lookahead:
            self.step_tables.write(m, blk, k)
            return
        reset, valid, stream, step = m
        self.step_tables.write((reset, valid[:, :t], stream[:, :t], step[:, :t]), blk, k)
        first = blk.source_start[k] + t
        _ahead.write_meta(m, t, blk.ahead[k], blk.id_rows[k], first)

    def _copy(
        self,
        out: np.ndarray,
        streams: list[Any],
        blk: Positions,
        k: int,
        m: meta.Meta | None,
        copy: Any = None,
    ) -> bool:
        """Copy every row's slice of ``streams`` (arrays) into ``out``.

        The compiled pass does it (and writes the metadata ``m`` when given) unless it
        declines, which it decides before copying anything (a stream that is not exactly
        an array or a memmap, another byte order, not contiguous); then one
        :func:`numpy.concatenate` does. Returns whether the metadata was written (or
        will be, by ``copy``: see :meth:`written`; segmented rows are written now, their
        resets written after the pass).
        """
        reads = blk.reads[k] if self.lookahead else blk.count[k]  # (the steps after: one read)
        if fill is not None:
            reset, valid, stream, step = m or meta.allocate(*out.shape[:2])
            start, ids = blk.source_start[k], blk.id_rows[k]
            later = None if self.segmented else copy
            if fill(streams, start, reads, ids, out, reset, valid, stream, step, later) < 0:
                if self.segmented:  # a segment starts where its own step 0 is
                    meta.write_resets(reset, blk, k)
                return m is not None
        if self.lookahead:
            self._gather_wide(out, streams, blk, k, reads.tolist())
        else:
            self._gather(out, streams, blk, k)
        return False

    def describe(self, i: int) -> str:
        """What batch ``i`` reads: each stream (index and repr) with its step range.

        Example:
            >>> from streamseq import interleave_streams, tbin
            >>> rows = interleave_streams([np.arange(5), np.arange(3)], 2)
            >>> writer = BatchWriter([tbin(r, 2) for r in rows], "zeros", 2)
            >>> print(writer.describe(1))  # doctest: +ELLIPSIS
            stream 0 (ndarray(shape=(5,), dtype=int64)) steps 2:4; stream 1 (...) steps 2:3
        """
        if self.pad == "pack":
            pieces: list[list[Any]] = []  # [row, stream, first step, stop] of each piece
            for r, (row, placed) in enumerate(zip(self.rows, self.placed, strict=True)):
                for j, a, n, _ in packed_pieces(row, i, self.tbins, placed):
                    a = int(row.starts[j]) + a
                    pieces.append([r, row.refs[j], a, a + n])
            if self.lookahead:  # the steps after a row's chunk, read with its last piece
                reads = (x.tolist() for x in _ahead.ahead_of(self, i))
                for r, p, a, n in zip(*reads, strict=True):
                    ref, last = self._ref(r, p), [q for q in pieces if q[0] == r][-1:]
                    if last and last[0][1] is ref and last[0][3] == a:
                        last[0][3] += n
                    elif n:
                        pieces.append([r, ref, a, a + n])
            return (
                "; ".join(
                    f"stream {ref.index} ({describe(ref.source)}) steps {a}:{b}"
                    for _, ref, a, b in pieces
                )
                or "padding only"
            )
        blk = self.positions(i, 1)
        reads = blk.count  # (with a look-ahead, the steps after the chunk that it reads too)
        if self.lookahead:
            reads = blk.count + _ahead.block_counts(self, blk)
        parts = []
        for r in range(len(self.rows)):
            n = int(reads[0, r])
            if n:
                ref, a = self._ref(r, int(blk.pos[0, r])), int(blk.source_start[0, r])
                parts.append(f"stream {ref.index} ({describe(ref.source)}) steps {a}:{a + n}")
        return "; ".join(parts) or "padding only"

    def _open_arrays(self, st: _ReadState, blk: Positions, k: int, i: int, spec: Any) -> bool:
        """Open the stream each row reads in batch ``k`` of ``blk``; whether all are arrays.

        Arrays (and trees of arrays) are checked against ``spec`` as they are opened;
        other streams are read, and checked, row by row.
        """
        if i == st.next and k:  # sequential: only the rows that moved on
            rows, at = blk.moved(k)
        else:
            rows = np.flatnonzero((blk.pos[k] != st.at) & blk.active[k]).tolist()
            at = blk.pos[k, rows].tolist()
        if st.opened:  # an opener's stream: the row may have been read elsewhere
            more = [r for r in st.opened if blk.active[k, r] and r not in rows]
            rows, at = rows + more, at + blk.pos[k, more].tolist()
        first, streams, where, opened, other = (
            self.first_list,
            st.open,
            st.at,
            st.opened,
            st.other,
        )
        is_array = type(spec) is np.ndarray
        dtype, shape = (spec.dtype, spec.shape[1:]) if is_array else (None, None)
        if self.arrays is not None:  # in short
            arrays = self.arrays
            for r, p in zip(rows, at, strict=True):
                stream = streams[r] = arrays[p]
                if stream.dtype is not dtype or stream.shape[1:] != shape:
                    self._check_array(spec, stream, r, p)
                where[r] = p
            st.next = i + 1
            return True
        for r, p in zip(rows, at, strict=True):
            ref = self.rows[r].switch(p - first[r])
            made = ref.open()
            try:
                stream = streams[r] = in_memory(made)
            except StreamError as e:  # a store's files gone: name the stream and steps
                a = int(blk.source_start[k, r])
                ref.locate(e, (a, a + int(blk.count[k, r])))
                raise
            if isinstance(stream, np.ndarray if is_array else ArrayTree):
                other.discard(r)
                if not is_array or stream.dtype is not dtype or stream.shape[1:] != shape:
                    self._check_array(spec, stream, r, p)
            else:
                other.add(r)
            where[r] = p  # (after the check: a failed row opens and fails again)
            if made is not ref.source:
                opened.add(r)
            elif opened:
                opened.discard(r)
        st.next = i + 1
        return not other

    def _gather(self, out: np.ndarray, streams: list[Any], blk: Positions, k: int) -> None:
        """Copy the slices of every row (and zeros) into ``out`` with one concatenate.

        A row reads its ``count`` steps from ``start`` (in the source, for a segment).
        """
        starts, t = blk.starts[k], self.tbins
        if blk.full[k]:  # no padding: the common case, in short
            pieces = [s[a : a + t] for s, a in zip(streams, starts, strict=True)]
        else:
            zeros = np.zeros((t, *out.shape[2:]), out.dtype)
            rows = zip(streams, starts, blk.counts[k], strict=True)
            pieces = [s[a : a + c] if a >= 0 else zeros for s, a, c in rows]
            rows, counts = blk.partial(k)
            for r, n in zip(reversed(rows), reversed(counts), strict=True):
                pieces.insert(r + 1, zeros[n:])
        self._concatenate(pieces, out, streams, blk, k, blk.counts[k])

    def _gather_wide(
        self, out: np.ndarray, streams: list[Any], blk: Positions, k: int, reads: list[int]
    ) -> None:
        """:meth:`_gather` of rows that read ``reads`` steps each (with their look-ahead).

        Raises:
            StreamError: a stream holds fewer steps than its source's length said (naming
                the stream and the steps).
        """
        w = out.shape[1]
        zeros = np.zeros((w, *out.shape[2:]), out.dtype)
        pieces = []
        for s, a, c in zip(streams, blk.starts[k], reads, strict=True):
            if c:
                pieces.append(s[a : a + c])
            if c < w:
                pieces.append(zeros[c:])
        self._concatenate(pieces, out, streams, blk, k, reads)

    def _concatenate(
        self,
        pieces: list[Any],
        out: np.ndarray,
        streams: list[Any],
        blk: Positions,
        k: int,
        reads: list[int],
    ) -> None:
        """Concatenate ``pieces`` into ``out``; a stream shorter than its length is named.

        Raises:
            StreamError: a row's stream holds fewer steps than it reads (``reads``, from
                ``blk.starts[k]``): it names the stream and the steps.
        """
        try:
            np.concatenate(pieces, out=out.reshape(-1, *out.shape[2:]), casting="safe")
        except ValueError:
            for r, (s, a, c) in enumerate(zip(streams, blk.starts[k], reads, strict=True)):
                if c and len(s[a : a + c]) != c:
                    ref = self._ref(r, int(blk.pos[k, r]))
                    problem = f"steps {a}:{a + c}: the stream holds {len(s)} steps"
                    raise ref.error(problem) from None
            raise

    def _check_array(self, spec: Any, stream: Any, r: int, p: int) -> None:
        """Raise the error naming stream ``p`` of row ``r`` if ``stream`` differs from ``spec``."""
        problem = spec_mismatch(spec, stream.tree if isinstance(stream, ArrayTree) else stream)
        if problem is not None:
            raise self._ref(r, p).error(problem)

    def _ref(self, r: int, p: int) -> StreamRef:
        """The stream at position ``p`` of the chunk map, in row ``r``."""
        return self.rows[r].refs[p - self.first_list[r]]

    def _read_packed(self, st: _ReadState, i: int, spec: Any, data: Any, m: meta.Meta) -> None:
        """Write packed batch ``i``: each row's streams one after the other, in its chunks.

        Every read goes through :meth:`Row.read` (checked, transformed); the first read of
        each stream is checked against ``spec``. ``data`` None: the metadata only.
        """
        st.at[:] = -1
        st.next = -1
        pieces = [
            packed_pieces(r, i, self.tbins, p) for r, p in zip(self.rows, self.placed, strict=True)
        ]
        meta.write_packed(m, self.rows, pieces)
        if data is None:
            return
        tree_map(lambda out: out.fill(0), data)
        for r, (row, row_pieces) in enumerate(zip(self.rows, pieces, strict=True)):
            for j, a, n, at in row_pieces:
                source = int(row.starts[j]) + a
                d = row.read(j, a, a + n)
                p = self.first_list[r] + j
                if st.checked[r] != p:
                    problem = spec_mismatch(spec, d)
                    if problem is not None:
                        raise self._ref(r, p).error(f"steps {source}:{source + n}: {problem}")
                    st.checked[r] = p

                def copy(out: np.ndarray, x: Any, r: int = r, at: int = at, n: int = n) -> None:
                    put(out[r, at : at + n], x)

                try:
                    tree_map(copy, data, d)
                except (TypeError, ValueError, KeyError) as e:
                    raise self._ref(r, p).error(f"steps {source}:{source + n}: {e}") from e

    def _read_checked(
        self,
        st: _ReadState,
        data: Any,
        blk: Positions,
        k: int,
        spec: Any,
        ahead: dict[int, Any] | None = None,
    ) -> None:
        """Read row by row through :meth:`Row.read`, which checks (and transforms) every read.

        The first read of each stream is checked against ``spec``, and every read is
        copied with safe casting, never broadcast. ``ahead`` holds rows already read
        (by :func:`~.warm.first_reads`).
        """
        st.at[:] = -1
        st.next = -1
        checked = st.checked
        into = not self.transformed and type(data) is np.ndarray
        for r, row in enumerate(self.rows):
            n = int(blk.count[k, r])
            if n:
                a, p = int(blk.start[k, r]), int(blk.pos[k, r])
                if ahead and r in ahead:
                    d = ahead.pop(r)
                elif into and row.read_part_into(p - self.first_list[r], a, a + n, data[r, :n]):
                    checked[r] = p  # (written in place: its dtype and step shape are the batch's)
                    data[r, n:] = 0
                    continue
                else:
                    d = row.read(p - self.first_list[r], a, a + n)
                if checked[r] != p:
                    problem = spec_mismatch(spec, d)
                    if problem is not None:
                        raise self._ref(r, p).error(f"steps {a}:{a + n}: {problem}")
                    checked[r] = p

                def copy(out: np.ndarray, x: Any, r: int = r, n: int = n) -> None:
                    put(out[r, :n], x)
                    out[r, n:] = 0

                try:
                    tree_map(copy, data, d)
                except (TypeError, ValueError, KeyError) as e:
                    raise self._ref(r, p).error(f"steps {a}:{a + n}: {e}") from e
            else:
                tree_map(lambda out, r=r: out.__setitem__(r, 0), data)


def _leaves_as(spec: Any, stream: Any) -> list[Any] | None:
    """The arrays of a tree stream in the order of ``spec``'s leaves (None: no stream)."""
    if not isinstance(stream, ArrayTree):
        return None
    return leaves(tree_map(lambda _, a: a, spec, stream.tree))


class _ReadState:
    """What one process has open in a writer's rows (one per process: ``ProcessLocal``)."""

    def __init__(self, rows: int):
        self.at = np.full(rows, -1, dtype=np.int64)  # position open in each row
        self.open: list[Any] = [_NOTHING] * rows  # the stream open in each row
        self.opened: set[int] = set()  # rows whose stream an opener made
        self.other: set[int] = set()  # rows whose stream is not an array: read checked
        self.checked = [-1] * rows  # position whose dtype and shape were checked
        self.next = -1  # the batch after the last one read here
        self.started = False  # a batch was written here (the first opens concurrently)
        self.block: Positions | None = None
