"""streamseq._fork_count: counts shared by threads, restarted in a forked child; the forks."""

import gc
import os
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamseq._fork_count import FORKS, Count


class Log:
    """A watcher that writes down what it is told."""

    def __init__(self):
        self.said = []

    def begin(self, first):
        self.said.append(("begin", first))

    def end(self):
        self.said.append("end")

    def child(self):
        self.said.append("child")


def _holding(count):
    """A thread with ``count`` held until ``go`` is set."""
    inside, go = threading.Event(), threading.Event()

    def hold():
        with count.held():
            inside.set()
            go.wait(30)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert inside.wait(30)
    return thread, go


def test_threads_overlapping_end_once_when_the_last_leaves():
    count, log = Count(), Log()
    count.watch(log)
    thread, go = _holding(count)
    count.enter()  # (begun while the other thread's is under way)
    go.set()
    thread.join(30)
    assert count.value == 1 and log.said == [("begin", True), ("begin", False)]
    count.leave()
    assert count.value == 0 and log.said[-1] == "end"
    count.leave()  # (never below nothing: no end again)
    assert count.value == 0 and log.said.count("end") == 1


@settings(max_examples=30, deadline=None)
@given(st.lists(st.booleans(), max_size=20))
def test_the_count_is_what_entered_and_did_not_leave(steps):
    """Any order of enters (True) and leaves (False): ``end`` once per return to nothing."""
    count, log = Count(), Log()
    count.watch(log)
    value, ends = 0, 0
    for enter in steps:
        (count.enter if enter else count.leave)()
        ends += not enter and value == 1
        value = value + 1 if enter else max(0, value - 1)
        assert count.value == value
    assert log.said.count("end") == ends
    assert [first for s in log.said if s != "end" for _, first in [s]] == [
        v == 0 for v, e in zip(_values(steps), steps, strict=True) if e
    ]


def _values(steps):
    """The count before each step."""
    out, value = [], 0
    for enter in steps:
        out.append(value)
        value = value + 1 if enter else max(0, value - 1)
    return out


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
@pytest.mark.parametrize("own", [0, 1])
def test_a_forked_child_counts_only_what_its_forking_thread_holds(own):
    count, log = Count(), Log()
    count.watch(log)
    thread, go = _holding(count)
    try:
        for _ in range(own):
            count.enter()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its count, and what its watchers were told
            os.write(write, bytes([count.value, "child" in log.said, "end" in log.said]))
            os._exit(0)
        os.close(write)
        got = os.read(read, 3)
        os.close(read)
        os.waitpid(pid, 0)
        for _ in range(own):
            count.leave()
    finally:
        go.set()
        thread.join(30)
    # the other thread's is gone (told), its own stays (and ends as in the parent)
    assert list(got) == [own, True, not own]
    assert count.value == 0 and "child" not in log.said


def test_one_count_of_forks_holds_the_collector_and_the_thread_locals():
    """A fork under way (its hooks before it ran, those after it not yet) turns the
    collector off and keeps what threads keep in thread-locals, until the last one ends."""
    from streamseq.io import _av_compat  # noqa: F401 (its collector off while forks are under way)
    from streamseq.workers import threadlocals

    local = threading.local()
    local.value = object()
    threadlocals.keep(local)
    assert gc.isenabled()
    try:
        FORKS.enter()  # (a thread's fork begins)
        FORKS.enter()  # (another thread's, before the first is done)
        FORKS.leave()
        assert FORKS.value == 1 and not gc.isenabled()
        assert any(d.get("value") is local.value for d in threadlocals._kept)
    finally:
        FORKS.leave()
    assert FORKS.value == 0 and gc.isenabled() and threadlocals._kept == []


def test_a_tie_made_while_something_is_under_way_leaves_only_what_it_entered():
    """A fork begun before the collector's count was tied to the forks (an import in another
    thread meanwhile) must not end another thread's pause when it ends."""
    forks, pauses = Count(), Count()
    thread, go = _holding(pauses)
    try:
        forks.enter()  # (a fork's hooks before it)
        forks.tie(pauses)
        forks.leave()  # (its hooks after it: it never entered the pauses)
        assert pauses.value == 1
        with forks.held():
            assert pauses.value == 2
        assert pauses.value == 1
    finally:
        go.set()
        thread.join(30)
    assert pauses.value == 0
