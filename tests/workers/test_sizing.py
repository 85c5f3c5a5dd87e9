import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamseq import StreamLoader, prefetch
from streamseq.workers import shm
from streamseq.workers.sizing import (
    HEADROOM,
    SLACK,
    block_slot_size,
    micro_batch_bytes,
    slot_size,
)

pytestmark = pytest.mark.timeout(120)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**40), st.integers(0, 2**20))
def test_a_slot_holds_its_item_with_room_to_spare_and_grows_with_it(item, more):
    assert slot_size(item) >= item * HEADROOM + SLACK - 1
    assert slot_size(item + more) >= slot_size(item)


class Arrays:
    def __init__(self, sizes):
        self.sizes = sizes

    def __len__(self):
        return len(self.sizes)

    def __getitem__(self, i):
        return np.full(self.sizes[i], i, dtype=np.int64)


def test_prefetch_sizes_and_grows_its_slots_by_the_one_rule():
    with prefetch(Arrays([1000] * 3 + [100_000] * 3), 1) as seq:
        assert int(seq[0][0]) == 0
        assert seq.slot_size == slot_size(8000)
        assert [int(seq[i][0]) for i in range(1, 6)] == [1, 2, 3, 4, 5]
        assert seq.grown == 1 and seq.slot_size == slot_size(800_000)


def test_the_pool_sizes_its_slots_by_the_one_rule():
    streams = [np.arange(n, dtype=np.float32) for n in (30, 20, 25, 12, 40)]
    loader = StreamLoader(streams, 4, 3, num_workers=2)
    try:
        batches = [b.data.clone() for b in loader]
        assert len(batches) == len(loader)
        pool = loader._workers
        rows, tbins, size = 4, loader._reading.steps, pool.block_size
        batch = micro_batch_bytes(np.empty((0,), np.float32), rows, tbins) + 5 * shm.ALIGN
        assert pool.slots.size == slot_size(batch * size)
        group = type("Group", (), {"num_rows": 2, "spec_": np.empty((0,), np.float32)})
        assert block_slot_size([group, group], tbins, size) == pool.slots.size
    finally:
        loader.close()
