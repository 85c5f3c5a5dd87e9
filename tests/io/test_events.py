import importlib
import math
import multiprocessing
import operator
import os
import pickle
from unittest import mock

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamseq import StreamLoader
from streamseq.errors import SourceError
from streamseq.io import EVENT_DTYPE, events, synthetic_events
from tests.helpers import assert_changed_during_a_pass

H, W = 24, 32


@pytest.fixture(scope="module")
def recording():
    return synthetic_events(height=H, width=W, duration_us=200_000, seed=3)


def naive_histograms(ev, t0, window, steps):
    """Per-window histograms with np.add.at (the stream uses bincount)."""
    out = np.zeros((steps, 2, H, W), np.float32)
    k = (ev["t"].astype(np.int64) - t0) // window
    keep = (k >= 0) & (k < steps)
    ev, k = ev[keep], k[keep]
    np.add.at(out, (k, (ev["p"] > 0).astype(int), ev["y"].astype(int), ev["x"].astype(int)), 1)
    return out


def test_synthetic_events_look_like_a_recording(recording):
    ev = recording
    assert ev.dtype == EVENT_DTYPE
    assert np.all(np.diff(ev["t"]) >= 0)
    assert 0 <= ev["t"].min() and ev["t"].max() <= 200_000
    assert ev["x"].max() < W and ev["y"].max() < H
    assert set(np.unique(ev["p"])) == {-1, 1}
    assert len(ev) > 1000  # moving balls produce many events
    # both polarities in similar numbers (leading and trailing edges)
    on = np.count_nonzero(ev["p"] > 0)
    assert 0.3 < on / len(ev) < 0.7
    np.testing.assert_array_equal(
        ev, synthetic_events(height=H, width=W, duration_us=200_000, seed=3)
    )
    assert len(synthetic_events(height=H, width=W, duration_us=200_000, seed=4)) != len(ev)


def test_histograms_match_a_naive_count(recording):
    e = events(recording, window_us=10_000, height=H, width=W)
    t_first, t_last = int(recording["t"][0]), int(recording["t"][-1])
    assert len(e) == math.ceil((t_last - t_first + 1) / 10_000)
    ref = naive_histograms(recording, t_first, 10_000, len(e))
    got = e[0 : len(e)]
    assert got.dtype == np.float32 and got.shape == (len(e), 2, H, W)
    np.testing.assert_array_equal(got, ref)
    assert got.sum() == len(recording)  # every event counted once


@given(
    window=st.integers(1, 50_000),
    reads=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 5)), min_size=1, max_size=5),
)
def test_random_windows(recording, window, reads):
    e = events(recording, window_us=window, height=H, width=W)
    for a, n in reads:
        a = a % (len(e) + 2)
        b = min(a + n, len(e))
        got = e[a : a + n]
        assert got.shape == (max(0, b - a), 2, H, W)
        if b > a:
            np.testing.assert_array_equal(
                got, naive_histograms(recording, e.t0 + a * window, window, b - a)
            )


def test_t0_and_length(recording):
    e = events(recording, window_us=50_000, height=H, width=W, t0=0, length=5)
    assert len(e) == 5
    got = e[0:5]
    np.testing.assert_array_equal(got, naive_histograms(recording, 0, 50_000, 5))
    assert got[4].sum() == np.count_nonzero(recording["t"] >= 200_000)


def test_file_source_memory_maps(tmp_path, recording):
    path = tmp_path / "rec.npy"
    np.save(path, recording)
    from_file = events(path, window_us=5000, height=H, width=W)
    in_memory = events(recording, window_us=5000, height=H, width=W)
    assert len(from_file) == len(in_memory)
    np.testing.assert_array_equal(from_file[3:9], in_memory[3:9])
    assert len(pickle.dumps(from_file)) < 1000  # the path, not the events
    for method in ["fork", "spawn"]:
        with multiprocessing.get_context(method).Pool(1) as pool:
            got = pool.apply(operator.getitem, (from_file, slice(10, 12)))
        np.testing.assert_array_equal(got, in_memory[10:12])


def test_empty_recording():
    e = events(np.zeros(0, EVENT_DTYPE), window_us=1000, height=H, width=W)
    assert len(e) == 0 and e[0:3].shape == (0, 2, H, W)


