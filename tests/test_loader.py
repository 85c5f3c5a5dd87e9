import functools
import os
import re
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
import torch
from helpers import as_numpy, assert_same, assume_rows_filled, live_children, no_children
from hypothesis import given, settings
from hypothesis import strategies as st

from streamseq import StreamError, StreamLoader, WorkerError, WorkerTimeout
from streamseq.errors import SourceError
from streamseq.testing import check_continuity, coded_streams, layouts


@given(layouts(), st.sampled_from(["zeros", "drop", "wrap"]), st.booleans())
def test_in_process_continuity_and_data(layout, pad, shuffle):
    assume_rows_filled(layout, pad)
    streams = coded_streams(layout.lengths, (2,))
    loader = StreamLoader(streams, layout.batch_size, layout.tbins, pad=pad, shuffle=shuffle)
    n = len(loader)
    batches = list(loader)
    assert len(batches) == n
    assert all(isinstance(b.data, torch.Tensor) for b in batches)
    check_continuity(
        batches,
        layout.lengths,
        sources=streams,
        complete=pad != "drop",
        allow_repeats=pad == "wrap",
    )


@settings(max_examples=8)
@given(layouts(max_streams=10), st.sampled_from(["zeros", "drop", "wrap"]), st.booleans())
def test_batches_do_not_depend_on_workers_or_backend(layout, pad, shuffle):
    assume_rows_filled(layout, pad)
    streams = coded_streams(layout.lengths)
    kwargs = dict(pad=pad, shuffle=shuffle, seed=5)
    reference = as_numpy(StreamLoader(streams, layout.batch_size, layout.tbins, **kwargs))
    for workers, method in [
        (1, "process"),
        (2, "process"),
        (3, "process"),
        (2, "thread"),
        (3, "thread"),
    ]:
        loader = StreamLoader(
            streams, layout.batch_size, layout.tbins, num_workers=workers, method=method, **kwargs
        )
        assert_same(as_numpy(loader), reference)


@given(layouts(max_streams=10), st.data())
def test_random_access_equals_iteration(layout, data):
    streams = coded_streams(layout.lengths)
    loader = StreamLoader(streams, layout.batch_size, layout.tbins)
    batches = as_numpy(loader)
    i = data.draw(st.integers(-len(batches), len(batches) - 1))
    assert_same([tuple(f.numpy() for f in loader[i])], [batches[i]])


def test_text_rows_continue_across_batches_with_two_workers():
    texts = [
        np.frombuffer("".join(f"{c}_{i};" for i in range(30)).encode(), np.uint8)
        for c in "abcdefghij"
    ]
    loader = StreamLoader(texts, batch_size=4, tbins=8, num_workers=2)
    rows = ["" for _ in range(4)]
    for batch in loader:
        for r in range(4):
            rows[r] += bytes(batch.data[r][batch.valid[r]].tolist()).decode()
    assert rows[0].startswith("a_0;a_1;a_2;")
    assert sorted("".join(rows)) == sorted(b"".join(t.tobytes() for t in texts).decode())


def test_time_major_layout():
    streams = coded_streams([5, 3, 4], (2,))
    a = list(StreamLoader(streams, 2, 3))
    b = list(StreamLoader(streams, 2, 3, time_major=True, num_workers=2))
    for x, y in zip(a, b, strict=True):
        assert y.data.shape == (3, 2, 2)
        assert torch.equal(x.data.transpose(0, 1), y.data)
        assert torch.equal(x.valid.T, y.valid) and torch.equal(x.reset, y.reset)
    check_continuity(b, [5, 3, 4], sources=streams, time_major=True)


def test_pin_memory_without_cuda_warns_and_delivers_tensors():
    streams = coded_streams([5, 3, 4])
    loader = StreamLoader(streams, 2, 3, pin_memory=True, num_workers=1)
    import streamseq.deliver.torch

    streamseq.deliver.torch._warned.clear()
    if torch.cuda.is_available():
        batches = list(loader)
        assert all(b.data.is_pinned() for b in batches)
    else:
        with pytest.warns(RuntimeWarning, match="CUDA is not available"):
            batches = list(loader)
    check_continuity(batches, [5, 3, 4], sources=streams)


