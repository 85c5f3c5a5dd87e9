"""The compiled copies of a batch run by the copying thread and its waiter (``Copy``)."""

import os
import threading

import numpy as np
import pytest
from helpers import run_python
from hypothesis import given, settings
from hypothesis import strategies as st

_gather = pytest.importorskip("streamseq.gather._gather")
Copy, fill = _gather.Copy, _gather.fill


def _batch(rows, t, width, dtype=np.uint8):
    return (
        np.full((rows, t, width), 77, dtype),
        np.ones(rows, bool),
        np.ones((rows, t), bool),
        np.full((rows, t), 5, np.int64),
        np.full((rows, t), 5, np.int64),
    )


def _fill(streams, starts, counts, ids, out, copy=None):
    args = (np.array(starts, np.int64), np.array(counts, np.int64), np.array(ids, np.int64))
    return fill(list(streams), *args, *out, copy)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 40), min_size=1, max_size=9),
    st.integers(1, 6),
    st.integers(1, 300),
    st.data(),
)
def test_a_copy_writes_what_fill_writes_at_once(lengths, t, width, data):
    streams = [np.arange(n * width, dtype=np.uint16).reshape(n, width) + n for n in lengths]
    counts = [data.draw(st.integers(0, min(t, n))) for n in lengths]
    starts = [data.draw(st.integers(0, n - c)) for n, c in zip(lengths, counts, strict=True)]
    ids = list(range(3, 3 + len(lengths)))
    want = _batch(len(lengths), t, width, np.uint16)
    got = _batch(len(lengths), t, width, np.uint16)
    assert _fill(streams, starts, counts, ids, want) == -1
    copy = Copy()
    assert _fill(streams, starts, counts, ids, got, copy) == -1
    copy.start()
    copy.wait()
    for a, b in zip(want, got, strict=True):
        np.testing.assert_array_equal(a, b)


def test_several_fills_of_one_copy_and_many_copies_under_way_are_all_written():
    width, t = 4096, 8
    streams = [np.random.default_rng(r).integers(0, 255, (64, width), np.uint8) for r in range(6)]
    copies, outs = [], []
    for k in range(40):  # (queued faster than one thread writes them)
        copy = Copy()
        out = [_batch(3, t, width) for _ in range(2)]
        for half, o in enumerate(out):
            rows = streams[3 * half : 3 * half + 3]
            assert _fill(rows, [k, k + 1, k + 2], [t, t - 1, 0], [0, 1, 2], o, copy) == -1
        copy.start()
        copies.append(copy)
        outs.append(out)
    for k, (copy, out) in enumerate(zip(copies, outs, strict=True)):
        copy.wait()
        for half, o in enumerate(out):
            rows = streams[3 * half : 3 * half + 3]
            np.testing.assert_array_equal(o[0][0], rows[0][k : k + t])
            np.testing.assert_array_equal(o[0][1, : t - 1], rows[1][k + 1 : k + t])
            assert not o[0][1, t - 1].any() and not o[0][2].any()
            assert o[2].sum() == 2 * t - 1 and o[1].tolist() == [k == 0, False, False]


def test_a_copy_is_started_once_waited_after_its_start_and_fills_only_before_it():
    copy, out = Copy(), _batch(1, 2, 4)
    with pytest.raises(RuntimeError, match="not started"):
        copy.wait()
    assert _fill([np.ones((4, 4), np.uint8)], [0], [2], [0], out, copy) == -1
    copy.start()
    with pytest.raises(RuntimeError, match="started already"):
        copy.start()
    with pytest.raises(RuntimeError, match="started already"):
        _fill([np.ones((4, 4), np.uint8)], [0], [2], [0], _batch(1, 2, 4), copy)
    copy.wait()
    copy.wait()  # (done: nothing more)
    assert out[0].tolist() == [[[1] * 4] * 2]
    with pytest.raises(TypeError, match="Copy or None"):
        _fill([np.ones((4, 4), np.uint8)], [0], [2], [0], _batch(1, 2, 4), object())


