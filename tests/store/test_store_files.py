"""A store's data files changed after the build (same size) are never read stale."""

import hashlib
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


def _stored_for(tmp_path, workers):
    """A store of four streams, and the transform that has ``workers`` read it (None: here)."""
    store = tmp_path / "s"
    stored = materialize(arrays((9, 14, 6, 11)), store)
    return store, stored, None if workers == 0 else _copy_of  # (a transform: in the workers)


@pytest.mark.parametrize(("workers", "when"), [(0, "during"), (0, "before"), (2, "before")])
def test_a_data_file_edited_is_an_error_of_the_loader_naming_file_stream_steps(
    tmp_path, workers, when
):
    store, stored, transform = _stored_for(tmp_path, workers)
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
            "blake2b": hashlib.blake2b(
                open(data_file(store, i), "rb").read(), digest_size=32
            ).hexdigest(),
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

    store, stored, _ = _stored_for(tmp_path, 0)
    real, copies = writer.fill, []

    def fill(*args):  # another program edits the file in place while the batch is copied
        done = real(*args)
        copies.append(done)
        if len(copies) == 2:
            flip(data_file(store), 3 * 12)
        return done

    monkeypatch.setattr(writer, "fill", fill)
    delivered = []
    with pytest.raises(SourceError, match="leaf-0.*changed") as raised:
        for batch in StreamLoader(stored, 2, 4):  # (the next batch is copied ahead)
            delivered.append(batch.step[:, 0].tolist())
    assert len(copies) == 2
    # the batch copied while the file changed (steps 4:8) is never delivered; the one
    # before it is refused too when the change came before it was handed over
    assert [4, 4] not in delivered and len(delivered) <= 1
    assert "steps 4:8" in str(raised.value) or "steps 0:4" in str(raised.value)


def _copy_store(src, dst, how):
    """Copy a store the ways users do: ``cp -r``, ``cp -a``/``rsync -a``, ``cp -al``."""
    if how == "cp -r":  # (new files: new inodes, times of the copy)
        shutil.copytree(src, dst, copy_function=shutil.copyfile)
    elif how == "cp -a":  # (times kept, new inodes and ctimes)
        shutil.copytree(src, dst, copy_function=shutil.copy2)
    else:  # "cp -al": hard links (the inode kept, its ctime changed by the link)
        shutil.copytree(src, dst, copy_function=os.link)


def _leaf_inodes(folder):
    return sorted(os.stat(os.path.join(folder, n)).st_ino for n in os.listdir(folder))


@pytest.mark.parametrize("how", ["cp -r", "cp -a", "cp -al"])
def test_a_copy_of_the_store_opens_reads_the_same_batches_and_is_not_made_again(tmp_path, how):
    sources = arrays((9, 14, 6, 11))
    store, copy = tmp_path / "s", tmp_path / "c"
    stored = materialize(sources, store)
    want = [b.data.numpy().tobytes() for b in StreamLoader(stored, 2, 4)]
    _copy_store(store, copy, how)
    opened = open_store(copy)
    assert [b.data.numpy().tobytes() for b in StreamLoader(opened, 2, 4)] == want
    assert [b.data.numpy().tobytes() for b in StreamLoader(open_store(copy), 2, 4)] == want
    inodes = _leaf_inodes(copy)
    again = materialize(sources, copy)  # (not made again: the same files)
    assert _leaf_inodes(copy) == inodes
    assert [b.data.numpy().tobytes() for b in StreamLoader(again, 2, 4)] == want


def test_a_copy_verified_once_records_its_files_and_is_not_hashed_again(tmp_path, monkeypatch):
    from streamseq.store import check

    store, copy = tmp_path / "s", tmp_path / "c"
    materialize(arrays(), store)
    _copy_store(store, copy, "cp -r")
    hashed = []
    real = check.file_digest
    monkeypatch.setattr(check, "file_digest", lambda *a: hashed.append(a[0]) or real(*a))
    open_store(copy)
    assert len(hashed) == 1
    files = layout.read_manifest(copy)["files"]
    st = os.stat(data_file(copy))
    assert (files[0]["inode"], files[0]["ctime_ns"]) == (st.st_ino, st.st_ctime_ns)
    open_store(copy)
    assert len(hashed) == 1  # (the identity of the copy recorded)


@pytest.mark.parametrize("how", ["cp -r", "cp -a", "cp -al"])
def test_an_edited_copy_is_refused_and_made_again(tmp_path, how):
    sources = arrays()
    store, copy = tmp_path / "s", tmp_path / "c"
    materialize(sources, store)
    _copy_store(store, copy, how)
    if how == "cp -al":  # (shared with the store: made its own before the edit)
        shutil.copyfile(data_file(copy), data_file(copy) + ".x")
        os.replace(data_file(copy) + ".x", data_file(copy))
    flip(data_file(copy), 13, restore_times=True)
    with pytest.raises(SourceError, match=f"{copy}.*leaf-0.*(changed|digest).*materialize"):
        open_store(copy)
    stored = materialize(sources, copy)  # (made again)
    assert stored_bytes(stored) == [s.tobytes() for s in sources]
    assert stored_bytes(open_store(store)) == [s.tobytes() for s in sources]


