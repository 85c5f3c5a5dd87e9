import collections
import multiprocessing
import pickle
import select

import numpy as np
import pytest

from streamseq import StreamError, WorkerError
from streamseq.workers.wire import Packed, Poller, dump_error, load_error, message, pack


class TwoArgError(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a} and {b}")


def raised(error, cause=None):
    try:
        try:
            raise cause if cause is not None else ValueError("no cause")
        except Exception as inner:
            if cause is None:
                raise error from None
            raise error from inner
    except Exception as e:
        return e


def test_an_error_travels_as_itself_with_its_causes_and_the_worker_traceback():
    error = raised(StreamError("opening failed", 3, "open('a')"), FileNotFoundError("a"))
    again = load_error(dump_error(error))
    assert type(again) is StreamError and str(again) == str(error)
    assert (again.index, again.stream) == (3, "open('a')")
    assert type(again.__cause__) is FileNotFoundError and str(again.__cause__) == "a"
    (note,) = again.__notes__
    assert note.startswith("raised in a worker process:") and "raise error from inner" in note


def test_the_error_sent_is_left_as_it_was():
    error = raised(KeyError("k"), OSError("disk"))
    cause, traceback = error.__cause__, error.__traceback__
    dump_error(error)
    assert error.__cause__ is cause and error.__traceback__ is traceback


def test_an_error_that_would_not_unpickle_is_described_with_the_traceback():
    error = raised(TwoArgError("this", "that"))
    again = load_error(dump_error(error))
    assert type(again) is WorkerError
    assert str(again).startswith("TwoArgError: this and that (not sent as itself: TypeError")
    assert "raise error from None" in str(again)  # the worker's traceback
    assert not getattr(again, "__notes__", None)  # (not twice)


def test_a_cause_that_would_not_unpickle_is_described_and_the_error_kept():
    error = raised(KeyError("frame 3"), TwoArgError("this", "that"))
    again = load_error(dump_error(error))
    assert type(again) is KeyError
    assert type(again.__cause__) is WorkerError and "TwoArgError" in str(again.__cause__)


def test_long_chains_of_causes_are_cut():
    error = ValueError(0)
    for k in range(1, 20):
        error = raised(ValueError(k), error)
    again, depth = load_error(dump_error(error)), 0
    while again is not None:
        again, depth = again.__cause__, depth + 1
    assert depth == 8


Pair = collections.namedtuple("Pair", "a b")


@pytest.mark.parametrize("kind", [tuple, Pair._make])
def test_tuples_of_arrays_travel_as_buffers(kind):
    value = kind([np.arange(6).reshape(2, 3), np.ones(4, np.float32)])
    packed = pack(value)
    assert type(packed) is Packed
    buffers = []
    payload = pickle.dumps(packed, protocol=5, buffer_callback=buffers.append)
    again = pickle.loads(payload, buffers=buffers)
    assert type(again) is type(value)
    assert all((x == y).all() and x.dtype == y.dtype for x, y in zip(again, value, strict=True))


@pytest.mark.parametrize(
    "value", [(), [np.zeros(2)], (np.zeros(2), 1), (np.zeros((2, 2)).T,), (np.zeros(2, "O"),)]
)
def test_other_values_are_left_to_pickle(value):
    assert pack(value) is value


def test_messages_are_plain_pickles():
    assert pickle.loads(message((1, True, None, [], b"x"))) == (1, True, None, [], b"x")


@pytest.mark.parametrize("with_poll", [True, False])
def test_poller_tells_readable_and_closed_pipes(monkeypatch, with_poll):
    if not with_poll:
        monkeypatch.delattr(select, "poll")
    rx, tx = multiprocessing.Pipe(duplex=False)
    poller = Poller([rx])
    assert (poller.poller is not None) == with_poll
    assert poller.wait(0) == []
    tx.send_bytes(b"x")
    assert poller.wait(1) == [rx] and rx.recv_bytes() == b"x"
    assert poller.wait(0.01) == []
    tx.close()
    assert poller.wait(1) == [rx]  # the writer is gone: the next read says so
    with pytest.raises(EOFError):
        rx.recv_bytes()
    rx.close()
