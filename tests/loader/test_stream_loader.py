"""The loader's settings: every constructor argument read back, none written."""

import inspect
import os
import pickle
import re
import sys
import warnings

import numpy as np
import pytest

import streamseq
from streamseq import StreamLoader
from tests.loader.threads import while_paused

pytestmark = pytest.mark.timeout(60)

STREAMS = [np.arange(n) for n in (9, 7, 6, 5)]


def shift(steps, info):
    """A picklable transform (its identity is what the loader gives back)."""
    return steps


# a value other than the default for every parameter, valid together
GIVEN = {
    "streams": STREAMS,
    "batch_size": 2,
    "tbins": 3,
    "num_workers": 2,
    "shuffle": True,
    "seed": 7,
    "pad": "pack",
    "pin_memory": True,
    "lengths": [9, 7, 6, 5],
    "rank": 1,
    "world_size": 2,
    "time_major": True,
    "method": "thread",
    "max_buffered": 3,
    "timeout": 5.0,
    "transform": shift,
    "persistent_workers": True,
    "segment_length": 4,
    "max_streams_per_chunk": 2,
    "lookahead": 1,
}


def made():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (lookahead with pack and segments: warned)
        return StreamLoader(**GIVEN)


def test_every_setting_reads_back_as_given():
    params = inspect.signature(StreamLoader).parameters
    named = [p.name for p in params.values() if p.kind is not p.VAR_KEYWORD]
    assert sorted(named) == sorted(GIVEN)  # a new argument needs a value here
    loader = made()
    assert [name for name in named if not hasattr(loader, name)] == []
    for name in named:
        given, got = GIVEN[name], getattr(loader, name)
        if name == "lengths":
            assert got.tolist() == given, name
        else:
            assert got is given or got == given, name
    for name in named:
        default = params[name].default
        assert default is inspect.Parameter.empty or GIVEN[name] != default, name
    loader.close()


@pytest.mark.parametrize(
    "name", ["batch_size", "tbins", "num_workers", "lookahead", "seed", "config"]
)
def test_a_setting_cannot_be_written(name):
    loader = StreamLoader(STREAMS, 2, 3)
    before = len(loader)
    with pytest.raises(AttributeError):
        setattr(loader, name, 1)
    assert len(loader) == before and getattr(loader, name) != 1


@pytest.mark.parametrize("copied", [False, True])
def test_the_lengths_and_units_read_back_cannot_change_the_plan(copied):
    loader = StreamLoader([np.arange(n) for n in (9, 3, 5, 2)], 2, 2, segment_length=4)
    before = [b.data.tolist() for b in loader]
    if copied:
        loader = pickle.loads(pickle.dumps(loader))
    for array in (loader.lengths, *loader.units):
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 1
    assert loader.lengths.tolist() == [9, 3, 5, 2]
    loader.set_epoch(0)
    assert [b.data.tolist() for b in loader] == before


@pytest.mark.parametrize("name", ["spec", "refs", "streams"])
def test_the_plan_settings_and_streams_cannot_be_replaced(name):
    loader = StreamLoader(STREAMS, 2, 3)
    other = StreamLoader(STREAMS[:2], 1, 2)
    before = [b.data.tolist() for b in loader]
    with pytest.raises(AttributeError):
        setattr(loader, name, getattr(other, name))
    assert getattr(loader, name) is not getattr(other, name)
    loader.set_epoch(0)
    assert [b.data.tolist() for b in loader] == before


def test_an_unknown_attribute_is_an_attribute_error():
    loader = StreamLoader(STREAMS, 2, 3)
    with pytest.raises(AttributeError, match="max_stream_per_chunk"):
        loader.max_stream_per_chunk  # noqa: B018
    assert not hasattr(loader, "units_")


@pytest.mark.parametrize("set_epoch", [False, True])
@pytest.mark.parametrize("read", ["progress", "epoch", "len", "index", "state_dict"])
def test_a_read_from_another_thread_never_moves_the_pass_in_progress_back(
    monkeypatch, set_epoch, read
):
    from streamseq.plan.cursor import Cursor

    loader = StreamLoader([np.arange(n) for n in (9, 3, 5, 2)], 2, 2, shuffle=True)
    if set_epoch:
        loader.set_epoch(0)
    list(loader)  # a pass read to its end (the loader not asked anything since)
    epoch = 0 if set_epoch else 1
    original, running = Cursor.settled, []

    def settled_while_a_pass_starts(cursor):
        # the reading thread is preempted here: the training thread starts the next pass
        monkeypatch.setattr(Cursor, "settled", original)
        running.append(iter(loader))
        next(running[0])
        return original(cursor)

    monkeypatch.setattr(Cursor, "settled", settled_while_a_pass_starts)
    {
        "progress": lambda: loader.progress,
        "epoch": lambda: loader.epoch,
        "len": lambda: len(loader),
        "index": lambda: loader[0],
        "state_dict": loader.state_dict,
    }[read]()
    assert running, "the reader did not read the cursor"
    state = loader.state_dict()
    assert (state["epoch"], state["next_batch"]) == (epoch, 1)
    assert loader.progress.done == 1 and loader.epoch == epoch
    assert len(list(running[0])) == len(loader) - 1


