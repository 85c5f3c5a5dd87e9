import threading
import time

import numpy as np
import pytest

from streamseq import StreamLoader, WorkerTimeout
from streamseq.workers.inline import Bounded, bounded, call
from tests.helpers import raised_in_thread

pytestmark = pytest.mark.timeout(60)


class Hangs:
    """Items from ``at`` on take an hour, unless ``release`` is set."""

    def __init__(self, at, release):
        self.at, self.release_ = at, release

    def __len__(self):
        return 10

    def __getitem__(self, i):
        if i >= self.at:
            self.release_.wait(3600)
        return i

    def describe_item(self, i):
        return f"batch {i}: stream 4 steps {2 * i}:{2 * i + 2}"


def test_a_read_that_takes_too_long_is_a_timeout_naming_it():
    release = threading.Event()
    try:
        items = Bounded(Hangs(3, release), 0.5)
        assert [items[i] for i in range(3)] == [0, 1, 2]
        with pytest.raises(WorkerTimeout, match=r"reading batch 3: stream 4 steps 6:8 .*0.5 s"):
            items[3]
    finally:
        release.set()


def test_errors_of_the_read_are_raised_as_themselves():
    with pytest.raises(IndexError):
        call([1, 2], 5, 5.0)


def test_no_timeout_reads_in_the_calling_thread():
    items = [1, 2]
    assert bounded(items, None) is items


HUNG = threading.Event()  # set after each test: the reads left running end


@pytest.fixture
def hung():
    HUNG.clear()
    yield
    HUNG.set()


class Stuck:
    """A stream whose reads from step ``at`` on hang (a hung file)."""

    def __init__(self, n, at):
        self.n, self.at = n, at

    def __len__(self):
        return self.n

    def __getitem__(self, key):
        if key.stop > self.at:
            HUNG.wait(3600)
        return np.arange(self.n)[key]


def slow_transform(steps, info):
    if info.start >= 8:
        HUNG.wait(3600)
    return steps


@pytest.mark.parametrize("how", ["iterate", "index", "transform"])
def test_a_timeout_bounds_reads_without_workers(hung, how):
    streams = [np.arange(40), Stuck(40, 12)]
    transform = None
    if how == "transform":
        streams, transform = [np.arange(40), np.arange(40)], slow_transform
    loader = StreamLoader(streams, 2, 4, timeout=1.5, transform=transform)
    stuck = 3 if how != "transform" else 2
    message = rf"reading batch {stuck}: stream .* steps {4 * stuck}:{4 * stuck + 4}.*1.5 s"
    start = time.monotonic()
    delivered = []
    with pytest.raises(WorkerTimeout, match=message):
        if how == "index":
            loader[stuck]
        else:
            for batch in loader:
                delivered.append(batch)
    assert len(delivered) == (0 if how == "index" else stuck)
    assert time.monotonic() - start < 50  # (not the hour of the read)


def test_loader_index_asked_by_a_bounded_read_of_a_batch_is_the_error_of_asking_not_a_timeout():
    # The batch is written in the helper thread of a bounded read; loader[i] from its
    # transform would wait, in a helper thread of its own, for that writer: a timeout
    # after all of ``timeout`` that says the read took too long, not what went wrong.
    asking = []

    def ask(steps, info):
        if asking and info.start > 0:  # (a read of batch 1, not the first step's probe)
            asking.pop()[2]
        return steps

    streams = [np.arange(12), np.arange(10) + 100]
    loader = StreamLoader(streams, 2, 3, transform=ask, pin_memory=False, timeout=600)

    def read():
        asking.append(loader)
        loader[1]

    error = raised_in_thread(read, "loader[i] waits for the writer its own read holds", 30)
    assert "asked for while one is written" in str(error)
    assert loader[2].data.tolist() == [[6, 7, 8], [106, 107, 108]]  # (usable after)
