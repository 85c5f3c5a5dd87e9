import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamseq import split_by_worker


@given(st.lists(st.integers(), max_size=40), st.integers(1, 12))
def test_groups_are_contiguous_balanced_and_complete(rows, workers):
    groups = split_by_worker(rows, workers)
    assert len(groups) == workers
    assert [x for g in groups for x in g] == rows
    sizes = [len(g) for g in groups]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("workers", [0, -1])
def test_bad_worker_count(workers):
    with pytest.raises(ValueError, match="num_workers"):
        split_by_worker([1, 2], workers)
