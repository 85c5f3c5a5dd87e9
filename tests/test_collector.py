"""streamseq._collector: the collector off while a count is under way, as it was after."""

import gc
import os
import threading

import pytest

from streamseq._collector import CollectorOff, paused
from streamseq._fork_count import Count


@pytest.mark.parametrize("enabled", [True, False])
def test_off_while_under_way_then_as_it_was(enabled):
    count = Count()
    count.watch(CollectorOff())
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        with count.held():
            assert not gc.isenabled()
            gc.enable()  # (another count's end, meanwhile)
            with count.held():
                assert not gc.isenabled()
        assert gc.isenabled() == enabled
    finally:
        (gc.enable if was else gc.disable)()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_child_forked_during_another_threads_pause_collects_but_not_what_it_inherits():
    inside, go = threading.Event(), threading.Event()

    def pause():
        with paused():
            inside.set()
            go.wait(30)

    assert gc.isenabled()
    thread = threading.Thread(target=pause, daemon=True)
    thread.start()
    try:
        assert inside.wait(30)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its collector runs, what it inherited is left out of it
            os.write(write, bytes([gc.isenabled(), gc.get_freeze_count() > 0]))
            os._exit(0)
        os.close(write)
        got = os.read(read, 2)
        os.close(read)
        os.waitpid(pid, 0)
    finally:
        go.set()
        thread.join(30)
    assert list(got) == [1, 1] and gc.isenabled()
