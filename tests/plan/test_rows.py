"""Rows: balanced once (longest first onto the cheapest row), shuffled per epoch."""

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamseq.plan.epoch import epoch_rows, row_chunks, start_order
from streamseq.plan.progress import progress_at, rest_of_epoch, whole_units
from streamseq.plan.rows import (
    assign_rows,
    balanced_rows,
    row_cost,
    shuffle_rows,
    stream_order,
)
from streamseq.testing import stream_lengths

PADS = ("zeros", "drop", "wrap", "pack")

lengths_st = stream_lengths(max_streams=40, max_length=60).map(np.array)
rows_st = st.integers(1, 9)
tbins_st = st.integers(1, 12)
seeds = st.integers(0, 2**32 - 1)


def as_lists(rows):
    return [r.tolist() for r in rows]


def costs(lengths, rows, tbins, pack):
    cost = row_cost(lengths, tbins, pack)
    return np.array([int(cost[r].sum()) for r in rows])


def starts(lengths, rows, tbins, pack):
    """``(row, first step)`` of every stream in the rows."""
    cost = row_cost(lengths, tbins, pack)
    out = {}
    for r, row in enumerate(rows):
        at = 0
        for s in row.tolist():
            out[s] = (r, at)
            at += int(cost[s])
    return out


def token_lengths():
    """29 streams of token-like lengths, as in a small text corpus."""
    rng = np.random.default_rng(7)
    return np.clip(rng.lognormal(np.log(40), 1.0, 29), 1, 400).astype(np.int64)


# --- every stream once --------------------------------------------------------------------


@given(lengths_st, rows_st, tbins_st, st.booleans(), st.one_of(st.none(), seeds))
def test_balanced_rows_hold_every_nonempty_stream_once(lengths, num_rows, tbins, pack, seed):
    rows = balanced_rows(lengths, num_rows, tbins=tbins, pack=pack, seed=seed)
    assert len(rows) == num_rows
    placed = np.sort(np.concatenate(rows))
    assert placed.tolist() == np.flatnonzero(lengths).tolist()
    assert all(r.tolist() == sorted(r.tolist()) for r in rows)  # index order in a row


@given(lengths_st, rows_st, tbins_st, st.sampled_from(PADS), st.booleans(), seeds)
def test_epoch_plan_v2_holds_every_nonempty_stream_once(
    lengths, num_rows, tbins, pad, shuffle, seed
):
    for epoch in range(4):
        rows, _ = epoch_rows(
            lengths, num_rows, tbins, pad, shuffle=shuffle, seed=seed, epoch=epoch, version=2
        )
        assert len(rows) == num_rows
        placed = np.sort(np.concatenate(rows))
        assert placed.tolist() == np.flatnonzero(lengths).tolist()


# --- the same number of batches every epoch ----------------------------------------------


@given(lengths_st, rows_st, tbins_st, st.sampled_from(PADS), seeds)
def test_every_epoch_has_the_same_number_of_batches(lengths, num_rows, tbins, pad, seed):
    first = None
    for epoch in range(30):
        rows, n = epoch_rows(
            lengths, num_rows, tbins, pad, shuffle=True, seed=seed, epoch=epoch, version=2
        )
        chunks = row_chunks(lengths, rows, tbins, pack=pad == "pack")
        assert n == (chunks.min() if pad == "drop" else chunks.max())
        first = n if first is None else first
        assert n == first


def test_token_streams_fixed_length_while_version_1_varies():
    lengths = token_lengths()
    v1 = {epoch_rows(lengths, 4, 16, "zeros", shuffle=True, seed=1, epoch=e)[1] for e in range(20)}
    v2 = {
        epoch_rows(lengths, 4, 16, "zeros", shuffle=True, seed=1, epoch=e, version=2)[1]
        for e in range(20)
    }
    assert len(v1) > 1
    assert len(v2) == 1
    assert v2.pop() <= np.median(sorted(v1))


@pytest.mark.parametrize("pad", PADS)
def test_no_more_batches_than_a_typical_version_1_epoch(pad):
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(300), 1.2, 400), 10, 10_000).astype(np.int64)
    v1 = [epoch_rows(lengths, 32, 64, pad, shuffle=True, seed=0, epoch=e)[1] for e in range(50)]
    v2 = epoch_rows(lengths, 32, 64, pad, shuffle=True, seed=0, version=2)[1]
    if pad == "drop":  # drop stops at the shortest row: more batches is better
        assert v2 >= np.median(v1)
    else:
        assert v2 <= np.median(v1)


# --- balance ------------------------------------------------------------------------------


@given(lengths_st, rows_st, tbins_st, st.booleans(), st.one_of(st.none(), seeds))
def test_rows_differ_by_at_most_one_stream(lengths, num_rows, tbins, pack, seed):
    # invariant 6, in the unit the rows are balanced in: chunks, or steps when packed
    rows = balanced_rows(lengths, num_rows, tbins=tbins, pack=pack, seed=seed)
    total = costs(lengths, rows, tbins, pack)
    assert total.max() - total.min() <= row_cost(lengths, tbins, pack).max()
    # the costliest row is within one stream of the mean (list scheduling's bound)
    assert (
        total.max() * num_rows
        <= total.sum() + (num_rows - 1) * row_cost(lengths, tbins, pack).max()
    )


