"""Which streams go to which row: the cheap, deterministic plan that everything follows."""

from __future__ import annotations

import heapq

import numpy as np


def stream_order(
    count: int, *, shuffle: bool = False, seed: int = 0, epoch: int = 0
) -> np.ndarray:
    """The order in which the plan of ``epoch`` deals ``count`` streams out to rows.

    Example:
        >>> stream_order(4).tolist()
        [0, 1, 2, 3]
        >>> sorted(stream_order(4, shuffle=True, seed=1, epoch=2).tolist())
        [0, 1, 2, 3]
    """
    if shuffle:
        return np.random.default_rng([seed, epoch]).permutation(count)
    return np.arange(count)


#: runs of equal costs shorter than this are dealt one item at a time
RUN = 64


def deal(costs: np.ndarray, num_rows: int) -> np.ndarray:
    """The row each item goes to, in turn, each to the row of least cost so far.

    Ties go to the lowest row index. A run of items of one cost is dealt at once: row
    ``r`` at total ``t`` takes them at totals ``t, t + c, t + 2c, ...``, so the run goes
    to the first of these ``(total, row)`` pairs, in order (:func:`_deal_run`).

    Example:
        >>> deal(np.array([5, 2, 2, 4]), 2).tolist()
        [0, 1, 1, 1]
        >>> deal(np.array([3] + [1] * 100), 4)[:8].tolist()
        [0, 1, 2, 3, 1, 2, 3, 1]
    """
    costs = np.asarray(costs, dtype=np.int64)
    row_of = np.empty(len(costs), dtype=np.int64)
    totals = np.zeros(num_rows, dtype=np.int64)
    if not len(costs):
        return row_of
    cut = np.flatnonzero(costs[1:] != costs[:-1]) + 1  # (a mask: no int64 of differences)
    starts = np.concatenate([[0], cut]).tolist()
    stops = np.concatenate([cut, [len(costs)]]).tolist()
    heap: list[tuple[int, int]] | None = None
    replace = heapq.heapreplace
    for a, b in zip(starts, stops, strict=True):  # (runs of one cost, not items)
        c = int(costs[a])
        if b - a >= RUN and c > 0:
            if heap is not None:
                totals[[r for _, r in heap]] = [t for t, _ in heap]
                heap = None
            row_of[a:b] = _deal_run(totals, c, b - a)
            continue
        if heap is None:
            heap = list(zip(totals.tolist(), range(num_rows), strict=True))
            heapq.heapify(heap)
        for k in range(a, b):
            total, r = heap[0]
            row_of[k] = r
            replace(heap, (total + c, r))
    return row_of


def _deal_run(totals: np.ndarray, c: int, k: int) -> np.ndarray:
    """Deal ``k`` items of cost ``c > 0`` as the heap would; update ``totals`` in place.

    Example:
        >>> totals = np.array([2, 0, 1])
        >>> _deal_run(totals, 1, 5).tolist(), totals.tolist()
        ([1, 1, 2, 0, 1], [3, 3, 2])
    """
    # the smallest value v with k pairs of a total <= v
    lo, hi = int(totals.min()), int(totals.min()) + c * k
    while lo < hi:
        v = (lo + hi) // 2
        if _pairs_upto(totals, c, v).sum() >= k:
            hi = v
        else:
            lo = v + 1
    taken = _pairs_upto(totals, c, lo - 1)  # every pair below lo
    left = k - int(taken.sum())
    at_lo = np.flatnonzero((totals <= lo) & ((lo - totals) % c == 0))[:left]
    taken[at_lo] += 1
    # pair j of row r is (q + j) * c + m for t = q * c + m: in round q + j, the rows
    # come in the order of (m, r), the same in every round
    q, m = np.divmod(totals, c)
    first_round = int(q[taken > 0].min())
    rounds = int((q + taken).max()) - first_round
    if rounds * len(totals) <= 4 * k + 4096:
        by = np.lexsort((np.arange(len(totals)), m))
        g = np.arange(first_round, first_round + rounds)[:, None]
        inside = (q[by] <= g) & (g < (q + taken)[by])
        totals += taken * c
        return np.broadcast_to(by, inside.shape)[inside].astype(np.int64)
    rows = np.repeat(np.arange(len(totals), dtype=np.int64), taken)
    first = np.concatenate([[0], np.cumsum(taken)[:-1]])
    j = np.arange(k, dtype=np.int64) - np.repeat(first, taken)
    values = totals[rows] + j * c
    order = np.lexsort((rows, values))
    totals += taken * c
    return rows[order]