@pytest.mark.parametrize("name", ["shuffle", "pin_memory", "time_major", "persistent_workers"])
def test_a_switch_given_as_a_string_or_another_non_boolean_is_refused_by_name(name):
    for given in ["no", "False", None, 2, 0.5, [0]]:
        message = re.escape(f"{name} must be True or False, got {given!r}")
        with pytest.raises(TypeError, match=message):
            StreamLoader(STREAMS, 2, 3, num_workers=1, method="thread", **{name: given})
    for given, meant in [(np.bool_(False), False), (1, True), (0, False)]:
        loader = StreamLoader(STREAMS, 2, 3, num_workers=1, method="thread", **{name: given})
        assert getattr(loader, name) is meant
        loader.close()


def test_an_epoch_a_state_cannot_hold_is_refused_by_set_epoch():
    loader = StreamLoader(STREAMS, 2, 3, shuffle=True)
    with pytest.raises(ValueError, match=r"epoch must be <= 2\*\*63 - 1"):
        loader.set_epoch(2**64 + 5)
    assert loader.epoch == 0
    loader.set_epoch(2**63 - 1)  # the last epoch a state holds: saved and loaded
    it = iter(loader)
    next(it)
    again = StreamLoader(STREAMS, 2, 3, shuffle=True)
    again.load_state_dict(loader.state_dict())
    assert again.epoch == 2**63 - 1 and again.state_dict()["next_batch"] == 1


@pytest.mark.parametrize("meanwhile", ["end", "set_epoch", "load"])
def test_a_state_saved_while_another_thread_moves_the_run_is_a_position_of_a_run(
    monkeypatch, meanwhile
):
    # state_dict() in one thread while another thread moves the run (its pass reaches
    # the end, set_epoch, load_state_dict) saves where the run stood before the move or
    # after it, never the batch of one with the epoch of the other.
    from streamseq.plan.cursor import Cursor

    streams = [np.arange(n) for n in (9, 3, 5, 2, 8, 6)]
    loader = StreamLoader(streams, 2, 2, shuffle=True)
    length = len(loader)
    it = iter(loader)
    for _ in range(length if meanwhile == "end" else 3):
        next(it)
    if meanwhile != "end":
        it.close()  # (a pass left after 3 batches: the run stands at batch 3 of epoch 0)
    other = StreamLoader(streams, 2, 2, shuffle=True)
    other.set_epoch(4)
    other_it = iter(other)
    next(other_it)
    loaded = other.state_dict()  # (epoch 4, batch 1)
    move = {
        "end": lambda: next(it, None),  # (the last batch was delivered: the end)
        "set_epoch": lambda: loader.set_epoch(5),
        "load": lambda: loader.load_state_dict(loaded),
    }[meanwhile]
    before = loader.state_dict()
    original = Cursor.settled

    def settled_then_moved(cursor):
        # the saving thread read the cursor; the other thread moves the run here
        monkeypatch.setattr(Cursor, "settled", original)
        now = original(cursor)
        move()
        return now

    monkeypatch.setattr(Cursor, "settled", settled_then_moved)
    state = loader.state_dict()
    monkeypatch.setattr(Cursor, "settled", original)
    after = loader.state_dict()
    assert state in (before, after)


