"""The plan of one epoch from the stream lengths alone: rows and number of batches."""

from __future__ import annotations

import numpy as np

from .packing import placed_cap, row_spans
from .rows import assign_rows, balanced_rows, shuffle_rows

#: the planning algorithms :func:`epoch_rows` knows
PLAN_VERSIONS = (1, 2, 3, 4)

#: the first version whose packed rest of an epoch (resumed on other rows) starts each
#: stream begun before the resume at a chunk (:mod:`~streamseq.plan.packing`)
RESUMED_AT_CHUNKS = 3

#: the first version whose packed epochs start at a chunk every piece that goes on with
#: a stream from a step other than 0: a segment other than a stream's first, too
#: (:mod:`~streamseq.plan.packing`)
SEGMENTS_AT_CHUNKS = 4


def segments_at_chunks(pad: str, segment_length: int | None, version: int) -> bool:
    """Whether a plan starts at a chunk every segment but a stream's first (packed).

    Example:
        >>> segments_at_chunks("pack", 8, 4), segments_at_chunks("pack", 8, 3)
        (True, False)
        >>> segments_at_chunks("zeros", 8, 4), segments_at_chunks("pack", None, 4)
        (False, False)
    """
    return pad == "pack" and segment_length is not None and version >= SEGMENTS_AT_CHUNKS


def same_plans(a: int, b: int, packed_rest: bool, packed_segments: bool = False) -> bool:
    """Whether plan versions ``a`` and ``b`` plan an epoch alike.

    Versions 2, 3 and 4 differ only where rows are packed. In a packed rest of an epoch
    resumed on other rows (``packed_rest``), version 2 packs a stream begun before the
    resume inside a chunk, where nothing marks it; 3 and 4 start it at a chunk. In packed
    epochs of segments (``packed_segments``: ``pad="pack"`` with ``segment_length``),
    fresh or resumed, versions 2 and 3 pack a segment other than a stream's first inside
    a chunk, where nothing marks it; 4 starts it at a chunk (and balances its rows by
    the padding that may cost, see :func:`~streamseq.plan.rows.balanced_rows`).

    Example:
        >>> same_plans(2, 3, False), same_plans(2, 3, True), same_plans(1, 3, False)
        (True, False, False)
        >>> same_plans(3, 4, True), same_plans(3, 4, False, True), same_plans(2, 4, True)
        (True, False, False)
    """
    if a == b:
        return True
    low, high = min(a, b), max(a, b)
    if low < 2:
        return False
    if packed_rest and low < RESUMED_AT_CHUNKS:
        return False
    return not (packed_segments and low < SEGMENTS_AT_CHUNKS <= high)


