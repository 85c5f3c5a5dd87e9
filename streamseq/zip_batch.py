"""Zip sequences of chunks (or of batches) into batches, row by row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._checks import check_pad
from .batch import Batch, Chunk
from .gather import BatchWriter, stack
from .tbin import TBinned

_NO_SPEC = (
    "every row is padding in this batch and no part can describe the data: "
    "pass spec= (zero-step arrays of the data's dtype and step shape)"
)


def _rows_of(part: Any) -> int:
    rows = getattr(part, "num_rows", None)
    if rows is not None:
        return int(rows)
    if len(part) == 0:
        raise ValueError(f"cannot tell how many rows the empty part {part!r} has")
    first = part[0]
    return 1 if isinstance(first, Chunk) else len(first.reset)


def _steps_of(part: Any) -> int | None:
    """Steps per item of ``part``: ``tbins`` plus its look-ahead."""
    t = getattr(part, "tbins", None)
    if t is not None:
        return int(t) + int(getattr(part, "lookahead", 0))
    if len(part) == 0:
        return None
    return int(np.shape(part[0].valid)[-1])


class ZipBatch:
    """Batches zipped from parts; see :func:`zip_batch`."""

    def __init__(
        self,
        parts: Sequence[Any],
        pad: str = "zeros",
        length: int | None = None,
        spec: Any = None,
    ):
        self.parts = list(parts)
        if not self.parts:
            raise ValueError("zip_batch needs at least one part")
        self.pad = check_pad(pad)
        self.spec_ = spec
        self.part_rows = [_rows_of(p) for p in self.parts]
        self.offsets = np.concatenate([[0], np.cumsum(self.part_rows)]).astype(int)
        self.num_rows = int(self.offsets[-1])
        steps = {t for t in map(_steps_of, self.parts) if t is not None}
        if len(steps) > 1:
            raise ValueError(f"parts have different numbers of steps per chunk: {sorted(steps)}")
        if not steps:
            raise ValueError("cannot tell the number of steps per chunk: every part is empty")
        self.steps = steps.pop()  # per item: tbins and the look-ahead
        aheads = {int(getattr(p, "lookahead", 0)) for p in self.parts if hasattr(p, "tbins")}
        if len(aheads) > 1:
            raise ValueError(f"parts have different look-aheads: {sorted(aheads)}")
        self.lookahead = aheads.pop() if aheads else 0
        self.tbins = self.steps - self.lookahead
        sizes = [len(p) for p in self.parts]
        natural = min(sizes) if pad == "drop" else max(sizes)
        self.length = natural if length is None else int(length)
        if self.length < 0:
            raise ValueError(f"length must be >= 0, got {length}")
        packed = [p for p in self.parts if getattr(p, "pack", False)]
        if (pad == "pack") != (len(packed) == len(self.parts)) and (packed or pad == "pack"):
            raise ValueError(
                'pad="pack" zips packed rows: every part from tbin(row, tbins, pack=True), '
                "and only those"
            )
        self._table = None
        if all(isinstance(p, TBinned) for p in self.parts):
            self._table = BatchWriter(self.parts, self.pad, self.tbins)

    def __repr__(self) -> str:
        return f"zip_batch({len(self.parts)} parts, rows={self.num_rows}, pad={self.pad!r})"

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> Batch:
        if type(i) is int and 0 <= i < self.length and self.spec_ is not None and self._table:
            return self._table.batch(i, self.spec_)  # the common case, in short
        if not isinstance(i, (int, np.integer)):
            raise TypeError(f"batch index must be an integer, got {type(i).__name__}")
        given, i = i, int(i)
        if i < 0:
            i += self.length
        if not 0 <= i < self.length:
            raise IndexError(f"batch {given} out of range for {self.length} batches")
        return self.item(i)

    def written(self, i: int, copy: Any = None) -> tuple[Any, ...]:
        """Batch ``i`` (``0 <= i < len``) as its five fields, its look-ahead and its valid steps.

        The fields are those of ``self[i]``, without a :class:`Batch` made around them (a
        caller that makes its own, of tensors, makes one); the valid steps are None where
        the plan does not give them (count ``valid`` then). ``copy``: the compiled copies
        left to it (:meth:`.BatchWriter.written`); the fields are whole once it is waited for.

        Example:
            >>> import numpy as np
            >>> from streamseq import interleave_streams, tbin
            >>> rows = interleave_streams([np.arange(3), np.arange(2)], 2)
            >>> *fields, lookahead, steps = zip_batch([tbin(r, 2) for r in rows]).written(1)
            >>> fields[0].tolist(), steps
            ([[2, 0], [0, 0]], 1)
        """
        if self._table is not None and type(i) is int and 0 <= i < self.length:
            spec = self.spec_ if self.spec_ is not None else self.spec()
            if spec is not None:
                data, m, la, steps = self._table.written(i, spec, copy)
                return data, *m, la, steps
        b = self[i]
        return (*b, b.lookahead, None)

    def describe_item(self, i: int) -> str:
        """What batch ``i`` reads: each stream (index and repr) with its step range.

        Example:
            >>> import numpy as np
            >>> from streamseq import interleave_streams, tbin
            >>> rows = interleave_streams([np.arange(3), np.arange(2)], 2)
            >>> zip_batch([tbin(r, 2) for r in rows]).describe_item(1)
            'batch 1: stream 0 (ndarray(shape=(3,), dtype=int64)) steps 2:3'
        """
        if self._table is not None:
            return f"batch {i}: {self._table.describe(i)}"
        what = []
        for part in self.parts:
            c = self._source_index(part, i)
            if c is not None and hasattr(part, "describe_item"):
                what.append(part.describe_item(c))
        return f"batch {i}: {'; '.join(what) or 'padding only'}"

    def spec(self) -> Any:
        """Zero-step arrays describing the data, from ``spec`` or from the parts."""
        if self.spec_ is None:
            for p in self.parts:
                s = p.spec() if hasattr(p, "spec") else None
                if s is not None:
                    self.spec_ = s
                    break
        return self.spec_

    def release(self) -> None:
        """Close the files the parts hold open."""
        for p in self.parts:
            if hasattr(p, "release"):
                p.release()
        if self._table is not None:
            self._table.forget()

    def _source_index(self, part: Any, i: int) -> int | None:
        n = len(part)
        if i < n:
            return i
        if self.pad == "wrap" and n > 0:
            return i % n
        return None

    def item(self, i: int, need_data: bool = True) -> Batch:
        """Batch ``i`` for any ``i >= 0``: beyond its end each row pads or wraps alone.

        With ``need_data=False`` a batch of padding whose data cannot be described has
        ``data=None`` instead of raising (an enclosing zip knows the data).
        """
        if self._table is not None:
            spec = self.spec()
            if spec is None and need_data:
                raise ValueError(_NO_SPEC)
            return self._table.batch(i, spec)
        items = []  # (row offset, rows, chunk or batch)
        for part, o, k in zip(self.parts, self.offsets.tolist(), self.part_rows, strict=False):
            if isinstance(part, ZipBatch):
                sub = part.item(i, need_data=False)
            else:
                c = self._source_index(part, i)
                if c is None:
                    continue
                sub = part[c]
            items.append((o, k, sub))
        b = stack(items, self.num_rows, self.steps, self.spec_, self.spec, f"batch {i}, ")
        if self.lookahead:
            b = Batch(*b, lookahead=self.lookahead)
        if b.data is None and need_data:
            raise ValueError(_NO_SPEC)
        return b


def zip_batch(
    parts: Sequence[Any], *, pad: str = "zeros", length: int | None = None, spec: Any = None
) -> ZipBatch:
    """Zip parts into batches: item i concatenates item i of every part along the batch axis.

    Each part is a sequence of chunks (from :func:`tbin`, one row) or of batches (from
    ``zip_batch``, several rows), so zipping groups of rows equals zipping all rows.

    Args:
        parts: the parts, in row order.
        pad: ``"zeros"`` runs until the longest part ends, padding rows that ended;
            ``"drop"`` stops before any row would be all padding; ``"wrap"`` restarts a
            row that ended from its first chunk (same length as ``"zeros"``); ``"pack"``
            zips packed rows (``tbin(row, tbins, pack=True)``), padded at their ends
            (and inside them where :func:`tbin` pads a row).
        length: number of batches, overriding the one ``pad`` gives (the loader uses it to
            give every worker group and every rank the same length).
        spec: zero-step arrays with the data's dtype and step shape, for batches in which
            every row is padding (read from the parts when not given).

    Returns:
        A lazy sequence of :class:`Batch` with numpy arrays.

    Raises:
        ValueError: no parts, an unknown pad mode, or parts with different chunk sizes.

    Example:
        >>> import numpy as np
        >>> from streamseq import interleave_streams, tbin
        >>> rows = interleave_streams([np.arange(4), np.arange(10, 12)], 2)
        >>> batches = zip_batch([tbin(r, 2) for r in rows])
        >>> [b.data.tolist() for b in batches]
        [[[0, 1], [10, 11]], [[2, 3], [0, 0]]]
        >>> [b.reset.tolist() for b in batches]
        [[True, True], [False, False]]
    """
    return ZipBatch(parts, pad=pad, length=length, spec=spec)