def test_dict_data_streams():
    class Pairs:
        def __init__(self, n):
            self.n = n

        def __len__(self):
            return self.n

        def __getitem__(self, key):
            k = np.arange(self.n)[key]
            return {"frame": np.stack([k, k], axis=1).astype(np.float32), "label": k}

    loader = StreamLoader([Pairs(5), Pairs(3)], 2, 2, num_workers=2)
    batches = list(loader)
    assert batches[0].data["frame"].shape == (2, 2, 2)
    assert batches[2].data["label"].tolist() == [[4, 0], [0, 0]]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"batch_size": 0}, "batch_size"),
        ({"tbins": 0}, "tbins"),
        ({"num_workers": -1}, "num_workers"),
        ({"pad": "reflect"}, "unknown pad mode"),
        ({"method": "gpu"}, "unknown method"),
        ({"num_workers": 2, "max_buffered": 3}, "max_buffered too small"),
        ({"rank": 2, "world_size": 2}, "rank"),
        ({"rank": 0}, "both rank and world_size"),
        ({"lengths": [1]}, "lengths given"),
        ({"timeout": -1.5}, "timeout must be > 0"),
    ],
)
def test_bad_arguments_are_value_errors(kwargs, message):
    args = dict(streams=coded_streams([3, 4]), batch_size=2, tbins=2)
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        StreamLoader(**args)


def test_no_streams_and_only_empty_streams():
    with pytest.raises(ValueError, match="no streams"):
        StreamLoader([], 2, 2)
    with pytest.raises(ValueError, match="empty"):
        StreamLoader([np.arange(0)], 2, 2)


def broken_opener(path):
    raise FileNotFoundError(f"no such recording: {path}")


def test_opener_failing_in_the_main_process_names_the_stream():
    openers = [functools.partial(np.arange, 4), functools.partial(broken_opener, "x.bin")]
    with pytest.raises(StreamError, match=r"stream 1 \(.*broken_opener.*x\.bin.*\)") as e:
        StreamLoader(openers, 2, 2)
    assert isinstance(e.value.__cause__, FileNotFoundError)


@pytest.mark.parametrize("method", ["process", "thread"])
def test_opener_failing_in_a_worker_names_the_stream_and_leaves_no_worker(method):
    before = {c.pid for c in live_children()}
    openers = [
        functools.partial(np.arange, 4),
        functools.partial(broken_opener, "y.bin"),
        functools.partial(np.arange, 6),
    ]
    loader = StreamLoader(openers, 3, 2, num_workers=3, lengths=[4, 5, 6], method=method)
    with pytest.raises(StreamError, match=r"stream 1 \(.*y\.bin.*\): opening failed") as e:
        list(loader)
    assert isinstance(e.value.__cause__, FileNotFoundError)
    assert "no such recording: y.bin" in str(e.value.__cause__)
    assert no_children(before)


def test_stream_shorter_than_declared_fails_in_a_worker():
    before = {c.pid for c in live_children()}
    streams = [np.arange(4), functools.partial(np.arange, 3)]
    loader = StreamLoader(streams, 2, 2, num_workers=2, lengths=[4, 6])
    with pytest.raises(StreamError, match="stream 1.*declared length 6 but the stream has 3"):
        list(loader)
    assert no_children(before)


def test_workers_stop_when_the_loop_breaks():
    before = {c.pid for c in live_children()}
    loader = StreamLoader(coded_streams([50] * 8), 4, 2, num_workers=2)
    for i, _ in enumerate(loader):
        if i == 2:
            assert len(live_children()) >= len(before) + 2
            break
    assert no_children(before)


def test_openers_run_in_the_worker_process():
    loader = StreamLoader(
        [functools.partial(_pid_stream, 6)] * 2, 2, 3, num_workers=2, lengths=[6, 6]
    )
    pids = {int(p) for b in loader for p in b.data[b.valid].tolist()}
    assert os.getpid() not in pids and len(pids) == 2


def _pid_stream(n):
    return np.full(n, os.getpid(), dtype=np.int64)


SPAWN_SCRIPT = """
import functools, multiprocessing
import numpy as np
from streamseq import StreamLoader
from streamseq.testing import check_continuity

if __name__ == "__main__":
    multiprocessing.set_start_method("spawn")
    lengths = [7, 5, 9]
    streams = [functools.partial(np.arange, n) for n in lengths]
    for method in ("process", "thread"):
        batches = list(StreamLoader(streams, 2, 3, num_workers=2, method=method))
        check_continuity(batches, lengths, sources=[np.arange(n) for n in lengths])
    print("spawn ok", multiprocessing.get_start_method())
"""


def test_spawn_start_method_works(tmp_path):
    script = tmp_path / "spawned.py"
    script.write_text(SPAWN_SCRIPT)
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "spawn ok spawn" in out.stdout


