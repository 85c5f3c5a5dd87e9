import functools
import json
import multiprocessing
import operator
import os
import sys
import time

import numpy as np
import pytest
from helpers import assert_same, live_children, no_children
from media import plain_audio, plain_video, write_audio, write_video
from servers import RangeServer, http_folder, http_server, s3_server  # noqa: F401

from streamseq import StreamLoader
from streamseq.errors import SourceError
from streamseq.io import audio, events, probe, probe_lengths, synthetic_events, tokens, video
from streamseq.io import remote as remote_files
from streamseq.testing import check_continuity

pytest.importorskip("s3fs")
pytest.importorskip("moto")

VIDEO_LENGTHS = {"a.mp4": 40, "b.mkv": 25, "c.mp4": 33}
TOKEN_LENGTHS = {"t0.npy": 300, "t1.npy": 170, "t2.npy": 45, "t3.npy": 260}


@pytest.fixture(scope="module")
def files(http_folder, s3_server):  # noqa: F811
    """Videos, audio, tokens and events, in the served folder and in the bucket."""
    folder = http_folder
    for name, n in VIDEO_LENGTHS.items():
        fmt = "matroska" if name.endswith("mkv") else "mp4"
        write_video(folder / name, n, fmt=fmt, gop=7, bf=2)
    write_audio(folder / "s.wav", 20000, "pcm_s16le", "wav", 16000, "stereo")
    write_audio(folder / "m.flac", 15000, "flac", "flac", 16000, "mono")
    for i, (name, n) in enumerate(TOKEN_LENGTHS.items()):
        np.save(folder / name, (np.arange(2 * n, dtype=np.int32) + 1000 * i).reshape(n, 2))
    np.arange(999, dtype=np.uint16).tofile(folder / "flat.bin")
    np.save(folder / "ev.npy", synthetic_events(height=16, width=24, duration_us=200_000))
    late = synthetic_events(height=16, width=24, duration_us=200_000)
    late["t"][len(late) // 2] = late["t"][-1] + 1  # one event out of order
    np.save(folder / "late.npy", late)
    for path in sorted(folder.iterdir()):
        s3_server.upload(path)
    return folder


def where(kind, files, s3_server, http_server):  # noqa: F811
    """(base URL, storage options) of a server."""
    if kind == "s3":
        return f"s3://{s3_server.bucket}", s3_server.options
    return http_server.url, {}


SERVERS = ["s3", "http"]


@pytest.fixture(params=SERVERS)
def served(request, files, s3_server, http_server):  # noqa: F811
    base, options = where(request.param, files, s3_server, http_server)
    return base, options, files


def open_all(make, names, base, options, **kw):
    return [make(f"{base}/{name}", storage_options=options, **kw) for name in names]


@pytest.mark.parametrize("workers", [0, 2])
def test_video_and_tokens_batches_equal_local(served, workers):
    base, options, folder = served
    names = list(VIDEO_LENGTHS)
    remote = open_all(video, names, base, options)
    local = [video(folder / n) for n in names]
    lengths = [len(s) for s in remote]
    assert lengths == list(VIDEO_LENGTHS.values())
    loader = StreamLoader(remote, 2, 8, num_workers=workers)
    batches = list(loader)
    check_continuity(batches, lengths, sources=local)
    assert_same(batches, list(StreamLoader(local, 2, 8)))

    names = list(TOKEN_LENGTHS)
    remote = open_all(tokens, names, base, options)
    local = [tokens(folder / n) for n in names]
    lengths = [len(s) for s in remote]
    assert lengths == list(TOKEN_LENGTHS.values())
    batches = list(StreamLoader(remote, 3, 16, num_workers=workers))
    check_continuity(batches, lengths, sources=local)
    assert_same(batches, list(StreamLoader(local, 3, 16)))


@pytest.mark.parametrize("workers", [0, 2])
def test_audio_and_events_batches_equal_local(served, workers):
    base, options, folder = served
    names = ["s.wav", "m.flac"]
    remote = open_all(audio, names, base, options, frame=512, layout="mono")
    local = [audio(folder / n, frame=512, layout="mono") for n in names]
    lengths = [len(s) for s in remote]
    assert lengths == [len(s) for s in local]
    batches = list(StreamLoader(remote, 2, 5, num_workers=workers))
    check_continuity(batches, lengths, sources=local)
    assert_same(batches, list(StreamLoader(local, 2, 5)))

    kw = {"window_us": 5000, "height": 16, "width": 24}
    remote = [events(f"{base}/ev.npy", storage_options=options, **kw)]
    local = [events(folder / "ev.npy", **kw)]
    assert len(remote[0]) == len(local[0]) == 40
    batches = list(StreamLoader(remote * 2, 2, 7, num_workers=workers))
    check_continuity(batches, [40, 40], sources=local * 2)
    assert_same(batches, list(StreamLoader(local * 2, 2, 7)))


def test_remote_events_out_of_order_are_refused_naming_the_file(served):
    base, options, folder = served
    kw = {"window_us": 5000, "height": 16, "width": 24, "storage_options": options}
    half = len(np.load(folder / "late.npy")) // 2
    with pytest.raises(SourceError, match=rf"late.npy: .*not sorted by t: event {half + 1} "):
        events(f"{base}/late.npy", **kw)


@pytest.mark.parametrize("kind", SERVERS)
@pytest.mark.parametrize("workers", [0, 2])
def test_changed_file_is_an_error(kind, workers, files, s3_server, http_server):  # noqa: F811
    base, options = where(kind, files, s3_server, http_server)
    name = f"changes-{workers}.npy"

    def put(data):
        np.save(files / name, data)
        if kind == "s3":
            s3_server.upload(files / name)

    data = np.arange(100, dtype=np.int32).reshape(50, 2)  # steps as those of t2.npy
    put(data)
    sources = [tokens(f"{base}/t2.npy", storage_options=options)]
    sources.append(tokens(f"{base}/{name}", storage_options=options))
    put(data.astype(np.float32))  # the same size, another ETag
    with pytest.raises(SourceError) as info:
        list(StreamLoader(sources, 2, 8, num_workers=workers))
    error = info.value
    assert error.path == f"{base}/{name}" and error.index == 1
    assert "ETag changed" in str(error) and "dtype int32 -> float32" in str(error)
    assert "testing" not in str(error)  # the credentials of the bucket
    put(data)  # back: the same bytes, the same ETag again
    batches = list(StreamLoader(sources, 2, 8, num_workers=workers))
    check_continuity(batches, [45, 50], sources=[tokens(files / "t2.npy"), data])


def test_random_access(served):
    base, options, folder = served
    v = video(f"{base}/a.mp4", storage_options=options)
    ref = plain_video(folder / "a.mp4")
    for a in [30, 3, 20, 19, 38, 0]:
        np.testing.assert_array_equal(v[a : a + 3], ref[a : a + 3])
    np.testing.assert_allclose(v.timestamps, np.arange(40) / 25)
    s = audio(f"{base}/s.wav", storage_options=options, frame=1000)
    ref = plain_audio(folder / "s.wav")
    for a in [15, 2, 9]:
        np.testing.assert_array_equal(s[a : a + 2].reshape(-1, 2), ref[a * 1000 : (a + 2) * 1000])
    t = tokens(f"{base}/flat.bin", np.uint16, storage_options=options)
    assert len(t) == 999 and t[990:].tolist() == list(range(990, 999))
    assert t[5] == 5 and not t[0:4].flags.writeable
    np.testing.assert_array_equal(t.array(), np.arange(999))


def test_fortran_order_tokens(s3_server, tmp_path):  # noqa: F811
    data = np.asfortranarray(np.arange(60).reshape(20, 3))
    np.save(tmp_path / "fortran.npy", data)
    t = tokens(s3_server.upload(tmp_path / "fortran.npy"), storage_options=s3_server.options)
    np.testing.assert_array_equal(t[4:9], data[4:9])


def test_pickle_is_small_and_opens_nothing(served):
    import pickle

    base, options, _ = served
    t = tokens(f"{base}/t1.npy", storage_options=options)
    t[0:10]  # holds an open file
    data = pickle.dumps(t)
    assert len(data) < 2000
    np.testing.assert_array_equal(pickle.loads(data)[5:7], t[5:7])


def _filesystem_of_child(url, options, parent):
    fs = remote_files.filesystem(url, options)
    return id(fs) != parent and getattr(fs, "_pid", os.getpid()) == os.getpid()


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_each_process_its_own_connection(served, method):
    base, options, folder = served
    url = f"{base}/t0.npy"
    t = tokens(url, storage_options=options)
    t[0:5]  # the parent's filesystem (session, loop) is open
    parent = id(remote_files.filesystem(url, options))
    with multiprocessing.get_context(method).Pool(1) as pool:
        own = pool.apply(_filesystem_of_child, (url, options, parent))
        got = pool.apply(operator.getitem, (t, slice(100, 104)))
    assert own
    np.testing.assert_array_equal(got, np.load(folder / "t0.npy")[100:104])
    np.testing.assert_array_equal(t[7:9], np.load(folder / "t0.npy")[7:9])  # the parent's goes on


def test_missing_file_and_local_options(served):
    base, options, folder = served
    start = time.monotonic()
    with pytest.raises(FileNotFoundError):
        video(f"{base}/nowhere.mp4", storage_options=options)
    with pytest.raises(FileNotFoundError):
        tokens(f"{base}/nowhere.npy", storage_options=options)
    assert time.monotonic() - start < 5  # not retried
    with pytest.raises(ValueError, match="storage_options are for URLs"):
        tokens(folder / "t0.npy", storage_options={"anon": True})


def test_missing_fsspec_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "fsspec", None)
    with pytest.raises(ImportError, match=r"streamseq\[remote\]"):
        tokens("s3://bucket/never-imported.npy", storage_options={"anon": True, "x": 1})


