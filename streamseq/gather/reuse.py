"""The arrays of batches written in this process, written again once nobody holds them.

A batch of a few hundred kB or more is larger than ``malloc``'s threshold for memory of
its own: allocated fresh for every batch, each one costs page faults and zeroed pages,
about as much as a small batch's copy. A :class:`Spare` keeps the arrays of the last
few batches a writer made, and hands a set back only when nothing outside it holds any
of them (design invariant 8: a delivered batch never changes while anything holds it).

Nothing can hold a part of an array without holding the array itself: a numpy view
keeps its base (numpy collapses the chain to the array that owns the memory), a tensor
of :func:`torch.from_numpy` keeps the array it was made from in its storage (and every
view of that tensor, and ``tensor.numpy()``, keeps the storage), a :class:`Batch` or a
dict of its fields keeps the tensors. So an array whose reference count is only the
spare's own references is held by nobody: :func:`sys.getrefcount` tells, without a
copy and for any number of holders.

Arrays in a worker's shared-memory slot are never kept here (the slot is freed with its
batch, :mod:`streamseq.workers.shm`); nor are batches of a tree of arrays (dicts,
tuples): their leaves are allocated fresh.
"""

from __future__ import annotations

import sys

import numpy as np

#: sets of arrays kept: the batch a loop holds and the one it just dropped (no more
#: memory than a loop that holds one batch at a time held before). The newest free set
#: is taken first: such a loop alternates two sets, which stay in the caches.
KEEP = 2

# references to a kept array while :func:`_free` looks at it: the list of its set and
# the argument of ``sys.getrefcount``
_OURS = 2


class Spare:
    """The arrays of the last :data:`KEEP` batches written here, reused once free.

    Example:
        >>> spare, wanted = Spare(), [((2, 3), np.dtype(np.int64))]
        >>> a = spare.take(wanted)
        >>> b = spare.take(wanted)  # ``a`` is still held
        >>> b[0] is a[0]
        False
        >>> address = a[0].ctypes.data
        >>> del a
        >>> c = spare.take(wanted)  # ``a``'s arrays: free
        >>> c[0].ctypes.data == address
        True
    """

    def __init__(self, keep: int = KEEP):
        self.keep = keep
        self.sets: list[list[np.ndarray]] = []
        self.wanted: list[tuple[tuple[int, ...], np.dtype]] | None = None  # (of the sets)

    def take(self, wanted: list[tuple[tuple[int, ...], np.dtype]]) -> list[np.ndarray]:
        """Uninitialised arrays of these shapes and dtypes: a free set kept, or new ones.

        The set returned is kept (the oldest set is let go past :attr:`keep`). The sets
        kept are those of the last ``wanted`` (the same list): another one lets them go.
        """
        if wanted is not self.wanted:
            self.sets, self.wanted = [], wanted
        sets = self.sets
        for n in range(len(sets) - 1, -1, -1):  # the last freed first: still in the caches
            if _free(sets[n]):
                arrays = sets.pop(n)
                sets.append(arrays)
                return list(arrays)
        arrays = [np.empty(shape, dtype) for shape, dtype in wanted]
        sets.append(arrays)
        if len(sets) > self.keep:
            del sets[0]
        return list(arrays)

    def clear(self) -> None:
        """Let go of every set kept."""
        self.sets = []


def _free(arrays: list[np.ndarray]) -> bool:
    """Whether nobody but the list ``arrays`` holds any of its arrays."""
    for n in range(len(arrays)):  # (no loop variable: it would be one more reference)
        if sys.getrefcount(arrays[n]) > _OURS:
            return False
    return True