def _at_once(monkeypatch, name, owner, method, other):
    """Run ``other`` in a thread while the thread ``name`` is about to call ``method`` of
    ``owner`` (it waits a second at most for ``other`` to end first, if it can)."""
    import threading

    entered, done, real = threading.Event(), threading.Event(), getattr(owner, method)

    def paused(self, *args, **kwargs):
        if threading.current_thread().name == name:
            entered.set()
            done.wait(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(owner, method, paused)

    def then():
        other()
        done.set()

    return entered, then


@pytest.mark.parametrize("workers", [0, 1])
@pytest.mark.parametrize("meanwhile", ["iter", "load", "set_epoch", "close", "close first"])
def test_a_pass_opening_while_another_thread_moves_the_run_is_the_only_pass(
    monkeypatch, workers, meanwhile
):
    # iter(loader) in one thread while another thread starts a pass too (or closes the
    # loader, loads a state, sets the epoch): one of them comes first. At most one pass
    # runs after both (two would count their batches into one position), it reads
    # every batch of its epoch from where the run stands (no worker stopped under it),
    # and the position saved counts each of its batches once.

    from streamseq.workers.pool import WorkerPool

    streams = [np.arange(n) for n in (9, 3, 5, 2, 8, 6)]
    loader = StreamLoader(
        streams, 2, 2, shuffle=True, num_workers=workers, persistent_workers=bool(workers)
    )
    list(loader)  # (persistent workers started: a close stops them)
    other = StreamLoader(streams, 2, 2, shuffle=True)
    other.set_epoch(4)
    next(iter(other))
    loaded = other.state_dict()  # (epoch 4, batch 1)
    passes = {}
    first, pause = (
        (loader.close, (WorkerPool, "stop"))
        if meanwhile == "close first"
        else (
            lambda: passes.setdefault("first", iter(loader)),
            (StreamLoader, "_open_pass"),
        )
    )
    entered, then = _at_once(
        monkeypatch,
        "first",
        *pause,
        {
            "iter": lambda: passes.setdefault("second", iter(loader)),
            "close": loader.close,
            "close first": lambda: passes.setdefault("second", iter(loader)),
            "load": lambda: loader.load_state_dict(loaded),
            "set_epoch": lambda: loader.set_epoch(4),
        }[meanwhile],
    )
    while_paused(first, "first", entered, then)
    running = [it for it in passes.values() if not it.closed]
    assert len(running) <= 1  # (none: a close or a load came last)
    it = running[0] if running else iter(loader)
    epoch, start = loader.state_dict()["epoch"], loader.state_dict()["next_batch"]
    got = []
    for batch in it:
        got.append(batch.stream.tolist())
        state = loader.state_dict()  # (each batch counted once, by this pass only)
        assert (state["epoch"], state["next_batch"]) == (epoch, start + len(got))
    want = StreamLoader(streams, 2, 2, shuffle=True)
    want.set_epoch(epoch)
    assert got == [b.stream.tolist() for b in want][start:]
    loader.close()


def test_the_progress_read_while_another_thread_ends_the_pass_is_one_of_the_run(monkeypatch):
    # progress in one thread while another thread's pass (of an epoch resumed on other
    # rows: its batches are not those of the next epoch) reaches its end: the progress
    # before the end or after it, never the batches of one with the length of the other.
    from streamseq.plan.cursor import Cursor

    streams = [np.arange(n) for n in (9, 3, 5, 2, 8, 6)]
    narrow = StreamLoader(streams, 1, 2)
    it = iter(narrow)
    for _ in range(4):
        next(it)
    loader = StreamLoader(streams, 3, 2)
    loader.load_state_dict(narrow.state_dict())
    it = iter(loader)
    for _ in range(len(loader)):
        next(it)
    before = loader.progress
    original = Cursor.settled

    def settled_then_ended(cursor):
        monkeypatch.setattr(Cursor, "settled", original)
        now = original(cursor)
        next(it, None)  # (the other thread's pass reaches its end here)
        return now

    monkeypatch.setattr(Cursor, "settled", settled_then_ended)
    progress = loader.progress
    monkeypatch.setattr(Cursor, "settled", original)
    assert progress.done <= progress.total
    assert progress in (before, loader.progress)


def open_files(folder):
    """The files under ``folder`` that this process holds open (fds and memory maps)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return sorted(p for p in out if p.startswith(str(folder)))


def token_files(folder, lengths):
    paths = []
    for i, n in enumerate(lengths):
        path = folder / f"s{i}.bin"
        np.arange(n, dtype=np.int32).tofile(path)
        paths.append(path)
    return [streamseq.io.tokens(p, np.int32) for p in paths]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/fd")
@pytest.mark.parametrize("epochs", [1, 2])
def test_batches_read_by_index_leave_no_file_open_after_close(tmp_path, epochs):
    loader = StreamLoader(token_files(tmp_path, range(40, 140, 10)), 3, 8, shuffle=True)
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        assert loader[3].data.shape == (3, 8)
        assert loader[len(loader) - 1].data.shape == (3, 8)
    assert open_files(tmp_path)  # (open while the loader may read on)
    loader.close()
    assert open_files(tmp_path) == []
    assert loader[3].data.shape == (3, 8)  # (read again after, opened again)
    loader.close()
    assert open_files(tmp_path) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/fd")
@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("stop", ["end", "early"])
def test_thread_workers_leave_no_file_open_after_a_pass_and_close(tmp_path, persistent, stop):
    streams = token_files(tmp_path, range(40, 140, 10))
    loader = StreamLoader(
        streams, 3, 8, num_workers=2, method="thread", persistent_workers=persistent
    )
    if stop == "end":
        assert len(list(loader)) == len(loader)
    else:
        it = iter(loader)
        next(it)
        next(it)
        it.close()
    if not persistent:  # (the workers of the pass are gone: so are their files)
        assert open_files(tmp_path) == []
    loader.close()
    assert open_files(tmp_path) == []
