"""materialize: a store gives the batches of its sources; built resumably, checked, shared."""

import errno
import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import streamseq
from streamseq import StreamLoader, materialize, mix
from streamseq.errors import SourceError, StreamError
from streamseq.store import StoredStream, layout, open_store
from streamseq.store import build as build_module

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "io"))
from helpers import state_refused  # noqa: E402
from media import write_audio, write_video  # noqa: E402

from streamseq.io import audio, recording, tokens, video  # noqa: E402


def batches_of(streams, workers=0, batch_size=3, tbins=5, **kwargs):
    """Every field of every batch, as bytes (the data a tree of arrays)."""
    loader = StreamLoader(streams, batch_size, tbins, num_workers=workers, **kwargs)
    return [_bytes(b) for b in loader]


def _bytes(batch):
    data = batch.data
    leaves = streamseq._tree.leaves(data) if not isinstance(data, np.ndarray) else [data]
    rest = [batch.reset, batch.valid, batch.stream, batch.step]
    arrays = [x.numpy() if hasattr(x, "numpy") else np.asarray(x) for x in leaves + rest]
    return [(a.dtype.str, a.shape, np.ascontiguousarray(a).tobytes()) for a in arrays]


def token_files(folder, lengths, dtype=np.int32):
    folder.mkdir(exist_ok=True)
    paths = []
    for i, n in enumerate(lengths):
        path = folder / f"{i}.npy"
        np.save(path, (np.arange(n) * 7 + i).astype(dtype))
        paths.append(path)
    return paths


def stored_bytes(streams):
    return [np.ascontiguousarray(s[0 : len(s)]).tobytes() for s in streams]


# -- same batches -------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_tokens_give_the_same_batches(tmp_path, workers):
    sources = [tokens(p) for p in token_files(tmp_path / "t", [30, 7, 0, 52, 11])]
    stored = materialize(sources, tmp_path / "store", num_workers=workers)
    assert all(isinstance(s, StoredStream) for s in stored)
    assert isinstance(stored[0][0:4], np.memmap)
    for kwargs in ({}, {"shuffle": True, "seed": 3}):
        want = batches_of(sources, workers, **kwargs)
        assert batches_of(stored, workers, **kwargs) == want


@pytest.mark.parametrize("workers", [0, 2])
def test_video_resized_and_audio_give_the_same_batches(tmp_path, workers):
    clips = [write_video(tmp_path / f"{i}.mp4", n) for i, n in enumerate((23, 9, 31))]
    videos = [video(p, size=(16, 24)) for p in clips]
    stored = materialize(videos, tmp_path / "v", num_workers=2)
    assert stored[0][0:1].shape == (1, 16, 24, 3)
    assert batches_of(stored, workers, 2, 4) == batches_of(videos, workers, 2, 4)
    wavs = [write_audio(tmp_path / f"{i}.wav", n) for i, n in enumerate((9000, 4000))]
    sounds = [audio(p, frame=512) for p in wavs]
    stored = materialize(sounds, tmp_path / "a", num_workers=workers)
    assert batches_of(stored, workers, 2, 3) == batches_of(sounds, workers, 2, 3)


def test_dict_steps_one_file_per_array(tmp_path):
    clip = write_video(tmp_path / "c.mp4", 20)
    recs = [
        recording(0.04, video=video(clip, size=(8, 8)), label=np.arange(20)),
        {"x": np.arange(12.0), "y": {"z": np.ones((12, 2), np.uint8)}},
    ]
    with pytest.raises(StreamError, match="stream 1"):  # two layouts cannot share a store
        materialize(recs, tmp_path / "bad")
    streams = [recs[0], recs[0].replace()]
    stored = materialize(streams, tmp_path / "s", num_workers=2)
    files = sorted(f for f in os.listdir(tmp_path / "s") if f.startswith("leaf-"))
    assert len(files) == len(streamseq._tree.leaves(stored[0][0:1])) > 2
    assert batches_of(stored, 2, 2, 6) == batches_of(streams, 0, 2, 6)


def test_trees_of_arrays(tmp_path):
    streams = [{"a": np.arange(n) * 1.5, "b": (np.ones((n, 3), np.int16) * n,)} for n in (5, 9)]
    stored = materialize(streams, tmp_path / "s")
    got = stored[1][2:4]
    assert isinstance(got, dict) and isinstance(got["b"], tuple)
    assert batches_of(stored, 0, 2, 3) == batches_of(streams, 0, 2, 3)


def test_a_deterministic_transform_is_stored(tmp_path):
    arrays = [np.arange(n * 4, dtype=np.uint8).reshape(n, 2, 2) for n in (6, 13)]

    def shrink(x, info):
        return (x[:, :1, :1].astype(np.int16) + info.stream) * 2

    stored = materialize(arrays, tmp_path / "s", transform=shrink)
    assert stored[0].step_spec() == (np.dtype(np.int16), (1, 1))
    want = batches_of(arrays, 0, 2, 4, transform=shrink)
    assert batches_of(stored, 2, 2, 4) == want


def test_resume_from_the_store_gives_the_rest_of_the_sources_run(tmp_path):
    sources = [tokens(p) for p in token_files(tmp_path / "t", [40, 17, 25, 8, 33, 12])]
    stored = materialize(sources, tmp_path / "s")
    full = batches_of(sources, 0, 3, 4, shuffle=True, seed=5)
    loader = StreamLoader(stored, 3, 4, num_workers=2, shuffle=True, seed=5)
    it = iter(loader)
    first = [_bytes(next(it)) for _ in range(4)]
    state = loader.state_dict()
    del it
    again = StreamLoader(stored, 3, 4, num_workers=2, shuffle=True, seed=5)
    again.load_state_dict(state)
    assert first + [_bytes(b) for b in again] == full


def test_a_mixture_gives_the_same_batches(tmp_path):
    files = token_files(tmp_path / "t", [20, 31, 9, 14, 40])
    groups = {"a": [tokens(p) for p in files[:2]], "b": [tokens(p) for p in files[2:]]}
    sources = mix(groups, {"a": 1, "b": 3})
    stored = materialize(sources, tmp_path / "s", num_workers=2)
    assert isinstance(stored, streamseq.Mixture) and stored.weights == sources.weights
    for epoch in (0, 1):
        a = StreamLoader(sources, 2, 5, shuffle=True)
        b = StreamLoader(stored, 2, 5, shuffle=True, num_workers=2)
        a.set_epoch(epoch), b.set_epoch(epoch)
        assert [_bytes(x) for x in b] == [_bytes(x) for x in a]


@settings(max_examples=15)
@given(
    lengths=st.lists(st.integers(0, 30), min_size=1, max_size=6).filter(any),
    width=st.integers(0, 3),
    dtype=st.sampled_from(["<i2", ">f4", "u1"]),
)
def test_every_stream_is_stored_whole(tmp_path_factory, lengths, width, dtype):
    rng = np.random.default_rng(len(lengths))
    arrays = [(rng.random((n, width)) * 100).astype(dtype) for n in lengths]
    folder = tmp_path_factory.mktemp("store")
    stored = materialize(arrays, folder)
    assert [len(s) for s in stored] == lengths
    for a, s in zip(arrays, stored, strict=True):
        np.testing.assert_array_equal(s[0 : len(s)], a)
        assert s[0 : len(s)].dtype == a.dtype
    again = open_store(folder)
    assert stored_bytes(again) == stored_bytes(stored)
    assert stored_bytes(pickle.loads(pickle.dumps(stored))) == stored_bytes(stored)


