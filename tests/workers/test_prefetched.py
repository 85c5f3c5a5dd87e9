import gc
import os
import random
import re
import signal
import subprocess
import threading
import time

import numpy as np
import psutil
import pytest
import torch
from helpers import default_sigint, run_python

from streamseq import WorkerError, prefetch
from streamseq.errors import WorkerTimeout


class Squares:
    def __init__(self, n, shape=(4,)):
        self.n, self.shape = n, shape

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return np.full(self.shape, i * i, dtype=np.int64)


class NoLen:
    def __getitem__(self, i):
        return i


@pytest.mark.parametrize(
    "workers, method",
    [(0, "process"), (1, "process"), (2, "process"), (1, "thread"), (3, "thread")],
)
def test_same_items_in_same_order(workers, method):
    with prefetch(Squares(20), workers, method=method) as seq:
        assert len(seq) == 20
        assert [int(seq[i][0]) for i in range(20)] == [i * i for i in range(20)]


def test_zero_workers_still_wraps_the_sequence():
    seq = prefetch(Squares(3), 0)
    assert type(seq).__name__ == "Prefetched" and int(seq[2][0]) == 4


@pytest.mark.parametrize("method", ["process", "thread"])
def test_out_of_order_access_restarts_and_stays_correct(method):
    with prefetch(Squares(30), 1, method=method) as seq:
        order = [0, 1, 2, 17, 18, 3, 29, -1, 5]
        assert [int(seq[i][0]) for i in order] == [(i % 30) ** 2 for i in order]


def test_no_len_is_a_type_error():
    with pytest.raises(TypeError, match="len"):
        prefetch(NoLen(), 1)


@pytest.mark.parametrize(
    "kwargs, message",
    [({"method": "mpi"}, "unknown prefetch method"), ({"max_buffered": 2}, "max_buffered")],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        prefetch(Squares(3), 1, **kwargs)
    with pytest.raises(ValueError, match="num_workers"):
        prefetch(Squares(3), -1)


def test_end_of_sequence_is_an_index_error_not_a_worker_error():
    with prefetch(Squares(3), 1) as seq:
        assert [int(x[0]) for x in seq] == [0, 1, 4]
        with pytest.raises(IndexError):
            seq[3]


def test_shared_memory_slots_are_sized_from_the_first_item():
    with prefetch(Squares(6, (1000,)), 1) as seq:
        first = seq[0]
        assert seq.slot_size >= first.nbytes
        assert [int(seq[i][0]) for i in range(1, 6)] == [1, 4, 9, 16, 25]
        assert seq.grown == 0


class Growing(Squares):
    def __getitem__(self, i):
        return np.full(10 if i < 3 else 100_000, i, dtype=np.int64)


def test_items_outgrowing_their_slot_make_the_slots_grow():
    with prefetch(Growing(8), 1, shm_size=6 * 1024) as seq:
        values = [int(seq[i][0]) for i in range(8)]
        assert values == list(range(8))
        assert seq.grown == 1 and seq.slot_size >= 800_000


class Exiting(Squares):
    def __getitem__(self, i):
        if i == 2:
            raise SystemExit("stop")
        return super().__getitem__(i)


def test_thread_worker_exit_is_an_error_not_a_hang():
    with prefetch(Exiting(5), 1, method="thread") as seq:
        assert int(seq[1][0]) == 1
        with pytest.raises(WorkerError, match="SystemExit"):
            seq[2]


class Failing(Squares):
    def __getitem__(self, i):
        if i == 3:
            raise KeyError("missing frame 3")
        return super().__getitem__(i)


@pytest.mark.parametrize("method", ["process", "thread"])
def test_worker_errors_reach_the_caller_as_themselves(method):
    with prefetch(Failing(6), 1, method=method) as seq:
        with pytest.raises(KeyError, match="missing frame 3"):
            [seq[i] for i in range(6)]


def test_start_hook_gets_the_worker_index_with_threads():
    seen = []
    lock = threading.Lock()

    def hook(index):
        with lock:
            seen.append(index)

    with prefetch(Squares(10), 3, method="thread", start_hook=hook) as seq:
        list(seq[i] for i in range(10))
    assert sorted(seen) == [0, 1, 2]


def test_close_stops_worker_processes():
    seq = prefetch(Squares(50), 2)
    seq[0]
    seq[1]
    pids = seq.pids
    assert len(pids) == 2
    seq.close()
    assert seq.pids == []
    import psutil

    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in pids)


