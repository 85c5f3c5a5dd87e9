import queue
import threading
import time

import pytest

from streamseq.workers.failures import Cancelled, NoResult, WorkerGone
from streamseq.workers.poll import poll


def test_returns_what_comes_in_time():
    q = queue.Queue()
    threading.Timer(0.05, q.put, args=("x",)).start()
    assert poll(lambda s: q.get(timeout=s), every=0.01, timeout=5) == "x"


def test_times_out_with_the_timeout_in_the_message():
    q = queue.Queue()
    start = time.monotonic()
    with pytest.raises(NoResult, match=r"no result from the workers in 0.05 s"):
        poll(lambda s: q.get(timeout=s), every=0.01, timeout=0.05)
    assert time.monotonic() - start < 2


def test_cancel_comes_before_the_check_and_the_check_before_the_deadline():
    q = queue.Queue()
    calls = []

    def check():
        calls.append(1)
        raise WorkerGone(3)

    cancelled = threading.Event()
    cancelled.set()
    with pytest.raises(Cancelled, match="closed while a result was awaited"):
        poll(lambda s: q.get(timeout=s), 0.01, check, timeout=0.0, cancelled=cancelled)
    assert calls == []
    with pytest.raises(WorkerGone, match="worker 3"):
        poll(lambda s: q.get(timeout=s), 0.01, check, timeout=0.0)


def test_get_is_given_at_most_the_time_left():
    q = queue.Queue()
    given = []

    def get(s):
        given.append(s)
        return q.get(timeout=s)

    with pytest.raises(NoResult):
        poll(get, every=10.0, timeout=0.05)
    assert given and all(s <= 0.05 for s in given)