# -- resumable ---------------------------------------------------------------------------

BUILD = """
import sys, time
import numpy as np
from streamseq import materialize
from streamseq.io import tokens

def slow(x, info):
    time.sleep(0.03)
    return x * 3

folder, workers = sys.argv[1], int(sys.argv[2])
paths = [f"{folder}/t/{i}.npy" for i in range(24)]
print("start", flush=True)
materialize([tokens(p) for p in paths], f"{folder}/store", transform=slow,
            num_workers=workers)
print("built", flush=True)
"""


def _build_script(tmp_path):
    lengths = [(i * 37) % 90 + 40 for i in range(24)]
    token_files(tmp_path / "t", lengths, np.int64)
    script = tmp_path / "build.py"
    script.write_text(textwrap.dedent(BUILD))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return script, env


def test_a_build_killed_at_random_points_resumes_identical(tmp_path):
    script, env = _build_script(tmp_path)
    paths = [tmp_path / "t" / f"{i}.npy" for i in range(24)]
    reference = materialize(
        [tokens(p) for p in paths], tmp_path / "ref", transform=lambda x, info: x * 3
    )
    rng, cut = random.Random(7), 0
    for attempt in range(4):
        workers = attempt % 2 * 2
        proc = subprocess.Popen(
            [sys.executable, str(script), str(tmp_path), str(workers)],
            env=env,
            stdout=subprocess.PIPE,
        )
        assert proc.stdout.readline().strip() == b"start"
        time.sleep(rng.uniform(0.0, 0.8))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        store = tmp_path / "store"
        manifest = layout.read_manifest(str(store)) if store.exists() else None
        if manifest is not None:
            done = layout.read_done(str(store), manifest["generation"], 24)
            leaf = store / layout.leaf_file(0, manifest["generation"])
            written = [
                np.fromfile(leaf, "<i8")[o : o + n]
                for o, n in np.load(store / layout.INDEX).tolist()
            ]
            cut += 0 < done.sum() < 24
            for i in np.flatnonzero(done):  # a stream recorded is whole
                np.testing.assert_array_equal(written[i], np.load(paths[i]) * 3)
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "2"],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    assert stored_bytes(open_store(tmp_path / "store")) == stored_bytes(reference)
    print(f"{cut} of 4 builds were killed with some streams written")


def test_an_incomplete_store_is_not_read_and_is_finished(tmp_path):
    sources = [tokens(p) for p in token_files(tmp_path / "t", [10, 20, 30])]
    materialize(sources, tmp_path / "s")
    manifest = layout.read_manifest(str(tmp_path / "s"))
    generation = manifest["generation"]
    layout.write_done(str(tmp_path / "s"), generation, np.array([True, False, True]))
    body = {k: v for k, v in manifest.items() if k not in ("digest", "files")}
    layout.write_manifest(str(tmp_path / "s"), {**body, "complete": False})  # (a build's)
    with open(leaf_path(tmp_path / "s"), "r+b") as f:  # stream 1 half written
        f.seek(10 * 4)
        f.write(b"\xff" * 40)
    with pytest.raises(SourceError, match="not complete.*the first is stream 1"):
        open_store(tmp_path / "s")
    stored = materialize(sources, tmp_path / "s")
    assert batches_of(stored) == batches_of(sources)


def test_a_failure_keeps_what_was_written_and_the_next_call_writes_the_rest(tmp_path, monkeypatch):
    sources = [tokens(p) for p in token_files(tmp_path / "t", [10, 20, 30, 5])]
    monkeypatch.setattr(build_module, "TASK_STREAMS", 1)
    broken, calls = [True], []

    def fn(x, info):
        calls.append((info.stream, info.start, info.stop))
        if broken[0] and info.stream == 3:
            raise RuntimeError("boom")
        return x + 1

    with pytest.raises(StreamError, match="stream 3.*boom"):
        materialize(sources, tmp_path / "s", transform=fn)
    generation = layout.read_manifest(str(tmp_path / "s"))["generation"]
    done = layout.read_done(str(tmp_path / "s"), generation, 4)
    assert done.tolist() == [True, True, True, False]  # longest first: stream 3 last
    broken[0], calls[:] = False, []
    stored = materialize(sources, tmp_path / "s", transform=fn)
    assert sorted(calls) == [(0, 0, 1), (3, 0, 5)]  # the first step (the layout), stream 3
    assert batches_of(stored) == batches_of(sources, transform=fn)


# -- checked against the sources ------------------------------------------------------------


def test_a_changed_source_is_refused_or_rebuilt(tmp_path):
    paths = token_files(tmp_path / "t", [10, 20, 30])
    materialize([tokens(p) for p in paths], tmp_path / "s")
    np.save(paths[1], np.arange(20, dtype=np.int32) * -1)  # same length, other steps
    os.utime(paths[1], ns=(0, 10**18))
    new = [tokens(p) for p in paths]
    with pytest.raises(SourceError) as info:
        materialize(new, tmp_path / "s", on_change="error")
    error = info.value
    assert error.index == 1 and error.path == str(paths[1]) and "stream 1" in str(error)
    assert "since the store was made" in str(error)
    stored = materialize(new, tmp_path / "s")
    np.testing.assert_array_equal(stored[1][0:20], np.arange(20) * -1)
    assert batches_of(stored) == batches_of(new)


def test_a_source_whose_file_changed_after_it_was_made_is_an_error(tmp_path):
    paths = token_files(tmp_path / "t", [10, 20])
    sources = [tokens(p) for p in paths]
    materialize(sources, tmp_path / "s")
    np.save(paths[0], np.arange(10, dtype=np.float32))
    with pytest.raises(SourceError, match="stream 0.*changed since the source was made"):
        materialize(sources, tmp_path / "s")


def test_other_lengths_or_settings_rebuild_or_refuse(tmp_path):
    paths = token_files(tmp_path / "t", [10, 20])
    materialize([tokens(p) for p in paths], tmp_path / "s")
    with pytest.raises(SourceError, match="other streams or settings.*key"):
        materialize([tokens(p) for p in paths], tmp_path / "s", key="2", on_change="error")
    token_files(tmp_path / "t", [10, 25])
    stored = materialize([tokens(p) for p in paths], tmp_path / "s")
    assert [len(s) for s in stored] == [10, 25]
    np.testing.assert_array_equal(stored[1][0:25], np.arange(25) * 7 + 1)


# -- several processes, full disks ------------------------------------------------------------


def test_two_processes_building_at_once_end_with_one_valid_store(tmp_path):
    script, env = _build_script(tmp_path)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path), str(w)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for w in (2, 0)
    ]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1].decode()[-1000:] for o in outs]
    paths = [tmp_path / "t" / f"{i}.npy" for i in range(24)]
    stored = open_store(tmp_path / "store")
    assert stored_bytes(stored) == [(np.load(p) * 3).tobytes() for p in paths]
    generation = layout.read_manifest(str(tmp_path / "store"))["generation"]
    raw = np.fromfile(tmp_path / "store" / layout.done_file(generation), "<i8")
    assert len(raw) == 2 * 24  # every stream written and recorded once


