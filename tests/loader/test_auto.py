import gc
import logging
import time

import numpy as np
import pytest

from streamseq import StreamLoader
from streamseq.loader.config import auto_workers
from streamseq.loader.run import Trial
from tests.helpers import as_numpy, assert_same, live_children, no_children, raised_in_thread

pytestmark = pytest.mark.timeout(120)

STREAMS = [np.arange(100 * k, 100 * k + n) for k, n in enumerate((90, 60, 75, 36, 120, 48))]


def slow(steps, info):  # every read waits: workers in parallel are faster
    time.sleep(0.004)
    return steps


@pytest.fixture
def quick_trial(monkeypatch):
    """A trial that decides after a few batches (the streams here are short)."""
    monkeypatch.setattr(Trial, "MIN_BATCHES", 2)
    monkeypatch.setattr(Trial, "MAX_BATCHES", 3)
    monkeypatch.setattr(Trial, "MIN_SECONDS", 0.0)


def epochs(loader, count=3):
    return [as_numpy(loader) for _ in range(count)]


@pytest.mark.parametrize("transform", [None, slow], ids=["cheap", "slow"])
@pytest.mark.parametrize("persistent", [False, True])
def test_auto_batches_are_those_of_any_number_of_workers(quick_trial, transform, persistent):
    before = {c.pid for c in live_children()}  # (a resource tracker of other tests)
    expected = epochs(StreamLoader(STREAMS, 4, 5, shuffle=True, transform=transform))
    two = StreamLoader(STREAMS, 4, 5, shuffle=True, transform=transform, num_workers=2)
    for a, b in zip(epochs(two), expected, strict=True):
        assert_same(a, b)
    auto = StreamLoader(
        STREAMS,
        4,
        5,
        shuffle=True,
        transform=transform,
        num_workers="auto",
        persistent_workers=persistent,
    )
    assert auto.num_workers == "auto"
    got = epochs(auto)
    for a, b in zip(got, expected, strict=True):
        assert_same(a, b)
    assert type(auto.num_workers) is int and auto.num_workers >= 0
    if transform is slow and auto_workers() >= 2:  # reads that wait: workers are faster
        assert auto.num_workers > 0
    auto.close()
    gc.collect()
    assert no_children(before)


def test_auto_keeps_workers_when_reading_is_slow_and_says_so(quick_trial, caplog):
    loader = StreamLoader(STREAMS, 4, 5, transform=slow, num_workers="auto")
    with caplog.at_level(logging.INFO, logger="streamseq"):
        n = sum(1 for _ in loader)
    assert n == len(loader)
    chosen = [r.getMessage() for r in caplog.records if 'num_workers="auto" chose' in r.message]
    assert len(chosen) == 1, chosen
    assert type(loader.num_workers) is int
    assert loader.num_workers > 0 or auto_workers() == 1
    assert chosen[0].startswith(f'num_workers="auto" chose {loader.num_workers}:')
    loader.close()


class ClosingOnChoice(logging.Handler):
    """A handler that closes the loader when the trial says what it chose."""

    def __init__(self, loader):
        super().__init__(logging.INFO)
        self.loader, self.closed = loader, 0

    def emit(self, record):
        if 'num_workers="auto" chose' in record.getMessage():
            self.loader.close()
            self.closed += 1


def test_a_log_handler_closing_the_loader_on_the_choice_does_not_hang(quick_trial):
    loader = StreamLoader(STREAMS, 4, 5, transform=slow, num_workers="auto")
    handler = ClosingOnChoice(loader)
    log = logging.getLogger("streamseq")
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        error = raised_in_thread(
            lambda: list(loader), "closing the loader from a log handler hung"
        )
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    assert error is None and handler.closed == 1
    # the close ended that pass; the next one is a whole epoch from where it stopped
    assert sum(1 for _ in loader) <= len(loader)
    loader.close()


def test_auto_state_resumes_across_the_switch(quick_trial):
    expected = as_numpy(StreamLoader(STREAMS, 4, 5, transform=slow))
    loader = StreamLoader(STREAMS, 4, 5, transform=slow, num_workers="auto")
    it = iter(loader)
    got = []
    for _ in range(9):  # past the switch to workers (after 1 + 3 batches) and the choice
        got += as_numpy([next(it)])
    state = loader.state_dict()
    assert state["next_batch"] == 9
    for other in (0, 2, "auto"):
        again = StreamLoader(STREAMS, 4, 5, transform=slow, num_workers=other)
        again.load_state_dict(state)
        assert_same(got + as_numpy(again), expected)
        again.close()
    rest = as_numpy(it)
    assert_same(got + rest, expected)
    loader.close()


def test_auto_workers_do_not_outlive_the_loader(quick_trial):
    before = {c.pid for c in live_children()}
    loader = StreamLoader(STREAMS, 4, 5, transform=slow, num_workers="auto")
    it = iter(loader)
    for _ in range(6):  # with workers now (the trial's second way)
        next(it)
    del it, loader
    gc.collect()
    assert no_children(before)


@pytest.mark.parametrize("bad", ["many", "AUTO", ""])
def test_num_workers_auto_is_the_only_string(bad):
    with pytest.raises(ValueError, match='num_workers must be an integer >= 0 or "auto"'):
        StreamLoader(STREAMS, 2, 4, num_workers=bad)


def test_auto_copies_start_their_own_trial(quick_trial):
    import copy

    loader = StreamLoader(STREAMS, 4, 5, num_workers="auto")
    twin = copy.copy(loader)
    assert twin.num_workers == "auto" and twin._trial is not loader._trial
    for _ in range(2):
        for _ in loader:
            pass
    assert isinstance(loader.num_workers, int)
    assert copy.copy(loader).num_workers == loader.num_workers
    loader.close()


def test_auto_tells_the_workers_in_use_during_the_first_pass(quick_trial):
    loader = StreamLoader(STREAMS, 4, 5, transform=slow, num_workers="auto")
    tried = min(auto_workers(), 4)
    assert loader.workers_in_use == 0  # the trial starts in this process
    seen, settings = [], []
    for _ in loader:
        seen.append(loader.workers_in_use)
        settings.append(loader.num_workers)
    assert all(type(n) is int for n in seen)
    assert seen[0] == 0 and tried in seen  # this process, then the workers tried
    assert type(loader.num_workers) is int  # chosen within the pass (a quick trial)
    first = next(i for i, n in enumerate(settings) if n != "auto")
    assert all(n == loader.num_workers for n in settings[first:])
    assert seen[first:] == [loader.num_workers] * (len(seen) - first)
    assert loader.workers_in_use == loader.num_workers
    loader.close()


def test_workers_in_use_is_the_number_given():
    assert StreamLoader(STREAMS, 4, 5).workers_in_use == 0
    assert StreamLoader(STREAMS, 4, 5, num_workers=3, method="thread").workers_in_use == 3
    assert StreamLoader(STREAMS, 2, 5, num_workers=3, method="thread").workers_in_use == 2
