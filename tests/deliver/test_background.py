import itertools
import threading
import time

import pytest

from streamseq.deliver.background import Background


def test_items_in_order_and_bounded_buffer():
    produced = []

    def gen():
        for i in range(100):
            produced.append(i)
            yield i

    with Background(gen, max_buffered=2) as it:
        assert next(it) == 0
        time.sleep(0.2)
        assert len(produced) <= 4  # one consumed, two queued, one blocked in put
        assert list(it) == list(range(1, 100))


def test_errors_are_raised_in_the_consumer():
    def gen():
        yield 1
        raise ValueError("bad frame")

    it = Background(gen)
    assert next(it) == 1
    with pytest.raises(ValueError, match="bad frame"):
        next(it)


def test_close_stops_a_blocked_producer():
    def gen():
        i = 0
        while True:
            yield i
            i += 1

    it = Background(gen, max_buffered=1)
    next(it)
    it.close()
    assert not it.thread.is_alive()
    assert threading.active_count() >= 1


def test_an_interrupt_as_the_thread_starts_leaves_it_not_running(monkeypatch):
    """Ctrl-C in ``start()`` once the thread runs: nobody will read it, so it stops."""
    started = []
    start = threading.Thread.start

    def interrupted(self):
        start(self)
        started.append(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        Background(lambda: itertools.count())
    monkeypatch.undo()
    [thread] = started
    thread.join(10)
    assert not thread.is_alive()