def test_a_store_locked_too_long_is_a_timeout(tmp_path):
    from streamseq.store.lock import build_lock

    (tmp_path / "s").mkdir()
    code = (
        "import sys, time; from streamseq.store.lock import build_lock\n"
        f"with build_lock({str(tmp_path / 's')!r}, 5):\n"
        "    print('held', flush=True); time.sleep(30)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"held"
        with pytest.raises(TimeoutError, match="another process"):
            with build_lock(str(tmp_path / "s"), 0.2):
                pass
    finally:
        holder.kill()
        holder.wait(timeout=30)
    with build_lock(str(tmp_path / "s"), 5):  # released with its holder
        pass


def test_a_full_disk_is_told_before_writing(tmp_path, monkeypatch):
    sources = [np.zeros((100, 8), np.float64), np.zeros((50, 8), np.float64)] * 2

    class Usage:
        total, used, free = 10**9, 10**9, 5_000

    monkeypatch.setattr(build_module.shutil, "disk_usage", lambda path: Usage)
    with pytest.raises(OSError) as info:
        materialize(sources, tmp_path / "s")
    assert info.value.errno == errno.ENOSPC
    text = str(info.value)
    assert "19200 bytes" in text and "300 steps x 64 bytes" in text and "5000 bytes" in text
    assert layout.read_manifest(str(tmp_path / "s")) is None  # nothing written
    monkeypatch.undo()
    stored = materialize(sources, tmp_path / "s")
    assert batches_of(stored) == batches_of(sources)


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="on_change"):
        materialize([np.arange(3)], tmp_path / "s", on_change="ignore")
    with pytest.raises(ValueError, match="all 2 streams are empty"):
        materialize([np.arange(0), np.arange(0)], tmp_path / "s")
    with pytest.raises(SourceError, match="no store here"):
        open_store(tmp_path / "nothing")


# -- a damaged store is refused or made again ---------------------------------------------------


def leaf_path(folder, i=0):
    """The data file of leaf ``i`` of the store's current files."""
    (path,) = Path(folder).glob(f"leaf-{i}.*bin")
    return path


def token_arrays(lengths=(7, 0, 5, 12, 3)):
    return [
        (np.arange(n)[:, None] * 10 + s * 1000 + np.zeros((n, 3), np.int32)).astype(np.int32)
        for s, n in enumerate(lengths)
    ]


@pytest.mark.parametrize("offset", ["another stream's", -3, 1])
def test_tampered_offsets_are_refused_by_open_store_and_rebuilt(tmp_path, offset):
    sources = token_arrays()
    store = tmp_path / "s"
    materialize(sources, store)
    index = np.load(store / layout.INDEX)
    index[0, 0] = index[2, 0] if offset == "another stream's" else offset
    np.save(store / layout.INDEX, index)
    with pytest.raises(SourceError, match=f"{store}.*stream 0"):
        open_store(store)
    stored = materialize(sources, store)
    assert stored_bytes(stored) == [s.tobytes() for s in sources]
    assert stored_bytes(open_store(store)) == [s.tobytes() for s in sources]


