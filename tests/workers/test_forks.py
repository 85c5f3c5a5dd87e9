"""A fork's hooks interrupted (Ctrl-C as they run) leave no set of slots locked."""

import threading

import pytest

from streamseq.workers import forks
from streamseq.workers.slots import Slots

pytestmark = pytest.mark.timeout(60)


def free_for_another_thread(slots):
    """Whether another thread can take the slots' lock (none is left held)."""
    got = []

    def take():
        if slots.lock.acquire(timeout=5):
            slots.lock.release()
            got.append(True)

    thread = threading.Thread(target=take)
    thread.start()
    thread.join(10)
    return got == [True]


def interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_an_interrupt_before_a_fork_leaves_no_slots_locked(monkeypatch):
    slots = Slots(4, 4096)
    assert slots.take() is not None  # (held: a fork notes it)
    monkeypatch.setattr(slots, "held_starts", interrupt)
    with pytest.raises(KeyboardInterrupt):
        forks._before()
    assert free_for_another_thread(slots)
    assert forks._pending == []


def test_an_interrupt_after_a_fork_in_the_parent_leaves_no_slots_locked(monkeypatch):
    slots = Slots(4, 4096)
    assert slots.take() is not None
    forks._before()  # (as os.fork() runs it; the fork itself is left out)
    monkeypatch.setattr(slots, "inherited", interrupt)
    with pytest.raises(KeyboardInterrupt):
        forks._after_in_parent()
    assert free_for_another_thread(slots)
    assert forks._pending == []