def test_a_row_the_compiled_pass_declines_writes_nothing_into_the_copy():
    copy, out = Copy(), _batch(2, 2, 4)
    rows = [np.ones((4, 4), np.uint8), np.ones((4, 4), np.uint8)[:, ::2]]  # (not contiguous)
    assert _fill(rows, [0, 0], [2, 2], [0, 1], out, copy) == 1
    copy.start()
    copy.wait()
    assert (out[0] == 77).all()


def test_a_copy_dropped_without_a_wait_writes_its_rows_before_they_go():
    stream = np.arange(256 * 4096, dtype=np.uint8).reshape(256, 4096)
    out = _batch(8, 32, 4096)
    copy = Copy()
    _fill([stream] * 8, [8 * r for r in range(8)], [32] * 8, range(8), out, copy)
    copy.start()
    del copy  # (its rows end before it goes: the arrays it writes are held until then)
    for r in range(8):
        np.testing.assert_array_equal(out[0][r], stream[8 * r : 8 * r + 32])


def test_threads_waiting_for_their_copies_at_once_each_get_their_rows():
    stream = np.arange(128 * 1024, dtype=np.uint8).reshape(128, 1024)
    failures = []

    def run(seed):
        rng = np.random.default_rng(seed)
        for _ in range(200):
            start = int(rng.integers(0, 100))
            out = _batch(4, 16, 1024)
            copy = Copy()
            _fill([stream] * 4, [start] * 4, [16] * 4, range(4), out, copy)
            copy.start()
            copy.wait()
            if not all((out[0][r] == stream[start : start + 16]).all() for r in range(4)):
                failures.append(seed)

    threads = [threading.Thread(target=run, args=(s,)) for s in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not failures and not any(th.is_alive() for th in threads)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_fork_while_copies_are_queued_leaves_the_child_every_row():
    code = """
import os
import numpy as np
from streamseq.gather._gather import Copy, fill
stream = np.arange(512 * 4096, dtype=np.uint8).reshape(512, 4096)
def batch():
    return (np.zeros((8, 64, 4096), np.uint8), np.zeros(8, bool), np.zeros((8, 64), bool),
            np.zeros((8, 64), np.int64), np.zeros((8, 64), np.int64))
jobs = []
for k in range(6):
    out, copy = batch(), Copy()
    fill([stream] * 8, np.arange(8, dtype=np.int64) * 50 + k, np.full(8, 64, np.int64),
         np.arange(8, dtype=np.int64), *out, copy)
    copy.start()
    jobs.append((k, out, copy))
pid = os.fork()
for k, out, copy in jobs:  # (the child has no copying thread: it writes what is left)
    copy.wait()
    for r in range(8):
        assert (out[0][r] == stream[50 * r + k : 50 * r + k + 64]).all(), (os.getpid(), k, r)
out, copy = batch(), Copy()  # (and copies again: a thread of its own)
fill([stream] * 8, np.zeros(8, np.int64), np.full(8, 64, np.int64),
     np.arange(8, dtype=np.int64), *out, copy)
copy.start()
copy.wait()
assert (out[0][3] == stream[:64]).all()
if pid == 0:
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("CHILD", os.waitstatus_to_exitcode(status))
"""
    run = run_python(code, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "CHILD 0" in run.stdout, (run.stdout, run.stderr[-2000:])


def test_a_map_cut_short_during_a_copy_is_the_error_of_its_wait_naming_file_stream_steps():
    code = """
import os, tempfile
import numpy as np
from streamseq.errors import StreamError
from streamseq.gather._gather import Copy, fill
path = os.path.join(tempfile.mkdtemp(), "leaf-0.bin")
np.arange(64 * 4096, dtype=np.uint8).tofile(path)
mapped = np.memmap(path, np.uint8, mode="r", shape=(64, 4096))
out = (np.zeros((2, 16, 4096), np.uint8), np.zeros(2, bool), np.zeros((2, 16), bool),
       np.zeros((2, 16), np.int64), np.zeros((2, 16), np.int64))
copy = Copy()
fill([np.zeros((64, 4096), np.uint8), mapped[8:40]], np.full(2, 2, np.int64),
     np.full(2, 16, np.int64), np.array([5, 7], np.int64), *out, copy)
os.truncate(path, 4096)  # (steps 1: past its end now)
copy.start()
try:
    copy.wait()
except StreamError as e:
    print("ERROR", e)
again = Copy()  # (the thread copies on)
fill([np.ones((4, 4096), np.uint8)], np.zeros(1, np.int64), np.full(1, 4, np.int64),
     np.zeros(1, np.int64), out[0][:1, :4], out[1][:1], *(a[:1, :4] for a in out[2:]), again)
again.start()
again.wait()
print("AFTER", int(out[0][0, :4].min()))
"""
    run = run_python(code, timeout=120)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    message = run.stdout.split("ERROR", 1)[1]
    assert "leaf-0.bin" in message and "cut short" in message, message
    assert "stream 7" in message and "steps 2:18" in message, message
    assert "AFTER 1" in run.stdout


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_fork_while_another_thread_writes_a_copys_rows_leaves_the_child_every_row():
    code = """
import os, threading
import numpy as np
from streamseq.gather._gather import Copy, fill
W = 1 << 22  # (rows long enough that a fork comes while a waiter writes one)
stream = np.random.default_rng(0).integers(1, 255, (32, W), dtype=np.uint8)
bad = []
for rep in range(24):
    out = (np.zeros((8, 4, W), np.uint8), np.zeros(8, bool), np.zeros((8, 4), bool),
           np.zeros((8, 4), np.int64), np.zeros((8, 4), np.int64))
    copy = Copy()
    fill([stream] * 8, np.arange(8, dtype=np.int64) * 4, np.full(8, 4, np.int64),
         np.arange(8, dtype=np.int64), *out, copy)
    copy.start()
    waiter = threading.Thread(target=copy.wait)  # (a thread of the parent writes rows)
    waiter.start()
    for _ in range(rep % 6 * 20000):
        pass
    pid = os.fork()
    if pid == 0:  # the child waits for the copy itself: every row is whole there
        copy.wait()
        whole = all((out[0][r] == stream[4 * r : 4 * r + 4]).all() for r in range(8))
        os._exit(0 if whole and out[2].all() else 3)
    waiter.join()
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        bad.append(rep)
print("BAD", bad)
"""
    run = run_python(code, timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "BAD []" in run.stdout, (run.stdout, run.stderr[-2000:])


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_the_copying_thread_ends_when_idle_and_starts_again_when_needed():
    code = """
import os, time
import numpy as np
from streamseq.gather._gather import Copy, fill
def threads():
    return len(os.listdir("/proc/self/task"))
def copy_once():
    out = (np.zeros((2, 4, 4096), np.uint8), np.zeros(2, bool), np.zeros((2, 4), bool),
           np.zeros((2, 4), np.int64), np.zeros((2, 4), np.int64))
    copy = Copy()
    fill([np.ones((8, 4096), np.uint8)] * 2, np.zeros(2, np.int64), np.full(2, 4, np.int64),
         np.arange(2, dtype=np.int64), *out, copy)
    copy.start()
    copy.wait()
    return int(out[0].min())
before = threads()
assert copy_once() == 1
during = threads()
deadline = time.monotonic() + 20
while threads() > before and time.monotonic() < deadline:
    time.sleep(0.05)
after = threads()
assert copy_once() == 1  # (a thread started again)
print(before, during, after)
"""
    run = run_python(code, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    before, during, after = map(int, run.stdout.split())
    assert during == before + 1 and after == before  # (a fork after it finds no thread)
