"""The one batch writer: the chunks of ``tbin`` parts as arrays, read into a batch."""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._tree import leaves, tree_map
from ..batch import Batch
from ..workers import shm as _shm
from .handle import ProcessLocal
from .ref import ArrayTree, StreamRef, describe

if TYPE_CHECKING:
    from ..interleave import Row
    from ..tbin import TBinned

try:  # the compiled batch assembly (built with the package; optional)
    from .._gather import fill as _fill
except ImportError:  # pragma: no cover - a build without a C compiler
    _fill = None


def _layout(tree: Any) -> str:
    if isinstance(tree, dict):
        return f"a dict with keys {sorted(map(str, tree))}"
    if isinstance(tree, (tuple, list)):
        return f"a {type(tree).__name__} of {len(tree)}"
    return "an array"


def spec_mismatch(spec: Any, data: Any, where: str = "") -> str | None:
    """Why steps ``data`` of a stream do not match ``spec``, or None when they do.

    ``spec`` holds zero-step arrays (or a tree of them) with the dtype and step shape of
    the data; ``data`` must have the same layout, dtypes equal up to byte order and the
    same step shapes.

    Example:
        >>> spec = np.zeros((0, 3), np.int64)
        >>> spec_mismatch(spec, np.ones((4, 3), np.int64)) is None
        True
        >>> spec_mismatch(spec, np.ones((4, 3)))
        "dtype float64 differs from the first stream's int64"
        >>> spec_mismatch(spec, np.ones((4, 1), np.int64))
        "step shape (1,) differs from the first stream's (3,)"
    """
    if isinstance(spec, dict):
        if not isinstance(data, dict) or set(data) != set(spec):
            return f"{where}steps are {_layout(data)}, the first stream's {_layout(spec)}"
        keys: Any = spec
    elif isinstance(spec, (tuple, list)):
        if not isinstance(data, (tuple, list)) or len(data) != len(spec):
            return f"{where}steps are {_layout(data)}, the first stream's {_layout(spec)}"
        keys = range(len(spec))
    elif isinstance(data, (dict, tuple)):
        return f"{where}steps are {_layout(data)}, the first stream's {_layout(spec)}"
    else:
        d = data if type(data) is np.ndarray else np.asarray(data)
        if d.ndim == 0:
            return f"{where}steps are not arrays with a step axis"
        s = spec.dtype
        if d.dtype != s and d.dtype.newbyteorder("=") != s.newbyteorder("="):
            return f"{where}dtype {d.dtype} differs from the first stream's {s}"
        got, want = d.shape[1:], spec.shape[1:]
        if got != want:
            return f"{where}step shape {got} differs from the first stream's {want}"
        return None
    for key in keys:
        problem = spec_mismatch(spec[key], data[key], f"{where}[{key!r}]: ")
        if problem is not None:
            return problem
    return None


def _put(out: np.ndarray, x: Any) -> None:
    """Copy ``x`` into ``out``: same shape (no broadcasting), safe casting."""
    if np.shape(x) != out.shape:
        raise ValueError(f"data of shape {np.shape(x)} where the batch holds {out.shape}")
    np.copyto(out, x, casting="safe")