def test_a_read_only_copy_opens_and_is_verified_at_each_open(tmp_path, monkeypatch, caplog):
    from streamseq.store import check

    sources = arrays((9, 14, 6, 11))
    store, copy = tmp_path / "s", tmp_path / "c"
    stored = materialize(sources, store)
    want = [b.data.numpy().tobytes() for b in StreamLoader(stored, 2, 4)]
    _copy_store(store, copy, "cp -a")
    before = (copy / layout.MANIFEST).read_bytes()

    def read_only(path, data):
        raise PermissionError(30, "Read-only file system", path)

    monkeypatch.setattr(layout, "write_atomic", read_only)
    hashed = []
    real = check.file_digest
    monkeypatch.setattr(check, "file_digest", lambda *a: hashed.append(a[0]) or real(*a))
    with caplog.at_level("INFO", logger="streamseq.store"):
        opened = open_store(copy)
    assert "each open" in caplog.text
    assert [b.data.numpy().tobytes() for b in StreamLoader(opened, 2, 4)] == want
    got = [b.data.numpy().tobytes() for b in StreamLoader(opened, 2, 4, num_workers=2)]
    assert got == want
    open_store(copy)
    assert len(hashed) == 2
    assert (copy / layout.MANIFEST).read_bytes() == before


def _open_and_read(folder):
    return [b.data.numpy().tobytes() for b in StreamLoader(open_store(folder), 2, 4)]


def test_two_processes_opening_a_copy_at_once_both_read_it_and_keep_the_manifest_valid(tmp_path):
    import multiprocessing

    sources = arrays((9, 14, 6, 11))
    store, copy = tmp_path / "s", tmp_path / "c"
    stored = materialize(sources, store)
    want = [b.data.numpy().tobytes() for b in StreamLoader(stored, 2, 4)]
    _copy_store(store, copy, "cp -r")
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        got = pool.map(_open_and_read, [str(copy)] * 4)
    assert got == [want] * 4
    manifest = layout.read_manifest(copy)  # (its digest checks)
    st = os.stat(data_file(copy))
    assert manifest["files"][0]["inode"] == st.st_ino
    assert _open_and_read(copy) == want


@pytest.mark.parametrize("change", ["chmod", "cp -al"])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_store_made_read_only_or_linked_while_a_loader_reads_it_is_read_on(
    tmp_path, change, workers
):
    store, stored, transform = _stored_for(tmp_path, workers)
    want = [b.data.numpy().tobytes() for b in StreamLoader(stored, 2, 4)]
    it = iter(StreamLoader(stored, 2, 4, num_workers=workers, transform=transform))
    got = [next(it).data.numpy().tobytes()]
    if change == "chmod":  # (its inode changed, its bytes not: ctime only)
        os.chmod(data_file(store), 0o444)
    else:
        _copy_store(store, tmp_path / "c", "cp -al")
    got += [b.data.numpy().tobytes() for b in it]
    assert got == want
    flip(data_file(store), 5 * 12, restore_times=True)  # (an edit still told)
    with pytest.raises(SourceError, match="leaf-0.*changed"):
        list(StreamLoader(stored, 2, 4, num_workers=workers, transform=transform))


def test_a_copy_of_a_store_without_digests_is_refused_as_before(tmp_path):
    store, copy = tmp_path / "s", tmp_path / "c"
    materialize(arrays(), store)
    manifest = layout.read_manifest(store)
    manifest["files"] = [{k: v for k, v in f.items() if k != "blake2b"} for f in manifest["files"]]
    manifest.pop("digest")
    layout.write_manifest(store, manifest)
    open_store(store)
    _copy_store(store, copy, "cp -a")
    with pytest.raises(SourceError, match="leaf-0.*changed.*inode"):
        open_store(copy)


def test_a_data_file_cut_short_during_the_copy_is_the_error_of_the_file_check(
    tmp_path, monkeypatch
):
    from streamseq.gather import writer

    store, stored, _ = _stored_for(tmp_path, 0)
    real = writer.fill

    def fill(*args):  # another program cuts the file short while the batch is copied
        with open(data_file(store), "r+b") as f:
            f.truncate(0)
        return real(*args)

    it = iter(StreamLoader(stored, 2, 4))
    next(it)
    monkeypatch.setattr(writer, "fill", fill)
    with pytest.raises(SourceError, match="leaf-0.*cut short to 0 bytes") as raised:
        next(it)  # (the check's words, with the batch's streams, not the copy's alone)
    assert re.search(r"batch 1: stream \d+ \(StoredStream.*\),? steps 4:8", str(raised.value))


def test_a_store_let_go_closes_its_files_without_a_resource_warning(tmp_path):
    import gc
    import warnings

    _, stored, _ = _stored_for(tmp_path, 0)
    list(StreamLoader(stored, 2, 4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        del stored
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)], caught


@pytest.mark.timeout(30, method="signal")
@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero"])
def test_a_manifest_that_is_not_a_regular_file_is_refused_not_waited_for(tmp_path, kind):
    folder = tmp_path / "store"
    materialize(arrays(), folder)
    os.remove(folder / layout.MANIFEST)
    if kind == "fifo":
        os.mkfifo(folder / layout.MANIFEST)  # (opened for reading, it waits for a writer)
    else:
        os.symlink("/dev/zero", folder / layout.MANIFEST)  # (read whole, it never ends)
    with pytest.raises(SourceError, match="not a regular file") as e:
        open_store(folder)
    assert str(folder) in str(e.value) and layout.MANIFEST in str(e.value)