def test_unreachable_server_is_a_source_error(http_folder):  # noqa: F811
    server = RangeServer(http_folder).start()
    url = f"{server.url}/t0.npy"
    server.stop()
    start = time.monotonic()
    with pytest.raises(SourceError, match=url) as info:
        tokens(url)
    assert time.monotonic() - start < 10
    assert info.value.path == url and "3 attempts" in str(info.value)


@pytest.mark.parametrize("workers", [0, 2])
def test_server_stops_in_the_middle_of_an_epoch(http_folder, workers):  # noqa: F811
    before = {c.pid for c in live_children()}
    for i in range(12):
        np.save(http_folder / f"fault{i}.npy", np.arange(120, dtype=np.int64) + 1000 * i)
    server = RangeServer(http_folder).start()
    try:
        streams = [tokens(f"{server.url}/fault{i}.npy") for i in range(12)]
        loader = StreamLoader(streams, 2, 8, num_workers=workers, max_buffered=4)
        it = iter(loader)
        first = next(it)
        assert first.data.shape == (2, 8)
        server.stop()
        start = time.monotonic()
        with pytest.raises(SourceError, match=rf"{server.url}/fault\d+\.npy") as info:
            for _ in it:
                pass
        assert time.monotonic() - start < 20  # the retries, not a hang
        assert "attempts" in str(info.value)
        loader.close()
        del it, loader
    finally:
        server.stop()
    assert no_children(before)


