import gc
import multiprocessing
import operator
import os
import pickle
import time
import tokenize

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamseq import StreamLoader
from streamseq.errors import SourceError
from streamseq.io import tokens
from tests.helpers import assert_changed_during_a_pass


@pytest.fixture
def flat(tmp_path):
    path = tmp_path / "tokens.bin"
    np.arange(1000, dtype=np.uint16).tofile(path)
    return path


@pytest.fixture
def npy(tmp_path):
    path = tmp_path / "tokens.npy"
    np.save(path, np.arange(300, dtype=np.int32).reshape(100, 3))
    return path


def test_flat_file(flat):
    t = tokens(flat, np.uint16)
    assert len(t) == 1000
    np.testing.assert_array_equal(t[10:20], np.arange(10, 20))
    assert t[999] == 999 and t[-1] == 999
    assert t[995:2000].tolist() == [995, 996, 997, 998, 999]
    assert t[2000:3000].shape == (0,) and t[2000:3000].dtype == np.uint16


def test_npy_file(npy):
    t = tokens(npy)
    assert len(t) == 100 and t.dtype == np.int32
    np.testing.assert_array_equal(t[5:7], [[15, 16, 17], [18, 19, 20]])
    assert t[99].tolist() == [297, 298, 299]
    assert t[100:].shape == (0, 3)
    assert tokens(npy, np.int32)[1].tolist() == [3, 4, 5]


def test_fortran_order_npy(tmp_path):
    path = tmp_path / "f.npy"
    data = np.asfortranarray(np.arange(24).reshape(6, 4))
    np.save(path, data)
    np.testing.assert_array_equal(tokens(path)[2:5], data[2:5])


@given(a=st.integers(-1200, 1200), b=st.integers(-1200, 1200))
def test_slices_clamp_like_numpy(flat, a, b):
    t = tokens(flat, np.uint16)
    np.testing.assert_array_equal(t[a:b], np.arange(1000, dtype=np.uint16)[a:b])


def test_slices_are_memmap_views(flat):
    t = tokens(flat, np.uint16)
    block = t[100:200]
    assert isinstance(block, np.memmap)
    assert np.shares_memory(block, t.array())
    assert not block.flags.writeable


def test_pickle_is_small_and_reopens(flat):
    t = tokens(flat, np.uint16)
    t[0:10]
    data = pickle.dumps(t)
    assert len(data) < 1000  # the path, not the data
    np.testing.assert_array_equal(pickle.loads(data)[500:505], np.arange(500, 505))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_read_in_worker_process(flat, method):
    t = tokens(flat, np.uint16)
    t[0:10]
    with multiprocessing.get_context(method).Pool(1) as pool:
        got = pool.apply(operator.getitem, (t, slice(40, 45)))
    np.testing.assert_array_equal(got, np.arange(40, 45))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_worker_opening_a_changed_file_raises(npy, method):
    t = tokens(npy)
    t[0:10]  # open here: this process goes on reading the file it mapped
    np.save(npy, np.arange(300, dtype=np.float32).reshape(100, 3))  # same size
    with multiprocessing.get_context(method).Pool(1) as pool:
        with pytest.raises(SourceError, match=r"tokens.npy: changed .*dtype int32 -> float32"):
            pool.apply(operator.getitem, (t, slice(40, 45)))


def test_replaced_copy_checks_the_same_file(npy):
    t = tokens(npy)
    copy = t.replace(order="C")
    np.save(npy, np.arange(600, dtype=np.int32).reshape(200, 3))
    with pytest.raises(SourceError, match=r"shape \(100, 3\) -> \(200, 3\)"):
        copy[0:2]


def test_dtype_errors(flat, npy):
    with pytest.raises(ValueError, match="dtype"):
        tokens(flat)
    with pytest.raises(ValueError, match="int64"):
        tokens(npy, np.int64)


def test_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.bin"):
        tokens(tmp_path / "nowhere.bin", np.uint16)
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x00" * 7)
    with pytest.raises(SourceError, match="odd.bin"):
        tokens(odd, np.uint16)
    cut = tmp_path / "cut.npy"
    np.save(cut, np.arange(100))
    cut.write_bytes(cut.read_bytes()[:-8])
    with pytest.raises(SourceError, match="cut.npy: truncated"):
        tokens(cut)
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"\x93NUMPY\x01\x00garbage")
    with pytest.raises(SourceError, match="bad.npy"):
        tokens(bad)


@pytest.mark.parametrize(
    "offset, byte, error",
    [
        (10, b"'", tokenize.TokenError),  # the header no longer tokenizes
        (21, b",", SyntaxError),  # nor parses
        (26, b"B", TypeError),  # a dtype that is no dtype
        (6, b"\x00", ValueError),  # a version that does not exist
    ],
)
def test_damaged_npy_header(npy, offset, byte, error):
    data = bytearray(npy.read_bytes())
    data[offset : offset + 1] = byte
    npy.write_bytes(data)
    with pytest.raises(SourceError, match="tokens.npy: not a valid .npy file") as info:
        tokens(npy)
    assert info.value.path == str(npy)
    assert isinstance(info.value.__cause__, error)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.bin"
    path.write_bytes(b"")
    t = tokens(path, np.int64)
    assert len(t) == 0 and t[0:5].shape == (0,)


def test_step_spec_comes_from_the_header(npy, flat):
    assert tokens(npy).step_spec() == (np.dtype(np.int32), (3,))
    assert tokens(flat, "<u2").step_spec() == (np.dtype("<u2"), ())


