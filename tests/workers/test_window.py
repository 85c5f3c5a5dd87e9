import pytest

from streamseq.workers.window import Window


class Echo:
    """Workers that deliver the jobs submitted so far in reverse order; item 4 fails."""

    def __init__(self):
        self.submitted, self.queue = [], []

    def submit(self, item):
        self.submitted.append(item)
        self.queue.append(item)

    def wait(self):
        item = self.queue.pop()
        return item, item != 4, item * 10 if item != 4 else KeyError(item)


def test_items_come_in_order_whatever_order_the_workers_deliver_them():
    workers = Echo()
    window = Window(workers, 2, 7, depth=3)
    assert workers.submitted == [2, 3, 4]
    assert window.take() == (True, 20)
    assert window.take() == (True, 30)
    ok, error = window.take()
    assert not ok and isinstance(error, KeyError)
    assert [window.take(), window.take()] == [(True, 50), (True, 60)]
    assert workers.submitted == [2, 3, 4, 5, 6]  # nothing at or past the end
    assert window.next == 7


@pytest.mark.parametrize("start, stop, depth", [(0, 2, 4), (5, 5, 3), (0, 10, 1)])
def test_at_most_depth_jobs_in_flight(start, stop, depth):
    workers = Echo()
    window = Window(workers, start, stop, depth)
    for i in range(start, stop):
        assert len(workers.submitted) - (i - start) <= depth
        window.take()
    assert workers.submitted == list(range(start, stop))
