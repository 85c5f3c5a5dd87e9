"""A store's data files changed after the build (same size) are never read stale."""

import json
import os
import re
import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamseq import StreamLoader, materialize
from streamseq.errors import SourceError
from streamseq.store import layout, open_store


def arrays(lengths=(7, 0, 5, 12, 3)):
    return [
        (np.arange(n)[:, None] * 10 + s * 1000 + np.zeros((n, 3), np.int32)).astype(np.int32)
        for s, n in enumerate(lengths)
    ]


def stored_bytes(streams):
    return [np.ascontiguousarray(s[0 : len(s)]).tobytes() for s in streams]


def data_file(folder, i=0):
    (name,) = [n for n in os.listdir(folder) if n.startswith(f"leaf-{i}.") and n.endswith(".bin")]
    return os.path.join(folder, name)


def flip(path, at, restore_times=False):
    """Change one byte of ``path`` in place (its size kept; its times restored if asked)."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))
    if restore_times:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size


def forget_identity(folder):
    """Make the store one of before the data files' identity was recorded (digest kept valid)."""
    manifest = layout.read_manifest(folder)
    manifest.pop("files", None)
    manifest.pop("digest", None)
    layout.write_manifest(folder, manifest)


@pytest.mark.parametrize("restore_times", [False, True])
def test_a_data_file_edited_in_place_is_refused_by_open_store_and_rebuilt(tmp_path, restore_times):
    sources = arrays()
    store = tmp_path / "s"
    materialize(sources, store)
    flip(data_file(store), 13, restore_times)
    with pytest.raises(SourceError, match=f"{store}.*leaf-0.*changed.*materialize"):
        open_store(store)
    stored = materialize(sources, store)  # (made again)
    assert stored_bytes(stored) == [s.tobytes() for s in sources]
    assert stored_bytes(open_store(store)) == [s.tobytes() for s in sources]


@settings(max_examples=10, deadline=None)
@given(lengths=st.lists(st.integers(0, 9), min_size=1, max_size=5), data=st.data())
def test_any_byte_edited_after_the_build_is_never_read(tmp_path_factory, lengths, data):
    if not sum(lengths):
        lengths = [*lengths, 1]
    sources = arrays(lengths)
    store = str(tmp_path_factory.mktemp("s"))
    stored = materialize(sources, store)
    at = data.draw(st.integers(0, sum(lengths) * 12 - 1))
    flip(data_file(store), at, restore_times=data.draw(st.booleans()))
    with pytest.raises(SourceError, match="leaf-0"):
        open_store(store)
    with pytest.raises(SourceError, match="leaf-0"):
        list(StreamLoader(stored, 1, 3))


@pytest.mark.parametrize(("workers", "when"), [(0, "during"), (0, "before"), (2, "before")])
def test_a_data_file_edited_is_an_error_of_the_loader_naming_file_stream_steps(
    tmp_path, workers, when
):
    sources = arrays((9, 14, 6, 11))
    store = tmp_path / "s"
    stored = materialize(sources, store)
    transform = None if workers == 0 else _copy_of  # (a transform: read in the workers)
    it = iter(StreamLoader(stored, 2, 4, num_workers=workers, transform=transform))
    if when == "during":
        next(it)  # (the files mapped and checked in this process)
    flip(data_file(store), 5 * 12, restore_times=True)  # (a step already read: any batch after)
    with pytest.raises(SourceError, match="leaf-0.*changed") as raised:
        list(it)
    assert re.search(r"stream \d+ \(StoredStream.*\),? steps \d+:\d+", str(raised.value))


def _copy_of(x, info):
    return np.array(x)


def test_a_data_file_replaced_by_another_of_its_size_is_refused(tmp_path):
    sources = arrays()
    store, other = tmp_path / "s", tmp_path / "o"
    materialize(sources, store)
    materialize([a + 1 for a in sources], other)
    shutil.copyfile(data_file(other), data_file(store))  # (the copy over it, whole or not)
    with pytest.raises(SourceError, match="leaf-0.*changed"):
        open_store(store)


def test_a_store_moved_to_another_folder_opens(tmp_path):
    sources = arrays()
    materialize(sources, tmp_path / "s")
    os.rename(tmp_path / "s", tmp_path / "moved")
    assert stored_bytes(open_store(tmp_path / "moved")) == [s.tobytes() for s in sources]


def test_the_manifest_records_every_data_file(tmp_path):
    store = tmp_path / "s"
    materialize([{"a": a, "b": a[:, 0]} for a in arrays()], store)
    files = json.loads((store / layout.MANIFEST).read_text())["files"]
    assert len(files) == 2
    for i, record in enumerate(files):
        st = os.stat(data_file(store, i))
        assert record == {
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns,
            "inode": st.st_ino,
        }


def test_an_older_store_without_the_record_opens_and_checks_its_size(tmp_path):
    sources = arrays()
    store = tmp_path / "s"
    materialize(sources, store)
    forget_identity(store)
    flip(data_file(store), 0)  # (its size kept: not told, as before the record)
    got = open_store(store)
    assert stored_bytes(got)[1:] == [s.tobytes() for s in sources][1:]
    assert len(list(StreamLoader(got, 2, 3))) > 0
    with open(data_file(store), "r+b") as f:
        f.truncate(100)
    with pytest.raises(SourceError, match=f"{store}.*leaf-0"):
        open_store(store)


def test_a_loader_reading_a_store_made_again_meanwhile_reads_the_files_it_mapped(tmp_path):
    sources = arrays((9, 14, 6, 11))
    store = tmp_path / "s"
    stored = materialize(sources, store)
    want = [b.data.numpy().tobytes() for b in StreamLoader(sources, 2, 4)]
    it = iter(StreamLoader(stored, 2, 4))
    got = [next(it).data.numpy().tobytes()]
    materialize([a + 1 for a in sources], store)  # (new files; the old ones removed)
    got += [b.data.numpy().tobytes() for b in it]
    assert got == want


def test_a_data_file_edited_while_a_batch_is_copied_is_an_error_of_that_batch(
    tmp_path, monkeypatch
):
    from streamseq.gather import writer

    store = tmp_path / "s"
    stored = materialize(arrays((9, 14, 6, 11)), store)
    real, copies = writer.fill, []

    def fill(*args):  # another program edits the file in place while the batch is copied
        done = real(*args)
        copies.append(done)
        if len(copies) == 2:
            flip(data_file(store), 3 * 12)
        return done

    monkeypatch.setattr(writer, "fill", fill)
    it = iter(StreamLoader(stored, 2, 4))
    next(it)
    with pytest.raises(SourceError, match="leaf-0.*changed") as raised:
        next(it)  # (the batch copied while the file changed: never delivered)
    assert "steps 4:8" in str(raised.value)
    assert len(copies) == 2
