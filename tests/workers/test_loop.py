import contextlib
import threading

import pytest
import seqtools

from streamseq import WorkerError
from streamseq.workers.loop import HOOK, evaluate, run


class Listed:
    """A channel with its jobs given up front; it records what the worker did."""

    def __init__(self, jobs, listening=True):
        self.jobs, self.listening = list(jobs), listening
        self.results, self.built, self.spent = [], [], []

    def take(self):
        return self.jobs.pop(0) if self.jobs else None

    @contextlib.contextmanager
    def building(self):
        self.built.append("enter")
        yield
        self.built.append("exit")

    def put(self, item, ok, value, spent=(0.0, 0.0)):
        self.results.append((item, ok, value))
        self.spent.append(spent)
        return self.listening


def hook_failing(index):
    raise OSError(f"no device {index}")


def test_the_hook_runs_first_with_the_worker_index_then_every_job_in_order():
    calls = []
    channel = Listed([2, 0, 1])
    run([10, 11, 12], 5, calls.append, channel)
    assert calls == [5]
    assert channel.results == [(2, True, 12), (0, True, 10), (1, True, 11)]
    assert channel.built == ["enter", "exit"] * 3
    assert seqtools.seterr() == "wrap"  # the thread's setting, as it was


def test_a_failing_hook_is_the_only_result():
    channel = Listed([0, 1])
    run([10, 11], 1, hook_failing, channel)
    ((item, ok, error),) = channel.results
    assert (item, ok) == (HOOK, False) and isinstance(error, OSError)
    assert channel.jobs == [0, 1]  # no job taken


def test_errors_are_results_and_the_worker_goes_on():
    channel = Listed([5, 0])
    run([10], 0, None, channel)
    (item, ok, error), last = channel.results
    assert (item, ok) == (5, False) and isinstance(error, IndexError)
    assert last == (0, True, 10)


class Exits:
    def __getitem__(self, i):
        raise SystemExit(f"gave up at {i}")


def test_exits_end_the_evaluation_not_the_worker():
    ok, error = evaluate(Exits(), 3)
    assert not ok and isinstance(error, WorkerError)
    assert "item 3" in str(error) and "SystemExit: gave up at 3" in str(error)
    assert isinstance(error.__cause__, SystemExit)


def test_the_worker_stops_when_nobody_listens():
    channel = Listed([0, 1, 2], listening=False)
    run([10, 11, 12], 0, None, channel)
    assert channel.results == [(0, True, 10)] and channel.jobs == [1, 2]


def fails(x):
    raise KeyError(f"frame {x}")


def test_seqtools_sequences_raise_their_own_errors_in_a_worker():
    channel = Listed([1])
    seq = seqtools.smap(fails, [0, 1])
    with pytest.raises(seqtools.EvaluationError):  # seqtools' default, here
        seq[1]
    worker = threading.Thread(target=run, args=(seq, 0, None, channel))
    worker.start()
    worker.join(10)
    ((_, ok, error),) = channel.results
    assert not ok and type(error) is KeyError and "frame 1" in str(error)
    assert seqtools.seterr() == "wrap"  # (the calling thread's setting is its own)


ADDRESS = "https://alice:hunter2@host.example/a.bin?token=SECRET1"


class ExitsWithAddress:
    def __len__(self):
        return 1

    def __getitem__(self, item):
        raise SystemExit(f"cannot reach {ADDRESS}")


def test_an_exit_in_the_sequence_shows_no_credential_in_the_error_or_its_chain():
    import traceback

    ok, error = evaluate(ExitsWithAddress(), 0)
    assert not ok and isinstance(error, WorkerError)
    shown = "".join(traceback.format_exception(error))
    assert "SystemExit" in str(error) and "host.example" in str(error), str(error)
    assert "hunter2" not in shown and "SECRET1" not in shown, shown