def test_probe_cache_keyed_by_etag(s3_server, tmp_path, monkeypatch):  # noqa: F811
    measured = []
    real = probe._measure
    monkeypatch.setattr(probe, "_measure", lambda o: measured.append(o) or real(o))
    np.save(tmp_path / "p.npy", np.arange(50))
    url = s3_server.upload(tmp_path / "p.npy")
    cache = tmp_path / "lengths.json"

    def run():
        return probe_lengths(
            [tokens(url, storage_options=s3_server.options)], cache=cache, progress=False
        )

    assert run() == [50] and len(measured) == 1
    entry = json.loads(cache.read_text())["files"][url]
    assert entry["etag"] and entry["size"] > 0 and "mtime_ns" not in entry
    assert run() == [50] and len(measured) == 1  # same ETag: read back
    np.save(tmp_path / "p.npy", np.arange(70))
    s3_server.upload(tmp_path / "p.npy")  # same name, new content: new ETag
    assert run() == [70] and len(measured) == 2
    assert json.loads(cache.read_text())["files"][url]["etag"] != entry["etag"]


def test_probe_cache_of_a_partial_opener(served, tmp_path):
    base, options, _ = served
    url = f"{base}/t2.npy"
    opener = functools.partial(tokens, url, storage_options=options)
    cache = tmp_path / "lengths.json"
    assert probe_lengths([opener], cache=cache, progress=False, num_workers=2) == [45]
    entry = json.loads(cache.read_text())["files"][url]
    assert entry["etag"] and list(entry["lengths"].values()) == [45]
    assert "secret" not in cache.read_text()  # the options are not the description


def _first_batch_requests(http_server, name, steps):  # noqa: F811
    opener = functools.partial(tokens, f"{http_server.url}/{name}")
    loader = StreamLoader([opener], 1, steps, lengths=[steps], pin_memory=False)
    before = http_server.requests, http_server.heads
    batch = next(iter(loader))
    return batch, (http_server.requests - before[0], http_server.heads - before[1])


def test_a_source_made_to_read_asks_once(files, http_server):  # noqa: F811
    """An opener's token file: one request for its size, one for its header and steps.

    The loader opens the first stream twice: to read the layout of the steps, then for
    the batch.
    """
    batch, (gets, heads) = _first_batch_requests(http_server, "t1.npy", 170)
    np.testing.assert_array_equal(batch.data[0, :, 0], np.arange(0, 340, 2) + 1000)
    assert (heads, gets) == (2, 2)