def failing_hook(index):
    raise OSError(f"no device for worker {index}")


@pytest.mark.parametrize("method", ["process", "thread"])
def test_a_failing_start_hook_is_an_error_naming_it_not_a_hang(method):
    outcome = []

    def use():
        try:
            with prefetch(Squares(10), 2, method=method, start_hook=failing_hook) as seq:
                seq[0]
                seq[1]
        except Exception as e:
            outcome.append(e)

    caller = threading.Thread(target=use, daemon=True)
    caller.start()
    caller.join(20)
    assert not caller.is_alive(), "prefetch hangs when a worker's start hook fails"
    (error,) = outcome
    assert isinstance(error, WorkerError)
    message = (
        rf"^worker {method} (\d) failed to start: start_hook failing_hook raised "
        r"OSError: no device for worker (\d)$"
    )
    match = re.match(message, str(error))
    assert match and match[1] == match[2], str(error)
    assert isinstance(error.__cause__, OSError)
    assert str(error.__cause__) == f"no device for worker {match[1]}"


STUCK_SCRIPT = """
import os, time
import numpy as np
from streamseq import WorkerError, prefetch
from streamseq.workers import processes

processes.STARTUP = 2.0
os.register_at_fork(after_in_child=lambda: time.sleep(3600))  # (a lock nobody releases)

class Squares:
    def __len__(self):
        return 10
    def __getitem__(self, i):
        return np.full(4, i * i)

try:
    with prefetch(Squares(), 2, start_hook=print) as seq:  # (no timeout)
        seq[0]
        seq[1]
    print("no error")
except WorkerError as e:
    print(e)
"""