class _Block:
    """Where every row reads in ``size`` consecutive batches, as arrays ``[size, rows]``.

    Idle rows (ended, or empty) read nothing: position, start and stream -1, 0 steps.
    """

    def __init__(self, table: _Table, first: int, size: int):
        self.first = first
        t, rows = table.tbins, len(table.rows)
        i = np.arange(first, first + size, dtype=np.int64)[:, None]
        n = table.counts[None, :]
        if table.pad == "wrap":
            chunk = i % np.maximum(n, 1)
            active = np.broadcast_to(n > 0, (size, rows))
        else:
            chunk = np.broadcast_to(i, (size, rows))
            active = i < n
        if len(table.ends):
            q = table.base + chunk
            pos = np.minimum(np.searchsorted(table.ends, q, side="right"), len(table.ends) - 1)
            prev = np.where(pos > table.first, table.ends[pos - 1], table.base)
            start = (q - prev) * t
            stop = np.minimum(start + t, table.lengths[pos])
            ids = table.ids[pos]
        else:
            pos = start = stop = ids = np.zeros((size, rows), np.int64)
        self.active = np.ascontiguousarray(active)
        self.pos = np.where(active, pos, -1)
        self.start = np.ascontiguousarray(np.where(active, start, -1), np.int64)
        if table.segmented:  # where the slices start in the sources (steps count there)
            shift = table.shifts[pos] if len(table.ends) else 0
            self.source_start = np.ascontiguousarray(np.where(active, start + shift, -1))
        else:
            self.source_start = self.start
        self.count = np.ascontiguousarray(np.where(active, stop - start, 0), np.int64)
        self.id_rows = np.ascontiguousarray(np.where(active, ids, -1), np.int64)
        self.ramp = np.where(active, start // t, -1)  # row of the table of steps (-1: none)
        self.starts = self.source_start.tolist()
        self.counts = self.count.tolist()
        self.partial = _Rows((self.count < t) & (self.count > 0), self.count)
        self.full = (self.count == t).all(axis=1).tolist()
        moved = self.active.copy()
        moved[1:] &= self.pos[1:] != self.pos[:-1]
        self.moved = _Rows(moved, self.pos)


def _plain(source: Any, length: int | None) -> bool:
    """Whether ``source`` is a plain array of ``length`` steps (nothing to open or check)."""
    return type(source) is np.ndarray and source.ndim > 0 and len(source) == length


class _Rows:
    """For each batch k of a block: the rows where ``mask[k]``, with ``values[k, row]``."""

    def __init__(self, mask: np.ndarray, values: np.ndarray):
        size, rows = mask.shape
        where = np.flatnonzero(mask)
        self.bounds = np.searchsorted(where, np.arange(0, (size + 1) * rows, rows)).tolist()
        self.rows = (where % rows).tolist()
        self.values = values.reshape(-1)[where].tolist()

    def __call__(self, k: int) -> tuple[list[int], list[int]]:
        a, z = self.bounds[k], self.bounds[k + 1]
        return self.rows[a:z], self.values[a:z]


_NOTHING = np.zeros(0)
_TABLE_LIMIT = 1 << 20  # elements of the tables of steps and valid masks


class _Table:
    """The chunks of ``tbin`` parts as arrays, so that reading a batch takes few steps.

    Built once per zip from the rows' stream lengths (O(streams) memory): where each
    stream of each row ends, in chunks, concatenated over rows. The read positions of a
    block of consecutive batches come from one binary search over all rows. Rows of
    arrays are copied, and the metadata written, by one compiled pass
    (:mod:`streamseq._gather`) when it was built. Otherwise reading a batch slices the
    open stream of each row and copies the slices with one
    :func:`numpy.concatenate` straight into the output, which is allocated in the
    worker's shared-memory slot when there is one (:mod:`streamseq.workers.shm`); ``step`` and
    ``valid`` are rows taken from small tables (chunk ``c`` covers steps ``c*T + [0,
    T)``; ``n`` valid steps make the mask ``[0, T) < n``).
    """

    def __init__(self, parts: Sequence[TBinned], pad: str, tbins: int):
        self.rows: list[Row] = [p.row for p in parts]
        self.pad, self.tbins = pad, tbins
        self.counts = np.array([len(p) for p in parts], dtype=np.int64)
        sizes = np.array([len(p.chunk_ends) for p in parts], dtype=np.int64)
        self.base = np.cumsum(self.counts) - self.counts
        self.first = np.cumsum(sizes) - sizes
        self.first_list = self.first.tolist()
        ends = [p.chunk_ends + b for p, b in zip(parts, self.base.tolist(), strict=True)]
        self.ends = np.concatenate([np.zeros(0, np.int64), *ends]).astype(np.int64)
        self.ids = np.concatenate([np.zeros(0, np.int64), *(r.stream_ids for r in self.rows)])
        refs = [ref for r in self.rows for ref in r.refs]
        self.arrays: list[np.ndarray] | None = None  # the streams, when all are plain arrays
        if all(_plain(f.source, f.length) for f in refs):
            self.arrays = [f.source for f in refs]  # nothing to open, measure or close
        self.lengths = np.concatenate([np.zeros(0, np.int64), *(r.lengths for r in self.rows)])
        self.shifts = np.concatenate([np.zeros(0, np.int64), *(r.starts for r in self.rows)])
        self.segmented = bool(self.shifts.any())  # streams that are segments of longer ones
        self.steps = np.arange(tbins, dtype=np.int64)
        longest = -(-int(self.lengths.max(initial=0)) // tbins)
        self.ramps = None  # row c: the steps of chunk c; last row: -1
        if (longest + 1) * tbins <= _TABLE_LIMIT and not self.segmented:
            self.ramps = np.arange((longest + 1) * tbins, dtype=np.int64).reshape(-1, tbins)
            self.ramps[-1] = -1
        self.masks = None  # row n: n valid steps
        if (tbins + 1) * tbins <= _TABLE_LIMIT:
            self.masks = self.steps < np.arange(tbins + 1)[:, None]
        self.block_size = max(1, 4096 // max(1, len(self.rows)))
        self.shape = (len(self.rows), tbins)
        self.transformed = any(r.transform is not None for r in self.rows)
        self._state = ProcessLocal(functools.partial(_ReadState, len(self.rows)))
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def forget(self) -> None:
        """Drop the references to open streams (the rows closed them, or will)."""
        self._state.close()

    def batch(self, i: int, spec: Any) -> Batch:
        """Batch ``i`` (``data`` None when ``spec`` is None).

        Safe to call from several threads: one batch is written at a time.
        """
        with self._lock:
            return self._batch(i, spec)

    def _batch(self, i: int, spec: Any) -> Batch:
        st = self._state.get()
        bt = self.shape
        empty = np.empty if _shm.current() is None else _shm.empty
        reset, valid = empty(bt[:1], bool), empty(bt, bool)  # (once: they may be in shm)
        stream, step = empty(bt, np.int64), empty(bt, np.int64)
        data = (
            None if spec is None else tree_map(lambda s: empty((*bt, *s.shape[1:]), s.dtype), spec)
        )
        if self.pad == "pack":
            self._read_packed(st, i, spec, data, reset, valid, stream, step)
            return Batch(data, reset, valid, stream, step)
        first = i - i % self.block_size
        blk = st.block
        if blk is None or blk.first != first:
            blk = st.block = _Block(self, first, self.block_size)
        k = i - first
        if spec is None:
            self._metadata(blk, k, reset, valid, stream, step)
            return Batch(None, reset, valid, stream, step)
        if self.transformed or not self._open_arrays(st, blk, k, i, spec):
            self._read_checked(st, data, blk, k, spec)  # read and check row by row
        elif type(spec) is np.ndarray:
            if self._copy(data, st.open, blk, k, (reset, valid, stream, step)):
                return Batch(data, reset, valid, stream, step)
        else:  # a tree: each leaf of every stream, copied as an array stream
            parts = [_leaves_as(spec, s) for s in st.open]
            for n, out in enumerate(leaves(data)):
                streams = [_NOTHING if p is None else p[n] for p in parts]
                self._copy(out, streams, blk, k, None)
        self._metadata(blk, k, reset, valid, stream, step)
        return Batch(data, reset, valid, stream, step)

    def _copy(
        self, out: np.ndarray, streams: list[Any], blk: _Block, k: int, meta: tuple | None
    ) -> bool:
        """Copy every row's slice of ``streams`` (arrays) into ``out``.

        The compiled pass does it (and writes the metadata ``meta`` when given) unless it
        declines, which it decides before copying anything (a stream that is not exactly
        an array or a memmap, another byte order, not contiguous); then one
        :func:`numpy.concatenate` does. Returns whether the metadata was written.
        """
        if _fill is not None:
            reset, valid, stream, step = meta or self._scratch(out.shape[:2])
            start, count, ids = blk.source_start[k], blk.count[k], blk.id_rows[k]
            if _fill(streams, start, count, ids, out, reset, valid, stream, step) < 0:
                if self.segmented:  # a segment starts where its own step 0 is
                    np.equal(blk.start[k], 0, out=reset)
                return meta is not None
        self._gather(out, streams, blk, k)
        return False

    def _scratch(self, shape: tuple[int, int]) -> tuple[np.ndarray, ...]:
        """Metadata arrays the compiled pass writes when the caller writes its own."""
        b, t = shape
        return (np.empty(b, bool), np.empty(shape, bool), *np.empty((2, b, t), np.int64))

    def describe(self, i: int) -> str:
        """What batch ``i`` reads: each stream (index and repr) with its step range.

        Example:
            >>> from streamseq import interleave_streams, tbin
            >>> rows = interleave_streams([np.arange(5), np.arange(3)], 2)
            >>> table = _Table([tbin(r, 2) for r in rows], "zeros", 2)
            >>> print(table.describe(1))  # doctest: +ELLIPSIS
            stream 0 (ndarray(shape=(5,), dtype=int64)) steps 2:4; stream 1 (...) steps 2:3
        """
        if self.pad == "pack":
            parts = []
            for row in self.rows:
                for j, a, n, _ in packed_pieces(row, i, self.tbins):
                    ref, a = row.refs[j], int(row.starts[j]) + a
                    parts.append(f"stream {ref.index} ({describe(ref.source)}) steps {a}:{a + n}")
            return "; ".join(parts) or "padding only"
        blk = _Block(self, i, 1)
        parts = []
        for r in range(len(self.rows)):
            n = int(blk.count[0, r])
            if n:
                ref, a = self._ref(r, int(blk.pos[0, r])), int(blk.source_start[0, r])
                parts.append(f"stream {ref.index} ({describe(ref.source)}) steps {a}:{a + n}")
        return "; ".join(parts) or "padding only"

    def _metadata(
        self,
        blk: _Block,
        k: int,
        reset: np.ndarray,
        valid: np.ndarray,
        stream: np.ndarray,
        step: np.ndarray,
    ) -> None:
        """Write ``reset``, ``valid``, ``stream`` and ``step`` of batch ``k`` of ``blk``.

        The one place where they are computed (the compiled pass writes the same).
        """
        start = blk.source_start[k]
        if blk.full[k]:
            valid.fill(True)
        elif self.masks is not None:
            self.masks.take(blk.count[k], axis=0, out=valid, mode="clip")
        else:
            np.less(self.steps, blk.count[k][:, None], out=valid)
        if self.ramps is not None:
            self.ramps.take(blk.ramp[k], axis=0, out=step, mode="wrap")
        else:
            np.add(self.steps, start[:, None], out=step)
            np.putmask(step, ~valid, -1)
        stream[...] = blk.id_rows[k][:, None]
        np.equal(blk.start[k], 0, out=reset)
        a, z = blk.partial.bounds[k], blk.partial.bounds[k + 1]
        if a < z:
            for r, n in zip(blk.partial.rows[a:z], blk.partial.values[a:z], strict=True):
                step[r, n:] = -1
                stream[r, n:] = -1

    def _open_arrays(self, st: _ReadState, blk: _Block, k: int, i: int, spec: Any) -> bool:
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
            stream = streams[r] = ref.open()
            if isinstance(stream, np.ndarray if is_array else ArrayTree):
                other.discard(r)
                if not is_array or stream.dtype is not dtype or stream.shape[1:] != shape:
                    self._check_array(spec, stream, r, p)
            else:
                other.add(r)
            where[r] = p  # (after the check: a failed row opens and fails again)
            if stream is not ref.source:
                opened.add(r)
            elif opened:
                opened.discard(r)
        st.next = i + 1
        return not other

    def _gather(self, out: np.ndarray, streams: list[Any], blk: _Block, k: int) -> None:
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
        np.concatenate(pieces, out=out.reshape(-1, *out.shape[2:]), casting="safe")

    def _check_array(self, spec: Any, stream: Any, r: int, p: int) -> None:
        """Raise the error naming stream ``p`` of row ``r`` if ``stream`` differs from ``spec``."""
        problem = spec_mismatch(spec, stream.tree if isinstance(stream, ArrayTree) else stream)
        if problem is not None:
            raise self._ref(r, p).error(problem)

    def _ref(self, r: int, p: int) -> StreamRef:
        """The stream at position ``p`` of the table, in row ``r``."""
        return self.rows[r].refs[p - self.first_list[r]]

    def _read_packed(
        self,
        st: _ReadState,
        i: int,
        spec: Any,
        data: Any,
        reset: np.ndarray,
        valid: np.ndarray,
        stream: np.ndarray,
        step: np.ndarray,
    ) -> None:
        """Write packed batch ``i``: each row's streams one after the other, in its chunks.

        Every read goes through :meth:`Row.read` (checked, transformed); the first read of
        each stream is checked against ``spec``. ``data`` None: the metadata only.
        """
        st.at[:] = -1
        st.next = -1
        reset.fill(False)
        valid.fill(False)
        stream.fill(-1)
        step.fill(-1)
        if data is not None:
            tree_map(lambda out: out.fill(0), data)
        for r, row in enumerate(self.rows):
            for j, a, n, at in packed_pieces(row, i, self.tbins):
                source = int(row.starts[j]) + a
                valid[r, at : at + n] = True
                stream[r, at : at + n] = row.stream_ids[j]
                step[r, at : at + n] = np.arange(source, source + n)
                if at == 0 and a == 0:
                    reset[r] = True
                if data is None:
                    continue
                d = row.read(j, a, a + n)
                p = self.first_list[r] + j
                if st.checked[r] != p:
                    problem = spec_mismatch(spec, d)
                    if problem is not None:
                        raise self._ref(r, p).error(f"steps {source}:{source + n}: {problem}")
                    st.checked[r] = p

                def put(out: np.ndarray, x: Any, r: int = r, at: int = at, n: int = n) -> None:
                    _put(out[r, at : at + n], x)

                try:
                    tree_map(put, data, d)
                except (TypeError, ValueError, KeyError) as e:
                    raise self._ref(r, p).error(f"steps {source}:{source + n}: {e}") from e

    def _read_checked(self, st: _ReadState, data: Any, blk: _Block, k: int, spec: Any) -> None:
        """Read row by row through :meth:`Row.read`, which checks (and transforms) every read.

        The first read of each stream is checked against ``spec``, and every read is
        copied with safe casting, never broadcast.
        """
        st.at[:] = -1
        st.next = -1
        checked = st.checked
        for r, row in enumerate(self.rows):
            n = int(blk.count[k, r])
            if n:
                a, p = int(blk.start[k, r]), int(blk.pos[k, r])
                d = row.read(p - self.first_list[r], a, a + n)
                if checked[r] != p:
                    problem = spec_mismatch(spec, d)
                    if problem is not None:
                        raise self._ref(r, p).error(f"steps {a}:{a + n}: {problem}")
                    checked[r] = p

                def put(out: np.ndarray, x: Any, r: int = r, n: int = n) -> None:
                    _put(out[r, :n], x)
                    out[r, n:] = 0

                try:
                    tree_map(put, data, d)
                except (TypeError, ValueError, KeyError) as e:
                    raise self._ref(r, p).error(f"steps {a}:{a + n}: {e}") from e
            else:
                tree_map(lambda out, r=r: out.__setitem__(r, 0), data)


def _leaves_as(spec: Any, stream: Any) -> list[Any] | None:
    """The arrays of a tree stream in the order of ``spec``'s leaves (None: no stream)."""
    if not isinstance(stream, ArrayTree):
        return None
    return leaves(tree_map(lambda _, a: a, spec, stream.tree))


def packed_pieces(row: Row, i: int, tbins: int) -> list[tuple[int, int, int, int]]:
    """Packed chunk ``i`` of a row: stream ``j`` gives ``n`` steps from ``a``, at ``at``.

    Example:
        >>> from streamseq.read.ref import as_refs
        >>> from streamseq.interleave import Row
        >>> row = Row(as_refs([np.arange(5), np.arange(2), np.arange(4)]))
        >>> packed_pieces(row, 1, 4)
        [(0, 4, 1, 0), (1, 0, 2, 1), (2, 0, 1, 3)]
    """
    first = i * tbins
    out, at = [], 0
    for j, a, n in row.pieces(first, min(first + tbins, len(row))):
        out.append((j, a, n, at))
        at += n
    return out


class _ReadState:
    """What one process has open in a table's rows (one per process: ``ProcessLocal``)."""

    def __init__(self, rows: int):
        self.at = np.full(rows, -1, dtype=np.int64)  # position open in each row
        self.open: list[Any] = [_NOTHING] * rows  # the stream open in each row
        self.opened: set[int] = set()  # rows whose stream an opener made
        self.other: set[int] = set()  # rows whose stream is not an array: read checked
        self.checked = [-1] * rows  # position whose dtype and shape were checked
        self.next = -1  # the batch after the last one read here
        self.block: _Block | None = None
