import numpy as np
import pytest

from streamseq import StreamLoader
from streamseq.workers.blocks import Blocks
from streamseq.workers.config import WorkerConfig
from streamseq.workers.epochs import EpochBlocks
from streamseq.workers.pool import WorkerPool

pytestmark = pytest.mark.timeout(120)

STREAMS = [np.arange(n) for n in (30, 20, 25, 12, 40)]


def setup(count):
    loader = StreamLoader(STREAMS, 4, 3)
    reading, epochs = loader._reading, loader._epochs
    plan = epochs.plan(0)
    return reading, epochs, plan, reading.groups(plan, count)


def test_worker_processes_get_the_shared_slots_and_their_rows_as_arguments():
    reading, epochs, plan, groups = setup(2)
    pool = WorkerPool(WorkerConfig(1))
    started = pool.start(groups, reading.steps, reading.group_of, epochs)
    try:
        assert [type(pf.seq) for pf in started] == [Blocks, Blocks]  # the data, unwrapped
        assert all(pf.shared is pool.slots for pf in started)
        assert [pf.rows for pf in started] == [(0, 4), (2, 4)]  # (first, total)
        expected = [b.data.tolist() for b in Blocks(groups[0], pool.block_size)[0]]
        placed = started[0][0]  # this group's rows of the block, written in a shared slot
        assert [placed.item(m).data.tolist() for m in range(placed.count)] == expected
    finally:
        for pf in started:
            pf.close()


def test_worker_threads_share_no_slots():
    reading, epochs, plan, groups = setup(2)
    pool = WorkerPool(WorkerConfig(1, "thread"))
    started = pool.start(groups, reading.steps, reading.group_of, epochs)
    try:
        assert pool.slots is None and all(pf.shared is None for pf in started)
    finally:
        for pf in started:
            pf.close()


def test_persistent_workers_are_kept_and_read_any_epoch_through_group_of():
    reading, epochs, plan, groups = setup(2)
    pool = WorkerPool(WorkerConfig(1, "thread", persistent_workers=True))
    started = pool.start(groups, reading.steps, reading.group_of, epochs)
    try:
        assert pool.start(groups, reading.steps, reading.group_of, epochs) is started
        assert all(type(pf.seq) is EpochBlocks for pf in started)
        blocks = started[1].seq.group(0)
        assert len(blocks) == len(Blocks(reading.group_of(plan, 1, 2), pool.block_size))
    finally:
        pool.stop()
    assert pool.persistent is None and all(pf.pids == [] for pf in started)


@pytest.mark.parametrize("persistent", [False, True])
def test_a_pass_reads_each_group_one_micro_batch_at_a_time(persistent):
    reading, epochs, plan, groups = setup(2)
    pool = WorkerPool(WorkerConfig(1, "thread", persistent_workers=persistent))
    started = pool.start(groups, reading.steps, reading.group_of, epochs)
    try:
        unblocked = pool.unblocked(started, 0, plan.length)
        for group, expected in zip(unblocked, groups, strict=True):
            got = [group[i].data.tolist() for i in range(plan.length)]
            assert got == [expected[i].data.tolist() for i in range(plan.length)]
    finally:
        pool.stop()
        for pf in started:
            pf.close()
