import re
import threading
import time

import numpy as np
import pytest

from streamseq import StreamLoader
from streamseq.errors import StreamError
from streamseq.gather import warm


class Slow:
    """A stream (not an array) that waits on every read, counting reads in flight."""

    inflight = 0
    most = 0
    lock = threading.Lock()

    def __init__(self, data, fail=False):
        self.data, self.fail = data, fail

    def __len__(self):
        return len(self.data)

    def __getitem__(self, key):
        cls = type(self)
        with cls.lock:
            cls.inflight += 1
            cls.most = max(cls.most, cls.inflight)
        try:
            time.sleep(0.02)
            if self.fail:
                raise OSError(f"cannot read {key}")
            return self.data[key]
        finally:
            with cls.lock:
                cls.inflight -= 1


def streams(n=6, fail=()):
    return [Slow(np.arange(10 + i) + 100 * i, fail=i in fail) for i in range(n)]


def batches(threads, monkeypatch, **kw):
    monkeypatch.setattr(warm, "THREADS", threads)
    Slow.most = 0
    loader = StreamLoader(streams(**kw), 6, 4, pin_memory=False)
    return [b.data.clone() for b in loader], Slow.most


def test_the_first_batch_reads_its_rows_concurrently(monkeypatch):
    concurrent, most = batches(8, monkeypatch)
    assert most > 1
    one_by_one, most = batches(1, monkeypatch)
    assert most == 1
    assert len(concurrent) == len(one_by_one)
    for a, b in zip(concurrent, one_by_one, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_failed_first_read_is_the_writers_error_in_row_order(monkeypatch):
    messages = []
    for threads in (1, 8):
        monkeypatch.setattr(warm, "THREADS", threads)
        loader = StreamLoader(streams(fail=(3, 4)), 6, 4, pin_memory=False)
        with pytest.raises(StreamError, match="cannot read") as error:
            next(iter(loader))
        messages.append(re.sub(r" at 0x[0-9a-f]+", "", str(error.value)))
    assert messages[0] == messages[1]


def test_shared_sources_are_left_to_the_writer():
    from streamseq import interleave_streams, tbin
    from streamseq.gather.writer import BatchWriter

    one = Slow(np.arange(8))
    rows = interleave_streams([one, one], 2)
    table = BatchWriter([tbin(r, 2) for r in rows], "zeros", 2)
    assert warm.first_reads(table.rows, table.first_list, table.positions(0, 1), 0) == {}