@given(
    st.lists(st.integers(0, 30), min_size=1, max_size=7).filter(any).map(np.array),
    st.integers(1, 3),
    st.integers(1, 8),
    st.booleans(),
)
def test_longest_first_within_four_thirds_of_the_best(lengths, num_rows, tbins, pack):
    rows = balanced_rows(lengths, num_rows, tbins=tbins, pack=pack)
    cost = row_cost(lengths, tbins, pack)
    best = min(
        max(int(cost[np.array(a) == r].sum()) for r in range(num_rows))
        for a in itertools.product(range(num_rows), repeat=len(cost))
    )
    assert 3 * costs(lengths, rows, tbins, pack).max() <= 4 * best


# --- shuffled -----------------------------------------------------------------------------


@given(lengths_st, rows_st, tbins_st, st.sampled_from(PADS), seeds)
def test_epochs_are_shuffled(lengths, num_rows, tbins, pad, seed):
    if np.count_nonzero(lengths) < 2:
        return  # one stream: a single arrangement
    pack = pad == "pack"
    plans = [
        epoch_rows(lengths, num_rows, tbins, pad, shuffle=True, seed=seed, epoch=e, version=2)[0]
        for e in range(40)
    ]
    # where the streams start changes (each of 40 epochs alike: odds below 2**-39)
    assert len({tuple(sorted(starts(lengths, p, tbins, pack).items())) for p in plans}) > 1
    if any(len(r) > 1 for r in plans[0]):
        # which streams open the epoch changes
        assert len({frozenset(r[0] for r in p if len(r)) for p in plans}) > 1


def test_streams_move_over_rows_and_positions():
    lengths = token_lengths()
    base = balanced_rows(lengths, 4, tbins=16, seed=1)
    seen_rows = {s: set() for s in range(len(lengths))}
    opened = {s: 0 for s in range(len(lengths))}
    epochs = 400
    for e in range(epochs):
        rows, _ = epoch_rows(lengths, 4, 16, "zeros", shuffle=True, seed=1, epoch=e, version=2)
        for r, row in enumerate(rows):
            for s in row.tolist():
                seen_rows[s].add(r)
            opened[int(row[0])] += 1
    assert all(len(v) == 4 for v in seen_rows.values())  # every stream on every row index
    for row in base:
        for s in row.tolist():  # opens its row in about 1 / len(row) of the epochs
            assert abs(opened[s] / epochs - 1 / len(row)) < 0.1


def test_shuffle_rows_keeps_each_rows_streams():
    rows = [np.array([0, 3, 5]), np.array([1]), np.array([], np.int64), np.array([2, 4])]
    for epoch in range(10):
        out = shuffle_rows(rows, 3, epoch)
        assert sorted(sorted(r.tolist()) for r in out) == sorted(sorted(r.tolist()) for r in rows)
    assert len({str(as_lists(shuffle_rows(rows, 3, e))) for e in range(10)}) > 1


# --- deterministic ------------------------------------------------------------------------


@given(
    lengths_st, rows_st, tbins_st, st.sampled_from(PADS), st.booleans(), seeds, st.integers(0, 9)
)
def test_same_inputs_same_plan(lengths, num_rows, tbins, pad, shuffle, seed, epoch):
    def plan():
        rows, n = epoch_rows(
            lengths.copy(), num_rows, tbins, pad, shuffle=shuffle, seed=seed, epoch=epoch,
            version=2,
        )  # fmt: skip
        return as_lists(rows), n

    assert plan() == plan()


@given(lengths_st, rows_st, tbins_st, st.sampled_from(PADS), seeds, st.integers(0, 9))
def test_unshuffled_is_balanced_and_ignores_seed_and_epoch(
    lengths, num_rows, tbins, pad, seed, epoch
):
    rows, n = epoch_rows(lengths, num_rows, tbins, pad, seed=seed, epoch=epoch, version=2)
    expected = balanced_rows(lengths, num_rows, tbins=tbins, pack=pad == "pack")
    assert as_lists(rows) == as_lists(expected)
    plain, m = epoch_rows(lengths, num_rows, tbins, pad, version=2)  # seed 0, epoch 0
    assert (as_lists(rows), n) == (as_lists(plain), m)


def test_seed_orders_streams_of_equal_cost():
    lengths = np.full(12, 10)
    by_seed = {str(as_lists(balanced_rows(lengths, 3, tbins=4, seed=s))) for s in range(10)}
    assert len(by_seed) > 1
    assert as_lists(balanced_rows(lengths, 3, tbins=4)) == [
        [0, 3, 6, 9],
        [1, 4, 7, 10],
        [2, 5, 8, 11],
    ]


# --- version 1, and an explicit order -----------------------------------------------------


