"""A file that changes after its source was made is an error, never other steps.

Each case makes the sources, then a loader, changes one file and iterates: the first
stream (whose first step the loader reads for the data's dtype, here) is left alone, so
that the changed file is first opened where the rows are read (a worker process with
``num_workers=2``).
"""

import os
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from media import frames_of, plain_audio, plain_video, write_audio, write_video
from servers import http_folder, http_server  # noqa: F401

from streamseq import StreamLoader
from streamseq.errors import SourceError
from streamseq.io import audio, tokens, video
from streamseq.testing import check_continuity

WORKERS = [0, 2]


def replace(path, write):
    """Write a new file aside with ``write(tmp)``, then rename it over ``path``."""
    tmp = f"{path}.new{os.path.splitext(path)[1]}"
    write(tmp)
    os.replace(tmp, path)


def assert_changed(sources, workers, path, *what, index=1):
    """Iterating a loader over ``sources`` raises a SourceError naming ``path`` and ``what``."""
    loader = StreamLoader(sources, len(sources), 4, num_workers=workers)
    with pytest.raises(SourceError) as info:
        list(loader)
    error = info.value
    assert error.path == str(path) and error.index == index
    assert error.steps is not None and error.steps[0] == 0
    text = str(error)
    assert f"stream {index}" in text and "changed since the source was made" in text
    for words in what:
        assert words in text, text
    return error


def npy(path, data):
    np.save(path, data)
    return path


# -- token files ----------------------------------------------------------------------------


@pytest.mark.parametrize("workers", WORKERS)
def test_npy_same_size_other_dtype(tmp_path, workers):
    keep = npy(tmp_path / "keep.npy", np.arange(50, dtype=np.int32))
    path = npy(tmp_path / "a.npy", np.arange(100, dtype=np.int32))
    sources = [tokens(keep), tokens(path)]
    size = os.path.getsize(path)
    np.save(path, np.arange(100, dtype=np.float32))  # in place: same inode, same size
    assert os.path.getsize(path) == size
    assert_changed(sources, workers, path, "dtype int32 -> float32")


@pytest.mark.parametrize("workers", WORKERS)
def test_npy_longer(tmp_path, workers):
    keep = npy(tmp_path / "keep.npy", np.arange(50, dtype=np.int32))
    path = npy(tmp_path / "a.npy", np.arange(100, dtype=np.int32))
    sources = [tokens(keep), tokens(path)]
    np.save(path, np.arange(300, dtype=np.int32))
    assert_changed(sources, workers, path, "shape (100,) -> (300,)", "size 528 -> 1328 bytes")


@pytest.mark.parametrize("workers", WORKERS)
def test_flat_file_replaced_with_same_size(tmp_path, workers):
    keep = npy(tmp_path / "keep.npy", np.arange(50, dtype=np.uint16))
    path = tmp_path / "a.bin"
    np.arange(100, dtype=np.uint16).tofile(path)
    sources = [tokens(keep), tokens(path, np.uint16)]
    replace(str(path), lambda p: np.arange(100, 200, dtype=np.uint16).tofile(p))
    assert_changed(sources, workers, path, "replaced by another file")


@pytest.mark.parametrize("workers", WORKERS)
def test_deleted_file(tmp_path, workers):
    keep = npy(tmp_path / "keep.npy", np.arange(50))
    path = npy(tmp_path / "a.npy", np.arange(100))
    sources = [tokens(keep), tokens(path)]
    os.remove(path)
    assert_changed(sources, workers, path, "the file no longer exists")


@pytest.mark.parametrize("workers", WORKERS)
def test_unchanged_files_read_identically(tmp_path, workers):
    arrays = [np.arange(n, dtype=np.int16) * 3 for n in (30, 7, 52)]
    sources = [tokens(npy(tmp_path / f"{i}.npy", a)) for i, a in enumerate(arrays)]
    batches = list(StreamLoader(sources, 2, 5, num_workers=workers))
    check_continuity(batches, [30, 7, 52], sources=arrays)


def test_touched_file_is_a_change(tmp_path):
    # the content may be the same: only its time says otherwise, and that is not enough
    path = npy(tmp_path / "a.npy", np.arange(10))
    t = tokens(path)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(SourceError, match=r"\(modified .* UTC -> .* UTC\)"):
        t[0:3]


def test_open_handle_keeps_the_file_it_opened(tmp_path):
    """A file replaced by a rename: the open memory map reads the former file (the planned
    steps); the next open (another process, another pass) is an error."""
    path = npy(tmp_path / "a.npy", np.arange(100, dtype=np.int64))
    t = tokens(path)
    np.testing.assert_array_equal(t[0:10], np.arange(10))
    replace(str(path), lambda p: np.save(p, np.arange(100, dtype=np.float64)))
    np.testing.assert_array_equal(t[50:60], np.arange(50, 60))
    moved = pickle.loads(pickle.dumps(t))  # as sent to a spawned worker: nothing open
    with pytest.raises(SourceError, match="dtype int64 -> float64"):
        moved[0:10]
    t.close()
    with pytest.raises(SourceError, match="dtype int64 -> float64"):
        t[0:10]