class RecordedReads:
    """``np.arange(n)``, recording the slices read."""

    def __init__(self, n):
        self.n, self.reads = n, []

    def __len__(self):
        return self.n

    def __getitem__(self, key):
        self.reads.append((key.start, key.stop))
        return np.arange(self.n)[key]


def test_the_data_spec_is_read_once_per_loader_not_per_epoch():
    first = RecordedReads(7)
    loader = StreamLoader([np.arange(0), first, np.arange(5)], 2, 3, shuffle=True)
    for epoch in range(3):
        loader.set_epoch(epoch)
        assert len(loader) > 0
    assert first.reads == []  # planning an epoch reads nothing
    for epoch in range(3):
        loader.set_epoch(epoch)
        list(loader)
    assert first.reads.count((0, 1)) == 1  # one step, read once for the dtype and shape


class Floats:
    """A stream that is not an array, of float64 steps."""

    def __len__(self):
        return 10

    def __getitem__(self, key):
        return np.full((10, 3), 0.5)[key]

    def __repr__(self):
        return "Floats()"


def dict_stream(n, label_dtype):
    class Pairs:
        def __len__(self):
            return n

        def __getitem__(self, key):
            k = np.arange(n)[key]
            return {"x": np.ones((len(k), 3)), "label": k.astype(label_dtype)}

    return Pairs()


MISFITS = [
    (
        np.full((10, 3), 0.7),
        r"stream 1 \(ndarray.*float64\)\): dtype float64 differs from the first stream's int64",
    ),
    (
        np.ones((10, 1), np.int64),
        r"stream 1 .*: step shape \(1,\) differs from the first stream's \(3,\)",
    ),
    (
        np.ones((10, 4), np.int64),
        r"stream 1 .*: step shape \(4,\) differs from the first stream's \(3,\)",
    ),
    (
        np.ones(10, np.int64),
        r"stream 1 .*: step shape \(\) differs from the first stream's \(3,\)",
    ),
    (
        Floats(),
        r"stream 1 \(Floats\(\)\): steps 0:\d+: dtype float64 differs from the first stream.s int64",  # noqa: E501
    ),
]


@pytest.mark.parametrize("workers, method", [(0, "process"), (2, "process"), (2, "thread")])
@pytest.mark.parametrize("rows", [3, 1])  # the misfit starts a row, or follows in its row
@pytest.mark.parametrize("misfit, message", MISFITS)
def test_a_stream_of_another_dtype_or_step_shape_is_an_error(
    misfit, message, rows, workers, method
):
    streams = [np.ones((10, 3), np.int64), misfit, np.ones((4, 3), np.int64)]
    with pytest.raises(StreamError, match=message):  # arrays when built, others when read
        list(StreamLoader(streams, rows, 4, num_workers=workers, method=method))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_float_stream_among_int_streams_is_not_delivered_as_zeros(workers):
    streams = [np.arange(1, 11), np.full(10, 0.7), np.arange(1, 5)]
    with pytest.raises(StreamError, match="stream 1 .*dtype float64 differs"):
        list(StreamLoader(streams, 3, 4, num_workers=workers))


@pytest.mark.parametrize("workers", [0, 2])
def test_dict_streams_are_checked_leaf_by_leaf(workers):
    streams = [dict_stream(5, np.int64), dict_stream(3, np.int64), dict_stream(4, np.float32)]
    loader = StreamLoader(streams, 1, 2, num_workers=workers)
    with pytest.raises(StreamError, match=r"stream 2 .*\['label'\]: dtype float32 differs"):
        list(loader)