@pytest.mark.parametrize("damage", ["garbage", "pickle", "deleted"])
def test_an_unreadable_or_missing_index_is_refused_by_open_store_and_rebuilt(tmp_path, damage):
    sources = token_arrays()
    store = tmp_path / "s"
    materialize(sources, store)
    if damage == "deleted":
        os.remove(store / layout.INDEX)
    elif damage == "pickle":
        np.save(store / layout.INDEX, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    else:
        (store / layout.INDEX).write_bytes(b"garbage")
    with pytest.raises(SourceError, match=f"{store}.*index"):
        open_store(store)
    stored = materialize(sources, store)
    assert stored_bytes(stored) == [s.tobytes() for s in sources]


@pytest.mark.parametrize("damage", ["truncated", "longer", "deleted"])
def test_a_truncated_or_missing_data_file_is_refused_by_open_store_and_rebuilt(tmp_path, damage):
    sources = token_arrays()
    store = tmp_path / "s"
    materialize(sources, store)
    leaf = leaf_path(store)
    if damage == "deleted":
        os.remove(leaf)
    else:
        with open(leaf, "r+b") as f:
            f.truncate(100 if damage == "truncated" else 10_000)
    with pytest.raises(SourceError, match=f"{store}.*leaf-0"):
        open_store(store)
    stored = materialize(sources, store)
    assert stored_bytes(stored) == [s.tobytes() for s in sources]


@pytest.mark.parametrize(
    "spec",
    [
        {"leaf": 0, "dtype": "|O", "shape": [3]},
        {"leaf": 0, "dtype": "<i2", "shape": [3]},
        {"leaf": 0, "dtype": "<i4", "shape": [1]},
        {"leaf": 0, "dtype": [["a", "<i4"]], "shape": [3]},
        {"leaf": "../../x", "dtype": "<i4", "shape": [3]},
        {"leaf": 0, "dtype": "<i4", "shape": [-3]},
    ],
)
@pytest.mark.parametrize("digest", ["kept", "made again"])
def test_a_tampered_step_layout_is_refused_by_open_store_and_rebuilt(tmp_path, spec, digest):
    import json

    sources = token_arrays()
    store = tmp_path / "s"
    materialize(sources, store)
    manifest = json.loads((store / layout.MANIFEST).read_text())
    manifest["spec"] = spec
    if digest == "kept":
        (store / layout.MANIFEST).write_text(json.dumps(manifest))
    else:  # the layout itself must not check
        layout.write_manifest(str(store), {k: v for k, v in manifest.items() if k != "digest"})
    with pytest.raises(SourceError, match=f"{store}"):
        open_store(store)
    stored = materialize(sources, store)
    assert stored_bytes(stored) == [s.tobytes() for s in sources]


def test_steps_of_python_objects_are_not_stored(tmp_path):
    objects = np.empty((3, 2), dtype=object)
    objects[:] = [[1, "a"]] * 3
    with pytest.raises((TypeError, StreamError), match="object"):
        materialize([objects], tmp_path / "s")


# -- sources that record no file state ----------------------------------------------------------


def test_an_array_changed_in_memory_is_written_again(tmp_path):
    sources = token_arrays()
    materialize(sources, tmp_path / "s")
    sources[0][:] = -1
    sources[3][2, 1] = 5
    with pytest.raises(SourceError, match="stream 0"):
        materialize(sources, tmp_path / "s", on_change="error")
    stored = materialize(sources, tmp_path / "s")
    assert stored_bytes(stored) == [s.tobytes() for s in sources]


def test_a_memory_mapped_array_whose_file_changed_is_written_again(tmp_path):
    path = tmp_path / "a.npy"
    np.save(path, token_arrays()[3])
    materialize([np.load(path, mmap_mode="r")], tmp_path / "s")
    new = np.full((12, 3), 77, np.int32)
    np.save(path, new)  # the same size, the same inode
    os.utime(path, ns=(0, 10**18))
    with pytest.raises(SourceError, match=f"stream 0.*{path}"):
        materialize([np.load(path, mmap_mode="r")], tmp_path / "s", on_change="error")
    stored = materialize([np.load(path, mmap_mode="r")], tmp_path / "s")
    np.testing.assert_array_equal(stored[0][0:12], new)


# -- readers of a store keep what they hold -----------------------------------------------------


def test_views_held_keep_their_steps_when_a_changed_source_is_written_again(tmp_path):
    paths = token_files(tmp_path / "t", [10, 20, 30])
    first = materialize([tokens(p) for p in paths], tmp_path / "s")
    held = [first[1][0:20], first[2][5:9]]
    before = [np.array(h) for h in held]
    np.save(paths[1], np.arange(20, dtype=np.int32) * -1)
    os.utime(paths[1], ns=(0, 10**18))
    stored = materialize([tokens(p) for p in paths], tmp_path / "s")
    np.testing.assert_array_equal(stored[1][0:20], np.arange(20) * -1)
    for h, b in zip(held, before, strict=True):
        np.testing.assert_array_equal(h, b)  # the old files, still mapped
    leaves = [f for f in os.listdir(tmp_path / "s") if f.startswith("leaf-")]
    assert len(leaves) == 1  # the old data file is gone from the folder
    assert stored_bytes(open_store(tmp_path / "s"))[0] == np.load(paths[0]).tobytes()


# -- a store on a read-only folder ----------------------------------------------------------------


def _no_lock_file(monkeypatch, existing):
    from streamseq.store import lock

    real = os.open

    def refuse(path, flags, *args):
        if os.fspath(path).endswith(layout.LOCK) and (flags != os.O_RDONLY or not existing):
            raise OSError(errno.EROFS, "Read-only file system", path)
        return real(path, flags, *args)

    monkeypatch.setattr(lock.os, "open", refuse)


@pytest.mark.parametrize("lock_file", ["absent", "read-only"])
def test_a_complete_store_in_a_read_only_folder_is_read(tmp_path, monkeypatch, lock_file):
    sources = token_arrays()
    store = tmp_path / "s"
    materialize(sources, store)
    if lock_file == "absent":
        os.remove(store / layout.LOCK)
    _no_lock_file(monkeypatch, existing=lock_file != "absent")
    stored = materialize(sources, store)
    assert stored_bytes(stored) == [s.tobytes() for s in sources]
    assert stored_bytes(open_store(store)) == [s.tobytes() for s in sources]
    sources[0][:] = 5
    with pytest.raises(SourceError, match=f"{store}.*not writable"):
        materialize(sources, store)


def test_a_complete_store_whose_done_log_is_lost_is_made_again_in_new_files(tmp_path):
    sources = token_arrays()
    store = tmp_path / "s"
    first = materialize(sources, store)
    held = first[3][0:12]
    generation = layout.read_manifest(str(store))["generation"]
    os.remove(store / layout.done_file(generation))
    with pytest.raises(SourceError, match="not complete"):
        open_store(store)
    stored = materialize(sources, store)
    assert layout.read_manifest(str(store))["generation"] != generation
    assert stored_bytes(stored) == [s.tobytes() for s in sources]
    np.testing.assert_array_equal(held, sources[3])


# -- read as arrays, in this process -------------------------------------------------------


def _count_reads(monkeypatch):
    """Count the reads of stored streams other than copies out of their memory maps."""
    reads = []
    getitem = StoredStream.__getitem__

    def counted(self, key):
        reads.append(key)
        return getitem(self, key)

    def refuse(self, *args):
        raise AssertionError(f"{self!r} read row by row, not copied as arrays")

    monkeypatch.setattr(StoredStream, "read_into", refuse)
    monkeypatch.setattr(StoredStream, "__getitem__", counted)
    return reads


def test_a_store_is_copied_from_its_memory_maps_not_read_row_by_row(tmp_path, monkeypatch):
    arrays = token_arrays((9, 0, 14, 3, 22, 6))
    trees = [{"a": a, "b": (a[:, 0].astype(np.float32),)} for a in arrays]
    stored = [materialize(arrays, tmp_path / "s"), materialize(trees, tmp_path / "d")]
    reads = _count_reads(monkeypatch)
    for sources, streams in zip((arrays, trees), stored, strict=True):
        for kwargs in ({}, {"shuffle": True, "seed": 2}, {"segment_length": 5}, {"pad": "drop"}):
            want = batches_of(sources, 0, 3, 4, **kwargs)
            reads.clear()
            assert batches_of(streams, 0, 3, 4, **kwargs) == want, kwargs
            assert len(reads) <= 1, (kwargs, reads)  # (one step: the data's dtype and shape)


@pytest.mark.parametrize("persistent", [False, True])
def test_a_store_is_read_in_this_process_whatever_the_workers(tmp_path, monkeypatch, persistent):
    arrays = token_arrays((9, 0, 14, 3, 22, 6, 11))
    stored = materialize(arrays, tmp_path / "s")

    def no_workers(*args, **kwargs):
        raise AssertionError("workers started for streams already in memory")

    monkeypatch.setattr(streamseq.workers.pool.WorkerPool, "start", no_workers)
    want = batches_of(arrays, 0, 3, 4, shuffle=True, seed=1)
    kwargs = {"shuffle": True, "seed": 1, "persistent_workers": persistent}
    loader = StreamLoader(stored, 3, 4, num_workers=2, **kwargs)
    assert [_bytes(b) for b in loader] == want
    assert loader.num_workers == 2  # (the setting stays as given)
    loader = StreamLoader(stored, 3, 4, num_workers=2, **kwargs)
    it = iter(loader)
    first = [_bytes(next(it)) for _ in range(3)]
    state = loader.state_dict()
    del it
    again = StreamLoader(stored, 3, 4, num_workers=2, **kwargs)
    again.load_state_dict(state)
    assert first + [_bytes(b) for b in again] == want
    auto = StreamLoader(stored, 3, 4, num_workers="auto", shuffle=True, seed=1)
    assert [_bytes(b) for b in auto] == want


def test_large_batches_of_a_store_are_read_by_the_workers(tmp_path, monkeypatch):
    arrays = token_arrays((9, 0, 14, 3, 22, 6, 11))
    stored = materialize(arrays, tmp_path / "s")
    started = []
    start = streamseq.workers.pool.WorkerPool.start

    def spy(self, groups, *args):
        started.append(len(groups))
        return start(self, groups, *args)

    monkeypatch.setattr(streamseq.workers.pool.WorkerPool, "start", spy)
    monkeypatch.setattr(streamseq.loader.reading, "COPY_HERE_BYTES", 3 * 4 * 12 - 1)
    want = batches_of(arrays, 0, 3, 4, shuffle=True, seed=1)
    assert batches_of(stored, 2, 3, 4, shuffle=True, seed=1) == want
    assert started == [2]


def _noisy(x, info):
    """A random transform: per stream, per step (picklable)."""
    return x + info.rng("noise").integers(0, 100, size=x.shape).astype(x.dtype)


def test_a_store_with_a_transform_or_beside_other_streams_is_read_by_workers(tmp_path):
    arrays = token_arrays((9, 4, 14, 3, 22, 6))
    stored = materialize(arrays, tmp_path / "s")
    want = batches_of(arrays, 0, 3, 4, transform=_noisy)
    assert batches_of(stored, 2, 3, 4, transform=_noisy) == want
    clips = [write_video(tmp_path / f"{i}.mp4", n) for i, n in enumerate((11, 7))]
    videos = [video(p, size=(8, 8)) for p in clips]
    frames = [np.ascontiguousarray(v[0 : len(v)]) for v in videos]
    in_store = materialize(frames, tmp_path / "f")
    groups = {"stored": list(in_store), "decoded": videos}
    sources = {"stored": frames, "decoded": videos}
    for epoch in (0, 1):
        a = StreamLoader(mix(sources, {"stored": 1, "decoded": 2}), 2, 3, shuffle=True)
        b = StreamLoader(
            mix(groups, {"stored": 1, "decoded": 2}), 2, 3, shuffle=True, num_workers=2
        )
        a.set_epoch(epoch), b.set_epoch(epoch)
        assert [_bytes(x) for x in b] == [_bytes(x) for x in a]


@settings(max_examples=10, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 25), min_size=1, max_size=8).filter(any),
    batch=st.integers(1, 4),
    tbins=st.integers(1, 6),
    workers=st.sampled_from([0, 2]),
    options=st.sampled_from(
        [
            {},
            {"shuffle": True, "seed": 4},
            {"lookahead": 1},
            {"segment_length": 7},
            {"pad": "pack"},
        ]
    ),
    stop=st.integers(0, 5),
    dtype=st.sampled_from(["<i4", ">f4", "u1"]),
)
def test_a_store_gives_the_sources_batches_and_resumes(
    tmp_path_factory, lengths, batch, tbins, workers, options, stop, dtype
):
    arrays = [a.astype(dtype) for a in token_arrays(lengths)]
    stored = materialize(arrays, tmp_path_factory.mktemp("store"))
    want = batches_of(arrays, 0, batch, tbins, **options)
    loader = StreamLoader(stored, batch, tbins, num_workers=workers, **options)
    it = iter(loader)
    first = [_bytes(next(it)) for _ in range(min(stop, len(want) - 1))]
    state = loader.state_dict()
    del it
    again = StreamLoader(stored, batch, tbins, num_workers=workers, **options)
    again.load_state_dict(state)
    assert first + [_bytes(b) for b in again] == want


