"""The final stage: batches as torch tensors in page-locked memory, from one thread."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence

import torch

from ..batch import Batch
from .background import Background
from .torch import can_pin, to_torch


class PinMemory:
    """Batches of ``seq`` as torch tensors; see :func:`pin_memory`."""

    def __init__(self, seq: Sequence[Batch], max_buffered: int = 2):
        self.seq, self.max_buffered = seq, max_buffered
        self.pin = can_pin()

    def __len__(self) -> int:
        return len(self.seq)

    def __getitem__(self, i: int) -> Batch:
        return _delivered(self.seq[i], self.pin)

    def __iter__(self) -> Iterator[Batch]:
        with self.iterate() as it:
            yield from it

    def iterate(self, start: int = 0) -> Background:
        """Batches ``start`` to the end, prepared by the background thread (``close()`` it)."""
        produce = functools.partial(_produce, self.seq, start, self.pin)
        return Background(produce, self.max_buffered)


def _delivered(batch: Batch, pin: bool) -> Batch:
    """``batch`` as tensors: as it is when a stage before made them (assemble), else copied."""
    return batch if isinstance(batch.reset, torch.Tensor) else to_torch(batch, pin)


def _produce(seq: Sequence[Batch], start: int, pin: bool) -> Iterator[Batch]:
    """What the background thread runs; it holds the sequence, not the stage."""
    for i in range(start, len(seq)):
        yield _delivered(seq[i], pin)


def pin_memory(seq: Sequence[Batch], *, max_buffered: int = 2) -> PinMemory:
    """Deliver batches as torch tensors in page-locked memory, prepared by one thread.

    Iterating runs one background thread, ``max_buffered`` batches ahead, that copies each
    batch into page-locked memory, ready for ``.to(device, non_blocking=True)``. Indexing
    converts on demand. On a machine without CUDA it warns once and delivers unpinned
    tensors that share memory with the arrays.

    Args:
        seq: a sequence of numpy :class:`Batch` (from :func:`zip_batch`).
        max_buffered: batches prepared ahead.

    Returns:
        A sequence of :class:`Batch` of torch tensors.

    Example:
        >>> import warnings
        >>> import numpy as np
        >>> from streamseq import interleave_streams, tbin, zip_batch
        >>> rows = interleave_streams([np.arange(4), np.arange(10, 13)], 2)
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     batches = list(pin_memory(zip_batch([tbin(r, 2) for r in rows])))
        >>> batches[1].data
        tensor([[ 2,  3],
                [12,  0]])
    """
    return PinMemory(seq, max_buffered)