def test_big_endian_streams_give_the_same_batches_for_any_number_of_workers(tmp_path):
    from streamseq.io import tokens

    paths = []
    for k, n in enumerate([20, 7, 13]):
        paths.append(tmp_path / f"{k}.bin")
        (np.arange(n) + 100 * k).astype(">u2").tofile(paths[-1])
    streams = [tokens(p, ">u2") for p in paths] + [np.arange(300, 305, dtype="<u2")]
    reference = None
    for workers, method, pin in [
        (0, "process", False),
        (0, "process", True),
        (1, "process", False),
        (2, "thread", True),
    ]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pin_memory without CUDA
            loader = StreamLoader(
                streams, 2, 4, num_workers=workers, method=method, pin_memory=pin
            )
            batches = list(loader)
        assert all(b.data.dtype == torch.uint16 for b in batches)
        got = [tuple(f.numpy() for f in b) for b in batches]
        if reference is None:
            reference = got
            check_continuity(batches, [20, 7, 13, 5], sources=[np.asarray(s[:]) for s in streams])
        assert_same(got, reference)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_new_iteration_makes_the_one_in_progress_an_error(workers):
    loader = StreamLoader(coded_streams([7, 3, 12, 1, 5, 9]), 2, 3, num_workers=workers)
    n = len(loader)
    with pytest.raises(RuntimeError, match="superseded by a new iter"):
        list(zip(loader, loader, strict=True))
    first = iter(loader)
    next(first)
    second = iter(loader)
    with pytest.raises(RuntimeError, match="superseded"):
        next(first)
    assert len(list(second)) == n
    with pytest.raises(RuntimeError, match="superseded"):
        next(first)  # it delivered a batch: an error even after the newer pass ended
    with pytest.raises(RuntimeError, match="superseded"):
        for _ in loader:
            for _ in loader:
                pass
    ended = iter(loader)
    assert len(list(ended)) == n
    assert len(list(loader)) == n
    assert next(ended, None) is None  # a pass that ended stays ended
    closed = iter(loader)
    next(closed)
    loader.close()
    assert next(closed, None) is None  # so does a pass closed on purpose
    unused = iter(loader)
    assert len(list(loader)) == n
    assert next(unused, None) is None  # never used, its successor ended: exhausted


def test_index_errors_show_the_index_given():
    loader = StreamLoader(coded_streams([7, 3, 12, 1, 5]), 2, 3)
    n = len(loader)
    for i in (n, -n - 1):
        with pytest.raises(IndexError, match=rf"^batch {i} out of range for {n} batches$"):
            loader[i]


class Truncated(RecordedReads):
    """A source whose reads past step 5 fail with its own SourceError."""

    def __getitem__(self, key):
        if key.stop > 5:
            self.reads.append((key.start, key.stop))
            raise SourceError("clip.bin", "truncated after 5 steps")
        return super().__getitem__(key)


class FloatReads(RecordedReads):
    def __getitem__(self, key):
        return super().__getitem__(key) + 0.5


@pytest.mark.parametrize("workers", [0, 2])
def test_a_stream_error_while_gathering_a_batch_is_raised_without_reading_again(workers):
    bad = Truncated(10)
    loader = StreamLoader([np.arange(8), bad], 2, 3, num_workers=workers, method="thread")
    with pytest.raises(SourceError, match="clip.bin: truncated after 5 steps"):
        list(loader)
    assert bad.reads.count((3, 6)) == 1
    floats = FloatReads(6)
    loader = StreamLoader([np.arange(8), floats], 2, 3, num_workers=workers, method="thread")
    with pytest.raises(StreamError, match="stream 1 .*dtype float64 differs"):
        list(loader)
    assert floats.reads.count((0, 3)) == 1


def dict_streams(lengths):
    return [
        {"x": s, "y": (s * 2).astype(np.float32)[:, None].repeat(3, 1)}
        for s in coded_streams(lengths)
    ]


@settings(max_examples=15)
@given(layouts(max_streams=8), st.sampled_from(["zeros", "drop", "wrap"]), st.integers(0, 2))
def test_dict_streams_through_every_pad_mode(layout, pad, workers):
    assume_rows_filled(layout, pad)
    streams = dict_streams(layout.lengths)
    loader = StreamLoader(
        streams, layout.batch_size, layout.tbins, pad=pad, num_workers=workers, method="thread"
    )
    batches = list(loader)
    assert all(set(b.data) == {"x", "y"} for b in batches)
    for key in ("x", "y"):
        check_continuity(
            [b._replace(data=b.data[key]) for b in batches],
            layout.lengths,
            sources=[s[key] for s in streams],
            complete=pad != "drop",
            allow_repeats=pad == "wrap",
        )
    assert_same(batches, list(StreamLoader(streams, layout.batch_size, layout.tbins, pad=pad)))


