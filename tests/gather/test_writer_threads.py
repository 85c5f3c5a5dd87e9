"""The batch writer read from several threads at once: every batch as read alone."""

import sys
import threading
from unittest import mock

import numpy as np
import pytest

from streamseq import interleave_streams, tbin, zip_batch
from streamseq.gather import writer
from streamseq.testing import coded_streams

LENGTHS = [37, 12, 55, 8, 23, 41, 5, 30, 19, 60]


class ListStream:
    """A stream that is not an array: read through the rows, row by row."""

    def __init__(self, a):
        self.a = a

    def __len__(self):
        return len(self.a)

    def __getitem__(self, key):
        return self.a[key]


def correct(batch):
    ok = batch.valid
    return np.array_equal(batch.data[ok], batch.stream[ok] * 2**32 + batch.step[ok] + 1)


@pytest.fixture
def switch_often():
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    yield
    sys.setswitchinterval(interval)


@pytest.mark.parametrize("kind", ["compiled", "numpy", "sequence"])
def test_threads_reading_a_new_zip_at_once_get_the_batches_read_alone(kind, switch_often):
    """The first batches of a zip, read from 8 threads at once (its state made once)."""
    streams = coded_streams(LENGTHS)
    if kind == "sequence":
        streams = [ListStream(s) for s in streams]
    parts = [tbin(r, 3) for r in interleave_streams(streams, 4, tbins=3)]
    threads, rounds = 8, 80 if kind == "sequence" else 300
    failures, checks = [], [0]
    compiled = writer.fill if kind == "compiled" else None
    if kind == "compiled" and compiled is None:
        pytest.skip("the compiled batch assembly is not built")
    with mock.patch.object(writer, "fill", compiled):
        for _ in range(rounds):
            batches = zip_batch(parts)
            n = len(batches)
            start = threading.Barrier(threads, timeout=10)

            def read(s, batches=batches, n=n, start=start):
                try:
                    start.wait()
                    for k in range(s % n, n, threads)[:4]:
                        if not correct(batches[k]):
                            failures.append(f"batch {k}: wrong data")
                        checks[0] += 1
                except Exception as e:
                    failures.append(f"{type(e).__name__}: {e}")

            group = [threading.Thread(target=read, args=(s,)) for s in range(threads)]
            for t in group:
                t.start()
            for t in group:
                t.join(10)
            assert not any(t.is_alive() for t in group)
            if failures:
                break
    assert failures == []
    assert checks[0] >= rounds * threads
