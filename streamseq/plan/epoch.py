"""The plan of one epoch from the stream lengths alone: rows and number of batches."""

from __future__ import annotations

import numpy as np

from .rows import assign_rows


def row_chunks(
    lengths: np.ndarray, assignment: list[np.ndarray], tbins: int, pack: bool = False
) -> np.ndarray:
    """Chunks of ``tbins`` steps in each row.

    A chunk never spans two streams, unless ``pack``: then a row's streams follow one
    another inside chunks, and only the end of the row is padded.

    Example:
        >>> rows = [np.array([0]), np.array([1, 2])]
        >>> row_chunks(np.array([5, 2, 3]), rows, 2).tolist()
        [3, 3]
        >>> row_chunks(np.array([5, 2, 3]), rows, 2, pack=True).tolist()
        [3, 3]
        >>> row_chunks(np.array([5, 3, 3]), rows, 2, pack=True).tolist()
        [3, 3]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if pack:
        return np.array([-(-int(lengths[m].sum()) // tbins) for m in assignment], np.int64)
    per_stream = -(-lengths // tbins)
    return np.array([int(per_stream[m].sum()) for m in assignment], dtype=np.int64)


def num_batches(chunks: np.ndarray, pad: str) -> int:
    """Batches of an epoch whose rows have ``chunks`` chunks each.

    ``"drop"`` stops before any row would be all padding; the other modes run until the
    longest row ends.

    Example:
        >>> num_batches(np.array([3, 5]), "drop"), num_batches(np.array([3, 5]), "zeros")
        (3, 5)
    """
    return int(chunks.min() if pad == "drop" else chunks.max())


def epoch_plan(
    lengths: np.ndarray,
    num_rows: int,
    tbins: int,
    pad: str,
    *,
    shuffle: bool = False,
    seed: int = 0,
    epoch: int = 0,
    order: np.ndarray | None = None,
) -> tuple[list[np.ndarray], int]:
    """The streams of every row (global rows, all ranks) and the number of batches.

    ``order``: the order in which streams are dealt out to rows, instead of the epoch's
    (see :func:`~streamseq.plan.rows.assign_rows`).

    Example:
        >>> rows, n = epoch_plan(np.array([5, 2, 3]), 2, 2, "zeros")
        >>> [r.tolist() for r in rows], n
        ([[0], [1, 2]], 3)
    """
    assignment = assign_rows(
        lengths, num_rows, shuffle=shuffle, seed=seed, epoch=epoch, order=order
    )
    chunks = row_chunks(lengths, assignment, tbins, pack=pad == "pack")
    return assignment, num_batches(chunks, pad)