def test_tuple_streams_and_time_major_pinned_dicts():
    streams = [(np.arange(5), np.arange(5.0) * 2), (np.arange(3), np.arange(3.0) * 2)]
    (batch,) = StreamLoader(streams, 2, 5)[:1]
    assert batch.data[0].tolist() == [[0, 1, 2, 3, 4], [0, 1, 2, 0, 0]]
    assert batch.data[1][1].tolist() == [0, 2, 4, 0, 0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = StreamLoader(
            dict_streams([4, 6]), 2, 3, time_major=True, pin_memory=True, num_workers=2
        )
        batches = list(loader)
    assert batches[0].data["y"].shape == (3, 2, 3) and batches[0].valid.shape == (3, 2)


def test_a_dict_stream_of_unequal_arrays_is_an_error():
    with pytest.raises(ValueError, match="disagree on the number of steps"):
        StreamLoader([{"x": np.arange(3), "y": np.arange(4)}], 1, 2)


def test_a_dict_stream_with_other_keys_names_the_stream():
    streams = [{"x": np.arange(4)}, {"z": np.arange(4)}]
    with pytest.raises(StreamError, match=r"stream 1 .*dict with keys \['z'\]"):
        list(StreamLoader(streams, 2, 2))


class SlowReads:
    """An array stream whose reads take a little time (so threads interleave)."""

    def __init__(self, a):
        self.a = a

    def __len__(self):
        return len(self.a)

    def __getitem__(self, key):
        time.sleep(0.0002)
        return self.a[key]


def coded_correct(b):
    """Whether every valid step of batch ``b`` holds the code of its stream and step."""
    ok = b.valid.numpy()
    expected = b.stream.numpy()[ok] * 2**32 + b.step.numpy()[ok] + 1
    return np.array_equal(b.data.numpy()[ok], expected)


def index_and_iterate(loader, threads, passes, epochs=False, checks_each=1):
    """Iterate ``loader`` ``passes`` times while ``threads`` threads index it at random.

    With ``epochs``, one more thread sets the epoch meanwhile. Returns the failures (an
    exception of any thread, or a wrong batch) and the batches each indexing thread
    checked; every thread is joined.
    """
    import threading

    n = len(loader)
    failures, checked, stop = [], [0] * threads, threading.Event()

    def index_randomly(t):
        rng = np.random.default_rng(t)
        try:  # until stopped, and at least checks_each batches
            while not stop.is_set() or checked[t] < checks_each:
                k = int(rng.integers(n))
                if not coded_correct(loader[k]):
                    failures.append(f"loader[{k}] from thread {t}: wrong data")
                checked[t] += 1
        except Exception as e:
            failures.append(e)

    def set_epochs():
        rng = np.random.default_rng(threads)
        try:
            while not stop.is_set():
                loader.set_epoch(int(rng.integers(4)))
                time.sleep(0.0005)
        except Exception as e:
            failures.append(e)

    workers = [threading.Thread(target=index_randomly, args=(t,)) for t in range(threads)]
    if epochs:
        workers.append(threading.Thread(target=set_epochs))
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        for w in workers:
            w.start()
        for _ in range(passes):
            for i, b in enumerate(loader):
                if not coded_correct(b):
                    failures.append(f"batch {i} of a pass: wrong data")
    except Exception as e:
        failures.append(e)
    finally:
        stop.set()
        for w in workers:
            w.join(30)
        sys.setswitchinterval(interval)
    assert not any(w.is_alive() for w in workers)
    return failures, checked


@pytest.mark.parametrize("wrapped", [False, True])
def test_indexing_from_one_thread_while_another_iterates_gives_correct_batches(wrapped):
    lengths = [37, 12, 55, 8, 23, 41, 5, 30, 19, 60]
    streams = coded_streams(lengths)
    sources = [SlowReads(s) for s in streams] if wrapped else streams
    loader = StreamLoader(sources, 4, 3)
    failures, checked = index_and_iterate(loader, 1, 20 if wrapped else 100, checks_each=50)
    assert failures == []
    assert checked[0] >= 50


@pytest.mark.parametrize(
    "wrapped, shuffle, epochs",
    [(False, True, False), (False, True, True), (True, True, True), (False, False, True)],
)
def test_indexing_from_many_threads_while_iterating_and_setting_epochs(wrapped, shuffle, epochs):
    """Threads index the loader while a pass runs (a new epoch's rows each pass, shuffled)."""
    lengths = [37, 12, 55, 8, 23, 41, 5, 30, 19, 60]
    streams = coded_streams(lengths)
    sources = [SlowReads(s) for s in streams] if wrapped else streams
    loader = StreamLoader(sources, 4, 3, shuffle=shuffle)
    failures, checked = index_and_iterate(loader, 6, 5 if wrapped else 30, epochs, 10)
    assert failures == []
    assert min(checked) >= 10


@settings(max_examples=15, deadline=None)
@given(
    layout=layouts(max_streams=8, max_length=30),
    wrapped=st.booleans(),
    calls=st.lists(st.lists(st.integers(0, 10**6), min_size=1, max_size=12), max_size=4),
)
def test_any_interleaving_of_indexing_threads_and_a_pass_gives_the_reference(
    layout, wrapped, calls
):
    """``loader[k]`` from threads, during a pass, gives what a loader read alone gives."""
    import threading

    assume_rows_filled(layout, "zeros")
    streams = coded_streams(layout.lengths)
    sources = [SlowReads(s) for s in streams] if wrapped else streams
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (rows that stay empty)
        reference = as_numpy(StreamLoader(streams, layout.batch_size, layout.tbins))
        loader = StreamLoader(sources, layout.batch_size, layout.tbins)
    n = len(reference)
    got, failures = {}, []
    start = threading.Barrier(len(calls) + 1, timeout=30)

    def index(t, ks):
        try:
            start.wait()
            for j, k in enumerate(ks):
                got[t, j] = (k % n, as_numpy([loader[k % n]])[0])
        except Exception as e:
            failures.append(e)

    threads = [threading.Thread(target=index, args=(t, ks)) for t, ks in enumerate(calls)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for t in threads:
            t.start()
        start.wait()
        passed = as_numpy(loader)
    finally:
        for t in threads:
            t.join(30)
        sys.setswitchinterval(interval)
    assert not any(t.is_alive() for t in threads)
    assert failures == []
    assert_same(passed, reference)
    assert len(got) == sum(map(len, calls))
    for k, batch in got.values():
        assert_same([batch], [reference[k]])


@pytest.mark.parametrize(
    "keyword, hint",
    [
        ("drop_last", 'pad="drop"'),
        ("collate_fn", "transform="),
        ("worker_init_fn", "transform="),
        ("prefetch_factor", "max_buffered="),
        ("sampler", "shuffle="),
        ("generator", "seed="),
        ("multiprocessing_context", "method="),
        ("persistent_worker", "unexpected keyword argument 'persistent_worker'"),
    ],
)
def test_dataloader_keywords_say_what_to_use_instead(keyword, hint):
    with pytest.raises(TypeError, match=re.escape(hint)):
        StreamLoader(coded_streams([3, 4]), 2, 2, **{keyword: None})


def test_timeout_zero_means_no_timeout_as_in_dataloader():
    assert StreamLoader(coded_streams([3, 4]), 2, 2, timeout=0).timeout is None


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"tbins": 2.5}, TypeError, "tbins must be an integer, got 2.5"),
        ({"tbins": True}, TypeError, "tbins must be an integer, got True"),
        ({"batch_size": "3"}, TypeError, "batch_size must be an integer, got '3'"),
        ({"lengths": [3, 10.5]}, TypeError, r"lengths\[1\] must be an integer, got 10.5"),
        ({"seed": -1}, ValueError, "seed must be >= 0"),
        ({"num_workers": 1.5}, TypeError, "num_workers must be an integer"),
        ({"rank": 0, "world_size": "2"}, TypeError, "world_size must be an integer"),
    ],
)
def test_integer_arguments_are_checked(kwargs, error, message):
    args = dict(streams=[np.arange(3), np.arange(11)], batch_size=2, tbins=2)
    args.update(kwargs)
    with pytest.raises(error, match=message):
        StreamLoader(**args)


