import os
import signal
import threading
import time

import numpy as np
import psutil
import pytest
from helpers import run_script

from streamseq.workers import reaper
from streamseq.workers.failures import Cancelled, HookFailed, NoResult, WorkerGone
from streamseq.workers.processes import ProcessWorkers

pytestmark = pytest.mark.timeout(60)


class Squares:
    def __init__(self, n, delay=0.0):
        self.n, self.delay = n, delay

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        time.sleep(self.delay)
        return np.full(4, i * i, dtype=np.int64)


def hook_failing(index):
    raise OSError(f"no device for worker {index}")


def results(workers, count):
    return sorted(
        (item, ok, value.tolist()) for item, ok, value in (workers.wait() for _ in range(count))
    )


def test_jobs_go_round_robin_and_come_back_in_slots():
    workers = ProcessWorkers(Squares(10), 2, slots=4, slot_size=4096)
    try:
        for i in range(3):
            workers.submit(i)
        assert results(workers, 3) == [(i, True, [i * i] * 4) for i in range(3)]
        assert len(workers.pids()) == 2 and workers.pickled == 0
    finally:
        workers.stop()
    assert workers.pids() == []
    assert all(code == 0 for _, code in workers.ended)


def test_a_job_without_a_free_slot_is_pickled_and_counted():
    workers = ProcessWorkers(Squares(10), 1, slots=1, slot_size=4096)
    try:
        workers.submit(0)
        _, _, held = workers.wait()  # holds the only slot
        workers.submit(1)
        item, ok, value = workers.wait()
        assert (item, ok, value.tolist()) == (1, True, [1] * 4) and workers.pickled == 1
        del held, value
        workers.submit(2)
        workers.wait()
        assert workers.pickled == 1  # the slot was free again
    finally:
        workers.stop()


def test_an_error_comes_back_as_a_result():
    workers = ProcessWorkers(Squares(2), 1, slots=4, slot_size=1024)
    try:
        workers.submit(7)
        item, ok, error = workers.wait()
        assert (item, ok) == (7, False) and isinstance(error, IndexError)
    finally:
        workers.stop()


def test_a_failing_start_hook_is_reported_with_the_worker_index():
    workers = ProcessWorkers(Squares(2), 1, slots=4, slot_size=1024, start_hook=hook_failing)
    try:
        with pytest.raises(HookFailed, match="worker process 0 failed to start") as info:
            workers.wait()
        assert isinstance(info.value.__cause__, OSError)
        assert info.value.worker == 0
    finally:
        workers.stop()


def test_a_killed_worker_is_gone_with_the_item_it_was_evaluating():
    workers = ProcessWorkers(Squares(10, delay=0.2), 2, slots=6, slot_size=1024)
    try:
        for i in range(4):
            workers.submit(i)
        victim = workers.workers[1].pid
        time.sleep(0.1)
        os.kill(victim, signal.SIGKILL)
        got = []
        with pytest.raises(WorkerGone) as info:
            for _ in range(4):
                got.append(workers.wait()[0])
        assert info.value.worker == 1 and info.value.item == 1
        assert 1 not in got
    finally:
        workers.stop()
    assert (victim, -signal.SIGKILL) in workers.ended


def test_nothing_within_the_timeout_is_no_result():
    workers = ProcessWorkers(Squares(3, delay=30), 1, slots=4, slot_size=1024, timeout=0.3)
    start = time.monotonic()
    try:
        workers.submit(0)
        with pytest.raises(NoResult):
            workers.wait()
        assert 0.3 <= time.monotonic() - start < 5
    finally:
        workers.stop()  # (stuck: killed)
    assert workers.ended[0][1] == -signal.SIGKILL


def test_cancel_wakes_a_thread_waiting_for_a_result():
    workers = ProcessWorkers(Squares(3, delay=30), 1, slots=4, slot_size=1024)
    try:
        workers.submit(0)
        threading.Timer(0.2, workers.cancel).start()
        start = time.monotonic()
        with pytest.raises(Cancelled):
            workers.wait()
        assert time.monotonic() - start < 2
    finally:
        workers.stop()


def test_stop_without_wait_leaves_the_exit_to_the_reaper_and_no_zombie():
    workers = ProcessWorkers(Squares(10, delay=0.3), 1, slots=4, slot_size=1024)
    workers.submit(0)
    time.sleep(0.1)  # evaluating item 0
    pid = workers.workers[0].pid
    workers.stop(wait=False)
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # (nothing here joins it: the reaper does)
    assert not psutil.pid_exists(pid), "a stopped worker stays a zombie"
    assert reaper.wait(1)


def test_workers_of_a_collected_backend_stop():
    workers = ProcessWorkers(Squares(10), 2, slots=4, slot_size=1024)
    pids = workers.pids()
    del workers
    assert reaper.wait(10)
    assert not any(psutil.pid_exists(p) for p in pids)


def in_child(action):
    """Run ``action()`` in a child forked from this process; its exit code (0: done)."""
    pid = os.fork()
    if pid == 0:  # the child never returns to pytest
        code = 1
        try:
            action()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_forked_child_never_stops_its_parents_workers():
    workers = ProcessWorkers(Squares(10), 2, slots=4, slot_size=4096)
    try:
        pids = workers.pids()
        assert in_child(lambda: (workers.stop(), reaper.wait(5))) == 0
        assert in_child(lambda: workers._finalizer()) == 0  # (detached there: a no-op)
        assert workers.pids() == pids
        for i in range(4):
            workers.submit(i)
        assert results(workers, 4) == [(i, True, [i * i] * 4) for i in range(4)]
    finally:
        workers.stop()
    assert all(code == 0 for _, code in workers.ended)