def test_bad_input(tmp_path, recording):
    with pytest.raises(FileNotFoundError, match="nowhere.npy"):
        events(tmp_path / "nowhere.npy", window_us=1000, height=H, width=W)
    garbage = tmp_path / "garbage.npy"
    garbage.write_bytes(b"not an array at all")
    with pytest.raises(SourceError, match="garbage.npy"):
        events(garbage, window_us=1000, height=H, width=W)
    damaged = tmp_path / "damaged.npy"
    np.save(damaged, recording)
    data = bytearray(damaged.read_bytes())
    data[10:11] = b"'"  # the header no longer tokenizes
    damaged.write_bytes(data)
    with pytest.raises(SourceError, match="damaged.npy: .*not a valid .npy file"):
        events(damaged, window_us=1000, height=H, width=W)
    with pytest.raises(ValueError, match="fields"):
        events(np.zeros(5), window_us=1000, height=H, width=W)
    with pytest.raises(ValueError, match="window_us"):
        events(recording, window_us=0, height=H, width=W)
    with pytest.raises(ValueError, match="outside"):
        events(recording, window_us=10_000, height=H, width=W - 5)[0:20]
    shuffled = recording.copy()
    shuffled["t"][[100, 200]] = shuffled["t"][[200, 100]]
    with pytest.raises(ValueError, match="sorted"):
        events(shuffled, window_us=1_000_000, height=H, width=W)[0:1]


def test_a_state_of_events_is_resumed_by_the_same_options_spelled_otherwise(tmp_path):
    import pyarrow as pa
    from helpers import state_refused

    from streamseq.io import manifest

    paths = []
    for i in range(3):
        paths.append(str(tmp_path / f"e{i}.npy"))
        np.save(
            paths[-1], synthetic_events(height=8, width=8, duration_us=9000 + 3000 * i, seed=i)
        )

    def listed(**options):
        return [
            events(p, **{"window_us": 1000, "height": 8, "width": 8, **options}) for p in paths
        ]

    # (the reader takes whole numbers: 1000.0 microseconds are 1000)
    assert not state_refused(listed(), listed(window_us=1000.0, height=np.int32(8)))
    assert not state_refused(listed(t0=0), listed(t0=0.0))
    lengths = [len(s) for s in listed()]
    rows = pa.table({"path": paths, "length": lengths})
    table = manifest(rows, "events", window_us=1000.0, height=8.0, width=8)
    assert not state_refused(table, listed())
    # other options are other steps
    assert state_refused(listed(), listed(height=4, width=16))
    assert state_refused(table, listed(t0=500))


def test_a_file_rewritten_during_a_read_is_named_as_changed_not_as_its_new_contents(tmp_path):
    # the times of the file's new bytes, read by the map, are out of order: the read
    # must say that the file changed, not that its events are not sorted
    recording = np.zeros(250, EVENT_DTYPE)
    recording["t"] = np.arange(250) * 100
    path = tmp_path / "rec.npy"
    np.save(path, recording)
    source = events(path, window_us=1000, height=H, width=W, t0=0)
    backwards = recording.copy()
    backwards["t"] = backwards["t"][::-1]
    original = type(source)._histograms

    def rewritten_meanwhile(self, *args):
        with open(path, "r+b") as f:  # the same size and header, written in place
            np.save(f, backwards)
        st_ = os.stat(path)
        os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns + 1))
        return original(self, *args)

    with mock.patch.object(type(source), "_histograms", rewritten_meanwhile):
        with pytest.raises(SourceError, match="rec.npy.*changed") as caught:
            source[0:20]
    assert "not sorted" not in str(caught.value)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("change", ["truncate", "rewrite"])