@pytest.mark.parametrize("workers", [0, 2])
def test_a_store_removed_before_it_was_mapped_is_an_error_naming_stream_and_steps(
    tmp_path, workers
):
    import shutil

    first = materialize(token_arrays((6, 9)), tmp_path / "a")
    second = pickle.loads(pickle.dumps(materialize(token_arrays((4, 7)), tmp_path / "b")))
    shutil.rmtree(tmp_path / "b")  # (these streams have not mapped its files)
    loader = StreamLoader([*first, *second], 4, 3, num_workers=workers)
    with pytest.raises(SourceError, match=r"stream [23] \(StoredStream.*steps 0:3: .*leaf-0"):
        list(loader)


_CUT_SHORT = """
import glob, os, sys, numpy as np
import streamseq
from streamseq import StreamLoader, materialize
from streamseq.errors import SourceError
def _row(table, i, n):
    return table[i]
arrays = [np.arange(n * 3000, dtype=np.int32).reshape(n, 3000) + i for i, n in enumerate([50, 40])]
stored = materialize(arrays, sys.argv[1])
if sys.argv[4] == "zip":
    stored = [streamseq.zip_streams({"a": s, "b": s}) for s in stored]
if sys.argv[4] == "zip-tables":
    stored = streamseq.zip_streams({"a": stored, "b": stored})
if sys.argv[4] == "hand":  # (a table built by hand over the store's streams)
    import functools
    from streamseq.stream_table import StreamTable
    stored = StreamTable(functools.partial(_row, stored), stored.lengths, [np.arange(2)])
it = iter(StreamLoader(stored, 2, 4, num_workers=int(sys.argv[2]), pad=sys.argv[3]))
next(it)
os.truncate(glob.glob(os.path.join(sys.argv[1], "leaf-0.*.bin"))[0], 4096)
try:
    list(it)
except SourceError as e:
    print("ERROR", e)
"""


@pytest.mark.parametrize(
    ("workers", "pad", "zipped"),
    [
        (0, "zeros", ""),
        (2, "zeros", ""),
        (0, "pack", ""),
        (0, "zeros", "zip"),
        (0, "zeros", "zip-tables"),
        (0, "zeros", "hand"),
    ],
)
def test_a_data_file_cut_short_while_mapped_is_an_error_not_a_bus_error(
    tmp_path, workers, pad, zipped
):
    store = tmp_path / "s"
    run = subprocess.run(
        [sys.executable, "-c", _CUT_SHORT, str(store), str(workers), pad, zipped or "-"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert "ERROR" in run.stdout, run.stdout
    message = run.stdout.split("ERROR", 1)[1]
    assert "leaf-0." in message and "cut short" in message, message
    assert "stream 0" in message and "steps 4:8" in message, message


@pytest.mark.parametrize("persistent", [False, True])
def test_workers_in_use_is_0_when_a_store_is_read_in_this_process(tmp_path, persistent):
    stored = materialize(token_arrays((9, 0, 14, 3, 22, 6, 11)), tmp_path / "s")
    loader = StreamLoader(stored, 3, 4, num_workers=2, persistent_workers=persistent)
    assert loader.workers_in_use == 0
    it = iter(loader)
    next(it)
    assert loader.workers_in_use == 0
    assert loader.num_workers == 2  # (the setting stays as given)
    with_transform = StreamLoader(stored, 3, 4, num_workers=2, transform=_noisy)
    assert with_transform.workers_in_use == 2  # (a transform runs in the workers)


def test_auto_workers_are_not_tried_on_a_store_read_in_this_process(tmp_path, caplog):
    arrays = token_arrays((200, 340, 90, 410, 150, 260))
    stored = materialize(arrays, tmp_path / "s")
    want = batches_of(arrays, 0, 3, 4)
    loader = StreamLoader(stored, 3, 4, num_workers="auto")
    with caplog.at_level("INFO", logger="streamseq"):
        for _ in range(2):
            assert [_bytes(b) for b in loader] == want
            assert loader.workers_in_use == 0
    assert loader.num_workers == "auto"  # (nothing was timed with workers)
    assert "chose" not in caplog.text, caplog.text


@pytest.mark.parametrize("names", [("manifest.json", "clip.mp4"), ("index.npy",), ("done.log",)])
def test_a_folder_of_other_files_is_refused_and_left_as_it_is(tmp_path, names):
    folder = tmp_path / "dataset"
    folder.mkdir()
    for name in names:
        (folder / name).write_bytes(b'{"name": "my recordings"}')
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(SourceError, match=f"not a store.*{names[0]}"):
        materialize(token_arrays((5, 3)), folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.name != ".lock"} == before


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"lock_timeout": float("nan")}, ValueError),  # (a wait for the lock without end)
        ({"lock_timeout": -1}, ValueError),
        ({"lock_timeout": "60"}, TypeError),
        ({"timeout": float("nan")}, ValueError),
        ({"timeout": -5}, ValueError),
        ({"timeout": "1"}, TypeError),
    ],
)
def test_bad_timeouts_are_refused_before_anything_is_written(tmp_path, arguments, error):
    name = next(iter(arguments))
    with pytest.raises(error, match=name):
        materialize([np.arange(3)], tmp_path / "s", **arguments)
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("key", [("resize", 64), 64, b"v1", object()])
def test_a_key_that_is_not_text_is_refused(tmp_path, key):
    with pytest.raises(TypeError, match="key must be text"):
        materialize([np.arange(3)], tmp_path / "s", key=key)
    stored = materialize([np.arange(3)], tmp_path / "s", key="resize 64")
    again = materialize([np.arange(3)], tmp_path / "s", key="resize 64")
    assert stored[0]._files.generation == again[0]._files.generation  # (not made again)


