import os
import subprocess
import threading

import pytest
from helpers import run_python

from streamseq._fork_count import FORKS
from streamseq.workers import threadlocals

SCRIPT = """
import sys, threading
import av, numpy as np
from streamseq import prefetch

class Squares:
    def __len__(self):
        return 10
    def __getitem__(self, i):
        return np.full(4, i * i)

def hook(index):
    pass

def convert():  # PyAV (19 on) keeps this thread's scaler, slice threads and all, in a thread-local
    frame = av.VideoFrame.from_ndarray(np.zeros((64, 64, 3), np.uint8), format="rgb24")
    frame.reformat(width=32, height=32, format="yuv420p")

def read():
    with prefetch(Squares(), 2, start_hook=hook) as seq:
        return [int(x[0]) for x in seq]

out = []
if sys.argv[1] == "main":  # the main thread converted; the workers are forked from another
    convert()
    t = threading.Thread(target=lambda: out.append(read()))
    t.start()
    t.join()
else:  # another thread converted and lives on; the workers are forked from the main thread
    done, go = threading.Event(), threading.Event()
    t = threading.Thread(target=lambda: (convert(), done.set(), go.wait()), daemon=True)
    t.start()
    done.wait()
    out.append(read())
    go.set()
print(out[0])
"""


@pytest.mark.parametrize("converted_in", ["main", "other"])
def test_workers_forked_while_another_thread_holds_a_pyav_scaler_start(converted_in):
    """The child of a fork frees what other threads kept in thread-locals: a PyAV scaler
    with slice threads would wait for threads that exist only in the parent."""
    try:
        done = run_python(SCRIPT, converted_in, timeout=180)
    except subprocess.TimeoutExpired:
        pytest.fail("the forked workers hang before their start hook")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == str([i * i for i in range(10)])


class Held:
    """A value whose freeing is seen: it writes to a pipe when it is freed."""

    def __init__(self, fd):
        self.fd = fd

    def __del__(self):
        os.write(self.fd, b"freed")


def test_a_child_never_frees_what_other_threads_keep_in_a_kept_thread_local():
    local = threading.local()
    threadlocals.keep(local)
    r, w = os.pipe()
    t, go = _holding(local, w)
    pid = os.fork()
    if pid == 0:  # (the other thread's state is cleared here, before this line)
        os._exit(0)
    try:
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        _nothing_freed(r)  # (the value was not freed in the child)
    finally:
        go.set()
        t.join(10)
        os.close(r)
        os.close(w)
    assert threadlocals._kept == []  # (the parent let go of them)


def test_values_are_the_attributes_of_each_thread():
    local = threading.local()
    local.x = 1
    got, go = [], threading.Event()

    def other():
        local.x = 2
        got.append(sorted(d["x"] for d in threadlocals.values(local)))
        go.wait()  # (alive meanwhile: its values are freed when it ends)

    t = threading.Thread(target=other)
    t.start()
    while t.is_alive() and not got:
        go.wait(0.01)
    go.set()
    t.join(10)
    assert got == [[1, 2]]
    assert [d["x"] for d in threadlocals.values(local)] == [1]


def _holding(local, fd):
    """A live thread that keeps a :class:`Held` in ``local``; set ``go`` to end it."""
    set_, go = threading.Event(), threading.Event()

    def hold():
        local.value = Held(fd)
        set_.set()
        go.wait()
        del local.value

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    assert set_.wait(10)
    return t, go


def _nothing_freed(r):
    os.set_blocking(r, False)
    with pytest.raises(BlockingIOError):
        os.read(r, 16)


def test_a_forked_child_that_forks_again_never_frees_what_its_parent_threads_kept():
    """A child keeps the values of its parent's other threads for its whole life: its own
    forks (a loader with workers in a forked process) let go only of what they added."""
    local = threading.local()
    threadlocals.keep(local)
    r, w = os.pipe()
    t, go = _holding(local, w)
    pid = os.fork()
    if pid == 0:  # the other thread is gone here: its value must stay referenced
        code = 1
        try:
            grandchild = os.fork()
            if grandchild == 0:
                os._exit(0)
            os.waitpid(grandchild, 0)
            code = 0
        finally:
            os._exit(code)
    try:
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        _nothing_freed(r)  # neither the child (after its own fork) nor the grandchild freed it
    finally:
        go.set()
        t.join(10)
        os.close(r)
        os.close(w)
    assert threadlocals._kept == []


def test_values_stay_kept_while_a_fork_of_another_thread_is_under_way():
    """Two threads fork at once: the fork of one ends (its hooks after the fork run) while
    the other's is under way (its hooks before the fork ran, it waits for a lock of
    another hook): what the other child must keep is still kept when it forks."""
    local = threading.local()
    threadlocals.keep(local)
    r, w = os.pipe()
    t, go = _holding(local, w)
    FORKS.enter()  # (the other thread's fork: its before hook)
    try:
        pid = os.fork()  # this thread's fork, begun and ended meanwhile
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        assert any(d.get("value") is not None for d in threadlocals._kept)
    finally:
        FORKS.leave()  # (the other thread's fork ends)
        go.set()
        t.join(10)
        os.close(r)
        os.close(w)
    assert threadlocals._kept == []