def test_epochs_and_states_are_checked_integers():
    loader = StreamLoader(coded_streams([3, 4]), 2, 2)
    with pytest.raises(ValueError, match="epoch must be >= 0"):
        loader.set_epoch(-1)
    with pytest.raises(TypeError, match="epoch must be an integer"):
        loader.set_epoch(1.5)
    state = loader.state_dict()
    with pytest.raises(ValueError, match=r"state\['next_batch'\] must be an integer, got '1'"):
        loader.load_state_dict({**state, "next_batch": "1"})


@pytest.mark.parametrize("pad", ["drop", "wrap"])
def test_drop_and_wrap_need_a_stream_for_every_row(pad):
    with pytest.raises(ValueError, match=rf"pad='{pad}' needs a stream for every row: 4 rows"):
        StreamLoader(coded_streams([5, 0, 6, 7]), 4, 2, pad=pad)
    with pytest.raises(ValueError, match="4 rows"):
        StreamLoader(coded_streams([5, 6, 7]), 2, 2, pad=pad, rank=0, world_size=2)
    assert len(StreamLoader(coded_streams([5, 6, 7, 8]), 4, 2, pad=pad)) > 0


def order(loader):
    return [tuple(b.stream[:, 0].tolist()) for b in loader]


def test_a_new_pass_reshuffles_without_set_epoch_and_stays_resumable():
    streams = coded_streams([5, 3, 6, 2, 7, 4, 8, 1])
    loader = StreamLoader(streams, 2, 2, shuffle=True)
    passes = []
    for _ in range(3):
        n = len(loader)
        passes.append(order(loader))
        assert len(passes[-1]) == n
    assert passes[0] != passes[1] != passes[2]
    assert loader.epoch == 3
    explicit = StreamLoader(streams, 2, 2, shuffle=True)
    for epoch in range(3):  # the same as choosing the epochs
        explicit.set_epoch(epoch)
        assert order(explicit) == passes[epoch]
    assert order(explicit) == passes[2]  # a chosen epoch repeats, like DistributedSampler
    loader = StreamLoader(streams, 2, 2, shuffle=True)
    it = iter(loader)
    next(it)
    resumed = StreamLoader(streams, 2, 2, shuffle=True)
    resumed.load_state_dict(loader.state_dict())
    assert order(resumed) == passes[0][1:]
    assert order(resumed) == passes[1]  # the pass ended: the next one is epoch 1