def test_a_file_changed_in_place_during_a_pass_is_an_error_naming_it_not_other_events(
    tmp_path, workers, change
):
    rng = np.random.default_rng(0)  # 250 events: one page, a cut file never faults
    recording = np.zeros(250, EVENT_DTYPE)
    recording["t"] = np.sort(rng.integers(0, 50_000, 250))
    recording["x"], recording["y"] = rng.integers(0, W, 250), rng.integers(0, H, 250)
    recording["p"] = rng.integers(0, 2, 250)
    paths = [tmp_path / f"{i}.npy" for i in range(2)]
    for path in paths:
        np.save(path, recording)
    sources = [events(p, window_us=200, height=H, width=W, t0=0) for p in paths]
    expected = events(recording, window_us=200, height=H, width=W, t0=0)
    loader = StreamLoader(sources, 2, 1, num_workers=workers)
    it = iter(loader)
    next(it)
    moved = recording.copy()
    moved["x"] = (moved["x"] + 1) % W  # the same events, one pixel to the right
    for path in paths:
        if change == "truncate":  # (within the map's first page: zeros, never a bus error)
            os.truncate(path, 1024)
        else:  # the same size and header, written in place
            with open(path, "r+b") as f:
                np.save(f, moved)
            st_ = os.stat(path)
            os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns + 1))
    error = None
    try:
        for batch in it:  # what was read before the change (workers read ahead) is right
            for r in range(2):
                step = np.asarray(batch.step)[r]
                np.testing.assert_array_equal(
                    np.asarray(batch.data)[r][step >= 0], expected[step[0] : step[-1] + 1]
                )
    except SourceError as e:
        error = e
    # (250 batches: far more than the workers read ahead)
    assert_changed_during_a_pass(error, paths)


def test_events_out_of_order_are_an_error_not_left_out():
    recording = np.zeros(1000, EVENT_DTYPE)
    recording["t"], recording["x"], recording["p"] = np.arange(1000) * 100, 1, 1
    recording["t"][500] = 10**7  # one event out of order: the rest are sorted
    with pytest.raises(ValueError, match="not sorted by t: event 501 .* event 500 "):
        events(recording, window_us=1000, height=2, width=2, t0=0, length=100)


@pytest.mark.parametrize("where", [1, 499, 500, 999])
def test_a_file_of_events_out_of_order_is_refused_naming_it_and_the_events(tmp_path, where):
    # one event out of order anywhere (a block's first or last included): refused when
    # the source is made, naming the file and the two events, not left out of windows
    recording = np.zeros(1000, EVENT_DTYPE)
    recording["t"], recording["x"], recording["p"] = np.arange(1000) * 100, 1, 1
    recording["t"][where] = recording["t"][where - 1] - 1
    path = tmp_path / "rec.npy"
    np.save(path, recording)
    events_module = importlib.import_module("streamseq.io.events")
    with mock.patch.object(events_module, "_ORDER_BLOCK", 500):  # (several blocks)
        with pytest.raises(SourceError, match=rf"rec.npy: .*not sorted by t: event {where} "):
            events(path, window_us=1000, height=2, width=2)
        recording["t"][where] = recording["t"][where - 1]  # (equal times are in order)
        np.save(path, recording)
        assert len(events(path, window_us=1000, height=2, width=2)) > 0


def test_a_file_that_is_not_a_recording_of_events_is_named(tmp_path):
    path = tmp_path / "numbers.npy"
    np.save(path, np.zeros(5))
    with pytest.raises(SourceError, match="numbers.npy: .*fields"):
        events(path, window_us=1000, height=2, width=2)


def _events_of(t, dtype="<i8", x=0):
    rec = np.zeros(len(t), [("t", dtype), ("x", "<u2"), ("y", "<u2"), ("p", "i1")])
    rec["t"], rec["x"], rec["p"] = t, x, 1
    return rec


def test_float_times_fall_in_the_window_that_holds_them_negative_ones_included():
    # a float t is in window k when t0 + k * window_us <= t < t0 + (k + 1) * window_us:
    # rounded toward zero, -15.5 would start the first window at -15 (leaving the event
    # before it out) and -5.5 would count in the window of -5
    t = [-15.5, -5.5, -0.25, 0.0, 12.2, 29.9]
    e = events(_events_of(t, "<f8"), window_us=10, height=1, width=1)
    assert e.t0 == -16 and len(e) == 5
    got = e[0 : len(e)][:, 1, 0, 0].tolist()
    assert got == [1, 3, 1, 0, 1]  # [-16,-6) [-6,4) [4,14) [14,24) [24,34)
    assert sum(got) == len(t)


