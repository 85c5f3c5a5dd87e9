"""balance: rows in contiguous groups of even cost; the loader's workers get them."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamseq import StreamLoader
from streamseq.plan.balance import balanced_groups, balanced_sizes, even_split, row_costs


def _group_costs(costs, sizes):
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    return [int(costs[a:b].sum()) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


@settings(max_examples=200)
@given(st.lists(st.integers(0, 1000), max_size=40), st.integers(1, 9))
def test_every_row_in_one_group_and_costs_even(costs, groups):
    costs = np.array(costs, np.int64)
    rows = list(range(len(costs)))
    split = balanced_groups(rows, costs, groups)
    assert len(split) == groups
    assert [r for g in split for r in g] == rows  # each row once, in order, contiguous
    sizes = balanced_sizes(costs, groups)
    assert [len(g) for g in split] == sizes.tolist()
    if not len(costs):
        return
    if len(costs) >= groups:
        assert sizes.min() >= 1  # every worker reads a row
    got = _group_costs(costs, sizes)
    even = _group_costs(costs, even_split(len(costs), groups))
    largest = int(costs.max())
    assert max(got) <= max(even)  # never worse than as many rows each
    if groups == 2:
        assert abs(got[0] - got[1]) <= largest  # within one row's cost


def test_a_row_costlier_than_a_share_leaves_no_group_empty():
    sizes = balanced_sizes(np.array([1, 100, 1, 1, 1]), 4)
    assert sizes.tolist() == [1, 1, 1, 2]


def test_bad_arguments():
    with pytest.raises(ValueError, match="groups"):
        balanced_sizes(np.array([1, 2]), 0)
    with pytest.raises(ValueError, match="negative"):
        balanced_sizes(np.array([1, -2]), 2)
    with pytest.raises(ValueError, match="3 costs for 2 rows"):
        balanced_groups([1, 2], np.array([1, 2, 3]), 2)


def test_row_costs_are_the_steps_read_in_the_epoch():
    assert row_costs([np.arange(3), np.arange(40)], 16).tolist() == [3, 16]


def _bytes(loader):
    return [
        [np.ascontiguousarray(np.asarray(x)).tobytes() for x in (b.data, *b[1:5])] for b in loader
    ]


@pytest.mark.parametrize("persistent", [False, True])
def test_workers_get_rows_of_even_cost_and_batches_stay_the_same(persistent):
    streams = [np.arange(n * 2).reshape(n, 2) + 1000 * i for i, n in enumerate([60] * 3 + [1] * 3)]
    loader = StreamLoader(streams, 6, 4, num_workers=2, persistent_workers=persistent)
    plan = loader.plan()
    reading = loader._reading
    rows = reading.rows(plan)
    costs = [len(r) for r in rows]
    sizes = [g.num_rows for g in reading.groups(plan, 2)]
    assert sum(sizes) == 6
    bounds = np.cumsum([0, *sizes])
    got = [sum(costs[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    assert max(got) - min(got) <= max(costs)
    assert max(got) < max(sum(costs[:3]), sum(costs[3:]))  # better than 3 rows each
    # persistent workers keep groups of as many rows each (their sizes hold every epoch)
    assert [g.num_rows for g in reading.groups(plan, 2, balanced=False)] == [3, 3]
    shuffled = StreamLoader(
        streams, 6, 4, num_workers=2, persistent_workers=persistent, shuffle=True
    )
    try:
        assert _bytes(loader) == _bytes(StreamLoader(streams, 6, 4))
        first, second = _bytes(shuffled), _bytes(shuffled)  # epochs 0 and 1
        reference = StreamLoader(streams, 6, 4, shuffle=True)
        assert first == _bytes(reference)  # epoch 0
        assert second == _bytes(reference)  # epoch 1
    finally:
        loader.close()
        shuffled.close()