def test_a_state_of_token_files_is_refused_by_the_files_read_with_another_dtype(tmp_path):
    from streamseq import StreamLoader

    paths = []
    for i, n in enumerate([11, 6]):
        paths.append(tmp_path / f"{i}.bin")
        np.arange(n, dtype=np.uint16).tofile(paths[-1])
    saving = StreamLoader([tokens(p, np.uint16) for p in paths], batch_size=2, tbins=3)
    next(iter(saving))
    state = saving.state_dict()
    for dtype in (np.int16, ">u2"):  # (two bytes: the same lengths)
        other = StreamLoader([tokens(p, dtype) for p in paths], batch_size=2, tbins=3)
        with pytest.raises(ValueError, match="the streams' reader options"):
            other.load_state_dict(state)
    same = StreamLoader([tokens(p, "<u2") for p in paths], batch_size=2, tbins=3)
    same.load_state_dict(state)
    assert [b.data.tolist() for b in same] == [b.data.tolist() for b in list(saving)[1:]]


def test_a_state_of_a_store_is_refused_by_its_sources_and_the_other_way(tmp_path):
    from helpers import state_refused

    from streamseq import materialize

    paths = []
    for i, n in enumerate([11, 6, 9]):
        paths.append(tmp_path / f"{i}.bin")
        np.arange(n, dtype=np.uint16).tofile(paths[-1])
    sources = [tokens(p, np.uint16) for p in paths]
    stored = materialize(sources, tmp_path / "store")
    assert state_refused(sources, stored) and state_refused(stored, sources)
    assert not state_refused(stored, materialize(sources, tmp_path / "store"))
    # a store of the files read another way is another folder's: told apart too
    other = materialize([tokens(p, np.int16) for p in paths], tmp_path / "store16")
    assert state_refused(stored, other)


def _change_in_place(path, change):
    """Cut ``path`` short, or write other tokens over it (same size, same inode)."""
    if change == "truncate":  # (within the map's first page: zeros, not a bus error)
        os.truncate(path, 16)
    else:
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            f.write(b"\x07" * size)
        st_ = os.stat(path)
        os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns + 1))


@pytest.mark.parametrize("change", ["truncate", "rewrite"])
def test_a_file_changed_in_place_under_an_open_map_is_an_error_not_other_tokens(flat, change):
    t = tokens(flat, np.uint16)
    np.testing.assert_array_equal(t[0:10], np.arange(10))  # the map is open
    _change_in_place(flat, change)
    with pytest.raises(SourceError, match="changed since the source was made") as e:
        t[100:110]
    assert e.value.path == str(flat)
    out = np.zeros(10, np.uint16)
    with pytest.raises(SourceError, match="changed since the source was made"):
        t.read_into(100, 110, out)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("change", ["truncate", "rewrite"])
def test_a_file_changed_in_place_during_a_pass_is_an_error_naming_it_not_other_tokens(
    tmp_path, workers, change
):
    paths = []
    for i in range(4):  # (2000 tokens: one page, a cut file reads as zeros, never faults)
        paths.append(tmp_path / f"{i}.bin")
        (np.arange(2000, dtype=np.uint16) + i).tofile(paths[-1])
    loader = StreamLoader([tokens(p, np.uint16) for p in paths], 4, 5, num_workers=workers)
    it = iter(loader)
    next(it)
    for path in paths:
        _change_in_place(path, change)
    error = None
    try:
        for batch in it:  # what was read before the change (workers read ahead) is right
            valid = np.asarray(batch.valid)
            expected = np.asarray(batch.step)[valid] + np.asarray(batch.stream)[valid]
            np.testing.assert_array_equal(np.asarray(batch.data)[valid], expected)
    except SourceError as e:
        error = e
    # (400 batches: far more than the workers read ahead)
    assert_changed_during_a_pass(error, paths)


def _open_files():
    gc.collect()  # (files of sources dropped before)
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_many_files_read_directly_keep_a_bounded_number_of_files_open(tmp_path, monkeypatch):
    from streamseq.io import _mapped

    monkeypatch.setattr(_mapped, "OPEN_FILES", 4)
    paths = [str(tmp_path / f"{i}.npy") for i in range(30)]
    for i, path in enumerate(paths):
        np.save(path, np.arange(i, i + 10, dtype=np.int32))
    before = _open_files()
    streams = [tokens(path) for path in paths]
    assert [s[2:4].tolist() for s in streams] == [[i + 2, i + 3] for i in range(30)]
    assert _open_files() - before <= len(streams) + 4  # (a map holds a descriptor)
    # a map beyond those kept open is measured through its path: a rewrite in place is
    # refused, a file replaced by a rename leaves the map on the former one (planned)
    np.save(paths[-1], np.arange(100, 110, dtype=np.int64))
    with pytest.raises(SourceError, match="changed since the source was made"):
        streams[-1][0:2]
    np.save(paths[-2] + ".new.npy", np.arange(7))
    os.replace(paths[-2] + ".new.npy", paths[-2])
    assert streams[-2][0:2].tolist() == [28, 29]
    out = np.zeros(3, np.int32)
    assert streams[-3].read_into(0, 3, out) == 3 and out.tolist() == [27, 28, 29]
    for s in streams:
        s.close()
    assert _open_files() <= before


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks")
def test_a_child_forked_while_a_thread_opens_a_map_opens_its_own(tmp_path):
    from streamseq.io import _mapped

    path = str(tmp_path / "a.npy")
    np.save(path, np.arange(10, dtype=np.int32))
    with _mapped._kept_lock:  # (a thread of the parent making a map when the child forks)
        pid = os.fork()
        if pid == 0:
            os._exit(0 if tokens(path)[2:4].tolist() == [2, 3] else 1)
    for _ in range(600):  # (a child waiting for the parent's lock never ends: killed)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the child waited for a lock held by the parent")
    assert os.waitstatus_to_exitcode(status) == 0