def test_a_wait_when_the_workers_were_stopped_under_it_is_cancelled():
    """At interpreter exit the finalizer stops the workers of a loader that a daemon thread
    still reads: the thread's wait may read a worker's goodbye, which is no result."""
    from streamseq.workers.processes import _send_stop

    workers = ProcessWorkers([np.arange(3)] * 4, 1, slots=4, slot_size=256)
    try:
        _send_stop(workers.job_pipes)  # (what the finalizer sends first)
        with pytest.raises(Cancelled, match="stopped"):
            workers.wait()
    finally:
        workers.stop()


def test_stop_after_the_finalizer_ended_the_workers_does_nothing():
    """The finalizer (at interpreter exit) ended them; the reading thread then stops them
    on its error path: no ``ValueError: process object is closed``."""
    workers = ProcessWorkers([np.arange(3)] * 4, 1, slots=4, slot_size=256)
    workers._finalizer()  # (at exit: atexit runs it)
    assert reaper.wait(10)
    workers.stop()
    workers.stop(wait=False)


def test_a_wait_when_the_finalizer_killed_a_worker_stuck_in_a_read_is_cancelled():
    """At interpreter exit the finalizer kills a worker that is stuck in a read (no
    goodbye): the daemon thread waiting for it was stopped, no worker died by itself."""
    workers = ProcessWorkers(Squares(4, delay=60), 1, slots=4, slot_size=256)
    workers.submit(0)
    caught = []

    def waiting():
        try:
            workers.wait()
        except BaseException as e:  # noqa: BLE001 (what the waiting thread sees)
            caught.append(e)

    thread = threading.Thread(target=waiting, daemon=True)
    thread.start()
    time.sleep(0.3)  # (the thread waits in the read's result)
    workers._finalizer()  # (at exit: atexit runs it; the worker is killed after a second)
    thread.join(10)
    assert not thread.is_alive()
    assert len(caught) == 1 and isinstance(caught[0], Cancelled), caught
    assert reaper.wait(10)


def test_an_interrupt_right_after_the_workers_started_leaves_none_running(monkeypatch):
    """Ctrl-C once every worker started, before they are set to stop with the object."""
    import streamseq.workers.processes as processes

    def interrupted(pipes):
        raise KeyboardInterrupt

    before = {c.pid for c in psutil.Process().children()}
    monkeypatch.setattr(processes, "Poller", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ProcessWorkers(Squares(4), 2, slots=4, slot_size=256)
    monkeypatch.undo()
    assert reaper.wait(10)
    left = [c for c in psutil.Process().children() if c.pid not in before]
    assert [c for c in left if c.is_running() and c.status() != psutil.STATUS_ZOMBIE] == []


STUCK_AT_IMPORT = """
import multiprocessing, time
import numpy as np
from streamseq.workers import processes

if multiprocessing.current_process().name != "MainProcess":  # (a spawned worker)
    time.sleep(100)  # stuck as it imports the main module, before it reads its sequence

if __name__ == "__main__":
    multiprocessing.set_start_method("spawn")
    processes.STARTUP = 2.0
    try:
        workers = processes.ProcessWorkers([np.zeros(100_000)], 2, slots=4, slot_size=0)
        workers.submit(0)
        workers.wait()
    except processes.NotStarted as e:
        print("error:", e)
"""


def test_a_spawned_worker_stuck_before_it_reads_a_large_sequence_is_not_started(tmp_path):
    """A sequence larger than a pipe holds is sent within the startup bound, never a hang."""
    hang = "the main process hung sending a worker its sequence"
    done = run_script(tmp_path, STUCK_AT_IMPORT, timeout=40, hang=hang)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "did not start within 2 s" in done.stdout, done.stdout


UNPICKLES_NOT = """
import multiprocessing
import numpy as np
from streamseq.errors import WorkerError
from streamseq.workers import processes

class Refuses:
    def __init__(self):
        self.n = 1
    def __len__(self):
        return 1
    def __getitem__(self, item):
        return np.zeros(2)
    def __setstate__(self, state):
        if multiprocessing.current_process().name != "MainProcess":
            raise ValueError("no such device in a worker")

if __name__ == "__main__":
    multiprocessing.set_start_method("spawn")
    workers = processes.ProcessWorkers(Refuses(), 1, slots=4, slot_size=0)
    workers.submit(0)
    try:
        workers.wait()
    except WorkerError as e:
        print("error:", type(e).__name__, e)
    workers.stop()
"""


def test_a_spawned_worker_whose_sequence_fails_to_unpickle_says_why(tmp_path):
    done = run_script(tmp_path, UNPICKLES_NOT, timeout=40)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "failed to start" in done.stdout, done.stdout
    assert "ValueError: no such device in a worker" in done.stdout, done.stdout


INTERRUPTED_SENDING = STUCK_AT_IMPORT.replace(
    "processes.STARTUP = 2.0", "processes.STARTUP = 100.0"
)
INTERRUPTED_SENDING = INTERRUPTED_SENDING.replace(
    "    try:\n",
    "    import signal\n    signal.setitimer(signal.ITIMER_REAL, 2.0)\n"
    "    signal.signal(signal.SIGALRM, signal.default_int_handler)\n    try:\n",
    1,
).replace(
    "except processes.NotStarted as e:", "except KeyboardInterrupt as e:\n        print('stopped')"
)


def test_an_interrupt_while_a_large_sequence_is_sent_stops_the_workers_without_a_hang(tmp_path):
    hang = "the main process hung stopping the workers"
    done = run_script(tmp_path, INTERRUPTED_SENDING, timeout=40, hang=hang)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "stopped" in done.stdout, done.stdout