def test_epoch_is_the_epoch_the_next_pass_reads_after_a_peek():
    streams = coded_streams([5, 3, 6, 2, 7, 4, 8, 1])
    passes = []
    explicit = StreamLoader(streams, 2, 2, shuffle=True)
    for epoch in range(3):
        explicit.set_epoch(epoch)
        passes.append(order(explicit))
    loader = StreamLoader(streams, 2, 2, shuffle=True)
    next(iter(loader))  # a peek at the first batch, the pass let go
    assert loader.epoch == 1
    assert order(loader) == passes[1]  # what loader.epoch said
    assert loader.epoch == 2
    it = iter(loader)
    next(it)
    assert loader.epoch == 2  # the pass in progress
    del it
    assert loader.epoch == 3
    loader.set_epoch(1)
    next(iter(loader))
    assert loader.epoch == 1  # a chosen epoch is read by every pass
    assert order(loader) == passes[1]


def test_epoch_during_a_pass_is_that_of_the_pass_and_state_stays_resumable():
    streams = coded_streams([5, 3, 6, 2, 7, 4, 8, 1])
    loader = StreamLoader(streams, 2, 2, shuffle=True)
    seen = [loader.epoch for _ in loader]
    assert set(seen) == {0} and loader.epoch == 1
    for i, _ in enumerate(loader):
        if i == 2:
            break
    assert loader.epoch == 2  # the pass was left: the next one reads epoch 2
    state = loader.state_dict()  # where the run stands: epoch 1, batch 3
    assert (state["epoch"], state["next_batch"]) == (1, 3)
    resumed = StreamLoader(streams, 2, 2, shuffle=True)
    resumed.load_state_dict(state)
    assert resumed.epoch == 1


def test_epoch_length_is_the_length_of_any_epoch_without_reading():
    reads = RecordedReads(40)
    streams = [*coded_streams([9, 3, 17, 5, 2, 11, 6]), reads]
    loader = StreamLoader(streams, 3, 2, shuffle=True, lengths=[9, 3, 17, 5, 2, 11, 6, 40])
    lengths = [loader.epoch_length(e) for e in range(8)]
    assert reads.reads == []
    for epoch, n in enumerate(lengths):
        loader.set_epoch(epoch)
        assert len(loader) == n
    assert len(set(lengths)) == 1  # rows balanced once: every epoch is as long


def test_copies_and_pickles_have_their_own_passes():
    import copy
    import pickle

    loader = StreamLoader(coded_streams([5, 3, 6]), 2, 2)
    n = len(loader)
    it = iter(loader)
    next(it)
    for clone in (copy.copy(loader), copy.deepcopy(loader), pickle.loads(pickle.dumps(loader))):
        assert clone.state_dict() == loader.state_dict()
        assert len(list(clone)) == n  # a new pass, as a new iter(loader) would be
    assert len(list(it)) == n - 1  # the original pass goes on
    assert pickle.loads(pickle.dumps(loader)).epoch == 1  # after a whole pass


class Hanging:
    def __len__(self):
        return 10

    def __getitem__(self, key):
        time.sleep(30)


def test_a_stream_that_hangs_while_its_layout_is_read_is_a_timely_error():
    loader = StreamLoader([Hanging(), np.arange(10)], 2, 2, timeout=0.5)
    start = time.monotonic()
    with pytest.raises(StreamError, match=r"stream 0 .*first step.*timeout=0.5"):
        list(loader)
    assert time.monotonic() - start < 5


