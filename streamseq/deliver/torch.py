"""numpy batches as torch tensors: dtypes, page-locked memory when CUDA is there."""

from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np
import torch

from .._tree import leaves, rebuilt, tree_map
from .._warn import warn
from ..batch import Batch

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
        warn("CUDA is not available: pin_memory delivers unpinned tensors", RuntimeWarning)
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
    if not pin:  # the common case, in short: every field a contiguous native array
        shared = []
        for f in batch:
            if type(f) is not np.ndarray or not f.flags.c_contiguous or not f.dtype.isnative:
                break
            shared.append(torch.from_numpy(f))
        else:
            return rebuilt(batch, shared)

    def convert(a: Any) -> torch.Tensor:
        if type(a) is np.ndarray and not pin and a.flags.c_contiguous and a.dtype.isnative:
            return torch.from_numpy(a)
        a = np.asarray(a)
        if not pin:
            return torch.from_numpy(np.ascontiguousarray(_native(a)))
        out = empty(a.shape, a.dtype, True)
        out.numpy()[...] = a
        return out

    return rebuilt(
        batch, [convert(f) if type(f) is np.ndarray else tree_map(convert, f) for f in batch]
    )


def is_pinned(batch: Batch) -> bool:
    """Whether every tensor of a batch is page-locked."""
    return all(t.is_pinned() for t in leaves(tuple(batch)))
