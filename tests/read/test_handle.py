"""A value opened once per process: made again after a fork, dropped when pickled."""

import os
import pickle
import threading

from streamseq.read.handle import ProcessLocal, SharedHandles, current_pid


class Opened:
    """Something opened, that records where it was made and whether it was closed."""

    def __init__(self):
        self.pid, self.closed = os.getpid(), False

    def close(self):
        self.closed = True


def close(value):
    value.close()


def test_the_value_is_made_once_per_process_and_closed_only_where_it_was_made():
    handle = ProcessLocal(Opened, close)
    parent = handle.get()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a value of its own, the parent's left alone
        try:
            mine = handle.get()
            ok = mine is not parent and mine.pid == os.getpid() == current_pid()
            handle.close()
            ok = ok and mine.closed and not parent.closed
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    assert handle.get() is parent and not parent.closed
    handle.close()
    assert parent.closed and handle.peek() is None


def test_pickled_and_copied_handles_are_empty():
    import copy

    handle = ProcessLocal(Opened, close)
    value = handle.get()
    for other in (pickle.loads(pickle.dumps(handle)), copy.copy(handle), copy.deepcopy(handle)):
        assert other.peek() is None
        assert other.get() is not value
    assert handle.get() is value


def test_set_closes_the_value_it_replaces():
    handle = ProcessLocal(close=close)
    first, second = Opened(), Opened()
    handle.set(first)
    handle.set(second)
    assert first.closed and not second.closed and handle.get() is second


def test_shared_handles_give_one_handle_per_key():
    handles = SharedHandles()
    a = handles.of(("a.bin", 0))
    assert a is handles.of(("a.bin", 0)) and a is not handles.of(("a.bin", 8))
    assert a.peek() is None
    value = a.get(Opened)
    assert handles.of(("a.bin", 0)).get(Opened) is value  # opened once for every reader


def test_a_shared_handle_is_made_again_after_a_fork():
    handles = SharedHandles()
    parent = handles.of("key").get(Opened)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            mine = handles.of("key").get(Opened)
            ok = mine is not parent and mine.pid == os.getpid()
            ok = ok and handles.of("key").get(Opened) is mine
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    assert handles.of("key").get(Opened) is parent


def test_threads_that_use_a_value_first_at_once_get_one_value_made_once():
    made, inside, go = [], threading.Semaphore(0), threading.Event()

    def make():
        made.append(object())
        inside.release()
        go.wait(5)  # while a second thread asks for the value
        return made[-1]

    handle = ProcessLocal(make)
    got = []
    first = threading.Thread(target=lambda: got.append(handle.get()))
    second = threading.Thread(target=lambda: got.append(handle.get()))
    first.start()
    assert inside.acquire(timeout=5)  # the first thread is making the value
    second.start()
    inside.acquire(timeout=0.5)  # the second thread making one too, if it may
    go.set()
    first.join(5)
    second.join(5)
    assert len(made) == 1
    assert len(got) == 2 and got[0] is got[1] is made[0]
    assert handle.get() is made[0]


def test_a_value_made_after_a_fork_is_made_once_in_the_child_too():
    handle = ProcessLocal(list)
    parent = handle.get()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            got = []
            threads = [threading.Thread(target=lambda: got.append(handle.get())) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(5)
            ok = len(got) == 8 and all(g is got[0] for g in got) and got[0] is not parent
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