def test_error_is_raised_again_until_the_source_is_made_again(tmp_path):
    path = npy(tmp_path / "a.npy", np.arange(10, dtype=np.int32))
    t = tokens(path)
    np.save(path, np.arange(10, dtype=np.float32))
    for _ in range(2):
        with pytest.raises(SourceError, match="dtype int32 -> float32"):
            t[0:3]
    np.testing.assert_array_equal(tokens(path)[0:3], [0.0, 1.0, 2.0])


def test_a_damaged_header_is_named(tmp_path):
    path = npy(tmp_path / "a.npy", np.arange(10, dtype=np.int32))
    t = tokens(path)
    with open(path, "r+b") as f:
        f.write(b"garbage")
    with pytest.raises(SourceError, match=r"no longer a readable \.npy file"):
        t[0:3]


# -- media ----------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", WORKERS)
def test_video_replaced_by_a_longer_one(tmp_path, workers):
    keep = write_video(tmp_path / "keep.mp4", 12)
    path = write_video(tmp_path / "a.mp4", 20)
    sources = [video(keep), video(path)]
    assert [len(s) for s in sources] == [12, 20]
    replace(str(path), lambda p: write_video(p, 30))
    assert_changed(sources, workers, path, "size", "replaced by another file")


@pytest.mark.parametrize("workers", WORKERS)
def test_video_rewritten_in_place(tmp_path, workers):
    keep = write_video(tmp_path / "keep.mp4", 12)
    path = write_video(tmp_path / "a.mp4", 20, gop=5)
    sources = [video(keep), video(path)]
    [len(s) for s in sources]
    write_video(path, 20, gop=1)  # as many frames, other bytes
    assert_changed(sources, workers, path, "size")


@pytest.mark.parametrize("workers", WORKERS)
def test_video_rewritten_in_place_while_it_is_read_is_named_as_changed(tmp_path, workers):
    """An open decoder reads on in the new bytes: its failure is told as the file's change."""
    paths = [write_video(tmp_path / f"{i}.mp4", 200, gop=5, bf=0, size=(96, 128)) for i in (0, 1)]
    other = write_video(tmp_path / "other.mp4", 200, gop=3, bf=0, size=(96, 128))
    it = iter(StreamLoader([video(p) for p in paths], 2, 3, num_workers=workers))
    next(it)  # the decoders are open
    for path in paths:
        with open(path, "r+b") as f:  # the same file (inode), another video's bytes
            f.truncate(0)
            f.write(other.read_bytes())
        st_ = os.stat(path)
        os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns + 1))
    with pytest.raises(SourceError) as info:
        for _ in it:
            pass
    error = info.value
    assert error.path in {str(p) for p in paths} and error.steps is not None
    assert "changed since the source was made" in str(error) and "stream" in str(error)


def test_video_probed_after_the_change(tmp_path):
    path = write_video(tmp_path / "a.mp4", 20)
    v = video(path)  # not demuxed yet: the length is measured later
    replace(str(path), lambda p: write_video(p, 30))
    with pytest.raises(SourceError, match="changed since the source was made"):
        len(v)


@pytest.mark.parametrize("workers", WORKERS)
def test_unchanged_video_reads_identically(tmp_path, workers):
    paths = [write_video(tmp_path / f"{n}.mp4", n) for n in (12, 20)]
    sources = [video(p) for p in paths]
    batches = list(StreamLoader(sources, 2, 4, num_workers=workers))
    check_continuity(batches, [12, 20], sources=[plain_video(p) for p in paths])


@pytest.mark.parametrize("workers", WORKERS)
def test_audio_replaced(tmp_path, workers):
    keep = write_audio(tmp_path / "keep.wav", 4000, "pcm_s16le", "wav")
    path = write_audio(tmp_path / "a.wav", 8000, "pcm_s16le", "wav")
    sources = [audio(keep, frame=500), audio(path, frame=500)]
    assert [len(s) for s in sources] == [8, 16]
    write_audio(path, 16000, "pcm_s16le", "wav")
    assert_changed(sources, workers, path, "size 32078 -> 64078 bytes")


@pytest.mark.parametrize("workers", WORKERS)
def test_unchanged_audio_reads_identically(tmp_path, workers):
    paths = [write_audio(tmp_path / f"{n}.wav", n, "pcm_s16le", "wav") for n in (4000, 8000)]
    sources = [audio(p, frame=500) for p in paths]
    batches = list(StreamLoader(sources, 2, 4, num_workers=workers))
    expected = [frames_of(plain_audio(p), 500) for p in paths]
    check_continuity(batches, [8, 16], sources=expected)


