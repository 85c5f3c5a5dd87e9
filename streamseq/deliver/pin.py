"""The final stage: batches as torch tensors in page-locked memory, from one thread."""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from ._tree import leaves, tree_map
from .background import Background
from .batch import Batch

_warned = threading.Event()


def can_pin() -> bool:
    """Whether page-locked memory is available (CUDA present); warns once when not.

    Example:
        >>> isinstance(can_pin(), bool)
        True
    """
    if torch.cuda.is_available():
        return True
    if not _warned.is_set():
        _warned.set()
        warnings.warn(
            "CUDA is not available: pin_memory delivers unpinned tensors",
            RuntimeWarning,
            stacklevel=3,
        )
    return False


@functools.cache
def torch_dtype(dtype: np.dtype) -> torch.dtype:
    """The torch dtype of a numpy dtype (of either byte order).

    Example:
        >>> torch_dtype(np.dtype("uint8")), torch_dtype(np.dtype(">u2"))
        (torch.uint8, torch.uint16)
    """
    return torch.from_numpy(np.empty(0, np.dtype(dtype).newbyteorder("="))).dtype


def _native(a: np.ndarray) -> np.ndarray:
    """``a``, copied into native byte order if it is not in it (torch reads only that)."""
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def empty(shape: tuple[int, ...], dtype: np.dtype, pin: bool) -> torch.Tensor:
    """An uninitialised CPU tensor, page-locked when ``pin``."""
    return torch.empty(shape, dtype=torch_dtype(np.dtype(dtype)), pin_memory=pin)


def to_torch(batch: Batch, pin: bool = False) -> Batch:
    """Turn a numpy :class:`Batch` into torch tensors (copied into page-locked memory if pin).

    Without ``pin`` the tensors share memory with the arrays (no copy), except arrays
    that are not contiguous or not in native byte order: those are copied once.

    Example:
        >>> b = to_torch(Batch(np.zeros((1, 2)), np.ones(1, bool), np.ones((1, 2), bool),
        ...                    np.zeros((1, 2), np.int64), np.arange(2)[None]))
        >>> b.step
        tensor([[0, 1]])
    """
    if not pin and all(
        type(f) is np.ndarray and f.flags.c_contiguous and f.dtype.isnative for f in batch
    ):
        return Batch._make(map(torch.from_numpy, batch))

    def convert(a: Any) -> torch.Tensor:
        if type(a) is np.ndarray and not pin and a.flags.c_contiguous and a.dtype.isnative:
            return torch.from_numpy(a)
        a = np.asarray(a)
        if not pin:
            return torch.from_numpy(np.ascontiguousarray(_native(a)))
        out = empty(a.shape, a.dtype, True)
        out.numpy()[...] = a
        return out

    return Batch(*(convert(f) if type(f) is np.ndarray else tree_map(convert, f) for f in batch))


def assemble(parts: Sequence[Batch], pin: bool = False, time_major: bool = False) -> Batch:
    """Concatenate micro-batches along rows into new tensors, with a single copy.

    The output is allocated once (page-locked when ``pin``), in native byte order, and
    each part is copied into its rows; with ``time_major`` the output is laid out
    ``[T, B, ...]``.

    Example:
        >>> part = Batch(np.ones((1, 2)), np.ones(1, bool), np.ones((1, 2), bool),
        ...              np.zeros((1, 2), np.int64), np.arange(2)[None])
        >>> assemble([part, part], time_major=True).data.shape
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

    return Batch._make(
        combine(*fields) if type(fields[0]) is np.ndarray else tree_map(combine, *fields)
        for fields in zip(*parts, strict=True)
    )


class PinMemory:
    """Batches of ``seq`` as torch tensors; see :func:`pin_memory`."""

    def __init__(self, seq: Sequence[Batch], max_buffered: int = 2):
        self.seq, self.max_buffered = seq, max_buffered
        self.pin = can_pin()

    def __len__(self) -> int:
        return len(self.seq)

    def __getitem__(self, i: int) -> Batch:
        return to_torch(self.seq[i], self.pin)

    def __iter__(self) -> Iterator[Batch]:
        def produce() -> Iterator[Batch]:
            for batch in self.seq:
                yield to_torch(batch, self.pin)

        with Background(produce, self.max_buffered) as it:
            yield from it


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


def is_pinned(batch: Batch) -> bool:
    """Whether every tensor of a batch is page-locked."""
    return all(t.is_pinned() for t in leaves(tuple(batch)))
