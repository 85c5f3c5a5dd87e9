import threading
import time

import pytest

from streamseq.workers.failures import Cancelled, HookFailed, NoResult
from streamseq.workers.threads import ThreadWorkers

pytestmark = pytest.mark.timeout(60)


class Slow:
    def __init__(self, delay):
        self.delay = delay

    def __len__(self):
        return 100

    def __getitem__(self, i):
        time.sleep(self.delay)
        return (i, threading.current_thread().name)


def hook_failing_for_2(index):
    if index == 2:
        raise OSError(f"no device for worker {index}")


def test_threads_evaluate_jobs_and_stop_after_their_item():
    workers = ThreadWorkers(Slow(0.01), 3)
    for i in range(6):
        workers.submit(i)
    got = sorted(workers.wait()[:2] for _ in range(6))
    assert got == [(i, True) for i in range(6)]
    workers.stop()
    assert not any(w.is_alive() for w in workers.workers)


def test_a_failing_start_hook_names_its_thread():
    workers = ThreadWorkers(Slow(0.0), 3, start_hook=hook_failing_for_2)
    try:
        workers.submit(0)
        with pytest.raises(HookFailed, match="worker thread 2 failed to start") as info:
            for _ in range(2):
                workers.wait()
        assert isinstance(info.value.__cause__, OSError) and info.value.worker == 2
    finally:
        workers.stop()


def test_timeout_and_cancel():
    workers = ThreadWorkers(Slow(0.6), 1, timeout=0.2)
    workers.submit(0)
    with pytest.raises(NoResult):
        workers.wait()
    workers.timeout = None
    assert workers.wait()[:2] == (0, True)  # the thread lives on: it was slow only
    workers.submit(1)
    threading.Timer(0.1, workers.cancel).start()
    with pytest.raises(Cancelled):
        workers.wait()
    workers.stop()


def test_stop_drops_the_queued_jobs():
    seq = Slow(0.05)
    workers = ThreadWorkers(seq, 1)
    for i in range(50):
        workers.submit(i)
    time.sleep(0.08)
    start = time.monotonic()
    workers.stop()
    assert time.monotonic() - start < 0.5
    assert not workers.workers[0].is_alive()


def test_threads_of_a_collected_backend_stop():
    workers = ThreadWorkers(Slow(0.0), 2)
    threads = list(workers.workers)
    del workers
    deadline = time.monotonic() + 5
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(t.is_alive() for t in threads)


def alive_after(threads, seconds=10.0):
    """The threads of ``threads`` still alive once they all ended, or ``seconds`` passed."""
    deadline = time.monotonic() + seconds
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        time.sleep(0.02)
    return [t for t in threads if t.is_alive()]


def test_an_interrupt_while_the_threads_start_leaves_none_running(monkeypatch):
    """Ctrl-C while the second thread starts: the first one, started already, stops."""
    started = []
    start = threading.Thread.start

    def interrupted(self):
        if self.name == "streamseq-worker-1":
            raise KeyboardInterrupt
        start(self)
        started.append(self)

    monkeypatch.setattr(threading.Thread, "start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ThreadWorkers(Slow(0.01), 3)
    monkeypatch.undo()
    assert [t.name for t in started] == ["streamseq-worker-0"]
    assert alive_after(started) == []


class Interrupting:
    """Stands for ``name`` of ``target``: raises ``KeyboardInterrupt`` (Ctrl-C right there)."""

    def __init__(self, target, name):
        self.target, self.name = target, name

    def __getattr__(self, name):
        if name == self.name:
            raise KeyboardInterrupt
        return getattr(self.target, name)


@pytest.mark.parametrize("at", ["detach", "join"])
def test_an_interrupt_while_the_threads_stop_leaves_none_running(at):
    """Ctrl-C inside stop(): the threads stop all the same (none polls its queue forever)."""
    workers = ThreadWorkers(Slow(0.01), 2)
    threads = list(workers.workers)
    if at == "detach":
        finalizer = workers._finalizer
        workers._finalizer = Interrupting(finalizer, "detach")
    else:
        workers.workers[0] = Interrupting(threads[0], "join")
    with pytest.raises(KeyboardInterrupt):
        workers.stop()
    assert alive_after(threads) == []
    if at == "detach":
        finalizer.detach()