def _scaled(x, info, k=1):
    return x * k


class _Crop:
    """A transform object with the default repr (its address changes every run)."""

    def __init__(self, n):
        self.n = n

    def __call__(self, x, info):
        return x[:, : self.n]


def test_a_transform_is_known_by_its_arguments_not_its_address(tmp_path):
    import functools

    arrays = token_arrays((6, 4))
    one, other = _Crop(2), _Crop(2)  # (two objects: two addresses)
    first = materialize(arrays, tmp_path / "o", transform=one)
    again = materialize(arrays, tmp_path / "o", transform=other)
    assert again[0]._files.generation == first[0]._files.generation  # (not made again)
    assert stored_bytes(again) == [a[:, :2].tobytes() for a in arrays]
    twice = materialize(arrays, tmp_path / "p", transform=functools.partial(_scaled, k=2))
    assert stored_bytes(twice) == [(a * 2).tobytes() for a in arrays]
    thrice = materialize(arrays, tmp_path / "p", transform=functools.partial(_scaled, k=3))
    assert stored_bytes(thrice) == [(a * 3).tobytes() for a in arrays]  # (not the stale x2)


def _store_state_refused(saving, resuming):
    return state_refused(saving, resuming, batch_size=2)


def test_a_state_of_a_store_is_refused_by_a_store_of_other_streams(tmp_path):
    a = materialize([np.arange(12), np.arange(12) * 2], tmp_path / "a")
    b = materialize([np.arange(12) + 5, np.arange(12) * 3], tmp_path / "b")
    assert _store_state_refused(a, b)
    assert not _store_state_refused(a, open_store(tmp_path / "a"))


def test_a_state_of_some_streams_of_a_store_is_refused_by_others_of_it(tmp_path):
    store = materialize([np.arange(12), np.arange(12) * 2, np.arange(12) * 3], tmp_path / "s")
    assert _store_state_refused(store[:2], store[1:])
    assert _store_state_refused(store[:2], store[1::-1])


class _Counted(StoredStream):
    """A stored stream that counts the instances made (patched in for a test)."""

    made = 0

    def __init__(self, *args, **kwargs):
        type(self).made += 1
        super().__init__(*args, **kwargs)


def test_a_store_is_a_table_of_its_streams(tmp_path, monkeypatch):
    import streamseq.store.stream as stream_module

    sources = [np.arange(n) * 3 for n in (5, 0, 9, 4, 7)]
    materialize(sources, tmp_path / "s")
    monkeypatch.setattr(stream_module, "StoredStream", _Counted)
    monkeypatch.setattr(build_module, "StoredStream", _Counted, raising=False)
    if hasattr(streamseq.store, "table"):
        monkeypatch.setattr(streamseq.store.table, "StoredStream", _Counted)
    _Counted.made = 0
    for stored in (materialize(sources, tmp_path / "s"), open_store(tmp_path / "s")):
        assert isinstance(stored, streamseq.StreamTable)
        assert _Counted.made == 0  # no stream made to build or open it
        assert stored.lengths.tolist() == [5, 0, 9, 4, 7]
        again = pickle.loads(pickle.dumps(stored))
        assert type(again) is type(stored) and _Counted.made == 0
        sub = stored[2:]
        assert isinstance(sub, streamseq.StreamTable) and sub.lengths.tolist() == [9, 4, 7]
        assert sub[0].index == 2 and sub[0][1:3].tolist() == [3, 6]
        assert _Counted.made == 2
        # what users did with the list: len, indexing, iteration, slices, the steps
        assert len(stored) == 5 and sum(len(s) for s in stored) == 25
        assert [s[:].tolist() for s in again] == [s.tolist() for s in sources]
        assert stored[-1].index == 4 and [s.index for s in stored[::2]] == [0, 2, 4]
        _Counted.made = 0


def test_a_mixture_of_a_store_keeps_its_groups_as_tables(tmp_path):
    groups = {"a": [np.arange(5), np.arange(3)], "b": [np.arange(4) * 2]}
    stored = materialize(mix(groups, {"a": 1, "b": 1}), tmp_path / "s")
    assert [type(p).__name__ for p in stored.parts] == ["StoreTable", "StoreTable"]
    assert [p.lengths.tolist() for p in stored.parts] == [[5, 3], [4]]
    assert stored[2][0:4].tolist() == [0, 2, 4, 6]


def _picked(x, info, key="a", storage_options=None, url=None):
    return x * (2 if key == "b" else 1)


def test_no_credential_of_a_transform_is_written_and_a_hidden_setting_still_counts(tmp_path):
    import functools

    arrays = token_arrays((6, 4))
    secrets = ["OptS3cretQz", "UrlPassw0rdQz", "ApiT0kenQz"]
    fn = functools.partial(
        _picked,
        storage_options={"key": secrets[0]},
        url=f"https://user:{secrets[1]}@host/x?token={secrets[2]}",
    )
    stored = materialize(arrays, tmp_path / "s", transform=fn)
    written = b"".join(p.read_bytes() for p in (tmp_path / "s").iterdir() if p.is_file())
    assert not [s for s in secrets if s.encode() in written]
    assert stored_bytes(stored) == [a.tobytes() for a in arrays]
    # a setting whose name reads as a credential ("key") still names the transform
    other = materialize(arrays, tmp_path / "s", transform=functools.partial(fn, key="b"))
    assert stored_bytes(other) == [(a * 2).tobytes() for a in arrays]  # (not stale)


