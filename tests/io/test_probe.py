import errno
import functools
import json
import os
import re
import stat
import time

import numpy as np
import pytest

import streamseq
from streamseq.io import probe
from streamseq.io.probe import cache_key, probe_lengths
from streamseq.testing import check_continuity


def write(folder, lengths):
    paths = []
    for i, n in enumerate(lengths):
        path = os.path.join(folder, f"s{i}.npy")
        np.save(path, np.arange(n, dtype=np.int64) + 1000 * i)
        paths.append(path)
    return paths


def npy(path, **kw):
    return functools.partial(np.load, path, mmap_mode="r", **kw)


class Recording:
    """A source-like stream with a ``path`` attribute."""

    def __init__(self, path, scale=1):
        self.path, self.scale = path, scale
        self._cached = None

    def __len__(self):
        return len(np.load(self.path, mmap_mode="r")) * self.scale

    def __getitem__(self, key):
        return np.repeat(np.load(self.path, mmap_mode="r"), self.scale)[key]


def slow(seconds):
    time.sleep(seconds)
    return np.arange(3)


def die():
    os._exit(3)


def load_with(path, token=None):
    """An opener taking a credential as a keyword."""
    return np.load(path, mmap_mode="r")


@pytest.fixture
def counted(monkeypatch):
    """Count the streams actually measured (in this process)."""
    calls = []
    real = probe._measure

    def measure(opener):
        calls.append(opener)
        return real(opener)

    monkeypatch.setattr(probe, "_measure", measure)
    return calls


@pytest.mark.parametrize("workers", [0, 2])
def test_lengths_in_order(tmp_path, workers):
    lengths = [5, 0, 3, 7, 1, 4, 2]
    openers = [npy(p) for p in write(tmp_path, lengths)]
    assert probe_lengths(openers, num_workers=workers, progress=False) == lengths


def test_streams_and_openers_mixed(tmp_path):
    (path,) = write(tmp_path, [4])
    got = probe_lengths([np.arange(6), npy(path), Recording(path, 2)], progress=False)
    assert got == [6, 4, 8]


def test_cache_reused(tmp_path, counted):
    openers = [npy(p) for p in write(tmp_path, [3, 5, 2])]
    cache = tmp_path / "cache" / "lengths.json"
    assert probe_lengths(openers, cache=cache, progress=False) == [3, 5, 2]
    assert len(counted) == 3
    content = json.loads(cache.read_text())
    assert content["format"] == "streamseq-lengths"
    assert sorted(content["files"]) == sorted(os.path.abspath(o.args[0]) for o in openers)
    assert probe_lengths(openers, cache=cache, progress=False) == [3, 5, 2]
    assert len(counted) == 3  # nothing measured again
    assert not list(cache.parent.glob("*.tmp"))


def test_cache_from_workers(tmp_path, counted):
    openers = [npy(p) for p in write(tmp_path, [3, 5, 2, 6])]
    cache = tmp_path / "lengths.json"
    assert probe_lengths(openers, num_workers=2, cache=cache, progress=False) == [3, 5, 2, 6]
    assert probe_lengths(openers, cache=cache, progress=False) == [3, 5, 2, 6]
    assert counted == []