@given(
    lengths_st, rows_st, tbins_st, st.sampled_from(PADS), st.booleans(), seeds, st.integers(0, 9)
)
def test_version_1_is_assign_rows(lengths, num_rows, tbins, pad, shuffle, seed, epoch):
    rows, n = epoch_rows(lengths, num_rows, tbins, pad, shuffle=shuffle, seed=seed, epoch=epoch)
    again, m = epoch_rows(
        lengths, num_rows, tbins, pad, shuffle=shuffle, seed=seed, epoch=epoch, version=1
    )
    expected = assign_rows(lengths, num_rows, shuffle=shuffle, seed=seed, epoch=epoch)
    assert as_lists(rows) == as_lists(again) == as_lists(expected)
    chunks = row_chunks(lengths, expected, tbins, pack=pad == "pack")
    assert n == m == (chunks.min() if pad == "drop" else chunks.max())


def test_version_1_plans_as_before():
    # plans of version 1, as saved states know them
    lengths = np.array([5, 2, 0, 2, 4, 9, 1, 7])
    assert stream_order(8, shuffle=True, seed=1, epoch=2).tolist() == [6, 0, 7, 5, 1, 4, 3, 2]
    rows, n = epoch_rows(lengths, 3, 2, "zeros", shuffle=True, seed=1, epoch=2)
    assert (as_lists(rows), n) == ([[6, 5], [0, 1, 4], [7, 3]], 6)
    rows, n = epoch_rows(lengths, 3, 2, "pack")
    assert (as_lists(rows), n) == ([[0, 6, 7], [1, 4], [3, 5]], 7)


@given(lengths_st, rows_st, tbins_st, st.sampled_from(PADS), st.data())
def test_explicit_order_deals_as_version_1(lengths, num_rows, tbins, pad, data):
    order = np.array(data.draw(st.permutations(range(len(lengths)))), dtype=np.int64)
    v1 = epoch_rows(lengths, num_rows, tbins, pad, order=order)
    v2 = epoch_rows(lengths, num_rows, tbins, pad, order=order, shuffle=True, seed=5, version=2)
    assert (as_lists(v1[0]), v1[1]) == (as_lists(v2[0]), v2[1])
    # the first pieces of the order start rows 0, 1, ... (begun pieces of a resumed rest)
    first = order[lengths[order] > 0][:num_rows]
    assert [int(v2[0][r][0]) for r in range(len(first))] == first.tolist()


def test_unknown_version():
    with pytest.raises(ValueError, match="plan version"):
        epoch_rows(np.array([3]), 1, 2, "zeros", version=5)


@given(lengths_st, rows_st, tbins_st, st.sampled_from(PADS), seeds, st.data())
def test_rest_of_a_balanced_epoch_on_other_rows(lengths, num_rows, tbins, pad, seed, data):
    pack = pad == "pack"
    rows, n = epoch_rows(lengths, num_rows, tbins, pad, shuffle=True, seed=seed, version=2)
    order = start_order(lengths, rows, tbins, pack)
    assert sorted(order.tolist()) == list(range(len(lengths)))
    firsts = [int(r[0]) for r in rows if len(r)]
    assert sorted(order[: len(firsts)].tolist()) == sorted(firsts)  # row openers first
    batches = data.draw(st.integers(0, n))
    progress = progress_at(lengths, whole_units(lengths), rows, tbins, pack, batches)
    unit, offset, length = rest_of_epoch(progress, lengths, order)
    new_rows = data.draw(st.integers(1, 9))
    rest, _ = epoch_rows(
        length, new_rows, tbins, pad, order=np.arange(len(unit)), shuffle=True, version=2
    )
    begun = min(len(progress.begun), new_rows)
    assert [int(r[0]) for r in rest[:begun]] == list(range(begun))  # begun pieces open rows
    done = progress.done
    for u in range(len(lengths)):  # every step not delivered, once
        left = sorted(
            (int(o), int(o + n_)) for v, o, n_ in zip(unit, offset, length, strict=True) if v == u
        )
        if done[u]:
            assert left == []
        elif u in progress.begun.tolist():
            assert left == [(int(progress.next[progress.begun == u][0]), int(lengths[u]))]
        else:
            assert left == [(0, int(lengths[u]))]


@given(
    lengths=st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=6).map(np.array),
    tbins=st.integers(1, 2**20),
)
def test_row_cost_is_the_chunks_of_every_length_up_to_the_largest_int64(lengths, tbins):
    expected = [-(-int(n) // tbins) for n in lengths]
    assert row_cost(lengths, tbins).tolist() == expected


class _Zeros:
    """``n`` steps of zeros, made when sliced (``n`` up to the largest int64)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, key):
        return np.zeros(len(range(self.n)[key]))


def test_a_stream_within_tbins_of_the_largest_int64_is_planned_not_dropped():
    from streamseq import StreamLoader, StreamTable

    lengths = [2**63 - 1, 1]
    loader = StreamLoader(StreamTable(_Zeros, lengths), 2, 4, num_workers=0)
    assert len(loader) == -(-(2**63 - 1) // 4)
    rows = balanced_rows(np.array(lengths), 2, tbins=4)
    assert sorted(np.concatenate(rows).tolist()) == [0, 1]