def test_a_worker_that_never_reaches_its_start_hook_is_an_error_without_a_timeout():
    try:
        done = run_python(STUCK_SCRIPT, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("prefetch waits forever for a worker stuck right after its fork")
    assert done.returncode == 0, done.stderr[-3000:]
    message = (
        r"^worker process (\d) \(pid \d+\) did not start within 2 s: it never reached its "
        r"start hook while item 1 was awaited"
    )
    assert re.match(message, done.stdout.strip()), done.stdout


class Logged(Squares):
    """Squares whose evaluations take a while, logged as (thread, item, event)."""

    def __init__(self, n, delay):
        super().__init__(n)
        self.delay, self.log, self.lock = delay, [], threading.Lock()

    def __getitem__(self, i):
        with self.lock:
            self.log.append((threading.current_thread(), i, "start"))
        time.sleep(self.delay)
        with self.lock:
            self.log.append((threading.current_thread(), i, "end"))
        return super().__getitem__(i)


def test_a_restart_stops_the_old_thread_after_its_current_item():
    seq = Logged(100, 0.05)
    with prefetch(seq, 1, method="thread", max_buffered=6) as ahead:
        assert int(ahead[0][0]) == 0
        mark = len(seq.log)
        assert int(ahead[50][0]) == 2500  # out of order: the threads restart there
        time.sleep(0.3)
        log = list(seq.log)
    old = log[0][0]
    assert not old.is_alive()
    after = [(i, what) for t, i, what in log[mark:] if t is old]
    assert after in ([], [(1, "end")]), after  # no queued item started after the restart
    last_old = max(k for k, (t, _, _) in enumerate(log) if t is old)
    first_new = min(k for k, (t, _, _) in enumerate(log) if t is not old)
    assert last_old < first_new  # never both at once
    assert log[first_new][1] == 50


def test_index_errors_show_the_index_given():
    with prefetch(Squares(3), 0) as seq:
        with pytest.raises(IndexError, match=r"^item -4 out of range for 3 items$"):
            seq[-4]


def test_repr_describes_the_sequence_without_its_items():
    seq = prefetch([np.arange(1000)] * 50, 1, method="thread")
    assert repr(seq) == "prefetch(list of 50 items, 1, method='thread')"


class FrozenInWorker(Squares):
    """Items report how many objects this process's collector leaves alone."""

    def __getitem__(self, i):
        super().__getitem__(i)  # (the bounds)
        return np.array([gc.get_freeze_count()], np.int64)


def test_worker_collections_leave_the_inherited_objects_alone():
    before = gc.get_freeze_count()  # not 0 everywhere: CPython 3.12 starts with some
    with prefetch(FrozenInWorker(2), 1, method="process") as seq:
        seq[0]  # (computed here, to size the shared-memory slots)
        assert int(seq[1][0]) > before + 1000  # everything the worker inherited: torch, ...
    assert gc.get_freeze_count() == before  # the calling process is left as it was


class TorchSums(Squares):
    """Items computed with a torch operation large enough to run on several threads."""

    def __getitem__(self, i):
        super().__getitem__(i)  # (the bounds)
        x = torch.arange(2_000_000) + i
        return np.array([int(x[0]), torch.get_num_threads()], np.int64)


@pytest.mark.timeout(60)
def test_workers_run_torch_operations_after_the_main_process_did():
    # item 0 is computed here, which starts torch's thread pool before the workers fork
    with prefetch(TorchSums(4), 1, method="process") as seq:
        items = [seq[i].tolist() for i in range(4)]
    assert [x for x, _ in items] == [0, 1, 2, 3]
    assert [n for _, n in items[1:]] == [1, 1, 1]  # one thread each: workers are the parallelism


class TwoArgError(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a} and {b}")


class FailsWithTwoArgs(Squares):
    def __getitem__(self, i):
        if i == 2:
            raise TwoArgError("this", "that")
        return super().__getitem__(i)


def test_an_error_that_cannot_travel_is_described_not_replaced():
    with prefetch(FailsWithTwoArgs(4), 1, method="process") as seq:
        seq[0], seq[1]
        with pytest.raises(WorkerError, match=r"TwoArgError: this and that") as info:
            seq[2]
    assert "raise TwoArgError" in str(info.value)  # the worker's traceback comes along


class Index(Squares):
    """Items are their index, after a short random sleep."""

    def __getitem__(self, i):
        super().__getitem__(i)  # (the bounds)
        time.sleep(random.random() * 0.002)
        return i


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["iterate", "index"])
def test_threads_sharing_a_prefetch_get_their_own_items(how):
    ahead = prefetch(Index(150), 2, method="thread")
    got, errors = {}, []

    def consume(name):
        try:
            if how == "iterate":
                got[name] = list(ahead)
            else:
                got[name] = [ahead[i] for i in range(len(ahead))]
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=consume, args=(k,), daemon=True) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not any(t.is_alive() for t in threads), "a thread waits forever"
    assert not errors, errors
    assert got == {0: list(range(150)), 1: list(range(150))}
    ahead.close()


@pytest.mark.parametrize("method", ["process", "thread"])
def test_closing_while_another_thread_waits_is_a_clear_error_at_once(method):
    ahead = prefetch(Slow(5, 3), 1, method=method, shm_size=1 << 16)
    outcome = []

    def wait_for_an_item():
        try:
            outcome.append(ahead[0])
        except Exception as e:
            outcome.append(e)

    waiting = threading.Thread(target=wait_for_an_item, daemon=True)
    waiting.start()
    time.sleep(0.5)
    start = time.monotonic()
    ahead.close()
    assert time.monotonic() - start < 3
    waiting.join(5)
    (error,) = outcome
    assert isinstance(error, WorkerError) and "closed by another thread" in str(error)
    assert ahead.pids == []


class Slow(Squares):
    def __init__(self, n, delay, at=0):
        super().__init__(n)
        self.delay, self.at = delay, at

    def __getitem__(self, i):
        if i >= self.at:
            time.sleep(self.delay)
        return super().__getitem__(i)