def test_a_source_measured_long_ago_is_measured_again(files, http_server, monkeypatch):  # noqa: F811
    from streamseq.io import _base

    monkeypatch.setattr(_base, "FRESH", 0.0)
    _, (gets, heads) = _first_batch_requests(http_server, "t1.npy", 170)
    assert (heads, gets) == (4, 2)  # the size once more, whenever the process opens it


def test_only_a_token_file_made_to_read_keeps_its_first_block(files, http_server):  # noqa: F811
    from streamseq.read.handle import opening

    url = f"{http_server.url}/t1.npy"
    assert tokens(url)._spare.peek() is None  # made ahead (a list of sources): nothing held
    with opening():
        made = tokens(url)
    assert made._spare.peek() is not None  # its header's block, for the read that follows
    made[0:4]
    assert made._spare.peek() is None  # taken by the read


# -- what a forked child inherits, and the requests of a source made to read -----------------


def _child_reads(url, options, parent):
    """In a forked child: what it parsed, made and read (see the test below)."""
    import gc
    import socket
    import threading

    import aiohttp
    import botocore.loaders

    parsed = []
    real = botocore.loaders.JSONFileLoader.load_file
    botocore.loaders.JSONFileLoader.load_file = lambda self, *a, **k: (
        parsed.append(a) or real(self, *a, **k)
    )
    try:
        fs = remote_files.filesystem(url, options)
        data = remote_files.RemoteFile(url, options).read_range(0, 64)
    finally:
        botocore.loaders.JSONFileLoader.load_file = real
    loader = fs.session.get_component("data_loader")
    # nothing that holds a connection, a thread or a loop is reachable from the loader
    live = (socket.socket, threading.Thread, aiohttp.ClientSession, type(fs.loop))
    seen, todo, found = set(), [loader], []
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, type):
            continue
        seen.add(id(obj))
        if isinstance(obj, live):
            found.append(type(obj).__name__)
        todo.extend(gc.get_referents(obj))
    return {
        "parsed": len(parsed),
        "loader": id(loader) == parent["loader"],
        "own": all(
            id(x) != parent[k]
            for k, x in [("fs", fs), ("session", fs.session), ("client", fs.s3), ("loop", fs.loop)]
        ),
        "live": found,
        "data": data,
    }


def test_forked_child_inherits_parsed_models_not_connections(s3_server, files):  # noqa: F811
    url, options = f"s3://{s3_server.bucket}/t0.npy", s3_server.options
    fs = remote_files.filesystem(url, options)
    remote_files.RemoteFile(url, options).read_range(0, 8)  # the parent's client, connected
    parent = {"fs": id(fs), "session": id(fs.session), "client": id(fs.s3), "loop": id(fs.loop)}
    parent["loader"] = id(fs.session.get_component("data_loader"))
    with multiprocessing.get_context("fork").Pool(1) as pool:
        child = pool.apply(_child_reads, (url, options, parent))
    assert child["loader"] and child["parsed"] == 0  # the parent's parsed files, no JSON
    assert child["own"]  # its own filesystem, session, client and event loop
    assert child["live"] == []
    assert child["data"] == (files / "t0.npy").read_bytes()[:64]
    # the parent's goes on
    assert remote_files.RemoteFile(url, options).read_range(8, 16) == child["data"][8:16]


def test_a_session_given_is_used(s3_server, files):  # noqa: F811
    from aiobotocore.session import AioSession

    session = AioSession()
    options = {**s3_server.options, "session": session}
    url = f"s3://{s3_server.bucket}/t0.npy"
    assert remote_files.filesystem(url, options).session is session
    data = remote_files.RemoteFile(url, options).read_range(0, 16)
    assert data == (files / "t0.npy").read_bytes()[:16]


def test_threads_share_one_filesystem(s3_server):  # noqa: F811
    import concurrent.futures

    options = {**s3_server.options, "anon": False}  # a key of its own: made here, now
    url = f"s3://{s3_server.bucket}/t0.npy"
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        made = list(pool.map(lambda _: remote_files.filesystem(url, options), range(8)))
    assert all(fs is made[0] for fs in made)


