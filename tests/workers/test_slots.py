import ctypes
import gc
import pickle
import time

import numpy as np
import torch

from streamseq.workers import shm as _shm
from streamseq.workers.slots import Filling, Slots


def filling(slots, start):
    return Filling(
        memoryview(slots.memory).cast("B"), ctypes.addressof(slots.memory), start, slots.size
    )


def test_slots_are_handed_out_once_until_given_back():
    slots = Slots(3, 128)
    taken = {slots.take() for _ in range(3)}
    o = slots.origin  # (slot 0 starts on a page boundary)
    assert taken == {o, o + 128, o + 256} and slots.take() is None
    slots.give_back(o + 128)
    slots.give_back(None)
    assert slots.take() == o + 128


def test_no_shared_memory_means_no_slots():
    assert Slots(4, 0).take() is None


def test_a_leased_slot_is_free_once_every_view_and_array_of_it_is_gone():
    slots = Slots(2, 1024)
    start = slots.take()
    fill = filling(slots, start)
    with fill:
        built = _shm.empty((4,), np.int64)  # in the slot
        built[:] = [1, 2, 3, 4]
    payload, regions = fill.pickle((built, np.arange(3.0)))
    assert [z - a for a, z in regions] == [32, 24]
    item = pickle.loads(payload, buffers=slots.lease(start, regions))
    assert item[0].tolist() == [1, 2, 3, 4] and item[1].tolist() == [0.0, 1.0, 2.0]
    assert start not in slots.free
    first, rest = item[0][1:], torch.from_numpy(item[1])
    del item, built
    gc.collect()
    assert start not in slots.free  # views of it are still used
    del first
    assert start not in slots.free
    del rest
    assert start in slots.free


def test_arrays_built_in_the_slot_are_not_copied_and_others_are_copied_aligned():
    slots = Slots(1, 4096)
    fill = filling(slots, 0)
    with fill:
        assert _shm.current() is fill.slot
        built = _shm.empty((10,), np.uint8)
    assert _shm.current() is None
    _, regions = fill.pickle((np.ones(3, np.uint8), built))
    at = built.ctypes.data - ctypes.addressof(slots.memory)
    assert regions[1] == (at, at + 10)  # where it was built
    assert regions[0][0] % _shm.ALIGN == 0 and regions[0][0] >= at + 10


def test_what_does_not_fit_in_the_slot_travels_in_the_pickle():
    slots = Slots(2, 256)
    fill = filling(slots, 256)
    big = np.arange(100, dtype=np.int64)
    payload, regions = fill.pickle((np.arange(4), big))
    assert len(regions) == 1 and 256 <= regions[0][0] and regions[0][1] <= 512
    again = pickle.loads(payload, buffers=slots.lease(256, regions))
    assert again[1].tolist() == big.tolist() and again[0].tolist() == [0, 1, 2, 3]


def test_without_a_slot_the_item_is_pickled_whole():
    fill = filling(Slots(1, 64), None)
    with fill:
        assert _shm.current() is None
    payload, regions = fill.pickle({"a": np.arange(3)})
    assert regions == [] and pickle.loads(payload)["a"].tolist() == [0, 1, 2]


def test_a_party_that_took_a_key_gets_a_new_slot_for_it_and_the_key_follows():
    slots = Slots(4, 256)
    first = slots.take(key=0, party="a")
    assert slots.take(key=0, party="b") == first
    again = slots.take(key=0, party="a")  # block 0 of the next pass, the first still held
    assert again != first
    assert slots.take(key=0, party="b") == again  # the other party joins the new one
    for start in (first, first, again, again):
        slots.give_back(start)
    assert slots.held() == 0 and len(slots.free) == 4


def fork_a_child_holding(slots, start):
    """Fork a child that holds a view of the slot at ``start`` ("abcd") and, once told
    (a byte on ``go_w``), exits 0 if the view is unchanged; the parent drops its view."""
    import os

    view = slots.lease(start, [(start, start + 4)])[0]
    view[:4] = b"abcd"
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(go_w)
        os.read(go_r, 1)
        os._exit(0 if bytes(view[:4]) == b"abcd" else 1)
    os.close(go_r)
    del view
    gc.collect()
    return pid, go_w


def test_a_slot_held_at_a_fork_is_reused_only_once_the_child_cannot_see_it(monkeypatch):
    import os

    from streamseq.workers import forks

    # a child that cannot copy its slots: the parent waits until it ends
    monkeypatch.setattr(forks, "_privatize", lambda address, length: False)
    slots = Slots(2, 8192)
    start = slots.take()
    pid, go_w = fork_a_child_holding(slots, start)
    other = slots.take()
    assert other != start and slots.take() is None  # not reused while the child lives
    filled = np.frombuffer(slots.memory, np.uint8, 4, other)
    filled[:] = 1
    os.write(go_w, b"x")
    os.close(go_w)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert slots.take() == start  # the child ended


def test_a_forked_child_copies_the_slots_it_may_hold_and_the_parent_goes_on():
    import os

    slots = Slots(1, 8192)
    start = slots.take()
    pid, go_w = fork_a_child_holding(slots, start)
    deadline = time.monotonic() + 30
    while (again := slots.take()) is None and time.monotonic() < deadline:
        time.sleep(0.01)  # the child copies its slot at once, then the parent reuses it
    assert again == start
    np.frombuffer(slots.memory, np.uint8, 4, start)[:] = 1  # the parent writes it again
    os.write(go_w, b"x")
    os.close(go_w)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