def test_a_pass_left_before_its_end_is_followed_by_the_next_epoch():
    streams = coded_streams([5, 3, 6, 2, 7, 4, 8, 1])
    loader = StreamLoader(streams, 2, 2, shuffle=True)
    reference = StreamLoader(streams, 2, 2, shuffle=True)
    for _, _ in zip(range(2), loader, strict=False):  # left after two batches
        pass
    assert loader.state_dict()["epoch"] == 0 and loader.state_dict()["next_batch"] == 2
    reference.set_epoch(1)
    assert order(loader) == order(reference)


class Crashing:
    """A stream whose reads past step 6 kill the process that reads it (a decoder crash)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, key):
        if key.stop > 6:
            os.kill(os.getpid(), signal.SIGSEGV)
        return np.arange(self.n)[key]

    def __repr__(self):
        return "Crashing('clip.mp4')"


def test_a_worker_that_crashes_is_named_with_the_stream_and_steps_it_was_reading():
    before = {c.pid for c in live_children()}
    loader = StreamLoader([np.arange(9), Crashing(10)], 2, 3, num_workers=2)
    message = r"stream 1 \(Crashing\('clip.mp4'\)\) steps 6:9.*SIGSEGV"
    with pytest.raises(WorkerError, match=message):
        list(loader)
    assert no_children(before)


def test_a_timeout_names_the_stream_and_steps_being_read():
    loader = StreamLoader(
        [np.arange(9), Hanging()], 2, 3, num_workers=1, timeout=1, lengths=[9, 10]
    )
    with pytest.raises(WorkerTimeout, match=r"stream 1 \(.*Hanging.*\) steps 0:3"):
        list(loader)


def worker_pids(loader):
    return sorted(pid for pf in loader._workers.persistent or () for pid in pf.pids)


@pytest.mark.parametrize("method", ["process", "thread"])
def test_persistent_workers_read_every_epoch_and_give_the_same_batches(method):
    before = {c.pid for c in live_children()}
    streams = coded_streams([23, 7, 31, 12, 5, 18, 26, 9, 14, 3, 20, 11])
    kw = dict(shuffle=True, seed=3, transform=shift_by_epoch)
    reference = StreamLoader(streams, 4, 3, **kw)
    loader = StreamLoader(
        streams, 4, 3, num_workers=2, method=method, persistent_workers=True, **kw
    )
    pids = None
    for _ in range(3):  # three epochs: each pass reads the next
        expected = list(reference)
        assert_same(list(loader), expected)
        if method == "process":
            assert pids is None or worker_pids(loader) == pids, "the workers were replaced"
            pids = worker_pids(loader)
            assert len(pids) == 2
    for _, _ in zip(range(2), loader, strict=False):  # a pass left early, then the next
        pass
    next(iter(reference))
    assert_same(list(loader), list(reference))
    loader.set_epoch(1)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()  # inside epoch 1, after 3 batches
    assert (state["epoch"], state["next_batch"]) == (1, 3)
    reference.load_state_dict(state)
    loader.load_state_dict(state)
    assert_same(list(loader), list(reference))
    loader.close()
    assert loader._workers.persistent is None and no_children(before)


def shift_by_epoch(steps, info):
    return steps + info.epoch * 1000


def test_persistent_workers_stop_with_the_last_reference_to_the_loader():
    before = {c.pid for c in live_children()}
    loader = StreamLoader(coded_streams([9, 7, 5]), 2, 2, num_workers=2, persistent_workers=True)
    list(loader)
    assert len(worker_pids(loader)) == 2
    del loader
    assert no_children(before)


@pytest.mark.parametrize("workers", [0, 2])
def test_steps_that_tensors_cannot_hold_name_the_stream(workers):
    objects = np.array([{"a": i} for i in range(5)], dtype=object)
    with pytest.raises(StreamError, match=r"stream 0 .*dtype object, which tensors cannot hold"):
        list(StreamLoader([objects, np.arange(4)], 2, 2, num_workers=workers))
    with pytest.raises(StreamError, match=r"stream 1 .*dtype object differs from the first"):
        list(StreamLoader([np.arange(4), objects], 2, 2, num_workers=workers))


def test_a_source_error_while_reading_names_the_stream_and_steps():
    loader = StreamLoader([np.arange(8), Truncated(10)], 2, 3)
    with pytest.raises(SourceError, match=r"stream 1 .*steps 3:6: clip.bin: truncated") as e:
        list(loader)
    assert e.value.index == 1 and e.value.steps == (3, 6) and e.value.path == "clip.bin"