@pytest.mark.parametrize("how", ["written in place", "removed and made again"])
def test_a_file_rewritten_with_its_size_and_time_restored_is_not_read_stale(tmp_path, how):
    path = tmp_path / "a.bin"
    np.arange(50, dtype=np.int32).tofile(path)
    first = materialize([tokens(path, np.int32)], tmp_path / "s")
    assert first[0][0:2].tolist() == [0, 1]
    st = os.stat(path)
    new = np.arange(50, dtype=np.int32) + 1000
    if how == "written in place":
        with open(path, "r+b") as f:
            f.write(new.tobytes())
    else:
        path.unlink()
        new.tofile(path)  # (the file system may give it the same inode)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # size and time as they were
    again = materialize([tokens(path, np.int32)], tmp_path / "s")
    assert again[0][0 : len(again[0])].tolist() == new.tolist()
    with pytest.raises(SourceError, match="a.bin"):
        new.tofile(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        materialize([tokens(path, np.int32)], tmp_path / "s", on_change="error")
    assert first[0][0:2].tolist() == [0, 1]  # (the steps held keep their bytes)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_file_changed_while_its_steps_are_copied_is_an_error_then_written_again(
    tmp_path, monkeypatch, workers
):
    monkeypatch.setattr(build_module, "READ_BYTES", 40)  # (10 steps a read)
    path = tmp_path / "a.bin"
    old, new = np.arange(50, dtype=np.int32), np.arange(50, dtype=np.int32) + 1000
    old.tofile(path)
    marker = tmp_path / "changed"

    def change_after_the_first_read(x, info):
        if info.start == 10 and not marker.exists():  # a piece read: the file changes
            marker.touch()
            st = os.stat(path)
            new.tofile(path)
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # size and time restored
        return np.array(x)

    streams = [tokens(path, np.int32), np.arange(5, dtype=np.int32)]
    with pytest.raises(SourceError, match=r"a\.bin.*changed") as info:
        materialize(streams, tmp_path / "s", transform=change_after_the_first_read)
    assert "stream 0" in str(info.value)
    again = materialize(
        [tokens(path, np.int32), streams[1]], tmp_path / "s", transform=change_after_the_first_read
    )
    assert stored_bytes(again) == [new.tobytes(), streams[1].tobytes()]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_disk_that_fills_while_writing_is_told_with_the_stream_and_the_file(
    tmp_path, monkeypatch, workers
):
    sources = [np.full((40, 8), i, np.float64) for i in range(6)]
    real, writes = os.pwrite, [0]

    def fills_up(fd, data, position):  # (the check of space passed: another process fills it)
        writes[0] += 1
        if writes[0] > 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data, position)

    monkeypatch.setattr(os, "pwrite", fills_up)
    with pytest.raises(OSError) as info:
        materialize(sources, tmp_path / "s", num_workers=workers)
    assert info.value.errno == errno.ENOSPC
    text = str(info.value)
    assert "stream " in text and "steps 0:40" in text and "leaf-0." in text, text
    monkeypatch.undo()
    with pytest.raises(SourceError, match="not complete"):
        open_store(tmp_path / "s")  # (nothing half-written is read)
    stored = materialize(sources, tmp_path / "s")
    assert stored_bytes(stored) == [s.tobytes() for s in sources]


