import ctypes
import gc
import logging
import pickle

import numpy as np
import pytest

from streamseq import Batch, StreamLoader
from streamseq.workers import shm
from streamseq.workers.blocks import Failed
from streamseq.workers.placed import Placed, place, same_slot
from streamseq.workers.slots import Filling, Slots
from tests.helpers import as_numpy, assert_same, live_children, no_children

pytestmark = pytest.mark.timeout(120)


def write_rows(slots, start, first, rows, total, items=3, fail=False):
    """What a worker does: evaluate a block of ``items`` batches of its rows in the slot."""
    view, base = memoryview(slots.memory).cast("B"), ctypes.addressof(slots.memory)
    filling = Filling(view, base, start, slots.size, (first, total))
    block = []
    with filling:
        for m in range(items):
            data = shm.empty((rows, 2, 3), np.float32)
            reset, valid = shm.empty((rows,), bool), shm.empty((rows, 2), bool)
            stream, step = shm.empty((rows, 2), np.int64), shm.empty((rows, 2), np.int64)
            for r in range(rows):
                data[r] = 100 * m + first + r
                reset[r], valid[r], stream[r], step[r] = r % 2, [True, r % 2], first + r, m
            block.append(Batch(data, reset, valid, stream, step))
    if fail:
        block.append(Failed(KeyError("frame 9")))
    payload, regions = filling.pickle(block)
    return pickle.loads(payload, buffers=slots.lease(start, regions))


def test_workers_write_their_rows_of_the_same_batches():
    slots = Slots(2, 1 << 16)
    start = slots.take(key=7, party=0)
    assert slots.take(key=7, party=2) == start  # the second worker's job of block 7
    mine = write_rows(slots, start, 0, 2, 5)
    theirs = write_rows(slots, start, 2, 3, 5, fail=True)
    assert type(mine) is Placed and type(theirs) is Placed
    assert same_slot([mine, theirs]) and not same_slot([theirs, mine])
    assert repr(theirs.failed.error) == "KeyError('frame 9')" and theirs.count == 3
    assert mine.steps == [3, 3, 3] and theirs.steps == [4, 4, 4]
    for m in range(3):
        whole = mine.whole(m)
        assert whole.data.shape == (5, 2, 3)
        assert whole.data[:, 0, 0].tolist() == [100 * m + r for r in range(5)]
        assert whole.stream[:, 0].tolist() == list(range(5))
        assert theirs.item(m).stream[:, 0].tolist() == [2, 3, 4]
    assert start not in slots.free
    del mine, theirs, whole
    gc.collect()
    assert start in slots.free and slots.held() == 0


def test_a_block_not_in_the_slot_is_sent_as_it_is():
    slots = Slots(1, 1 << 16)
    start = slots.take()
    slot = shm.Slot(memoryview(slots.memory).cast("B"), start, start + slots.size, (0, 4))
    block = [Batch(np.zeros((4, 2)), *(np.zeros(4, bool),) * 4)]
    assert place(block, slot) is None
    assert place("not a block", slot) is None


def tokens(count=24, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 1000, n) for n in rng.integers(300, 600, count)]


def test_batches_are_views_of_the_slots_and_free_them_when_released():
    loader = StreamLoader(tokens(), 8, 16, num_workers=2)
    slots = None
    for i, batch in enumerate(loader):
        if i == 0:
            slots = loader._workers.slots
            assert slots is not None and slots.held() > 0
            assert not batch.data.numpy().flags.owndata  # no copy: a view of the slot
    del batch
    gc.collect()
    assert slots.held() == 0 and len(slots.free) == slots.count
    loader.close()


def test_a_batch_held_after_close_stays_valid():
    expected = as_numpy(StreamLoader(tokens(), 8, 16))
    before = {c.pid for c in live_children()}  # (a resource tracker of other tests)
    loader = StreamLoader(tokens(), 8, 16, num_workers=2)
    it = iter(loader)
    kept = [next(it) for _ in range(3)]
    loader.close()
    del it, loader
    gc.collect()
    assert no_children(before)
    assert_same(kept, expected[:3])  # the memory lives while a batch uses it
    kept[0].data[:] = -1  # and is the batch's own: nobody writes it any more
    assert (kept[0].data == -1).all()


def test_holding_more_batches_than_slots_copies_them_and_says_so(caplog):
    expected = as_numpy(StreamLoader(tokens(48), 8, 16))
    loader = StreamLoader(tokens(48), 8, 16, num_workers=2, max_buffered=4)
    with caplog.at_level(logging.INFO, logger="streamseq"):
        held = list(loader)  # every batch held: the slots run out
    assert_same(held, expected)
    said = [
        r for r in caplog.records if "shared-memory slots of the workers were held" in r.message
    ]
    assert 1 <= len(said) <= 2  # once per group of rows
    slots = loader._workers.slots
    del held
    gc.collect()
    assert slots.held() == 0
    assert_same(list(loader), expected)  # the slots serve again
    loader.close()


def test_a_block_of_runs_frees_its_slot_once_dropped_without_a_collection():
    slots = Slots(2, 1 << 16)
    start = slots.take(key=0, party=0)
    block = write_rows(slots, start, 0, 4, 4)
    block.runs = ((0, 1), (1, 3))  # the worker's rows are two runs of the batch's
    gc.disable()  # (a reference cycle would hold the slot until a collection)
    try:
        runs = [block.run(r) for r in range(2)]
        assert runs[0].whole(1).data[:, 0, 0].tolist() == [100, 101, 102, 103]
        parts = block.item(2).parts
        assert [p.stream[:, 0].tolist() for p in parts] == [[0], [1, 2, 3]]
        assert start not in slots.free
        del block, runs, parts
        assert start in slots.free and slots.held() == 0
    finally:
        gc.enable()
