"""Micro-batches into one batch of tensors, with a single copy (pinned, time-major)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from .._tree import rebuilt, tree_map
from ..batch import Batch
from ..read.handle import current_pid
from ..workers.placed import same_slot
from .torch import _native, can_pin, empty, to_torch


def assemble_parts(parts: Sequence[Batch], pin: bool = False, time_major: bool = False) -> Batch:
    """Concatenate micro-batches along rows into new tensors, with a single copy.

    The output is allocated once (page-locked when ``pin``), in native byte order, and
    each part is copied into its rows; with ``time_major`` the output is laid out
    ``[T, B, ...]``.

    Example:
        >>> part = Batch(np.ones((1, 2)), np.ones(1, bool), np.ones((1, 2), bool),
        ...              np.zeros((1, 2), np.int64), np.arange(2)[None])
        >>> assemble_parts([part, part], time_major=True).data.shape
        torch.Size([2, 2])
    """

    def combine(*arrays: Any) -> torch.Tensor:
        arrays = [a if type(a) is np.ndarray else np.asarray(a) for a in arrays]
        first, axis = arrays[0], 0
        shape = (sum(len(a) for a in arrays), *first.shape[1:])
        if time_major and first.ndim >= 2:
            arrays = [np.swapaxes(a, 0, 1) for a in arrays]
            shape, axis = (shape[1], shape[0], *shape[2:]), 1
        if pin:
            out = empty(shape, first.dtype, True)
            np.concatenate(arrays, axis=axis, out=out.numpy(), casting="safe")
            return out
        return torch.from_numpy(_native(np.concatenate(arrays, axis=axis)))

    out = rebuilt(
        parts[0],
        [
            combine(*fields) if type(fields[0]) is np.ndarray else tree_map(combine, *fields)
            for fields in zip(*parts, strict=True)
        ],
    )
    if time_major and isinstance(out, Batch):
        out.time_major = True  # (target_mask reads it)
    return out


class Assembled:
    """Item i of every group, assembled into one batch of tensors; see :func:`assemble`.

    :meth:`counted` also counts the valid steps of the batch, on the groups' arrays
    (cheaper than on the tensors): what a pass measures.
    """

    def __init__(
        self,
        groups: Sequence[Sequence[Batch]],
        pin: bool = False,
        time_major: bool = False,
        share: bool = False,
    ):
        self.groups = list(groups)
        if not self.groups:
            raise ValueError("assemble needs at least one group")
        lengths = {len(g) for g in self.groups}
        if len(lengths) > 1:
            raise ValueError(f"groups of different lengths: {sorted(lengths)}")
        self.length = lengths.pop()
        self.pin, self.time_major = pin and can_pin(), time_major
        self.share = share and len(self.groups) == 1 and not self.pin and not time_major
        # (the runs of one group share its ``prepare``: it is called once a batch)
        prepare = [g.prepare for g in self.groups if hasattr(g, "prepare")]
        self._prepare = list(dict.fromkeys(prepare))
        # groups whose workers write their rows of the same batches (:mod:`..workers.placed`)
        self._blocks = [g.block for g in self.groups if hasattr(g, "block")]
        if len(self._blocks) != len(self.groups):
            self._blocks = []
        self._whole: tuple[list[Any], bool] | None = None  # (blocks, one slot of whole batches)
        # the one group's batches as their fields (made into tensors here, one Batch a batch)
        self._written = getattr(self.groups[0], "written", None) if self.share else None
        # ... and with their copies run by the process's copying thread (stores)
        self._started = getattr(self.groups[0], "started", None) if self.share else None
        # (the batch started ahead, the process that started it, what finishes it)
        self._ahead: tuple[int, int, Callable[[], tuple[Any, ...]]] | None = None
        self._ahead_lock = threading.Lock()

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> Batch:
        if self.share:  # one group read here: the tensors share its arrays
            return to_torch(self.groups[0][i])
        return assemble_parts(self._parts(i), self.pin, self.time_major)

    def _parts(self, i: int) -> list[Batch]:
        """Item ``i`` of every group."""
        for prepare in self._prepare:  # start every worker before waiting for one
            prepare(i)
        return [g[i] for g in self.groups]

    def _in_place(self, i: int) -> tuple[Batch, int] | None:
        """Batch ``i`` as tensors over the slot its workers wrote, if they wrote it whole.

        None when its blocks are not one slot of whole batches (:func:`same_slot`): the
        batch is then assembled from its parts, with a copy.
        """
        for prepare in self._prepare:  # start every worker before waiting for one
            prepare(i)
        got = [block(i) for block in self._blocks]
        blocks = [b for b, _ in got]
        k = got[0][1]
        cached = self._whole
        if cached is None or any(a is not b for a, b in zip(cached[0], blocks, strict=True)):
            whole = all(g[1] == k for g in got) and same_slot(blocks)
            cached = self._whole = (blocks, whole)
        if not cached[1]:
            return None
        for b in blocks:  # (an item a block lacks: its error, in row order)
            if k >= b.count:
                return None
        first = blocks[0]
        batch = first.whole(k)
        steps = first.steps
        counted = (
            sum(b.steps[k] for b in blocks)
            if steps is not None
            else int(np.count_nonzero(batch.valid))
        )
        if self.pin or self.time_major:
            return assemble_parts([batch], self.pin, self.time_major), counted
        return to_torch(batch), counted

    def release(self) -> None:
        """Let go of the blocks last looked at (their slots are free once no batch uses them).

        A batch started ahead (:meth:`counted_next`) is dropped (its copy ends first).
        """
        self._whole = None
        self._ahead = None

    def counted_next(self, i: int, stop: int) -> tuple[Batch, int]:
        """:meth:`counted` of batch ``i`` of a pass that reads on to ``stop``.

        Where the group copies its batches in the process's copying thread (a store read
        here: its ``started``), batch ``i + 1`` is started before batch ``i`` is handed
        over, so its copy runs while the caller works on batch ``i``: the batches, their
        checks and their errors are those of :meth:`counted` (an error of starting batch
        ``i + 1`` is raised when it is asked for, by reading it again). Batch ``i``'s
        arrays are new: held batches never change. A forked child reads the batch its
        parent started ahead again: its files were checked in the parent only (a child
        checks the files it maps itself).

        Example:
            >>> from streamseq import interleave_streams, tbin, zip_batch
            >>> rows = interleave_streams([np.arange(4), np.arange(10, 13)], 2)
            >>> batches = assemble([zip_batch([tbin(r, 2)]) for r in rows])
            >>> [batches.counted_next(i, 2)[1] for i in range(2)]
            [4, 3]
        """
        started = self._started
        if started is None or not self._ahead_lock.acquire(blocking=False):
            return self.counted(i)  # (two threads reading one pass: each reads its own)
        try:
            ahead, self._ahead = self._ahead, None
            mine = ahead is not None and ahead[0] == i and ahead[1] == current_pid()
            finish = ahead[2] if mine else None
            if finish is None:
                finish = started(i)
                if finish is None:  # (the group's batches are not copied so)
                    self._started = None
                    return self.counted(i)
            if i + 1 < stop:
                try:
                    later = started(i + 1)
                except Exception:  # (its error is batch i + 1's: raised when it is read)
                    later = None
                self._ahead = None if later is None else (i + 1, current_pid(), later)
            return _shared(*finish())
        finally:
            self._ahead_lock.release()

    def counted(self, i: int) -> tuple[Batch, int]:
        """Batch ``i`` and its number of valid steps.

        Example:
            >>> from streamseq import interleave_streams, tbin, zip_batch
            >>> rows = interleave_streams([np.arange(4), np.arange(10, 13)], 2)
            >>> batch, steps = assemble([zip_batch([tbin(r, 2)]) for r in rows]).counted(1)
            >>> steps, int(batch.valid.sum())
            (3, 3)
        """
        if self._written is not None:
            return _shared(*self._written(i))
        if self.share:
            part = self.groups[0][i]
            return to_torch(part), int(np.count_nonzero(part.valid))
        if self._blocks:
            whole = self._in_place(i)
            if whole is not None:
                return whole
        parts = self._parts(i)
        steps = sum(int(np.count_nonzero(p.valid)) for p in parts)
        return assemble_parts(parts, self.pin, self.time_major), steps


def _shared(
    data: Any, reset: Any, valid: Any, stream: Any, step: Any, lookahead: int, steps: int | None
) -> tuple[Batch, int]:
    """A batch given as its fields (:meth:`ZipBatch.written`) as tensors, and its valid steps.

    The tensors share the arrays; the valid steps are counted on ``valid`` where the
    plan did not give them. The metadata a writer gives are new contiguous native
    arrays: each one tensor over it; anything else goes through :func:`to_torch`.

    Example:
        >>> from streamseq import interleave_streams, tbin, zip_batch
        >>> rows = interleave_streams([np.arange(3), np.arange(2)], 2)
        >>> batch, steps = _shared(*zip_batch([tbin(r, 2) for r in rows]).written(1))
        >>> batch.data, steps
        (tensor([[2, 0],
                [0, 0]]), 1)
    """
    if steps is None:
        batch = Batch(data, reset, valid, stream, step, lookahead)
        return to_torch(batch), int(np.count_nonzero(batch.valid))
    if type(data) is np.ndarray and data.dtype.isnative:  # (made contiguous: ``np.empty``)
        from_numpy = torch.from_numpy
        fields = (
            from_numpy(data),
            from_numpy(reset),
            from_numpy(valid),
            from_numpy(stream),
            from_numpy(step),
        )
        return Batch(*fields, lookahead), steps
    return to_torch(Batch(data, reset, valid, stream, step, lookahead)), steps


def counted_from(batches: Assembled, start: int) -> Iterator[tuple[Batch, int]]:
    """Batches ``start`` to the end with their valid steps (what a pinning thread runs).

    Example:
        >>> from streamseq import interleave_streams, tbin, zip_batch
        >>> rows = interleave_streams([np.arange(4), np.arange(10, 13)], 2)
        >>> batches = assemble([zip_batch([tbin(r, 2)]) for r in rows])
        >>> [steps for _, steps in counted_from(batches, 0)]
        [4, 3]
    """
    for i in range(start, len(batches)):
        yield batches.counted(i)


def assemble(
    groups: Sequence[Sequence[Batch]],
    *,
    pin_memory: bool = False,
    time_major: bool = False,
    share: bool = False,
) -> Assembled:
    """Batches of torch tensors assembled from groups of rows, with a single copy.

    Item i concatenates item i of every group (micro-batches of numpy arrays, from
    :func:`zip_batch` or :func:`prefetch`) along the rows, straight into page-locked
    memory when ``pin_memory`` (and CUDA) and laid out ``[T, B, ...]`` when
    ``time_major``: what :func:`zip_batch` followed by :func:`pin_memory` does with two
    copies. Groups with a ``prepare(i)`` method (prefetched groups) are all started on
    item i before any is waited for.

    Args:
        groups: sequences of micro-batches of the same length, in row order.
        pin_memory: allocate the batches page-locked (warns once without CUDA).
        time_major: lay the batches out ``[T, B, ...]``.
        share: with one group, no pinning and batch-major, let the tensors share the
            group's arrays instead of copying them (not for prefetched groups, whose
            arrays live in shared-memory slots that must be released).

    Returns:
        A sequence of :class:`Batch` of torch tensors.

    Example:
        >>> from streamseq import interleave_streams, tbin, zip_batch
        >>> rows = interleave_streams([np.arange(4), np.arange(10, 13)], 2)
        >>> groups = [zip_batch([tbin(r, 2)]) for r in rows]
        >>> assemble(groups, time_major=True)[1].data
        tensor([[ 2, 12],
                [ 3,  0]])
    """
    return Assembled(groups, pin_memory, time_major, share)