def test_a_file_size_limit_is_told_with_the_data_file_and_nothing_is_read_later(tmp_path):
    script = textwrap.dedent(
        """
        import resource, sys
        import numpy as np
        from streamseq import materialize
        sources = [np.full((n, 64), i, np.uint8) for i, n in enumerate([3000, 2000, 100])]
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
        try:
            materialize(sources, sys.argv[1], num_workers=int(sys.argv[2]))
        except OSError as e:
            print(e.errno, e)
        """
    )
    for workers in (0, 2):
        folder = tmp_path / f"s{workers}"
        run = subprocess.run(
            [sys.executable, "-c", script, str(folder), str(workers)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout.startswith(f"{errno.EFBIG} ") and "leaf-0." in run.stdout, run.stdout
        assert "326400 bytes" in run.stdout, run.stdout
        with pytest.raises(SourceError):
            open_store(folder)
    sources = [np.full((n, 64), i, np.uint8) for i, n in enumerate([3000, 2000, 100])]
    stored = materialize(sources, tmp_path / "s0")
    assert stored_bytes(stored) == [s.tobytes() for s in sources]


def test_a_store_of_the_first_version_is_made_again_and_its_files_removed(tmp_path):
    folder = tmp_path / "s"
    folder.mkdir()
    sources = [np.arange(10), np.arange(5)]
    # (the files the first version of the layout wrote: no generation in their names)
    (folder / ".lock").touch()
    (folder / "manifest.json").write_text(
        '{"version": 1, "streams": 2, "steps": 15, "spec": {"leaf": 0, "dtype": "<i8", '
        '"shape": []}, "complete": true}'
    )
    np.save(folder / "index.npy", np.array([[0, 10], [10, 5]]))
    np.concatenate(sources).tofile(folder / "leaf-0.bin")
    np.array([0, 0 ^ layout.DONE_KEY, 1, 1 ^ layout.DONE_KEY], "<i8").tofile(folder / "done.log")
    stored = materialize(sources, folder)
    assert stored_bytes(stored) == [s.tobytes() for s in sources]
    assert not {"leaf-0.bin", "done.log"} & set(os.listdir(folder))


@pytest.mark.parametrize("on_change", ["rebuild", "error"])
def test_a_lerobot_episode_whose_files_changed_is_not_read_stale(tmp_path, on_change):
    from media import write_lerobot

    from streamseq.io import lerobot

    root = write_lerobot(tmp_path / "lr", "v2.1", [6, 6])
    first = materialize(lerobot(root), tmp_path / "s")
    camera = "observation.images.top"
    videos = root / "videos" / "chunk-000" / camera
    was = np.array(first[0][0:6][camera])
    shutil.copyfile(videos / "episode_000001.mp4", videos / "episode_000000.mp4.new")
    os.replace(videos / "episode_000000.mp4.new", videos / "episode_000000.mp4")
    episodes = lerobot(root)
    now = np.asarray(episodes[0][0:6][camera])
    assert not np.array_equal(now, was)
    if on_change == "error":
        with pytest.raises(SourceError, match="episode_000000.mp4"):
            materialize(episodes, tmp_path / "s", on_change="error")
        return
    again = materialize(episodes, tmp_path / "s")
    assert np.array_equal(np.asarray(again[0][0:6][camera]), now)
    assert np.array_equal(np.asarray(first[0][0:6][camera]), was)  # (held steps kept)


@pytest.mark.parametrize("kind", ["recording", "zip_streams"])
def test_a_recording_or_zip_whose_video_changed_is_written_again(tmp_path, kind):
    clip = write_video(tmp_path / "a.mp4", 10)
    other = write_video(tmp_path / "b.mp4", 10, size=(32, 48), gop=3)

    def made():
        label = np.arange(10)
        if kind == "recording":
            return recording(0.04, video=video(clip, size=(8, 8)), label=label)
        return streamseq.zip_streams({"video": video(clip, size=(8, 8)), "label": label})

    first = materialize([made()], tmp_path / "s")
    was = np.array(first[0][0:10]["video"])
    shutil.copyfile(other, tmp_path / "new.mp4")
    os.replace(tmp_path / "new.mp4", clip)
    source = made()
    now = np.asarray(source[0:10]["video"])
    assert not np.array_equal(now, was)
    with pytest.raises(SourceError, match="a.mp4"):
        materialize([source], tmp_path / "s", on_change="error")
    again = materialize([source], tmp_path / "s")
    assert np.array_equal(np.asarray(again[0][0:10]["video"]), now)


@pytest.mark.parametrize(
    "step",
    [
        {1: np.arange(3)},
        {"x": np.array([[1, "a"]] * 3, dtype=object)},
        np.zeros(3, dtype=[("a", "<i4"), ("b", "<f4")]),
    ],
)
def test_steps_a_store_cannot_hold_are_refused_naming_the_stream(tmp_path, step):
    with pytest.raises(TypeError, match=r"stream 1 \(.*\), steps 0:1: a stored step"):
        materialize(
            [{"x": np.arange(0)} if isinstance(step, dict) else step[:0], step], tmp_path / "s"
        )
    assert not os.listdir(tmp_path / "s") or os.listdir(tmp_path / "s") == [".lock"]


@pytest.mark.parametrize("generation", ["../outside", "x/../..", "", "ab.cd"])
def test_a_generation_that_is_not_a_name_of_the_store_is_refused(tmp_path, generation):
    import json
    import shutil as shell

    sources = token_arrays()
    store = tmp_path / "s"
    materialize(sources, store)
    manifest = json.loads((store / layout.MANIFEST).read_text())
    old = manifest["generation"]
    manifest["generation"] = generation
    layout.write_manifest(str(store), {k: v for k, v in manifest.items() if k != "digest"})
    own = set(os.listdir(store))
    # (files where that name leads, outside the store's own names)
    for kind in ("leaf-0.{}.bin", "done.{}.log"):
        where = store / kind.format(generation)
        where.parent.mkdir(parents=True, exist_ok=True)
        shell.copyfile(store / kind.format(old), where)
    with pytest.raises(SourceError, match="generation"):
        open_store(store)
    with pytest.raises(SourceError, match="not a store"):  # (files not its own: left there)
        materialize(sources, store)
    for name in set(os.listdir(store)) - own:
        shell.rmtree(store / name) if (store / name).is_dir() else os.remove(store / name)
    stored = materialize(sources, store)
    assert stored_bytes(stored) == [s.tobytes() for s in sources]
    assert layout.read_manifest(str(store))["generation"] not in (generation, old)


def test_events_of_another_array_in_memory_are_written_again(tmp_path):
    from streamseq.io import events, synthetic_events

    def made(seed):
        recording = synthetic_events(height=16, width=16, duration_us=100_000, seed=seed)
        return events(recording, window_us=10_000, height=16, width=16)

    first = materialize([made(1)], tmp_path / "s")
    other = made(2)
    want = np.asarray(other[0 : len(other)])
    assert len(other) == len(first[0]) and not np.array_equal(want, first[0][0 : len(other)])
    with pytest.raises(SourceError, match="changed"):
        materialize([other], tmp_path / "s", on_change="error")
    again = materialize([other], tmp_path / "s")
    assert np.array_equal(np.asarray(again[0][0 : len(other)]), want)


def test_table_episodes_whose_file_changed_are_written_again(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from streamseq.io import table

    path = tmp_path / "t.parquet"

    def write(shift, where):
        rows = {"episode_index": [0, 0, 0, 1, 1], "x": [shift + 1.0, 2, 3, 4, 5]}
        pq.write_table(pa.table(rows), where)

    write(0, path)
    first = materialize(table(path, columns=["x"]), tmp_path / "s")
    assert first[0][0:1]["x"].tolist() == [1.0]
    write(100, tmp_path / "new.parquet")
    os.replace(tmp_path / "new.parquet", path)
    with pytest.raises(SourceError, match="t.parquet"):
        materialize(table(path, columns=["x"]), tmp_path / "s", on_change="error")
    again = materialize(table(path, columns=["x"]), tmp_path / "s")
    assert again[0][0:1]["x"].tolist() == [101.0]


def test_an_empty_path_is_refused_not_taken_as_the_working_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="path"):
        materialize([np.arange(3)], "")
    assert os.listdir(tmp_path) == []


def _edited(body):
    """A transform named ``scale`` as a script defines it, with ``body`` (edited between runs)."""
    space = {}
    exec(f"def scale(x, info, k=1):\n    return {body}\n", space)  # noqa: S102
    return space["scale"]


@pytest.mark.parametrize("edit", ["x * 3", "x * k + 1", "closure"])
def test_a_transform_edited_under_the_same_name_makes_the_store_again(tmp_path, edit):
    arrays = token_arrays((6, 4))
    first = materialize(arrays, tmp_path / "s", transform=_edited("x * 2"))
    assert stored_bytes(first) == [(a * 2).tobytes() for a in arrays]
    if edit == "closure":
        factor = 5

        def scale(x, info):
            return x * factor

        again = materialize(arrays, tmp_path / "s", transform=scale)
        assert stored_bytes(again) == [(a * 5).tobytes() for a in arrays]
        factor = 7
        again = materialize(arrays, tmp_path / "s", transform=scale)
        assert stored_bytes(again) == [(a * 7).tobytes() for a in arrays]
        return
    again = materialize(arrays, tmp_path / "s", transform=_edited(edit))
    want = [(a * 3) if edit == "x * 3" else (a + 1) for a in arrays]
    assert stored_bytes(again) == [w.tobytes() for w in want]
    same = materialize(arrays, tmp_path / "s", transform=_edited(edit))
    assert same[0]._files.generation == again[0]._files.generation  # (not made again)


def test_a_stored_stream_equals_the_same_stream_made_again(tmp_path):
    """``in``, ``index`` and ``==`` answer for a table's streams as for the list of them."""
    stored = materialize(token_arrays((6, 9, 4)), tmp_path / "a")
    other = materialize(token_arrays((6, 9, 4)), tmp_path / "b")
    assert stored[1] == stored[1] and hash(stored[1]) == hash(open_store(tmp_path / "a")[1])
    assert stored[1] in stored and stored.index(stored[2]) == 2
    assert list(stored) == list(open_store(tmp_path / "a"))
    assert stored[0] != stored[1] and stored[0] != other[0] and stored[0] not in other


def test_a_store_table_repr_names_its_kind_and_store(tmp_path):
    stored = materialize(token_arrays((6, 9, 4)), tmp_path / "a")
    for table in (stored, stored[1:], pickle.loads(pickle.dumps(stored))):
        text = repr(table)
        assert text.startswith("StoreTable(") and str(tmp_path / "a") in text, text
    assert repr(stored[1:]).startswith("StoreTable(2 streams")


def test_a_state_of_a_store_is_refused_by_the_store_made_again_from_the_files_read_another_way(
    tmp_path,
):
    from streamseq.io import tokens

    paths = []
    for i, n in enumerate([11, 6, 9]):
        paths.append(str(tmp_path / f"{i}.bin"))
        np.arange(n, dtype=np.uint16).tofile(paths[-1])
    folder = tmp_path / "store"
    stored = materialize([tokens(p, "<u2") for p in paths], folder)
    loader = StreamLoader(stored, batch_size=2, tbins=3)
    next(iter(loader))
    state = loader.state_dict()
    again = materialize([tokens(p, ">u2") for p in paths], folder)  # (made again: other steps)
    assert again[0][1:3].tolist() != stored[0][1:3].tolist()
    assert state_refused(None, again, state)


@pytest.mark.parametrize("as_list", [False, True])
def test_a_store_made_again_with_the_same_bytes_resumes_a_state_and_with_others_refuses_it(
    tmp_path, as_list
):
    from streamseq.io import tokens

    paths = []
    for i, n in enumerate([11, 6, 9]):
        paths.append(str(tmp_path / f"{i}.bin"))
        np.arange(n, dtype=np.uint16).tofile(paths[-1])
    folder = tmp_path / "store"

    def made(dtype):
        stored = materialize([tokens(p, dtype) for p in paths], folder)
        return list(stored) if as_list else stored

    loader = StreamLoader(made("<u2"), batch_size=2, tbins=3)
    it = iter(loader)
    next(it)
    state, rest = loader.state_dict(), [b.data.clone() for b in it]
    shutil.rmtree(folder)
    again = StreamLoader(made("<u2"), batch_size=2, tbins=3)  # (the same bytes: resumes)
    again.load_state_dict(state)
    assert [b.data.tolist() for b in again] == [b.tolist() for b in rest]
    assert state_refused(None, made(">u2"), state)  # (other bytes, same lengths)