@pytest.mark.parametrize(
    "t, dtype, problem",
    [
        ([0.0, np.nan, 12.0], "<f8", "event 1 .*t=nan"),
        ([np.nan, 5.0, 12.0], "<f8", "event 0 .*t=nan"),
        ([0.0, 5.0, np.nan], "<f4", "event 2 .*t=nan"),
        ([0.0, 5.0, np.inf], "<f8", "event 2 .*t=inf"),
        ([-np.inf, 5.0], "<f8", "event 0 .*t=-inf"),
        ([0.0, 2.0**70], "<f8", "event 1 .*int64"),
        ([0, 2**63 + 5], "<u8", "event 1 .*int64"),
        (np.array([0, 5], "datetime64[us]"), "datetime64[us]", "t of dtype datetime64"),
        (["0", "5"], "U3", "t of dtype <U3"),
        ([0, 5], "c16", "t of dtype complex128"),
    ],
)
def test_times_that_are_not_int64_microseconds_are_refused_naming_the_file_and_event(
    tmp_path, t, dtype, problem
):
    # (they read as an error without a name, events left out, or other windows)
    recording = _events_of(t, dtype)
    with pytest.raises(ValueError, match=problem):
        events(recording, window_us=10, height=1, width=1)
    path = tmp_path / "rec.npy"
    np.save(path, recording)
    with pytest.raises(SourceError, match=f"rec.npy: .*{problem}"):
        events(path, window_us=10, height=1, width=1)


def test_a_field_of_several_values_an_event_is_refused():
    dtype = np.dtype([("t", "<i8", (2,)), ("x", "<u2"), ("y", "<u2"), ("p", "i1")])
    with pytest.raises(ValueError, match="one value an event"):
        events(np.zeros(3, dtype), window_us=10, height=1, width=1)


@pytest.mark.parametrize(
    "options, name",
    [
        ({"window_us": 2.5}, "window_us"),
        ({"window_us": 0.5}, "window_us"),
        ({"window_us": float("nan")}, "window_us"),
        ({"window_us": float("inf")}, "window_us"),
        ({"window_us": 2**70}, "window_us"),
        ({"length": -3}, "length"),
        ({"length": 2.7}, "length"),
        ({"length": float("nan")}, "length"),
        ({"t0": 2.5}, "t0"),
        ({"t0": -(2**70)}, "t0"),
        ({"height": 1.5}, "height"),
        ({"height": -1}, "height"),
        ({"width": 0}, "width"),
        ({"width": "2"}, "width"),
    ],
)
def test_options_that_are_not_whole_numbers_in_range_are_refused_when_made(options, name):
    # (they were cut to whole numbers: a window of 0.5 us read as 0, every window empty,
    # one of 2.5 us counted steps by 2.5 and read them by 2; or failed when read, unnamed)
    recording = _events_of([0, 5, 12, 29])
    kwargs = {"window_us": 10, "height": 1, "width": 2, **options}
    with pytest.raises((TypeError, ValueError), match=rf"\b{name}\b"):
        events(recording, **kwargs)
    whole = {k: float(v) for k, v in kwargs.items()}  # (1000.0 is 1000)
    assert len(events(recording, **{**whole, **{name: 10.0 if name == "window_us" else 1.0}}))


def test_times_far_apart_are_counted_in_their_windows_without_overflow():
    # t - t0 past int64 (2**64 - 1 here) wrapped, counted the last event in window -1
    t = [-(2**63), -(2**63) + 7, 2**63 - 1]
    e = events(_events_of(t), window_us=2**62, height=1, width=1)
    assert len(e) == 4
    assert e[0:4][:, 1, 0, 0].tolist() == [2, 0, 0, 1]
    assert e[3:4][:, 1, 0, 0].tolist() == [1]


@given(
    dtype=st.sampled_from(["<f4", ">f4", "<f8"]),
    base=st.sampled_from([0, 2**24 - 3, 2**25 + 2, 2**53 - 2]),
    offsets=st.lists(st.integers(0, 40), min_size=1, max_size=12),
    frac=st.sampled_from([0.0, 0.5]),
    window=st.integers(1, 5),
)
def test_float_times_past_their_exact_integers_are_each_counted_once_in_their_window(
    dtype, base, offsets, frac, window
):
    # a window's bounds were compared with a float32 time in float32 (2**24 + 1 is 2**24
    # there): the events at 2**24 fell in no window, silently; float64 past 2**53 too
    t = np.sort(np.asarray([base + k + frac for k in offsets], np.float64).astype(dtype))
    floor = np.floor(t.astype(np.float64)).astype(np.int64)  # float32 to float64: exact
    e = events(_events_of(t, dtype), window_us=window, height=1, width=1)
    want = np.bincount((floor - e.t0) // window, minlength=len(e))
    got = e[0 : len(e)][:, 1, 0, 0]
    assert got.tolist() == want.tolist()
    assert got.sum() == len(t)
