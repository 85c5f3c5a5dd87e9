"""Sizes of what workers hand over: micro-batches, blocks of them, and the slots they fill.

Every shared-memory slot is sized by one rule, :func:`slot_size`: the bytes of the item
it is meant for, plus a quarter, plus 64 KiB. Why a quarter: a slot is sized from one
item (the first item of a :func:`~streamseq.prefetch`, or a block estimated from the
data's spec for a loader's workers), and the items that follow vary around it (a last
batch, packed chunks, per-step shapes that differ, the pickle's own bytes): with a
quarter of headroom, an item that outgrows its slot is rare, and it costs a restart of
the workers (:class:`~.prefetched.Prefetched`) or one item pickled through a pipe
(slots shared by a loader's groups), never wrong data. Why 64 KiB: each buffer of an
item starts on an aligned offset, and a small item's pickle is mostly header.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._tree import leaves, nbytes, tree_map
from . import shm

HEADROOM = 1.25
"""A slot holds its item's bytes times this (see above)."""

SLACK = 65536
"""Bytes every slot has on top (alignment of the buffers, the pickle's header)."""


#: bytes of items a hand-over should carry at least, and the most items it carries
BLOCK_BYTES = 2 * 2**20
MAX_BLOCK = 32


def block_size(item_bytes: int) -> int:
    """Items per hand-over for items of ``item_bytes``: about :data:`BLOCK_BYTES` a block.

    Example:
        >>> block_size(100_000), block_size(5_000_000), block_size(10)
        (20, 1, 32)
    """
    return max(1, min(MAX_BLOCK, BLOCK_BYTES // max(1, int(item_bytes))))


def slot_size(item_bytes: int) -> int:
    """Bytes of a slot for items of about ``item_bytes``: the one sizing rule.

    Example:
        >>> slot_size(0), slot_size(1_000_000)
        (65536, 1315536)
    """
    return int(item_bytes * HEADROOM) + SLACK


def micro_batch_bytes(spec: Any, rows: int, tbins: int) -> int:
    """Size of a micro-batch of ``rows`` rows whose data ``spec`` describes.

    Example:
        >>> micro_batch_bytes(np.empty((0, 3), np.float32), 2, 4)
        234
    """
    step = nbytes(tree_map(lambda a: np.zeros((1, *a.shape[1:]), a.dtype), spec))
    return rows * tbins * (step + 8 + 8 + 1) + rows


def group_block_size(group: Any, tbins: int) -> int:
    """Micro-batches a worker hands over at once (about 2 MB of them, at most 32).

    Args:
        group: a sequence of micro-batches with ``spec_`` (the data's spec) and
            ``num_rows`` (a :class:`~streamseq.ZipBatch`).
        tbins: steps per row of a micro-batch.
    """
    return block_size(micro_batch_bytes(group.spec_, group.num_rows, tbins))


def hand_over(groups: Sequence[Any], tbins: int) -> tuple[int, int]:
    """Micro-batches every worker hands over at once, and the bytes of a slot for them.

    Args:
        groups: one sequence of micro-batches per worker, each with ``spec_`` and
            ``num_rows`` (a :class:`~streamseq.ZipBatch`).
        tbins: steps per row of a micro-batch.

    Example:
        >>> from types import SimpleNamespace
        >>> group = SimpleNamespace(num_rows=2, spec_=np.empty((0, 3), np.float32))
        >>> hand_over([group, group], 4)
        (32, 97056)
    """
    size = common_block_size(groups, tbins)
    return size, block_slot_size(groups, tbins, size)


def common_block_size(groups: Sequence[Any], tbins: int) -> int:
    """Micro-batches every worker hands over at once: the same for all the groups.

    The workers write their rows of the same batches in one slot (:mod:`.placed`), so
    the blocks of every group hold the same batches.
    """
    return min(group_block_size(g, tbins) for g in groups)


def block_slot_size(groups: Sequence[Any], tbins: int, size: int) -> int:
    """Bytes of a slot that holds ``size`` whole batches of ``groups``' rows.

    Example:
        >>> from types import SimpleNamespace
        >>> group = SimpleNamespace(num_rows=2, spec_=np.empty((0, 3), np.float32))
        >>> block_slot_size([group, group], 4, 2) == slot_size(2 * (468 + 5 * shm.ALIGN))
        True
    """
    rows = sum(g.num_rows for g in groups)
    spec = groups[0].spec_
    arrays = len(leaves(spec)) + 4 if spec is not None else 4
    batch = micro_batch_bytes(spec, rows, tbins) + shm.ALIGN * arrays  # (each aligned)
    return slot_size(batch * size)
