import copy
import logging
import time

import numpy as np
import pytest

from streamseq import StreamLoader
from streamseq.loader import PassStats

pytestmark = pytest.mark.timeout(120)

STREAMS = [np.arange(n) for n in (40, 30, 25, 33, 17, 28)]
SLEEP = 0.05


def slow_read(steps, info):
    """A transform that makes reading slow: each slice of a stream takes SLEEP seconds."""
    time.sleep(SLEEP)
    return steps


def run(loader, model_seconds=0.0):
    """One pass, a model step of ``model_seconds`` a batch; the valid masks delivered."""
    valid = []
    for batch in loader:
        valid.append(batch.valid.numpy().copy())
        if model_seconds:
            time.sleep(model_seconds)
    return valid


@pytest.mark.parametrize("workers", [0, 2])
def test_a_slow_model_with_a_fast_loader_hardly_waits(workers):
    # two blocks in flight (max_buffered=4): the workers get ahead and then wait
    loader = StreamLoader(STREAMS, 4, 4, num_workers=workers, max_buffered=4)
    try:
        run(loader, model_seconds=SLEEP)
        stats = loader.stats
    finally:
        loader.close()
    assert stats.wait_fraction < 0.3, stats
    assert stats.seconds >= stats.batches * SLEEP
    assert len(stats.workers) == workers
    for w in stats.workers:  # they waited for the model to take their blocks
        assert w.idle_seconds > w.read_seconds, stats


@pytest.mark.parametrize("workers", [0, 2])
def test_a_fast_model_with_slow_reads_waits_nearly_all_the_time(workers):
    loader = StreamLoader(STREAMS, 4, 4, num_workers=workers, transform=slow_read)
    try:
        run(loader)
        stats = loader.stats
    finally:
        loader.close()
    assert stats.wait_fraction > 0.7, stats
    assert len(stats.workers) == workers
    for w in stats.workers:
        assert w.read_seconds > w.idle_seconds, stats
        assert w.blocks > 0


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"num_workers": 2},
        {"num_workers": 2, "method": "thread"},
        {"num_workers": 2, "persistent_workers": True},
        {"num_workers": 1, "time_major": True, "pad": "pack"},
    ],
)
def test_the_figures_are_those_of_the_batches_delivered(options):
    loader = StreamLoader(STREAMS, 4, 4, shuffle=True, **options)
    try:
        for epoch in range(2):
            valid = run(loader)
            stats = loader.stats
            assert stats.epoch == epoch and not stats.running
            assert stats.batches == len(valid) == len(loader)
            assert stats.steps == sum(int(v.sum()) for v in valid) == sum(map(len, STREAMS))
            assert stats.padding_steps == sum(int((~v).sum()) for v in valid)
            assert 0 <= stats.wait_seconds <= stats.seconds
            assert stats.steps_per_second == pytest.approx(stats.steps / stats.seconds)
            assert stats.wait_fraction == pytest.approx(stats.wait_seconds / stats.seconds)
            assert len(stats.workers) == options.get("num_workers", 0)
            assert all(w.blocks > 0 for w in stats.workers)
    finally:
        loader.close()


@pytest.fixture
def pinning(monkeypatch):
    """The pinning thread's code path on a machine without CUDA (memory not page-locked)."""
    import torch

    from streamseq.deliver import assemble
    from streamseq.deliver import torch as to_torch

    def empty(shape, dtype, pin):
        return torch.empty(shape, dtype=to_torch.torch_dtype(np.dtype(dtype)))

    monkeypatch.setattr(assemble, "can_pin", lambda: True)
    monkeypatch.setattr(assemble, "empty", empty)


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_pinned_by_the_background_thread_are_counted_when_delivered(pinning, workers):
    loader = StreamLoader(STREAMS, 4, 4, num_workers=workers, pin_memory=True)
    try:
        it = iter(loader)
        first = next(it)
        time.sleep(0.1)  # the thread prepares batches ahead meanwhile
        stats = loader.stats
        assert stats.batches == 1 and stats.steps == int(first.valid.sum())
        valid = [first.valid.numpy().copy(), *(b.valid.numpy().copy() for b in it)]
        stats = loader.stats
    finally:
        loader.close()
    assert stats.batches == len(valid) == len(loader)
    assert stats.steps == sum(int(v.sum()) for v in valid)
    assert stats.padding_steps == sum(int((~v).sum()) for v in valid)


def test_figures_of_the_pass_in_progress_then_of_the_last_one():
    loader = StreamLoader(STREAMS, 4, 4)
    before = loader.stats
    assert (before.batches, before.seconds, before.wait_fraction, before.running) == (
        0,
        0.0,
        0.0,
        False,
    )
    it = iter(loader)
    next(it), next(it)
    now = loader.stats
    assert now.running and now.batches == 2
    time.sleep(0.01)
    assert loader.stats.seconds > now.seconds  # so far: the clock runs
    for _ in it:
        pass
    last = loader.stats
    assert not last.running and last.batches == len(loader)
    assert loader.stats.seconds == last.seconds  # an ended pass is done counting
    unused = iter(loader)  # (tqdm.auto makes one and never uses it)
    assert loader.stats == last
    del unused


@pytest.mark.parametrize("method", ["process", "thread"])
def test_persistent_workers_count_each_pass_apart_and_not_the_time_between(method):
    loader = StreamLoader(
        STREAMS, 4, 4, num_workers=2, method=method, persistent_workers=True, shuffle=True
    )
    try:
        run(loader)
        first = loader.stats
        time.sleep(0.5)  # between two passes: the workers idle, unasked
        start = time.perf_counter()
        run(loader)
        wall = time.perf_counter() - start
        second = loader.stats
    finally:
        loader.close()
    assert (first.epoch, second.epoch) == (0, 1)
    assert second.batches == len(loader)
    for w in second.workers:  # idle within the pass only: never the 0.5 s gap before it
        assert 0 < w.blocks and w.idle_seconds <= second.seconds + 0.05, second
    assert second.seconds <= wall  # the pass's own time, never the gap before it


def test_a_pass_ends_with_one_log_line(caplog):
    loader = StreamLoader(STREAMS, 4, 4, num_workers=1, method="thread")
    with caplog.at_level(logging.INFO, logger="streamseq"):
        run(loader)
        it = iter(loader)
        next(it)
        loader.close()  # a pass stopped early logs what it did
    lines = [r for r in caplog.records if r.name == "streamseq"]
    assert [r.levelno for r in lines] == [logging.INFO, logging.INFO]
    first, stopped = (r.getMessage() for r in lines)
    assert first.startswith(f"pass ended, epoch 0: {len(loader)} batches, ")
    assert "steps/s; waited" in first and "worker 0 read" in first
    assert stopped.startswith("pass stopped, epoch 1: 1 batches, ")


def test_a_copy_has_figures_of_its_own():
    loader = StreamLoader(STREAMS, 4, 4)
    run(loader)
    again = copy.deepcopy(loader)
    assert loader.stats.batches == len(loader)
    assert again.stats.batches == 0


def test_the_figures_read_well():
    stats = PassStats(2, 10, 900, 100, 2.0, 1.5)
    assert "wait_fraction 0.75" in repr(stats)
    assert stats.postfix() == {"steps/s": "450", "wait": "75%"}
    assert PassStats(0).steps_per_second == PassStats(0).wait_fraction == 0.0
