"""The chunks of ``tbin`` parts as arrays: the fast path of :func:`streamseq.zip_batch`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _shm
from ._tree import tree_map
from .batch import Batch
from .errors import StreamError
from .interleave import Row
from .streams import _PID, StreamRef
from .tbin import TBinned

try:  # the compiled batch assembly (built with the package; optional)
    from ._gather import fill as _fill
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
        self.count = np.ascontiguousarray(np.where(active, stop - start, 0), np.int64)
        self.id_rows = np.ascontiguousarray(np.where(active, ids, -1), np.int64)
        self.ramp = np.where(active, start // t, -1)  # row of the table of steps (-1: none)
        self.starts = self.start.tolist()  # slices are [start, start + T): numpy clips them
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
    worker's shared-memory slot when there is one (:mod:`streamseq._shm`); ``step`` and
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
        self.steps = np.arange(tbins, dtype=np.int64)
        longest = -(-int(self.lengths.max(initial=0)) // tbins)
        self.ramps = None  # row c: the steps of chunk c; last row: -1
        if (longest + 1) * tbins <= _TABLE_LIMIT:
            self.ramps = np.arange((longest + 1) * tbins, dtype=np.int64).reshape(-1, tbins)
            self.ramps[-1] = -1
        self.masks = None  # row n: n valid steps
        if (tbins + 1) * tbins <= _TABLE_LIMIT:
            self.masks = self.steps < np.arange(tbins + 1)[:, None]
        self.block_size = max(1, 4096 // max(1, len(self.rows)))
        self.shape = (len(self.rows), tbins)
        self._block: _Block | None = None
        self._zeros: np.ndarray | None = None
        self.forget()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_block"], state["_open"], state["_at"], state["_pid"] = None, None, None, -1
        return state

    def forget(self) -> None:
        """Drop the references to open streams (the rows closed them, or will)."""
        self._pid = _PID[0]
        self._at = np.full(len(self.rows), -1, dtype=np.int64)  # position open in each row
        self._open: list[Any] = [_NOTHING] * len(self.rows)  # the stream open in each row
        self._opened: set[int] = set()  # rows whose stream an opener made
        self._unsized: set[int] = set()  # rows whose stream is not an array: check sizes
        self._checked = [-1] * len(self.rows)  # position whose dtype and shape were checked
        self._unchecked: list[tuple[int, int]] = []  # (row, position) opened, not checked
        self._next = -1  # the batch after the last one read here

    def batch(self, i: int, spec: Any) -> Batch:
        """Batch ``i`` (``data`` None when ``spec`` is None)."""
        first = i - i % self.block_size
        blk = self._block
        if blk is None or blk.first != first:
            blk = self._block = _Block(self, first, self.block_size)
        k = i - first
        bt = self.shape
        empty = np.empty if _shm.current() is None else _shm.empty
        data = None
        reset, valid = empty(bt[:1], bool), empty(bt, bool)  # (once: they may be in shm)
        stream, step = empty(bt, np.int64), empty(bt, np.int64)
        if type(spec) is np.ndarray:
            data = empty((*bt, *spec.shape[1:]), spec.dtype)
            streams = self._streams(blk, k, i, spec)
            if _fill is not None:  # array streams: one compiled pass writes the batch
                count, ids = blk.count[k], blk.id_rows[k]
                if _fill(streams, blk.start[k], count, ids, data, reset, valid, stream, step) < 0:
                    if self._unchecked:
                        self._checked_by_fill(count)
                    return Batch(data, reset, valid, stream, step)
            try:
                self._gather(data, streams, blk, k, spec)
            except StreamError:
                raise  # it names its stream or file already: no need to read again
            except Exception:  # read again, row by row, with every check: the right error
                self._read_checked(data, blk, k, spec)
        elif spec is not None:
            data = tree_map(lambda s: empty((*bt, *np.shape(s)[1:]), s.dtype), spec)
            self._read_checked(data, blk, k, spec)
        self._metadata(blk, k, reset, valid, stream, step)
        return Batch(data, reset, valid, stream, step)

    def _metadata(
        self,
        blk: _Block,
        k: int,
        reset: np.ndarray,
        valid: np.ndarray,
        stream: np.ndarray,
        step: np.ndarray,
    ) -> None:
        """Write ``reset``, ``valid``, ``stream`` and ``step`` of batch ``k`` of ``blk``."""
        start = blk.start[k]
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
        np.equal(start, 0, out=reset)
        a, z = blk.partial.bounds[k], blk.partial.bounds[k + 1]
        if a < z:
            for r, n in zip(blk.partial.rows[a:z], blk.partial.values[a:z], strict=True):
                step[r, n:] = -1
                stream[r, n:] = -1

    def _streams(self, blk: _Block, k: int, i: int, spec: np.ndarray) -> list[Any]:
        """The stream each row reads in batch ``k`` of ``blk``, opened.

        An array stream is checked against ``spec`` here; another stream, on the first
        slice read from it (:meth:`_check_spec`).
        """
        if self._pid != _PID[0]:
            self.forget()
        if i == self._next and k:  # sequential: only the rows that moved on
            rows, at = blk.moved(k)
        else:
            rows = np.flatnonzero((blk.pos[k] != self._at) & blk.active[k]).tolist()
            at = blk.pos[k, rows].tolist()
        if self._opened:  # an opener's stream: the row may have been read elsewhere
            more = [r for r in self._opened if blk.active[k, r] and r not in rows]
            rows, at = rows + more, at + blk.pos[k, more].tolist()
        table_rows, first, streams, where = self.rows, self.first_list, self._open, self._at
        opened, unsized, checked = self._opened, self._unsized, self._checked
        dtype, step = spec.dtype, spec.shape[1:]
        if self.arrays is not None:  # in short
            arrays = self.arrays
            for r, p in zip(rows, at, strict=True):
                stream = streams[r] = arrays[p]
                if stream.dtype is not dtype or stream.shape[1:] != step:
                    self._check_array(spec, stream, r, p)
                where[r] = p
            self._next = i + 1
            return streams
        for r, p in zip(rows, at, strict=True):
            ref = table_rows[r].switch(p - first[r])
            stream = streams[r] = ref.open()
            if type(stream) is not np.ndarray:
                unsized.add(r)
                if checked[r] != p:
                    self._unchecked.append((r, p))
            else:
                if unsized:
                    unsized.discard(r)
                if stream.dtype is not dtype or stream.shape[1:] != step:
                    self._check_array(spec, stream, r, p)
            where[r] = p  # (after the check: a failed row opens and fails again)
            if stream is not ref.source:
                opened.add(r)
            elif opened:
                opened.discard(r)
        self._next = i + 1
        return streams

    def _gather(
        self, out: np.ndarray, streams: list[Any], blk: _Block, k: int, spec: np.ndarray
    ) -> None:
        """Copy the slices of every row (and zeros) into ``out`` with one concatenate.

        A row reads ``[start, start + T)``: slicing clips it to the end of the stream,
        which is where a chunk with padding stops. The first slice of each stream opened
        is checked against ``spec``.
        """
        starts, t = blk.starts[k], self.tbins
        if blk.full[k]:  # no padding: the common case, in short
            pieces = [s[a : a + t] for s, a in zip(streams, starts, strict=True)]
            if self._unchecked:
                self._check_spec(pieces, starts, spec)
            if self._unsized:
                self._check(pieces, blk.count[k])
        else:
            zeros = self._zeros
            if zeros is None or zeros.dtype != out.dtype or zeros.shape[1:] != out.shape[2:]:
                zeros = self._zeros = np.zeros((t, *out.shape[2:]), out.dtype)
            rows_starts = zip(streams, starts, strict=True)
            pieces = [s[a : a + t] if a >= 0 else zeros for s, a in rows_starts]
            if self._unchecked:
                self._check_spec(pieces, starts, spec)
            if self._unsized:
                self._check(pieces, blk.count[k])
            rows, counts = blk.partial(k)
            for r, n in zip(reversed(rows), reversed(counts), strict=True):
                pieces.insert(r + 1, zeros[n:])
        np.concatenate(pieces, out=out.reshape(-1, *out.shape[2:]), casting="safe")

    def _check_spec(self, pieces: list[Any], starts: list[int], spec: np.ndarray) -> None:
        """Check the first slice read of each stream opened against ``spec`` (once each)."""
        left = []
        for r, p in self._unchecked:
            if self._at[r] != p:
                continue  # the row moved on before reading it
            if starts[r] < 0:
                left.append((r, p))
                continue
            problem = spec_mismatch(spec, pieces[r])
            if problem is not None:
                raise self._ref(r, p).error(problem)  # (left unchecked: raised again)
            self._checked[r] = p
        self._unchecked = left

    def _checked_by_fill(self, counts: np.ndarray) -> None:
        """Mark the streams the compiled pass read as checked (it reads only exact matches)."""
        left = []
        for r, p in self._unchecked:
            if self._at[r] != p:
                continue  # the row moved on before reading it
            if counts[r]:
                self._checked[r] = p
            else:
                left.append((r, p))
        self._unchecked = left

    def _check_array(self, spec: np.ndarray, stream: np.ndarray, r: int, p: int) -> None:
        """Raise the error naming stream ``p`` of row ``r`` if ``stream`` differs from ``spec``."""
        problem = spec_mismatch(spec, stream)
        if problem is not None:
            raise self._ref(r, p).error(problem)

    def _ref(self, r: int, p: int) -> StreamRef:
        """The stream at position ``p`` of the table, in row ``r``."""
        return self.rows[r].refs[p - self.first_list[r]]

    def _check(self, pieces: list[Any], counts: np.ndarray) -> None:
        """Raise when a stream that is not an array returned another number of steps."""
        for r in self._unsized:
            if counts[r] and len(pieces[r]) != counts[r]:
                raise ValueError(f"row {r}: read {len(pieces[r])} steps")

    def _read_checked(self, data: Any, blk: _Block, k: int, spec: Any) -> None:
        """Read row by row through :meth:`Row.read`, which checks every read.

        The first read of each stream is checked against ``spec``, and every read is
        copied with safe casting, never broadcast.
        """
        self._at[:] = -1
        self._next = -1
        self._unchecked = []
        checked = self._checked
        for r, row in enumerate(self.rows):
            n = int(blk.count[k, r])
            if n:
                a, p = int(blk.start[k, r]), int(blk.pos[k, r])
                d = row.read(p - self.first_list[r], a, a + n)
                if checked[r] != p:
                    problem = spec_mismatch(spec, d)
                    if problem is not None:
                        raise self._ref(r, p).error(problem)
                    checked[r] = p

                def put(out: np.ndarray, x: Any, r: int = r, n: int = n) -> None:
                    _put(out[r, :n], x)
                    out[r, n:] = 0

                try:
                    tree_map(put, data, d)
                except (TypeError, ValueError) as e:
                    raise self._ref(r, p).error(f"steps {a}:{a + n}: {e}") from e
            else:
                tree_map(lambda out, r=r: out.__setitem__(r, 0), data)
