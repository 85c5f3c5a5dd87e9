import ctypes
import resource
import sys

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streamseq.workers import shm
from streamseq.workers.processes import ProcessWorkers
from streamseq.workers.slots import Filling, Slots

pytestmark = pytest.mark.timeout(120)

PAGE = shm.PAGE


@settings(max_examples=40, deadline=None)
@given(
    shift=st.integers(0, PAGE - 1),
    regions=st.lists(st.tuples(st.integers(0, 6 * PAGE), st.integers(0, 2 * PAGE)), max_size=5),
)
@example(shift=0, regions=[(5 * PAGE + 1, 2 * PAGE)])  # (past the end: a read out of bounds)
@example(shift=1, regions=[(6 * PAGE, 2 * PAGE)])
def test_pages_maps_each_page_of_a_region_once_and_changes_nothing(shift, regions):
    memory = np.arange(7 * PAGE, dtype=np.uint8)
    before = memory.copy()
    pages = shm.Pages(memoryview(memory), shift)
    seen = set()
    for begin, length in regions:
        asked = begin + length
        end = min(asked, len(memory))  # (a region past the end: mapped up to it)
        touching = set(range((begin + shift) // PAGE, (end - 1 + shift) // PAGE + 1))
        touching = touching if end > begin else set()
        assert pages.map(begin, asked) == len(touching - seen)
        seen |= touching
        assert pages.map(begin, asked) == 0  # once only
    assert set(np.flatnonzero(pages.mapped)) == seen
    assert (memory == before).all()


def test_a_worker_maps_only_the_pages_of_its_own_rows():
    slots = Slots(1, 64 * PAGE)
    start = slots.take()
    view, base = memoryview(slots.memory).cast("B"), ctypes.addressof(slots.memory)
    pages = shm.Pages(view, base)
    with Filling(view, base, start, slots.size, (2, 4), pages):  # rows 2 and 3 of 4
        data = shm.empty((2, 8 * PAGE), np.uint8)
    row = data.ctypes.data - base, data.ctypes.data - base + data.nbytes
    first, stop = (row[0] + pages.shift) // PAGE, (row[1] - 1 + pages.shift) // PAGE + 1
    assert set(np.flatnonzero(pages.mapped)) == set(range(first, stop))
    assert data.ctypes.data == base + start + 2 * 8 * PAGE  # rows 0 and 1 are another's


class Written:
    """Items that fill an array of the slot, and the page faults of making and writing it."""

    def __init__(self, size):
        self.size = size

    def __len__(self):
        return 2

    def __getitem__(self, item):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        out = shm.empty((self.size,), np.uint8)  # (its pages mapped here, if at all)
        out[:] = item + 1
        return out, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@pytest.mark.skipif(sys.platform != "linux", reason="page faults of Linux's shared memory")
def test_workers_started_again_write_the_slots_without_a_fault_a_page():
    size = 1024 * PAGE
    slots = Slots(1, size + 65536)
    faults = []
    for run in range(2):  # the second set of workers writes the slot written already
        workers = ProcessWorkers(Written(size), 1, 2, slots.size, shared=slots)
        try:
            workers.submit(run)
            item, ok, (value, spent) = workers.wait()
            assert ok and (value == run + 1).all()
            faults.append(spent)
            del value
        finally:
            workers.stop()
    # (new memory: a fault a page; mapped again: a few pages a fault, the kernel's fault-around)
    assert faults[1] < size // PAGE // 2, f"{faults} page faults writing {size // PAGE} pages"


def test_pages_forgets_regions_past_its_memory_and_still_maps_each_page_once(monkeypatch):
    monkeypatch.setattr(shm, "SEEN", 2)
    pages = shm.Pages(memoryview(bytearray(8 * PAGE)), 0)
    assert [pages.map(k * PAGE, (k + 1) * PAGE) for k in range(5)] == [1] * 5
    assert len(pages.seen) <= 2
    assert [pages.map(k * PAGE, (k + 1) * PAGE) for k in range(6)] == [0] * 5 + [1]