def test_changed_file_probed_again(tmp_path, counted):
    paths = write(tmp_path, [3, 5, 2])
    openers = [npy(p) for p in paths]
    cache = tmp_path / "lengths.json"
    probe_lengths(openers, cache=cache, progress=False)
    np.save(paths[1], np.arange(9))  # other size
    st = os.stat(paths[2])
    os.utime(paths[2], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # same size, touched
    counted.clear()
    assert probe_lengths(openers, cache=cache, progress=False) == [3, 9, 2]
    assert sorted(o.args[0] for o in counted) == sorted(paths[1:])
    counted.clear()
    assert probe_lengths(openers, cache=cache, progress=False) == [3, 9, 2]
    assert counted == []


def test_opened_differently_cached_apart(tmp_path, counted):
    (path,) = write(tmp_path, [4])
    cache = tmp_path / "lengths.json"
    assert probe_lengths([Recording(path, 1)], cache=cache, progress=False) == [4]
    assert probe_lengths([Recording(path, 3)], cache=cache, progress=False) == [12]
    assert probe_lengths([npy(path)], cache=cache, progress=False) == [4]
    assert len(counted) == 3
    counted.clear()
    both = [Recording(path, 3), Recording(path, 1), npy(path)]
    assert probe_lengths(both, cache=cache, progress=False) == [12, 4, 4]
    assert counted == []


def test_without_path_measured_every_time(tmp_path, counted):
    cache = tmp_path / "lengths.json"
    streams = [np.arange(3), functools.partial(np.arange, 4)]
    assert probe_lengths(streams, cache=cache, progress=False) == [3, 4]
    assert probe_lengths(streams, cache=cache, progress=False) == [3, 4]
    assert len(counted) == 4
    assert not cache.exists()


def test_tokens_source_cached(tmp_path, counted):
    from streamseq.io import tokens

    paths = write(tmp_path, [6, 2, 9])
    cache = tmp_path / "lengths.json"
    openers = [functools.partial(tokens, p) for p in paths]
    assert probe_lengths(openers, num_workers=2, cache=cache, progress=False) == [6, 2, 9]
    assert probe_lengths([tokens(p) for p in paths], cache=cache, progress=False) == [6, 2, 9]
    assert len(counted) == 3  # the sources were measured, the openers came from the cache
    counted.clear()
    assert probe_lengths(openers, cache=cache, progress=False) == [6, 2, 9]
    assert counted == []
    _, how = cache_key(tokens(paths[0]))
    assert "dtype=dtype('int64')" in how


def test_cache_key():
    path, how = cache_key(functools.partial(np.load, "a.npy", mmap_mode="r"))
    assert path == os.path.abspath("a.npy") and how == "numpy.load(mmap_mode='r')"
    path, how = cache_key(functools.partial(np.load, path="b.npy"))
    assert path == os.path.abspath("b.npy") and how == "numpy.load()"
    path, how = cache_key(Recording("c.npy", 2))
    assert path == os.path.abspath("c.npy")
    assert how.endswith("Recording(scale=2)")  # private attributes left out
    assert cache_key(functools.partial(np.arange, 3)) is None
    assert cache_key(np.arange(3)) is None
    _, how = cache_key(functools.partial(np.load, "a.npy", np.zeros(10**6)))
    assert how == "numpy.load(<numpy.ndarray>)"


def test_damaged_cache_rebuilt(tmp_path):
    openers = [npy(p) for p in write(tmp_path, [3, 5])]
    cache = tmp_path / "lengths.json"
    cache.write_text('{"format": "streamseq-lengths", "version": 1, "files": {"/a')  # cut short
    with pytest.warns(UserWarning, match="unreadable length cache"):
        assert probe_lengths(openers, cache=cache, progress=False) == [3, 5]
    assert len(json.loads(cache.read_text())["files"]) == 2


@pytest.mark.parametrize(
    "foreign", ["{not json", '{"format": "other", "files": {}}', "[1, 2]", ""]
)
def test_foreign_file_left_as_it_is(tmp_path, foreign):
    openers = [npy(p) for p in write(tmp_path, [3, 5])]
    cache = tmp_path / "lengths.json"
    cache.write_text(foreign)
    with pytest.warns(UserWarning) as caught:
        assert probe_lengths(openers, cache=cache, progress=False) == [3, 5]
    assert "ignoring the" in str(caught[0].message)  # read: nothing to reuse
    assert re.search("lengths.json was not written.*left as it is", str(caught[-1].message))
    assert cache.read_text() == foreign


def test_rewritten_cache_keeps_its_mode(tmp_path):
    paths = write(tmp_path, [3, 5])
    cache = tmp_path / "lengths.json"
    probe_lengths([npy(paths[0])], cache=cache, progress=False)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o666 & ~umask  # as any new file
    cache.chmod(0o640)  # shared with a group
    assert probe_lengths([npy(p) for p in paths], cache=cache, progress=False) == [3, 5]
    assert stat.S_IMODE(cache.stat().st_mode) == 0o640
    assert len(json.loads(cache.read_text())["files"]) == 2


def test_cache_written_through_a_symlink_to_a_cache(tmp_path, counted):
    paths = write(tmp_path, [3, 5])
    (tmp_path / "shared").mkdir()
    target = tmp_path / "shared" / "lengths.json"
    probe_lengths([npy(paths[0])], cache=target, progress=False)  # the shared cache
    link = tmp_path / "lengths.json"
    link.symlink_to(target)
    probe_lengths([npy(p) for p in paths], cache=link, progress=False)  # written through
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert len(json.loads(target.read_text())["files"]) == 2
    assert not list(tmp_path.glob("*.tmp")) and not list(target.parent.glob("*.tmp"))
    counted.clear()
    assert probe_lengths([npy(p) for p in paths], cache=link, progress=False) == [3, 5]
    assert counted == []


def test_dangling_symlink_not_followed(tmp_path):
    paths = write(tmp_path, [3, 5])
    target = tmp_path / "elsewhere" / "deeper" / "lengths.json"
    link = tmp_path / "lengths.json"
    link.symlink_to(target)
    with pytest.warns(UserWarning, match="symbolic link to .*which does not exist"):
        assert probe_lengths([npy(p) for p in paths], cache=link, progress=False) == [3, 5]
    assert link.is_symlink() and not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("content", ["#!/bin/sh\necho precious\n", "", '{"a": 1}'])
def test_symlink_to_another_file_left_alone(tmp_path, content):
    paths = write(tmp_path, [3, 5])
    target = tmp_path / "precious.txt"
    target.write_text(content)
    target.chmod(0o600)
    link = tmp_path / "lengths.json"
    link.symlink_to(target)
    with pytest.warns(UserWarning) as caught:
        assert probe_lengths([npy(p) for p in paths], cache=link, progress=False) == [3, 5]
    assert len(caught) == 2 and "ignoring the" in str(caught[0].message)
    assert re.search("a symbolic link to .*precious.txt.*not a streamseq", str(caught[1].message))
    assert target.read_text() == content and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert link.is_symlink() and not list(tmp_path.glob("*.tmp"))


def test_dangling_folder_symlink_not_followed(tmp_path):
    paths = write(tmp_path, [3, 5])
    (tmp_path / "cache").symlink_to(tmp_path / "missing" / "folder")
    cache = tmp_path / "cache" / "lengths.json"
    with pytest.warns(UserWarning, match="was not written.*FileExistsError"):
        assert probe_lengths([npy(p) for p in paths], cache=cache, progress=False) == [3, 5]
    assert not (tmp_path / "missing").exists()


def test_folder_at_the_cache_path(tmp_path):
    paths = write(tmp_path, [3, 5])
    cache = tmp_path / "lengths.json"
    cache.mkdir()
    with pytest.warns(UserWarning) as caught:
        assert probe_lengths([npy(p) for p in paths], cache=cache, progress=False) == [3, 5]
    messages = [str(w.message) for w in caught]
    assert any(f"{cache} was not written (IsADirectoryError" in m for m in messages)
    assert cache.is_dir() and list(cache.iterdir()) == []


@pytest.mark.parametrize(
    "error",
    [
        FileExistsError(errno.EEXIST, "exists"),
        FileNotFoundError(errno.ENOENT, "gone"),
        PermissionError(errno.EACCES, "refused"),
        OSError(errno.ENOSPC, "no space left"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_unwritable_cache_warned_lengths_returned(tmp_path, monkeypatch, error):
    paths = write(tmp_path, [3, 5])
    cache = tmp_path / "lengths.json"

    def refuse(src, dst):
        raise error

    monkeypatch.setattr(probe.os, "replace", refuse)
    what = f"length cache {cache} was not written .{type(error).__name__}"
    with pytest.warns(UserWarning, match=what):
        assert probe_lengths([npy(p) for p in paths], cache=cache, progress=False) == [3, 5]
    assert not cache.exists() and not list(tmp_path.glob("*.tmp"))


def test_unwritable_cache_does_not_hide_the_error(tmp_path, monkeypatch):
    paths = write(tmp_path, [3, 4])
    with open(paths[1], "wb") as f:
        f.write(b"not an npy file")
    monkeypatch.setattr(probe.os, "replace", lambda src, dst: os.unlink("/no/such/file"))
    with pytest.warns(UserWarning, match="was not written"):
        with pytest.raises(streamseq.StreamError, match="s1.npy"):
            probe_lengths([npy(p) for p in paths], cache=tmp_path / "c.json", progress=False)


def test_crash_while_writing_keeps_the_old_cache(tmp_path, monkeypatch):
    paths = write(tmp_path, [3, 5])
    cache = tmp_path / "lengths.json"
    probe_lengths([npy(paths[0])], cache=cache, progress=False)
    before = cache.read_bytes()

    def crash(fd):
        raise KeyboardInterrupt  # as if the process were stopped mid-write

    monkeypatch.setattr(probe.os, "fsync", crash)
    with pytest.raises(KeyboardInterrupt):
        probe_lengths([npy(p) for p in paths], cache=cache, progress=False)
    assert cache.read_bytes() == before and not list(tmp_path.glob("*.tmp"))


def test_new_cache_folders_made(tmp_path):
    paths = write(tmp_path, [3])
    cache = tmp_path / "a" / "b" / "lengths.json"
    assert probe_lengths([npy(paths[0])], cache=cache, progress=False) == [3]
    assert json.loads(cache.read_text())["format"] == "streamseq-lengths"


def test_credentials_never_written_to_the_cache(tmp_path):
    (path,) = write(tmp_path, [4])
    secret = "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY40"
    cache = tmp_path / "lengths.json"
    opener = npy(path, token=secret)  # np.load ignores no keyword: measured by a wrapper
    assert cache_key(opener)[1].startswith("numpy.load(mmap_mode='r', token=<sha256:")
    probe_lengths([functools.partial(load_with, path, token=secret)], cache=cache, progress=False)
    text = cache.read_text()
    assert all(secret[i : i + 8] not in text for i in range(len(secret) - 7))
    url = f"https://me:{secret}@host/a.bin?X-Amz-Signature={secret}"
    assert cache_key(functools.partial(load_with, url))[0] == (
        "https://***@host/a.bin?X-Amz-Signature=***"
    )


def test_damaged_entry_measured_again(tmp_path, counted):
    openers = [npy(p) for p in write(tmp_path, [3, 5])]
    cache = tmp_path / "lengths.json"
    probe_lengths(openers, cache=cache, progress=False)
    content = json.loads(cache.read_text())
    content["files"][os.path.abspath(openers[0].args[0])]["size"] = "big"
    cache.write_text(json.dumps(content))
    counted.clear()
    assert probe_lengths(openers, cache=cache, progress=False) == [3, 5]
    assert [o.args[0] for o in counted] == [openers[0].args[0]]


@pytest.mark.parametrize("workers", [0, 2])
def test_error_names_file(tmp_path, workers):
    paths = write(tmp_path, [3, 4, 5])
    with open(paths[1], "wb") as f:
        f.write(b"not an npy file")
    openers = [npy(p) for p in paths]
    cache = tmp_path / "lengths.json"
    with pytest.raises(streamseq.StreamError, match="s1.npy") as info:
        probe_lengths(openers, num_workers=workers, cache=cache, progress=False)
    assert info.value.index == 1 and info.value.stream == os.path.abspath(paths[1])
    assert "opening failed" in str(info.value)  # as the loader says it
    if workers == 0:  # what was measured before the error is kept
        assert len(json.loads(cache.read_text())["files"]) == 1


def test_missing_file(tmp_path):
    with pytest.raises(streamseq.StreamError, match="nowhere.npy.*FileNotFoundError"):
        probe_lengths([npy(str(tmp_path / "nowhere.npy"))], progress=False)


@pytest.mark.parametrize("workers", [0, 1])
def test_timeout(workers):
    openers = [functools.partial(slow, 0), functools.partial(slow, 30)]
    t0 = time.perf_counter()
    with pytest.raises(streamseq.StreamError, match="stream 1 .*timed out after 0.3 s"):
        probe_lengths(openers, num_workers=workers, timeout=0.3, progress=False)
    assert time.perf_counter() - t0 < 10


def test_dead_worker():
    with pytest.raises(streamseq.StreamError, match="worker process died.*streams 0"):
        probe_lengths([die], num_workers=1, progress=False)


def test_unpicklable_opener_with_workers():
    openers = [np.arange(4), lambda: np.arange(3)]
    with pytest.raises(streamseq.StreamError, match="cannot send streams .*1.*must pickle"):
        probe_lengths(openers, num_workers=2, progress=False)
    assert probe_lengths(openers, progress=False) == [4, 3]  # fine in this process


def test_bad_arguments(tmp_path):
    with pytest.raises(TypeError, match="is a path"):
        probe_lengths([str(tmp_path / "a.npy")])
    with pytest.raises(TypeError, match="is a path"):
        probe_lengths([tmp_path / "a.npy"])
    with pytest.raises(TypeError, match="stream 0"):
        probe_lengths([3])
    with pytest.raises(ValueError, match="num_workers"):
        probe_lengths([np.arange(2)], num_workers=-1)
    with pytest.raises(ValueError, match="timeout"):
        probe_lengths([np.arange(2)], timeout=0)


def test_progress_bar(tmp_path, capsys):
    openers = [npy(p) for p in write(tmp_path, [3, 5, 2])]
    probe_lengths(openers, progress=True)
    assert "probing lengths" in capsys.readouterr().err


def test_feeds_the_loader(tmp_path, counted):
    lengths = [5, 3, 0, 8, 2]
    paths = write(tmp_path, lengths)
    openers = [npy(p) for p in paths]
    measured = probe_lengths(openers, cache=tmp_path / "lengths.json", progress=False)
    loader = streamseq.StreamLoader(openers, batch_size=2, tbins=3, lengths=measured)
    sources = [np.load(p) for p in paths]
    assert check_continuity(loader, lengths, sources=sources) == len(loader)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_source_error_while_probing_stays_a_source_error(tmp_path, workers):
    from streamseq.errors import SourceError

    bad = tmp_path / "neg.npy"
    good = np.lib.format.header_data_from_array_1_0(np.zeros(3, np.int32))
    good["shape"] = (-6,)
    with open(bad, "wb") as f:
        np.lib.format.write_array_header_1_0(f, good)
    openers = [functools.partial(streamseq.io.tokens, str(bad))]
    with pytest.raises(SourceError, match=r"stream 0 .*neg\.npy"):
        probe_lengths(openers, num_workers=workers, progress=False)