def _pairs_upto(totals: np.ndarray, c: int, v: int) -> np.ndarray:
    """How many of ``t, t + c, t + 2c, ...`` are at most ``v``, for every total ``t``."""
    return np.where(totals <= v, (v - totals) // c + 1, 0)


def assign_rows(
    lengths: np.ndarray,
    num_rows: int,
    *,
    shuffle: bool = False,
    seed: int = 0,
    epoch: int = 0,
    order: np.ndarray | None = None,
) -> list[np.ndarray]:
    """The plan behind :func:`interleave_streams`: stream indices of each row, in order.

    Streams are dealt out in :func:`stream_order` (or ``order``), each to the row with
    the fewest steps so far; empty streams are skipped.

    Example:
        >>> [a.tolist() for a in assign_rows(np.array([5, 2, 0, 2, 4]), 2)]
        [[0], [1, 3, 4]]
        >>> [a.tolist() for a in assign_rows(np.array([5, 2, 0, 2, 4]), 2, order=[4, 0])]
        [[4], [0]]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if order is None:
        order = stream_order(len(lengths), shuffle=shuffle, seed=seed, epoch=epoch)
    order = np.asarray(order, dtype=np.int64)
    order = order[lengths[order] > 0]
    row_of = deal(lengths[order], num_rows)
    by_row = np.argsort(row_of, kind="stable")
    bounds = np.searchsorted(row_of[by_row], np.arange(num_rows + 1))
    ordered = order[by_row]
    return [ordered[bounds[r] : bounds[r + 1]] for r in range(num_rows)]


def row_cost(
    lengths: np.ndarray,
    tbins: int,
    pack: bool = False,
    cap: int | None = None,
    resumed: np.ndarray | None = None,
) -> np.ndarray:
    """What each stream adds to its row: its chunks of ``tbins`` steps, or steps if ``pack``.

    A chunk never spans two streams unless ``pack``, so a stream costs its own chunks;
    packed streams follow one another inside chunks, so they cost their steps. Packed
    with at most ``cap`` streams per chunk (:mod:`~streamseq.plan.packing`), a stream of
    ``n`` steps costs ``n * (cap - 1) + tbins``, in ``1 / ((cap - 1) * tbins)`` of a
    chunk: a chunk padded after ``cap`` streams saw at least ``cap - 1`` of them start,
    so a row of total cost ``c`` takes at most ``ceil(c / ((cap - 1) * tbins))`` chunks
    (``cap=1``: each stream its own chunks, as unpacked).

    ``resumed``: with ``pack``, the streams that start a chunk (one flag a stream, or
    None; :mod:`~streamseq.plan.packing`): each costs ``K - 1`` more, ``K`` the cost of a
    chunk (``tbins``, or ``(cap - 1) * tbins``), the most padding it adds before it, so
    the bound above holds in any order
    (:func:`~streamseq.plan.packing.most_chunks`).

    Example:
        >>> row_cost(np.array([5, 4, 0]), 2).tolist()
        [3, 2, 0]
        >>> row_cost(np.array([5, 4, 0]), 2, pack=True).tolist()
        [5, 4, 0]
        >>> row_cost(np.array([5, 4, 0]), 2, pack=True, cap=3).tolist()
        [12, 10, 0]
        >>> row_cost(np.array([5, 4, 0]), 2, pack=True, resumed=np.array([0, 1, 1], bool))
        array([5, 5, 0])
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    flagged = None
    if pack and cap != 1 and resumed is not None:
        flagged = np.asarray(resumed, bool) & (lengths > 0)
    if pack and cap is not None and cap > 1:
        cost = np.where(lengths > 0, lengths * (cap - 1) + tbins, 0)
        if flagged is not None:
            cost += flagged * ((cap - 1) * tbins - 1)
        return cost
    if pack and cap is None:
        return lengths.copy() if flagged is None else lengths + flagged * (tbins - 1)
    chunks = lengths // tbins  # ceil(n / tbins) of n >= 0, in one array (n + tbins - 1
    chunks += lengths % tbins != 0  # would wrap for n within tbins of the largest int64)
    return chunks


def balanced_rows(
    lengths: np.ndarray,
    num_rows: int,
    *,
    tbins: int,
    pack: bool = False,
    seed: int | None = None,
    cap: int | None = None,
    resumed: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Streams balanced over ``num_rows`` rows, once for every epoch: stream indices per row.

    Longest first, each stream goes to the row with the lowest cost so far (the first
    such row on a tie), the cost being :func:`row_cost`: chunks, or steps if ``pack``.
    Streams of equal cost are taken in index order, or in an order drawn from ``seed``.
    Empty streams are skipped; each row lists its streams in index order, and the rows
    come in the order of their first streams (so the first stream starts row 0).

    The last stream placed on the costliest row went to the cheapest row of that time,
    so the costliest and the cheapest rows differ by at most one stream's cost: in
    chunks, so by at most the longest stream rounded up to whole chunks (their steps may
    differ more: many short streams against as many long ones of as many chunks).

    Args:
        lengths: steps of every stream.
        num_rows: rows of the plan (global rows, all ranks).
        tbins: steps per chunk.
        pack: the rows are packed (``pad="pack"``): balance steps, not chunks.
        seed: draws the order of streams of equal cost (None: index order).
        cap: with ``pack``, the most streams a chunk may pack (see :func:`row_cost`).
        resumed: with ``pack``, the streams that start a chunk (one flag a stream, or
            None): they cost the padding they may add before them (see
            :func:`row_cost`), the cost the bound on a shuffled row's chunks counts
            (:func:`~streamseq.plan.packing.most_chunks`), so that rows balanced in it
            have the least such bound.

    Returns:
        The stream indices of each row, a list of ``num_rows`` arrays.

    Example:
        >>> [r.tolist() for r in balanced_rows(np.array([5, 2, 0, 2, 4]), 2, tbins=1)]
        [[0, 3], [1, 4]]
        >>> [r.tolist() for r in balanced_rows(np.array([9, 2, 0, 2, 4]), 2, tbins=1)]
        [[0], [1, 3, 4]]
        >>> [r.tolist() for r in balanced_rows(np.array([5, 2, 0, 2, 4]), 2, tbins=2)]
        [[0, 3], [1, 4]]
    """
    # (each temporary is let go as soon as it is used: this runs on every stream at once)
    count = len(lengths)
    drawn = row_cost(lengths, tbins, pack, cap, resumed)
    top = int(drawn.max(initial=0))
    if top < 1 << 16:  # (costs in 2 bytes: those of every stream, held while sorting)
        drawn = drawn.astype(np.uint16)
    candidates = None
    if seed is not None:
        candidates = np.random.default_rng([seed]).permutation(count)
        drawn = drawn[candidates]
    by_cost = _descending(drawn)
    placed = int(np.count_nonzero(drawn))  # the empty streams come last: left out
    by_cost = by_cost[:placed]
    order = by_cost if candidates is None else candidates[by_cost]
    del candidates
    if top <= 4 * len(drawn) + 65536:  # from the count of each
        counts = np.bincount(drawn)[::-1][:-1]  # of every cost > 0, the largest first
        del drawn, by_cost
        sorted_cost = np.repeat(np.arange(len(counts), 0, -1, dtype=np.int64), counts)
    else:
        sorted_cost = drawn[by_cost]
        del drawn, by_cost
    row_of = deal(sorted_cost, num_rows)
    _even_out(row_of, sorted_cost, num_rows)
    del sorted_cost
    ordered, bounds = _by_row(order, row_of, num_rows, count)
    del order, row_of
    rows = [ordered[bounds[r] : bounds[r + 1]] for r in range(num_rows)]
    # rows in the order of their first stream (empty ones last): row 0 starts stream 0
    return sorted(rows, key=lambda m: int(m[0]) if len(m) else count)


def _descending(values: np.ndarray) -> np.ndarray:
    """A stable argsort of ``values`` (integers >= 0), largest first.

    Example:
        >>> _descending(np.array([1, 3, 1, 3])).tolist()
        [1, 3, 0, 2]
    """
    top = int(values.max(initial=0))
    small = np.uint16 if top < 1 << 16 else np.int64  # (a radix sort: no comparisons)
    keys = values.astype(small)  # (in the small type: no temporary of int64)
    np.subtract(small(top), keys, out=keys)
    return np.argsort(keys, kind="stable")


def _by_row(
    items: np.ndarray, row_of: np.ndarray, num_rows: int, count: int
) -> tuple[np.ndarray, np.ndarray]:
    """``items`` (distinct, below ``count``) sorted by row, then by index; row bounds.

    As ``np.lexsort((items, row_of))``, in a stable sort of small integers.

    Example:
        >>> ordered, bounds = _by_row(np.array([4, 0, 2, 1]), np.array([1, 0, 1, 0]), 2, 5)
        >>> ordered.tolist(), bounds.tolist()
        ([0, 1, 2, 4], [0, 2, 4])
    """
    small = np.uint16 if num_rows < 1 << 16 else np.int64  # (a radix sort)
    row_at = np.full(count, num_rows, dtype=small)
    row_at[items] = row_of
    kept = np.flatnonzero(row_at < num_rows)
    rows = row_at[kept]
    del row_at
    by_row = np.argsort(rows, kind="stable")
    del rows
    sizes = np.bincount(row_of, minlength=num_rows)
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return kept[by_row], bounds


def _even_out(row_of: np.ndarray, cost: np.ndarray, num_rows: int) -> None:
    """Lower the costliest row by swaps with the cheapest one, in place, while one helps.

    Each round moves a stream of the costliest row to the cheapest one, in exchange for a
    cheaper stream of it (or none), choosing the exchange that brings the two closest to
    even. The costliest row never grows and the cheapest never passes the old costliest,
    so the bound of longest-first placement still holds.

    Example:
        >>> row_of = np.array([0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 1, 2])
        >>> cost = np.array([3] * 9 + [2] * 4 + [1])
        >>> row_of[9:] = [1, 2, 3, 1, 2]
        >>> _even_out(row_of, cost, 4)
        >>> np.bincount(row_of, weights=cost).tolist()
        [9.0, 9.0, 9.0, 9.0]
    """
    if num_rows < 2 or len(cost) == 0:
        return
    totals = np.bincount(row_of, weights=cost, minlength=num_rows).astype(np.int64)
    for _ in range(4 * num_rows):
        hi, lo = int(np.argmax(totals)), int(np.argmin(totals))
        gap = int(totals[hi] - totals[lo])
        if gap <= 1:
            return
        mine, theirs = np.flatnonzero(row_of == hi), np.flatnonzero(row_of == lo)
        b = np.concatenate([[0], cost[theirs]])  # 0: a move, nothing comes back
        by_cost = np.argsort(b, kind="stable")
        a = cost[mine]
        at = np.clip(np.searchsorted(b[by_cost], a - gap / 2), 1, len(b) - 1)
        best: tuple[float, int, int] | None = None
        for j in (at - 1, at):  # the two nearest exchanges for every stream of the row
            d = a - b[by_cost[j]]
            score = np.where((d > 0) & (d < gap), np.abs(d - gap / 2), np.inf)
            i = int(np.argmin(score))
            if np.isfinite(score[i]) and (best is None or score[i] < best[0]):
                best = (float(score[i]), i, int(by_cost[j[i]]))
        if best is None:
            return
        _, i, k = best
        d = int(a[i] - b[k])
        row_of[mine[i]] = lo
        if k > 0:
            row_of[theirs[k - 1]] = hi
        totals[hi] -= d
        totals[lo] += d


def shuffle_rows(rows: list[np.ndarray], seed: int, epoch: int) -> list[np.ndarray]:
    """The rows of ``epoch``: rows and the streams inside each in orders from ``(seed, epoch)``.

    The rows are permuted among the row indices, and each row's streams among
    themselves. Every row keeps its set of streams, so its cost, and the epoch's number
    of batches, do not change from epoch to epoch.

    Example:
        >>> rows = [np.array([0, 3]), np.array([1]), np.array([2, 4])]
        >>> shuffled = shuffle_rows(rows, seed=0, epoch=1)
        >>> sorted(sorted(r.tolist()) for r in shuffled)
        [[0, 3], [1], [2, 4]]
        >>> [r.tolist() for r in shuffle_rows(rows, 0, 1)] == [r.tolist() for r in shuffled]
        True
    """
    rng = np.random.default_rng([seed, epoch])
    return [
        rng.permutation(np.asarray(rows[p], dtype=np.int64)) for p in rng.permutation(len(rows))
    ]