@pytest.fixture
def s3_calls(monkeypatch):
    """The S3 operations of this process, by name."""
    import s3fs

    calls = []
    real = s3fs.S3FileSystem._call_s3

    async def call(self, method, *args, **kwargs):
        calls.append(getattr(method, "__name__", method))
        return await real(self, method, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", call)
    return calls


def test_a_source_made_to_read_asks_once_on_s3(s3_server, files, s3_calls, monkeypatch):  # noqa: F811
    """One GET tells the size and ETag of a file and reads its first block: no HEAD."""
    from streamseq.io import _base

    opener = functools.partial(
        tokens, f"s3://{s3_server.bucket}/t1.npy", storage_options=s3_server.options
    )
    batch = next(iter(StreamLoader([opener], 1, 170, lengths=[170], pin_memory=False)))
    np.testing.assert_array_equal(batch.data[0, :, 0], np.arange(0, 340, 2) + 1000)
    assert s3_calls == ["get_object"] * 2  # opened twice (the layout, then the batch)

    s3_calls.clear()
    monkeypatch.setattr(_base, "FRESH", 0.0)  # measured long ago: asked once more
    next(iter(StreamLoader([opener], 1, 170, lengths=[170], pin_memory=False)))
    assert sorted(s3_calls) == ["get_object"] * 2 + ["head_object"] * 2

    s3_calls.clear()  # made ahead: its size and ETag asked once, not again to read it
    made = remote_files.Remote(opener.args[0], s3_server.options)
    assert made.open().read_range(0, 10) == (files / "t1.npy").read_bytes()[:10]
    assert s3_calls == ["head_object", "get_object"]


def test_first_block_and_the_rest(s3_server, files, monkeypatch):  # noqa: F811
    from streamseq.read.handle import opening

    monkeypatch.setattr(remote_files, "BLOCK_SIZE", 1000)
    url = f"s3://{s3_server.bucket}/t0.npy"
    data = (files / "t0.npy").read_bytes()
    assert len(data) > 2000
    plain = remote_files.Remote(url, s3_server.options)
    with opening():
        made = remote_files.Remote(url, s3_server.options)
    assert made.stat == plain.stat and "etag" in made.stat  # the GET's ETag is the HEAD's
    file = made.open()
    assert file.read_range(10, 20) == data[10:20] and file.read_range(0, 1000) == data[:1000]
    assert file.read_range(900, 1500) == data[900:1500]  # across the end of the block
    assert file.read_range(1500, 2400) == data[1500:2400]  # past it: the block is let go
    assert file.read_range(0, 30) == data[:30]
    assert made.open().read_range(0, 10) == data[:10]  # the next file reads it again
    assert pickle_size(made) < 2000  # the block never travels


def pickle_size(obj):
    import pickle

    return len(pickle.dumps(obj))


@pytest.mark.parametrize("workers", [0, 2])
def test_openers_read_across_the_first_block(s3_server, files, monkeypatch, workers):  # noqa: F811
    monkeypatch.setattr(remote_files, "BLOCK_SIZE", 512)  # (a forked worker inherits it)
    names = list(TOKEN_LENGTHS)
    base, options = f"s3://{s3_server.bucket}", s3_server.options
    openers = [functools.partial(tokens, f"{base}/{n}", storage_options=options) for n in names]
    local = [tokens(files / n) for n in names]
    lengths = [len(s) for s in local]
    batches = list(StreamLoader(openers, 3, 16, num_workers=workers, lengths=lengths))
    check_continuity(batches, lengths, sources=local)
    assert_same(batches, list(StreamLoader(local, 3, 16)))
    names = list(VIDEO_LENGTHS)
    openers = [functools.partial(video, f"{base}/{n}", storage_options=options) for n in names]
    local = [video(files / n) for n in names]
    lengths = [len(s) for s in local]
    batches = list(StreamLoader(openers, 2, 8, num_workers=workers, lengths=lengths))
    assert_same(batches, list(StreamLoader(local, 2, 8)))


def test_empty_and_missing_files_made_to_read(s3_server, tmp_path):  # noqa: F811
    from streamseq.read.handle import opening

    (tmp_path / "empty.bin").write_bytes(b"")
    url = s3_server.upload(tmp_path / "empty.bin")
    with opening():
        assert len(tokens(url, np.uint16, storage_options=s3_server.options)) == 0
        start = time.monotonic()
        with pytest.raises(FileNotFoundError):
            tokens(f"s3://{s3_server.bucket}/nowhere.npy", storage_options=s3_server.options)
        assert time.monotonic() - start < 5  # not retried


def test_a_remote_file_that_cannot_be_opened_leaves_nothing_to_report_when_collected(
    tmp_path, monkeypatch
):
    import gc

    from streamseq.io.remote import RemoteFile

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    with pytest.raises(Exception, match="missing.bin") as raised:
        RemoteFile(f"file://{tmp_path}/missing.bin")
    del raised  # (its traceback holds the half-made file)
    gc.collect()
    assert not reported, [str(r.exc_value) for r in reported]