class Described(Slow):
    def describe_item(self, i):
        return f"batch {i}: stream 5 (video('a.mp4')) steps {8 * i}:{8 * i + 8}"


class DescribingFails(Slow):
    def describe_item(self, i):
        raise RuntimeError("no description")


def test_a_killed_worker_names_what_it_was_evaluating():
    with prefetch(Described(10, 30, at=3), 1, shm_size=1 << 16) as ahead:
        for i in range(3):
            ahead[i]
        (victim,) = ahead.pids
        threading.Timer(0.5, os.kill, (victim, signal.SIGKILL)).start()
        message = (
            r"died unexpectedly while evaluating item 3 \(batch 3: stream 5 "
            rf"\(video\('a.mp4'\)\) steps 24:32\) \(process {victim} killed by SIGKILL\)"
        )
        with pytest.raises(WorkerError, match=message):
            ahead[3]
        assert ahead.pids == []


@pytest.mark.parametrize("method", ["process", "thread"])
@pytest.mark.parametrize(
    "cls, what",
    [(Described, r"item 2 \(batch 2: .*steps 16:24\)"), (DescribingFails, r"item 2 \(timeout")],
)
def test_a_timeout_names_what_the_worker_was_evaluating(method, cls, what):
    with prefetch(cls(10, 3, at=2), 1, method=method, timeout=0.5, shm_size=1 << 16) as ahead:
        ahead[0], ahead[1]
        with pytest.raises(WorkerTimeout, match=rf"nothing for 0.5 s while evaluating {what}"):
            ahead[2]
        assert isinstance(WorkerTimeout(), WorkerError)


class SlowOne(Slow):
    def __getitem__(self, i):
        return super().__getitem__(i) if i == self.at else Squares.__getitem__(self, i)


def test_no_zombie_is_left_after_an_interrupt_and_close():
    # the worker says goodbye soon after the interrupt, and exits just after that
    ahead = prefetch(SlowOne(50, 0.3, at=1), 1, shm_size=1 << 16)
    ahead[0]
    (pid,) = ahead.pids
    with default_sigint(), pytest.raises(KeyboardInterrupt):
        threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT)).start()
        ahead[1]  # interrupted while waiting
        time.sleep(5)
    ahead.close(wait=False)  # as the loader does: the worker exits meanwhile
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # nothing in this process creates workers or joins them
    assert not psutil.pid_exists(pid), f"worker {pid} left: {psutil.Process(pid).status()}"


class CausedError(Squares):
    def __getitem__(self, i):
        try:
            raise OSError(f"disk error at {i}")
        except OSError as e:
            raise KeyError(f"frame {i}") from e


def test_errors_from_worker_processes_keep_their_cause_and_traceback():
    with prefetch(CausedError(4), 1, shm_size=1 << 16) as ahead:
        with pytest.raises(KeyError, match="frame 0") as info:
            ahead[0]
    error = info.value
    assert type(error.__cause__) is OSError and str(error.__cause__) == "disk error at 0"
    assert any("raise KeyError" in note for note in getattr(error, "__notes__", []))


class Hung:
    def __init__(self, release):
        self.release = release

    def __len__(self):
        return 3

    def __getitem__(self, i):
        if i == 1:
            self.release.wait(3600)
        return i


def test_a_timeout_bounds_items_evaluated_in_the_calling_process():
    release = threading.Event()
    try:
        ahead = prefetch(Hung(release), 0, timeout=0.5)
        assert ahead[0] == 0
        with pytest.raises(WorkerTimeout, match=r"reading item 1 in this process .*0.5 s"):
            ahead[1]
    finally:
        release.set()


@pytest.mark.parametrize("workers", [0, 1])
@pytest.mark.parametrize("index", [1.5, True, slice(1, 3), "1"])
def test_an_index_that_is_not_an_integer_is_a_type_error_naming_it(workers, index):
    with prefetch([np.full(2, i) for i in range(4)], workers, method="thread") as ahead:
        with pytest.raises(TypeError, match="an item index must be an integer"):
            ahead[index]
        assert int(ahead[2.0][0]) == 2  # (an integral float is an integer)