def row_chunks(
    lengths: np.ndarray,
    assignment: list[np.ndarray],
    tbins: int,
    pack: bool = False,
    cap: int | None = None,
    resumed: np.ndarray | None = None,
) -> np.ndarray:
    """Chunks of ``tbins`` steps in each row.

    A chunk never spans two streams, unless ``pack``: then a row's streams follow one
    another inside chunks, and only the end of the row is padded (and the end of a chunk
    that packed ``cap`` streams, or before a stream that starts a chunk: ``resumed``, one
    flag a stream; see :mod:`~streamseq.plan.packing`).

    Example:
        >>> rows = [np.array([0]), np.array([1, 2])]
        >>> row_chunks(np.array([5, 2, 3]), rows, 2).tolist()
        [3, 3]
        >>> row_chunks(np.array([5, 2, 3]), rows, 2, pack=True).tolist()
        [3, 3]
        >>> row_chunks(np.array([5, 3, 3]), rows, 2, pack=True).tolist()
        [3, 3]
        >>> resumed = np.array([False, False, True])
        >>> row_chunks(np.array([5, 3, 3]), rows, 2, pack=True, resumed=resumed).tolist()
        [3, 4]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    placed = resumed is not None and bool(np.any(resumed))
    if pack and (cap is not None or placed):
        flat = np.concatenate([np.asarray(m, np.int64) for m in assignment] + [np.zeros(0, int)])
        sizes = np.array([len(m) for m in assignment], np.int64)
        fresh = np.asarray(resumed, bool)[flat] if placed else None
        end = row_spans(lengths[flat], sizes, tbins, placed_cap(cap, tbins), fresh)[1]
        last = np.cumsum(sizes) - 1  # (the end of a row: that of its last piece)
        ends = np.where(sizes > 0, end[np.maximum(last, 0)] if len(end) else 0, 0)
        return -(-ends // tbins)
    if pack:
        return np.array([-(-int(lengths[m].sum()) // tbins) for m in assignment], np.int64)
    per_stream = -(-lengths // tbins)
    return np.array([int(per_stream[m].sum()) for m in assignment], dtype=np.int64)


def start_order(
    lengths: np.ndarray,
    assignment: list[np.ndarray],
    tbins: int,
    pack: bool = False,
    cap: int | None = None,
    resumed: np.ndarray | None = None,
) -> np.ndarray:
    """Every stream, in the order the plan starts reading them: by first step, then by row.

    Streams the plan does not hold (empty ones) come last, in index order. With a plan of
    :func:`epoch_rows` ``version=2`` this is the epoch's order of the streams, the one the
    rest of an epoch resumed on other rows takes its untouched streams in
    (:func:`~streamseq.plan.progress.rest_of_epoch`). ``cap`` and ``resumed`` (one flag a
    stream: those that start a chunk) lay packed rows out as :func:`row_chunks` does.

    Example:
        >>> rows = [np.array([2, 0]), np.array([1]), np.array([3])]
        >>> start_order(np.array([5, 2, 3, 1, 0]), rows, 2).tolist()
        [2, 1, 3, 0, 4]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    cost = lengths if pack else -(-lengths // tbins)
    flat = np.concatenate([np.asarray(a, np.int64) for a in assignment] + [np.zeros(0, np.int64)])
    sizes = np.array([len(a) for a in assignment], dtype=np.int64)
    row = np.repeat(np.arange(len(sizes)), sizes)
    ends = np.cumsum(cost[flat])
    first = np.repeat(np.cumsum(sizes) - sizes, sizes)
    start = ends - cost[flat] - (ends - cost[flat])[first] if len(flat) else ends
    placed = resumed is not None and bool(np.any(resumed))
    if pack and (cap is not None or placed):
        fresh = np.asarray(resumed, bool)[flat] if placed else None
        start = row_spans(lengths[flat], sizes, tbins, placed_cap(cap, tbins), fresh)[0]
    held = flat[np.lexsort((row, start))]
    rest = np.setdiff1d(np.arange(len(lengths)), held)
    return np.concatenate([held, rest])


def num_batches(chunks: np.ndarray, pad: str) -> int:
    """Batches of an epoch whose rows have ``chunks`` chunks each.

    ``"drop"`` stops before any row would be all padding; the other modes run until the
    longest row ends.

    Example:
        >>> num_batches(np.array([3, 5]), "drop"), num_batches(np.array([3, 5]), "zeros")
        (3, 5)
    """
    return int(chunks.min() if pad == "drop" else chunks.max())


def epoch_rows(
    lengths: np.ndarray,
    num_rows: int,
    tbins: int,
    pad: str,
    *,
    shuffle: bool = False,
    seed: int = 0,
    epoch: int = 0,
    order: np.ndarray | None = None,
    version: int = 1,
    cap: int | None = None,
    resumed: np.ndarray | None = None,
) -> tuple[list[np.ndarray], int]:
    """The streams of every row (global rows, all ranks) and the number of batches.

    ``version`` picks the algorithm (a saved state names the one it was planned with):

    - ``1``: streams dealt out in the epoch's order (:func:`~streamseq.plan.rows.stream_order`,
      shuffled from ``(seed, epoch)`` if ``shuffle``), each to the row with the fewest steps
      so far (:func:`~streamseq.plan.rows.assign_rows`). With ``shuffle`` the number of
      batches varies from epoch to epoch.
    - ``2``, ``3`` and ``4``: rows balanced once (:func:`~streamseq.plan.rows.balanced_rows`:
      longest first onto the cheapest row, in chunks, or in steps for ``pad="pack"``;
      ``seed`` orders streams of equal cost if ``shuffle``); with ``shuffle``, each epoch
      then permutes the rows and the streams inside each row
      (:func:`~streamseq.plan.rows.shuffle_rows`). Each row holds the same streams every
      epoch, so every epoch has the same number of batches. ``3`` differs from ``2`` in a
      packed rest of an epoch only, ``4`` from ``3`` in packed epochs of segments only
      (see :func:`same_plans`).

    ``order``: the order in which streams are dealt out to rows, instead of the epoch's
    (the rest of an epoch resumed on other rows: begun pieces first, one per row). Both
    versions then deal them out as version 1 does, each to the row with the fewest steps
    so far, so the first ``num_rows`` pieces of ``order`` start rows ``0, 1, ...``.

    ``cap``: with ``pad="pack"``, the most streams a chunk may pack
    (:mod:`~streamseq.plan.packing`). ``resumed``: with ``pad="pack"``, the streams that
    start a chunk (one flag a stream: those that go on with a stream from a step other
    than 0, see :func:`~streamseq.plan.planner.plan_resumed`); version 4 balances rows
    with the padding each may cost before it (:func:`~streamseq.plan.rows.row_cost`).

    Raises:
        ValueError: an unknown ``version``.

    Example:
        >>> rows, n = epoch_rows(np.array([5, 2, 3]), 2, 2, "zeros")
        >>> [r.tolist() for r in rows], n
        ([[0], [1, 2]], 3)
        >>> rows, n = epoch_rows(np.array([5, 2, 3, 4]), 2, 2, "zeros", version=2)
        >>> [r.tolist() for r in rows], n
        ([[0, 1], [2, 3]], 4)
        >>> lengths = np.random.default_rng(0).integers(1, 100, 29)
        >>> def batches(version):
        ...     return sorted({epoch_rows(lengths, 4, 16, "zeros", shuffle=True, seed=1,
        ...                               epoch=e, version=version)[1] for e in range(10)})
        >>> batches(1), batches(2)
        ([29, 30, 32], [28])
    """
    if version not in PLAN_VERSIONS:
        raise ValueError(f"unknown plan version {version!r}, expected one of {PLAN_VERSIONS}")
    pack = pad == "pack"
    if version == 1 or order is not None:
        assignment = assign_rows(
            lengths, num_rows, shuffle=shuffle, seed=seed, epoch=epoch, order=order
        )
    else:
        flagged = resumed if pack and version >= SEGMENTS_AT_CHUNKS else None
        assignment = balanced_rows(
            lengths,
            num_rows,
            tbins=tbins,
            pack=pack,
            seed=seed if shuffle else None,
            cap=cap,
            resumed=flagged,
        )
        if shuffle:
            assignment = shuffle_rows(assignment, seed, epoch)
    chunks = row_chunks(lengths, assignment, tbins, pack=pack, cap=cap, resumed=resumed)
    return assignment, num_batches(chunks, pad)
