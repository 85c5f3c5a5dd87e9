import multiprocessing
import time

import psutil
import pytest
from helpers import run_python

from streamseq.workers import reaper

pytestmark = pytest.mark.timeout(60)


def zombies():
    out = []
    for c in psutil.Process().children():
        try:
            out += [c.pid] if c.status() == psutil.STATUS_ZOMBIE else []
        except psutil.NoSuchProcess:
            pass
    return out


def exits_after(seconds):
    time.sleep(seconds)


def started(seconds):
    p = multiprocessing.get_context("fork").Process(target=exits_after, args=(seconds,))
    p.start()
    return p


def test_processes_handed_over_are_joined_once_they_exit_without_another_call():
    processes = [started(0.3), started(0.5)]
    pids = [p.pid for p in processes]
    reaper.exiting(processes)
    assert set(reaper.pending()) == set(processes)  # still running
    deadline = time.monotonic() + 10
    while reaper.pending() and time.monotonic() < deadline:
        time.sleep(0.05)  # (nothing here joins them)
    assert not reaper.pending()
    assert not any(psutil.pid_exists(p) for p in pids) and not zombies()


def test_a_process_that_does_not_exit_is_killed_after_the_grace_period():
    p = started(60)
    pid, start = p.pid, time.monotonic()
    reaper.exiting([p], grace=0.3)
    assert reaper.wait(10)
    assert time.monotonic() - start < 5
    assert not psutil.pid_exists(pid)


def test_handing_over_twice_is_harmless():
    p = started(0.1)
    reaper.exiting([p])
    reaper.exiting([p])
    assert reaper.pending().count(p) <= 1
    assert reaper.wait(10) and not zombies()


EXIT_SCRIPT = """
import multiprocessing, signal, time
from streamseq.workers import reaper

def lives(seconds):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # (multiprocessing's exit handler sends it)
    time.sleep(seconds)

# stopped workers still exiting when the interpreter exits, each at its own time
fork = multiprocessing.get_context("fork")
ps = [fork.Process(target=lives, args=(0.2 + 0.05 * k,), daemon=True) for k in range(12)]
for p in ps:
    p.start()
reaper.exiting(ps)
"""


def test_processes_still_exiting_at_interpreter_exit_leave_no_error():
    """multiprocessing's exit handler joins the children it knows of, one after another;
    meanwhile the reaper thread must not close one of them under it."""
    done = run_python(EXIT_SCRIPT, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr[-3000:]
