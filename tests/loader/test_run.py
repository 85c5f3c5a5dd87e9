"""A pass (``loader.run.Pass``): what it delivers, however it is iterated."""

import logging
import multiprocessing
import os
import threading
import time

import numpy as np
import pytest

from streamseq import StreamLoader, materialize
from streamseq.loader import run
from tests.helpers import raised_in_thread
from tests.loader.threads import while_paused


@pytest.mark.parametrize("stored", [False, True])
def test_one_pass_read_from_several_threads_delivers_every_batch_once(tmp_path, stored):
    sources = [np.arange(n * 4, dtype=np.int64).reshape(n, 4) + 1000 * n for n in range(5, 40)]
    streams = materialize(sources, tmp_path / "s") if stored else sources
    loader = StreamLoader(streams, 4, 3)
    want = sorted(b.step[:, 0].tolist() + b.stream[:, 0].tolist() for b in loader)
    for _ in range(5):
        it, got, barrier = iter(loader), [], threading.Barrier(3)

        def read(it=it, got=got, barrier=barrier):
            barrier.wait()
            for batch in it:
                got.append(batch.step[:, 0].tolist() + batch.stream[:, 0].tolist())

        threads = [threading.Thread(target=read) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(got) == want  # (each batch once: none twice, none lost)


def _pausing_once(thread_name, until):
    """A transform and its switch: once armed, the next read in ``thread_name`` says so
    (``entered``) and waits for ``until`` (a second at most) before it goes on."""
    entered, armed = threading.Event(), []

    def transform(x, info):
        if armed and threading.current_thread().name == thread_name:
            armed.clear()
            entered.set()
            until.wait(1)
        return x

    return transform, armed, entered


@pytest.mark.parametrize("stored", [False, True])
def test_a_pass_superseded_while_another_thread_reads_it_moves_the_new_pass_not(tmp_path, stored):
    # A thread reads a batch of a pass while another thread starts a new pass: the
    # position saved is that of the new pass (the old pass's batch is not counted in it).
    sources = [np.arange(40, dtype=np.int64) + 100 * i for i in range(4)]
    streams = materialize(sources, tmp_path / "s") if stored else sources
    delivered = threading.Event()  # (the new pass's batch, where the new pass does not wait)
    transform, blocking, entered = _pausing_once("old-reader", delivered)
    loader = StreamLoader(streams, 2, 2, transform=transform)
    old = iter(loader)
    next(old)
    got = {}

    def read_old():
        blocking.append(True)
        try:
            got["old"] = next(old)
        except RuntimeError as e:  # (closed while its batch was read: not delivered)
            got["old"] = e

    def read_new():
        new = iter(loader)
        got["new"] = next(new)
        got["state"] = loader.state_dict()
        delivered.set()
        got["new it"] = new

    while_paused(read_old, "old-reader", entered, read_new)
    assert got["state"]["next_batch"] == 1
    assert loader.state_dict()["next_batch"] == 1  # (one batch of the new pass delivered)
    assert isinstance(got["old"], RuntimeError) and "superseded" in str(got["old"])
    with pytest.raises(RuntimeError, match="superseded"):
        next(old)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks")
def test_threads_of_a_forked_child_reading_the_parents_pass_share_one_lock():
    # The first threads of a child to read a pass make its lock there: one lock, each
    # batch once (two threads making one each at once would read the same batch).
    sources = [np.arange(n * 4, dtype=np.int64).reshape(n, 4) + 1000 * n for n in range(5, 30)]
    loader = StreamLoader(sources, 4, 3)
    it = iter(loader)
    next(it)
    pid = os.fork()
    if pid == 0:  # (the child reports by its exit status only)
        try:
            made, real, meet = [], threading.RLock, threading.Barrier(2)

            def rlock():  # (both threads first look at the parent's lock, then make one)
                made.append(1)
                try:
                    meet.wait(1)
                except threading.BrokenBarrierError:
                    pass
                return real()

            run.threading.RLock = rlock
            got, start = [], threading.Barrier(2)

            def read():
                start.wait(10)
                got.extend(b.step[:, 0].tolist() + b.stream[:, 0].tolist() for b in it)

            readers = [threading.Thread(target=read) for _ in range(2)]
            for t in readers:
                t.start()
            for t in readers:
                t.join(30)
            keys = sorted(map(str, got))
            os._exit(0 if len(made) == 1 and keys == sorted(set(keys)) else 1)
        finally:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def _three_batches_in(loader):
    """A pass of ``loader`` that delivered 3 batches, and the state saved then."""
    it = iter(loader)
    for _ in range(3):
        next(it)
    return it, loader.state_dict()


def test_a_state_loaded_while_another_thread_reads_the_pass_is_the_position_after():
    # The batch being read when the state is loaded is not counted after the load.
    loaded = threading.Event()  # (the load, where it does not wait for this batch)
    transform, blocking, entered = _pausing_once("reader", loaded)
    sources = [np.arange(40, dtype=np.int64) + 100 * i for i in range(4)]
    loader = StreamLoader(sources, 2, 2, transform=transform)
    it, saved = _three_batches_in(loader)

    def read():
        blocking.append(True)
        got.append(next(it, None))

    got = []

    def load():
        loader.load_state_dict(saved)
        loaded.set()

    while_paused(read, "reader", entered, load)
    assert loader.state_dict()["next_batch"] == saved["next_batch"] == 3
    assert got == [None]  # (the pass was closed while the batch was read)
    want = [b.step.tolist() for b in StreamLoader(sources, 2, 2)][3:]
    assert [b.step.tolist() for b in loader] == want  # (resumed at batch 3: none skipped)


def _stuck_once_flagged(flag):
    """A transform that never returns, in a worker, once the file ``flag`` exists."""

    def transform(x, info):
        while os.path.exists(flag):
            time.sleep(0.05)
        return x

    return transform


@pytest.mark.parametrize("persistent", [False, True])
def test_a_loader_closed_just_before_a_read_awaits_its_workers_ends_that_read(
    tmp_path, monkeypatch, caplog, persistent
):
    # A thread's read passed the pass's own checks and is about to wait for the workers
    # when another thread closes the loader: that read ends as on a closed pass. It
    # starts no workers again (they would outlive the close, and, on a source that is
    # stuck, wait for ever with timeout=None).
    from streamseq.workers import prefetched

    flag = tmp_path / "stuck"
    sources = [np.arange(400, dtype=np.int64) + 1000 * i for i in range(4)]
    loader = StreamLoader(
        sources,
        2,
        2,
        num_workers=1,
        transform=_stuck_once_flagged(flag),
        persistent_workers=persistent,
    )
    it = iter(loader)
    next(it)
    paused, go = threading.Event(), threading.Event()
    real = prefetched.Prefetched.__getitem__

    def getitem(self, i):
        if threading.current_thread().name == "reader" and not go.is_set():
            paused.set()
            go.wait(30)
        return real(self, i)

    monkeypatch.setattr(prefetched.Prefetched, "__getitem__", getitem)
    got = []

    def read():
        try:
            got.append(next(it))
        except BaseException as e:  # noqa: BLE001 (what the read ended with)
            got.append(e)

    caplog.set_level(logging.INFO, logger="streamseq")
    reader = threading.Thread(target=read, name="reader", daemon=True)
    reader.start()
    assert paused.wait(30)
    flag.touch()  # (any worker started from now on is stuck)
    before = {p.pid for p in multiprocessing.active_children()}  # (exiting after the close)
    loader.close()
    go.set()
    reader.join(20)
    flag.unlink()
    alive = reader.is_alive()
    started = [p for p in multiprocessing.active_children() if p.pid not in before]
    loader.close()  # (what the read may have started)
    assert not alive, "the read waits for workers started after the close"
    assert started == [], "workers started after the close"
    (outcome,) = got
    assert isinstance(outcome, StopIteration)
    said = [r.getMessage() for r in caplog.records if "closed meanwhile" in r.getMessage()]
    assert said and "WorkerError" in said[0]  # (what that read raised is logged, not lost)
    want = [b.step.tolist() for b in StreamLoader(sources, 2, 2)]
    assert [b.step.tolist() for b in loader] == want  # (a pass left early: the next epoch)


def test_set_epoch_from_another_thread_while_a_batch_is_counted_loses_neither(monkeypatch):
    # set_epoch() in one thread while another thread's pass counts a batch delivered:
    # both changes of the position are kept (the batch counted, the epoch set), whatever
    # the order the two threads run in.
    from streamseq.plan import cursor

    sources = [np.arange(40, dtype=np.int64) + 100 * i for i in range(4)]
    loader = StreamLoader(sources, 2, 2, shuffle=True)
    it = iter(loader)
    next(it)
    counted, real = threading.Event(), cursor.Cursor.set_epoch

    def set_epoch(self, epoch, *, running):
        if threading.current_thread().name == "setter":
            counted.wait(1)  # (the other thread counts its batch meanwhile, if it can)
        return real(self, epoch, running=running)

    monkeypatch.setattr(cursor.Cursor, "set_epoch", set_epoch)

    def read():
        next(it)
        counted.set()

    setter = threading.Thread(target=loader.set_epoch, args=(5,), name="setter")
    setter.start()
    time.sleep(0.2)  # (the setter waits inside set_epoch)
    reader = threading.Thread(target=read)
    reader.start()
    setter.join(30)
    reader.join(30)
    assert loader.state_dict()["next_batch"] == 2  # (the batch counted)
    rest = list(it)
    assert len(rest) == len(StreamLoader(sources, 2, 2)) - 2  # (the pass goes on, epoch 0)
    want = StreamLoader(sources, 2, 2, shuffle=True)
    want.set_epoch(5)
    assert [b.stream.tolist() for b in loader] == [b.stream.tolist() for b in want]


@pytest.mark.parametrize("meanwhile", ["load", "set_epoch"])
def test_a_position_set_while_another_thread_reaches_the_end_of_the_pass_is_kept(meanwhile):
    # One thread's next() finds the pass at its end while another thread loads a state
    # (or sets the epoch, the pass closed): the end of that pass does not use up the
    # position set (the run resumes where the state stood, or at batch 0 of the epoch set).
    sources = [np.arange(40, dtype=np.int64) + 100 * i for i in range(4)]
    loader = StreamLoader(sources, 2, 2, shuffle=True)
    it, saved = _three_batches_in(loader)
    for _ in range(len(loader) - 3):
        next(it)  # (every batch delivered; the end not reached yet)
    entered, done, real = threading.Event(), threading.Event(), it.moved

    def moved(move):
        if threading.current_thread().name == "reader":
            entered.set()
            done.wait(1)  # (the other thread sets the position here, if it can)
        real(move)

    it.moved = moved
    got = []

    def read():
        got.append(next(it, None))

    def other():
        if meanwhile == "load":
            loader.load_state_dict(saved)
        else:
            it.close()
            loader.set_epoch(4)
        done.set()

    while_paused(read, "reader", entered, other)
    assert got == [None]
    want = StreamLoader(sources, 2, 2, shuffle=True)
    if meanwhile == "load":
        assert (loader.state_dict()["epoch"], loader.state_dict()["next_batch"]) == (0, 3)
        expected = [b.stream.tolist() for b in want][3:]
    else:
        want.set_epoch(4)
        expected = [b.stream.tolist() for b in want]
    assert [b.stream.tolist() for b in loader] == expected


def _failing_once_flagged(flag):
    """A transform that raises once the file ``flag`` exists (and removes it)."""

    def transform(x, info):
        if os.path.exists(flag):
            os.unlink(flag)
            raise ValueError("a bad read")
        return x

    return transform


def test_a_pass_opened_while_a_failed_pass_stops_its_persistent_workers_keeps_them(tmp_path):
    # A read fails in one thread (the loader stops its persistent workers then) while
    # another thread has just started a new pass with them: the new pass reads its
    # batches (the workers it reads with are not stopped for good under it).
    from streamseq.errors import StreamError

    flag = tmp_path / "fail"
    sources = [np.arange(40, dtype=np.int64) + 100 * i for i in range(4)]
    loader = StreamLoader(
        sources,
        2,
        2,
        num_workers=1,
        persistent_workers=True,
        transform=_failing_once_flagged(flag),
    )
    it = iter(loader)
    next(it)
    opened, done, real = threading.Event(), threading.Event(), it.close

    def close(*args, **kwargs):
        real(*args, **kwargs)
        if threading.current_thread().name == "reader":
            opened.set()
            done.wait(1)  # (the other thread starts a new pass here, if it can)

    it.close = close
    got, passes = [], []

    def read():
        try:
            for _ in it:
                pass
        except StreamError as e:  # (the transform's error, naming the stream and steps)
            got.append(e)

    def start():
        passes.append(iter(loader))
        done.set()

    flag.touch()
    while_paused(read, "reader", opened, start)
    assert len(got) == 1 and "a bad read" in str(got[0])
    (new,) = passes
    want = [b.step.tolist() for b in StreamLoader(sources, 2, 2)]
    try:
        assert [b.step.tolist() for b in new] == want
    finally:
        loader.close()


def test_a_trial_switching_while_another_thread_closes_the_loader_leaves_no_workers(
    monkeypatch,
):
    # num_workers="auto": the read that switches the pass to its workers runs while
    # another thread closes the loader. The workers are not started for the closed pass
    # (nothing would stop them but the collection of its iterator), or are stopped with it.
    from tests.helpers import live_children, no_children

    monkeypatch.setattr(run.Trial, "MIN_BATCHES", 2)
    monkeypatch.setattr(run.Trial, "MAX_BATCHES", 3)
    monkeypatch.setattr(run.Trial, "MIN_SECONDS", 0.0)
    before = {c.pid for c in live_children()}
    sources = [np.arange(40, dtype=np.int64) + 100 * i for i in range(4)]
    loader = StreamLoader(sources, 2, 2, num_workers="auto")
    it = iter(loader)
    next(it)  # (the first batch here: a start, not timed)
    next(it)  # (one timed: the next one switches)
    entered, done, real = threading.Event(), threading.Event(), run.Trial.delivered

    def delivered(self, *args):
        if threading.current_thread().name == "reader" and self.phase == 0:
            entered.set()
            done.wait(1)  # (the other thread closes the loader here, if it can)
        return real(self, *args)

    monkeypatch.setattr(run.Trial, "delivered", delivered)
    got = []

    def close():
        loader.close()
        done.set()

    while_paused(lambda: got.append(next(it, None)), "reader", entered, close)
    assert it.closed and it.prefetchers == []
    assert no_children(before)


@pytest.mark.parametrize("how", [dict(num_workers=2, method="thread"), dict(timeout=120)])
def test_a_transform_asking_for_a_batch_of_the_pass_from_another_thread_is_an_error(how):
    # The batch's rows are read in another thread than the one waiting in next() (a
    # worker thread; the helper thread of a bounded read): a transform there that asks
    # the pass for a batch would wait for that next(), which waits for the transform.
    it = None

    def ask(steps, info):
        if it is not None and info.start > 0:
            next(it)
        return steps

    streams = [np.arange(12), np.arange(10) + 100, np.arange(7) + 200, np.arange(9) + 300]
    loader = StreamLoader(streams, 2, 3, transform=ask, pin_memory=False, **how)

    def read():
        nonlocal it
        it = iter(loader)
        for _ in it:
            pass

    error = raised_in_thread(read, "the transform waits for the next() that waits for it")
    assert "asked for while one is written" in str(error)
    it = None  # (the transform asks for nothing more)
    assert [b.data.tolist() for b in StreamLoader(streams, 2, 3, pin_memory=False)] == [
        b.data.tolist() for b in loader
    ]  # (usable after: the same batches)
    loader.close()


def test_a_transform_of_a_worker_thread_asking_for_a_batch_between_two_nexts_is_an_error():
    # No thread waits in next() then: the worker thread's own next() would wait for the
    # workers' batches, its own among them, for ever (and every next() after it).
    passes, asked = [], threading.Event()
    got = {}

    def ask(steps, info):
        if len(passes) == 2 and not got:  # (read ahead by a worker: no next() waits)
            got["asking"] = True
            try:
                next(passes[0])
            except Exception as e:
                got["error"] = e
            asked.set()
        return steps

    streams = [np.arange(3000) + 10000 * i for i in range(8)]
    loader = StreamLoader(
        streams, 4, 3, transform=ask, pin_memory=False, num_workers=2, method="thread"
    )
    passes.append(iter(loader))
    next(passes[0])
    passes.append(True)  # (its first batch delivered: the workers read ahead)
    asked.wait(60)  # (a bound on a hang, not a measure of speed)
    assert asked.is_set(), "the worker thread waits for its own batch"
    assert "asked for while one is written" in str(got["error"])
    loader.close()
