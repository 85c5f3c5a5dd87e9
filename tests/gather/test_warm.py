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


class Local(Slow):
    """A stream of a local file: its reads wait on nothing but this process's work."""

    on_network = False


@pytest.mark.parametrize("on_network", [False, True, None])
def test_in_a_worker_process_only_reads_that_wait_on_a_network_are_concurrent(
    monkeypatch, on_network
):
    # A worker process shares the cores with the others: the first reads of local files
    # are left to the writer (one by one); those of files at URLs (and of streams that
    # do not say) still overlap their waits. The batches are the same either way.
    kind = {False: Local, True: type("Remote", (Slow,), {"on_network": True}), None: Slow}
    cls = kind[on_network]
    monkeypatch.setattr(warm.multiprocessing, "parent_process", lambda: object())
    cls.most = 0
    made = [cls(np.arange(10 + i) + 100 * i) for i in range(6)]
    got = [b.data.clone() for b in StreamLoader(made, 6, 4, pin_memory=False)]
    assert (cls.most == 1) == (on_network is False)
    want, _ = batches(1, monkeypatch)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_source_is_on_a_network_when_its_file_is_at_a_url_or_unknown(tmp_path):
    from streamseq.io import video
    from streamseq.io._base import Source
    from tests.io.media import write_video

    path = tmp_path / "a.mp4"
    write_video(path, n=4)
    assert video(str(path)).on_network is False

    class At(Source):
        def __init__(self, path=None):
            super().__init__()
            if path is not None:
                self.path = path

    assert At("https://host/a.mp4").on_network and not At(str(path)).on_network
    assert At().on_network  # (a source that names no file: what it waits on is not known)


class Unsure(Slow):
    """A stream whose ``on_network`` cannot say: it raises, or is not a bool."""

    answer = None

    @property
    def on_network(self):
        if Unsure.answer is None:
            raise RuntimeError("cannot tell")
        return Unsure.answer


@pytest.mark.parametrize("answer", [None, np.array([True, False])], ids=["raises", "array"])
def test_in_a_worker_process_a_stream_that_cannot_say_counts_as_on_a_network(monkeypatch, answer):
    # ``on_network`` only decides whether the first reads overlap: one that raises or is
    # no bool is taken as "on a network" (what a stream that does not say is), the
    # batches are those of a stream read one by one, never an error of the warm-up.
    monkeypatch.setattr(Unsure, "answer", answer)
    monkeypatch.setattr(warm.multiprocessing, "parent_process", lambda: object())
    Unsure.most = 0
    made = [Unsure(np.arange(10 + i) + 100 * i) for i in range(6)]
    got = [b.data.clone() for b in StreamLoader(made, 6, 4, pin_memory=False)]
    assert Unsure.most > 1
    want, _ = batches(1, monkeypatch)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