# -- files at URLs --------------------------------------------------------------------------


@pytest.mark.parametrize("workers", WORKERS)
def test_http_file_with_a_new_etag(http_server, http_folder, workers):  # noqa: F811
    npy(http_folder / "keep.npy", np.arange(40, dtype=np.int32))
    npy(http_folder / "changes.npy", np.arange(100, dtype=np.int32))
    secret = "sig=s3cr3t&X-Amz-Credential=AKIAXX"
    host = http_server.url.split("://", 1)[1]
    url = f"http://user:pa55@{host}/changes.npy?{secret}"
    sources = [tokens(f"{http_server.url}/keep.npy"), tokens(url)]
    np.save(http_folder / "changes.npy", np.arange(100, 200, dtype=np.int32))  # same size
    error = assert_changed(sources, workers, f"{http_server.url}/changes.npy", "ETag changed")
    for hidden in ("s3cr3t", "AKIAXX", "pa55", "sig="):
        assert hidden not in error.detail and hidden not in error.path


@pytest.mark.parametrize("workers", WORKERS)
def test_http_video_replaced(http_server, http_folder, tmp_path, workers):  # noqa: F811
    write_video(http_folder / "keep.mp4", 12)
    write_video(http_folder / "v.mp4", 20)
    sources = [video(f"{http_server.url}/{n}") for n in ("keep.mp4", "v.mp4")]
    assert [len(s) for s in sources] == [12, 20]
    replace(str(http_folder / "v.mp4"), lambda p: write_video(p, 30))
    assert_changed(sources, workers, f"{http_server.url}/v.mp4", "ETag changed")


def test_unchanged_http_file_reads_identically(http_server, http_folder):  # noqa: F811
    data = np.arange(300, dtype=np.int16).reshape(100, 3)
    npy(http_folder / "same.npy", data)
    t = tokens(f"{http_server.url}/same.npy")
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(t))[10:90], data[10:90])


# -- any rewrite ----------------------------------------------------------------------------

DTYPES = ["int8", "uint16", "int32", "float32", "int64", "float64"]
HOW = ["none", "in place", "rename"]


@st.composite
def files(draw):
    """The length of a token file, and how it is rewritten (or not) once the loader is made:
    ``(n, how, new dtype, new n)``."""
    n = draw(st.integers(1, 40))
    how = draw(st.sampled_from(HOW))
    return n, how, draw(st.sampled_from(DTYPES)), draw(st.integers(1, 40))


def rewrite(path, how, data):
    """Write ``data`` over the file at ``path``: in place (same inode) or by a rename."""
    if how == "in place":
        np.save(path, data)
        # file times come from a coarse kernel clock: a rewrite within the same tick keeps
        # the time (and may keep size and header); a later one, as any real one, does not
        st_ = os.stat(path)
        os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns + 1))
    elif how == "rename":
        replace(str(path), lambda p: np.save(p, data))


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    dtype=st.sampled_from(DTYPES),
    cases=st.lists(files(), min_size=1, max_size=3),
    tbins=st.integers(1, 9),
    workers=st.sampled_from([0, 2]),
    seed=st.integers(0, 2**16),
)
def test_batches_are_the_original_steps_or_an_error(
    tmp_path_factory, dtype, cases, tbins, workers, seed
):
    folder = tmp_path_factory.mktemp("rewrite")
    rng = np.random.default_rng(seed)
    originals, sources, paths = [], [], []
    for i, (n, _, _, _) in enumerate(cases):
        originals.append(rng.integers(0, 100, n).astype(dtype))
        paths.append(npy(folder / f"{i}.npy", originals[-1]))
        sources.append(tokens(paths[-1]))
    loader = StreamLoader(sources, min(2, len(sources)), tbins, num_workers=workers)
    for path, (_, how, new_dtype, new_n) in zip(paths, cases, strict=True):
        rewrite(path, how, rng.integers(0, 100, new_n).astype(new_dtype))
    changed = {str(p) for p, c in zip(paths, cases, strict=True) if c[1] != "none"}
    try:
        batches = list(loader)
    except SourceError as e:
        event(f"workers={workers}: a SourceError")
        assert e.path in changed
        assert "changed since the source was made" in str(e)
        return
    event(f"workers={workers}: the original steps")
    assert not changed
    check_continuity(batches, [len(a) for a in originals], sources=originals)


def test_an_events_file_that_changed_is_named(tmp_path):
    from streamseq.io import events, synthetic_events

    path = str(tmp_path / "ev.npy")
    np.save(path, synthetic_events(height=8, width=8, duration_us=20_000, seed=0))
    source = events(path, window_us=1000, height=8, width=8)
    longer = synthetic_events(height=8, width=8, duration_us=40_000, seed=1)
    np.save(path, longer)
    with pytest.raises(SourceError, match=r"ev\.npy.*changed"):
        source[0:2]
