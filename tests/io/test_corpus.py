import json
import multiprocessing
import os
import pickle
import shutil
import struct
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamseq import StreamLoader
from streamseq.errors import SourceError
from streamseq.io import token_corpus
from streamseq.testing import check_continuity

EOD = 50256


def write_docs(path, docs, dtype=np.uint16):
    """nanoGPT's layout: every document followed by EOD, flat."""
    flat = np.concatenate([np.append(d, EOD) for d in docs]).astype(dtype)
    flat.tofile(path)
    return flat


@pytest.fixture
def corpus(tmp_path):
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 1000, n) for n in rng.integers(1, 60, 40)]
    path = tmp_path / "train.bin"
    return path, write_docs(path, docs), docs


def test_documents_end_with_eod_and_concatenate_to_the_file(corpus):
    path, flat, docs = corpus
    got = token_corpus(path, eod=EOD)
    assert len(got) == len(docs)
    for d, want in zip(got, docs, strict=True):
        assert len(d) == len(want) + 1
        assert d[:].tolist() == [*want.tolist(), EOD]
    np.testing.assert_array_equal(np.concatenate([d[:] for d in got]), flat)


def test_slices_are_read_only_copies_out_of_one_shared_map(corpus):
    path, _, docs = corpus
    got = token_corpus(path, eod=EOD)
    a, b = got[3][1:4], got[7][:]
    assert not a.flags.writeable and not b.flags.writeable
    assert got[3]._handle is got[7]._handle  # one handle (one map) for the file
    assert got[3][-1] == EOD and got[3][0] == docs[3][0]
    assert got[3][100:200].shape == (0,) and got[3][100:200].dtype == np.uint16


def test_trailing_tokens_and_no_eod(tmp_path):
    path = tmp_path / "t.bin"
    np.array([1, 2, EOD, EOD, 3, 4], np.uint16).tofile(path)
    assert [d[:].tolist() for d in token_corpus(path, eod=EOD)] == [[1, 2, EOD], [EOD], [3, 4]]
    one = token_corpus(path, eod=7)  # never found: the whole file is one document
    assert len(one) == 1 and one[0][:].tolist() == [1, 2, EOD, EOD, 3, 4]


def test_npy_dtype_from_header(tmp_path):
    path = tmp_path / "t.npy"
    np.save(path, np.array([9, 9, 0, 8, 0], np.int32))
    docs = token_corpus(path, eod=0)
    assert [d[:].tolist() for d in docs] == [[9, 9, 0], [8, 0]] and docs[0].dtype == np.int32
    with pytest.raises(ValueError, match="int32"):
        token_corpus(path, eod=0, dtype=np.uint16)
    np.save(tmp_path / "m.npy", np.zeros((3, 2), np.int32))
    with pytest.raises(SourceError, match="m.npy.*1-d"):
        token_corpus(tmp_path / "m.npy", eod=0)


def test_index_offsets(tmp_path):
    path = tmp_path / "t.bin"
    np.arange(10, dtype=np.uint32).tofile(path)
    docs = token_corpus(path, dtype=np.uint32, index=[2, 5, 5, 9])
    assert [d[:].tolist() for d in docs] == [[2, 3, 4], [], [5, 6, 7, 8], [9]]
    ends = token_corpus(path, dtype=np.uint32, index=np.array([0, 4, 10]))  # with the end
    assert [len(d) for d in ends] == [4, 6]
    np.save(tmp_path / "offsets.npy", np.array([0, 7]))
    assert [len(d) for d in token_corpus(path, dtype="u4", index=tmp_path / "offsets.npy")] == [
        7,
        3,
    ]


@pytest.mark.parametrize(
    ("index", "match"),
    [
        ([0, 11], r"index\[1\] = 11 is out of range for a file of 10 tokens"),
        ([-1, 3], r"index\[0\] = -1 is out of range"),
        ([0, 5, 3], r"decreases: index\[1\] = 5 > index\[2\] = 3"),
        ([], "non-empty 1-d array"),
        ([0.5], "integer offsets"),
        (np.array([0, 2**63 + 5], np.uint64), r"index\[1\] = 9223372036854775813 is out of range"),
    ],
)
def test_bad_index_names_the_file(tmp_path, index, match):
    path = tmp_path / "t.bin"
    np.arange(10, dtype=np.uint16).tofile(path)
    with pytest.raises(SourceError, match="t.bin: .*" + match) as e:
        token_corpus(path, index=np.asarray(index))
    assert e.value.path == str(path)


def test_bad_files_name_the_file(tmp_path):
    with pytest.raises(SourceError, match="missing.bin: no such file"):
        token_corpus(tmp_path / "missing.bin", eod=0)
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x01\x00\x02")
    with pytest.raises(SourceError, match="odd.bin: size 3 is not a multiple of uint16"):
        token_corpus(odd, eod=0)
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    with pytest.raises(SourceError, match="empty.bin: empty"):
        token_corpus(empty, eod=0)
    with pytest.raises(ValueError, match="either eod"):
        token_corpus(odd)
    with pytest.raises(ValueError, match="either eod"):
        token_corpus(odd, eod=0, index=[0])


def write_megatron(prefix, documents, dtype=np.uint16):
    """Megatron's .bin and .idx for documents given as lists of sequences."""
    sequences = [np.asarray(s, dtype) for doc in documents for s in doc]
    np.concatenate(sequences).tofile(f"{prefix}.bin")
    lengths = np.array([len(s) for s in sequences], np.int32)
    pointers = np.concatenate([[0], np.cumsum(lengths.astype(np.int64) * 2)[:-1]])
    doc_idx = np.concatenate([[0], np.cumsum([len(doc) for doc in documents])]).astype(np.int64)
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 8))
        f.write(struct.pack("<Q", len(lengths)) + struct.pack("<Q", len(doc_idx)))
        f.write(lengths.tobytes() + pointers.astype(np.int64).tobytes() + doc_idx.tobytes())


def test_megatron_bin_and_idx(tmp_path):
    prefix = tmp_path / "corpus_text_document"
    write_megatron(prefix, [[[1, 2], [3]], [[4, 5, 6]], [], [[7], [8], [9, 10]]])
    docs = token_corpus(f"{prefix}.bin", index=f"{prefix}.idx")
    assert [d[:].tolist() for d in docs] == [[1, 2, 3], [4, 5, 6], [], [7, 8, 9, 10]]
    with pytest.raises(ValueError, match="uint16"):
        token_corpus(f"{prefix}.bin", index=f"{prefix}.idx", dtype=np.int32)
    damaged = tmp_path / "bad.idx"
    damaged.write_bytes(b"NOTANIDX" + bytes(40))
    with pytest.raises(SourceError, match="bad.idx: not a Megatron index"):
        token_corpus(f"{prefix}.bin", index=damaged)
    short = tmp_path / "short.bin"
    short.write_bytes(np.arange(5, dtype=np.uint16).tobytes())
    with pytest.raises(SourceError, match="short.bin: the index covers 10 tokens, the file has 5"):
        token_corpus(short, index=f"{prefix}.idx")


def test_pickle_carries_the_range_not_the_tokens(tmp_path):
    path = tmp_path / "big.bin"
    write_docs(path, [np.arange(100_000) % 1000, np.arange(10)])
    docs = token_corpus(path, eod=EOD)
    docs[0][:10]  # opened here
    data = pickle.dumps(docs[0])
    assert len(data) < 300  # 200 kB of tokens
    copy = pickle.loads(data)
    np.testing.assert_array_equal(copy[:], docs[0][:])
    assert copy._handle is docs[0]._handle  # one map per file and process, also when unpickled


def _read_each(pickled):
    """Unpickle documents one by one and read them: sums, handles and maps they used."""
    docs = [pickle.loads(p) for p in pickled]
    sums = [int(d[:].astype(np.int64).sum()) for d in docs]
    maps = {id(d._handle.peek()) for d in docs}
    return sums, len({id(d._handle) for d in docs}), len(maps)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_read_in_worker_process_through_one_map(corpus, method):
    path, _, docs = corpus
    got = token_corpus(path, eod=EOD)
    parent = got[0]._handle.get()
    with multiprocessing.get_context(method).Pool(1) as pool:
        sums, handles, maps = pool.apply(_read_each, ([pickle.dumps(d) for d in got[:5]],))
    assert sums == [int(d.sum()) + EOD for d in docs[:5]]
    assert handles == 1 and maps == 1  # one map of the file in the worker, for all documents
    assert got[0]._handle.get() is parent  # the parent's is its own


@pytest.mark.parametrize("workers", [0, 2])
def test_streaming_passes_check_continuity(corpus, workers):
    path, _, _ = corpus
    docs = token_corpus(path, eod=EOD)
    loader = StreamLoader(docs, batch_size=4, tbins=16, num_workers=workers)
    assert check_continuity(loader, [len(d) for d in docs], sources=docs) == len(loader)


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 30), min_size=1, max_size=25),
    seed=st.integers(0, 2**16),
)
def test_random_document_lengths(tmp_path_factory, lengths, seed):
    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, EOD, n) for n in lengths]
    folder = tmp_path_factory.mktemp("corpus")
    flat = write_docs(folder / "c.bin", docs)
    by_eod = token_corpus(folder / "c.bin", eod=EOD)
    assert [len(d) for d in by_eod] == [n + 1 for n in lengths]
    assert all(d[:].tolist() == [*w.tolist(), EOD] for d, w in zip(by_eod, docs, strict=True))
    np.testing.assert_array_equal(np.concatenate([d[:] for d in by_eod]), flat)
    body = np.concatenate([np.zeros(0, np.uint16), *[w.astype(np.uint16) for w in docs]])
    body.tofile(folder / "body.bin")
    if len(body):
        bounds = np.concatenate([[0], np.cumsum(lengths)])  # with the end: empty last ones too
        by_index = token_corpus(folder / "body.bin", index=bounds)
        assert [len(d) for d in by_index] == lengths
        assert all(d[:].tolist() == w.tolist() for d, w in zip(by_index, docs, strict=True))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("change", ["truncate", "rewrite"])
def test_a_file_changed_under_the_loader_is_an_error_naming_it(tmp_path, workers, change):
    path = tmp_path / "c.bin"
    tokens = np.arange(100, dtype=np.uint16) + 1
    tokens.tofile(path)
    starts = [0, 10, 30, 60]
    docs = token_corpus(path, index=starts)
    loader = StreamLoader(docs, batch_size=2, tbins=5, num_workers=workers)
    it = iter(loader)
    next(it)
    if change == "truncate":
        with open(path, "r+b") as f:
            f.truncate(40)
    else:  # the same size, other tokens, written in place
        np.zeros(100, np.uint16).tofile(path)
        os.utime(path, ns=(1, 1))
    error = None
    try:
        for batch in it:  # what was read before the change (workers read ahead) is right
            valid = np.asarray(batch.valid)
            at = (
                np.asarray(starts)[np.asarray(batch.stream)[valid]] + np.asarray(batch.step)[valid]
            )
            np.testing.assert_array_equal(np.asarray(batch.data)[valid], tokens[at])
    except SourceError as e:
        error = e
    if workers == 0:  # (read on demand: the next batch reads the changed file)
        assert error is not None
    if error is not None:
        assert "changed" in str(error) and error.path == str(path)
        assert "stream" in str(error) and "steps" in str(error)  # (the batch's, or the read's)


def test_an_index_file_rewritten_in_place_is_an_error_not_other_documents(tmp_path):
    path, where = tmp_path / "c.bin", tmp_path / "offsets.npy"
    np.arange(100, dtype=np.uint16).tofile(path)
    np.save(where, np.array([0, 10, 30, 60], np.int64))
    docs = token_corpus(path, index=where)
    assert docs[1][:3].tolist() == [10, 11, 12]
    np.save(where, np.array([0, 5, 7, 9], np.int64))  # the same file, other offsets
    os.utime(where, ns=(1, 1))
    with pytest.raises(SourceError, match="changed") as info:
        docs[1][:3]
    assert info.value.path == str(where)


def test_a_state_of_some_documents_is_refused_by_other_documents_of_the_file(tmp_path):
    path = tmp_path / "c.bin"
    np.arange(80, dtype=np.uint16).tofile(path)
    docs = token_corpus(path, index=np.arange(0, 80, 10))  # 8 documents of 10 tokens
    even = StreamLoader(docs[::2], batch_size=2, tbins=5)
    next(iter(even))
    odd = StreamLoader(docs[1::2], batch_size=2, tbins=5)
    with pytest.raises(ValueError, match="sources"):
        odd.load_state_dict(even.state_dict())
    with pytest.raises(ValueError, match="sources"):  # (a list of them names them alike)
        StreamLoader(list(docs[1::2]), batch_size=2, tbins=5).load_state_dict(even.state_dict())
    StreamLoader(list(docs[::2]), batch_size=2, tbins=5).load_state_dict(even.state_dict())
    # the same tokens, read as whole streams of the file: not the state's documents
    whole = [np.arange(a, a + 10, dtype=np.uint16) for a in (0, 20, 40, 60)]
    plain = StreamLoader(whole, batch_size=2, tbins=5)
    with pytest.raises(ValueError, match="ranges of files"):
        plain.load_state_dict(even.state_dict())


#: a state saved before documents were named by their place (by their file only), and the
#: batches it resumed to there (how it was made: the file's ``made_by``)
OLD_STATE = os.path.join(os.path.dirname(__file__), "data", "corpus_state_without_offsets.json")


def _old_corpus(folder, monkeypatch):
    """The corpus of :data:`OLD_STATE`, at the relative path it was saved with."""
    monkeypatch.chdir(folder)
    np.arange(80, dtype=np.uint16).tofile("c.bin")
    with open(OLD_STATE) as f:
        saved = json.load(f)
    return token_corpus("c.bin", index=np.arange(0, 80, 10)), saved


def test_a_state_saved_without_offsets_still_loads_and_gives_the_same_batches(
    tmp_path, monkeypatch
):
    docs, saved = _old_corpus(tmp_path, monkeypatch)
    assert "offsets" not in saved["state"]["plan"]
    loader = StreamLoader(docs[::2], batch_size=2, tbins=5, shuffle=True, seed=3)
    assert "offsets" in loader.state_dict()["plan"]  # (states saved now name the ranges)
    loader.load_state_dict(saved["state"])
    rest = list(loader)
    assert [b.stream.tolist() for b in rest] == [b["stream"] for b in saved["rest"]]
    assert [b.step.tolist() for b in rest] == [b["step"] for b in saved["rest"]]
    assert [b.reset.tolist() for b in rest] == [b["reset"] for b in saved["rest"]]
    assert [b.data.tolist() for b in rest] == [b["data"] for b in saved["rest"]]
    whole = list(StreamLoader(docs[::2], batch_size=2, tbins=5, shuffle=True, seed=3))
    for got, want in zip(rest, whole[1:], strict=True):
        assert np.array_equal(got.data, want.data) and np.array_equal(got.step, want.step)


def test_a_state_saved_without_offsets_is_still_checked_by_its_own_key(tmp_path, monkeypatch):
    docs, saved = _old_corpus(tmp_path, monkeypatch)
    other_seed = StreamLoader(docs[::2], batch_size=2, tbins=5, shuffle=True, seed=4)
    with pytest.raises(ValueError, match="seed"):
        other_seed.load_state_dict(saved["state"])
    longer = StreamLoader(docs[:5], batch_size=2, tbins=5, shuffle=True, seed=3)
    with pytest.raises(ValueError, match="number of streams"):
        longer.load_state_dict(saved["state"])
    forged = {**saved["state"], "fingerprint": "0" * 16}
    loader = StreamLoader(docs[::2], batch_size=2, tbins=5, shuffle=True, seed=3)
    with pytest.raises(ValueError, match="fingerprint"):
        loader.load_state_dict(forged)


def _selection(draw, n):
    return draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=5, unique=True))


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_two_selections_of_one_file_refuse_each_others_state_and_one_accepts_its_own(data):
    # documents of equal lengths (only their places tell them apart), and one longer
    n = 9
    folder = tempfile.mkdtemp()
    try:
        path = os.path.join(folder, "c.bin")
        np.arange(4 * n + 4, dtype=np.uint16).tofile(path)
        offsets = np.append(np.arange(0, 4 * n, 4), 4 * n + 1)[:n]
        docs = token_corpus(path, index=offsets)
        a = _selection(data.draw, n)
        b = _selection(data.draw, n)
        saving = StreamLoader(docs[a], batch_size=1, tbins=2)
        next(iter(saving))
        state = saving.state_dict()
        other = StreamLoader(docs[b], batch_size=1, tbins=2)
        if a != b:
            with pytest.raises(ValueError, match="this state was made by another plan"):
                other.load_state_dict(state)
        # the same selection, made another way: a fresh split, reordered, then indexed
        again = token_corpus(path, index=offsets)
        order = np.array(data.draw(st.permutations(range(n))))
        where = np.argsort(order)  # document i is at where[i] of again[order]
        same = StreamLoader(again[order][where[a]], batch_size=1, tbins=2)
        same.load_state_dict(state)
        assert [x.step.tolist() for x in same] == [x.step.tolist() for x in list(saving)[1:]]
    finally:
        shutil.rmtree(folder)


def test_sub_tables_of_a_corpus_keep_the_names_of_their_documents(tmp_path):
    path = tmp_path / "c.bin"
    np.arange(60, dtype=np.uint16).tofile(path)
    starts = np.array([0, 5, 12, 20, 33, 41])
    docs = token_corpus(path, index=starts)
    ids = docs.identities
    assert list(ids) == [str(path)] * 6 and ids.offsets.tolist() == starts.tolist()
    mask = np.array([True, False, True, True, False, True])
    for index in (slice(1, 4), slice(None, None, -2), [4, 0, 3], mask, np.array([5])):
        sub = docs[index]
        assert sub.identities.offsets.tolist() == starts[index].tolist()
        assert sub.identities.offsets.tolist() == [d.start for d in sub]
        again = pickle.loads(pickle.dumps(sub))
        assert again.identities == sub.identities
        assert again.identities.offsets.tolist() == starts[index].tolist()
    assert docs[::2][1:].identities.offsets.tolist() == [12, 33]
    assert docs[[1, 2]].identities != docs[[2, 1]].identities


def test_a_corpus_of_a_file_replaced_reads_the_new_file_not_the_old_map(tmp_path):
    path = tmp_path / "c.npy"
    old = np.array([1, 2, 3, 0, 4, 5, 0], np.uint16)
    np.save(path, old)
    first = token_corpus(path, eod=0)
    assert np.asarray(first[0][0:4]).tolist() == [1, 2, 3, 0]  # (its map is open here)
    new = np.where(old == 0, 0, old + 100).astype(np.uint16)
    np.save(tmp_path / "new.npy", new)
    os.replace(tmp_path / "new.npy", path)  # (same size: another file)
    second = token_corpus(path, eod=0)
    assert np.asarray(second[0][0:4]).tolist() == [101, 102, 103, 0]
    assert np.asarray(second[1][0:3]).tolist() == [104, 105, 0]


def test_a_file_rewritten_between_the_check_and_the_copy_is_an_error_not_other_tokens(
    tmp_path, monkeypatch
):
    import streamseq.io.corpus as corpus

    path = tmp_path / "c.bin"
    (np.arange(100, dtype=np.uint16) + 1).tofile(path)
    docs = token_corpus(path, index=[0, 10, 30, 60])
    assert docs[1][:3].tolist() == [11, 12, 13]
    check = corpus._check_unchanged

    def rewritten_after_the_check(files, a, b):
        check(files, a, b)
        with open(path, "r+b") as f:  # in place, the same size: the map reads the new bytes
            f.write(np.zeros(100, np.uint16).tobytes())
        os.utime(path, ns=(1, 1))

    monkeypatch.setattr(corpus, "_check_unchanged", rewritten_after_the_check)
    with pytest.raises(SourceError, match="changed") as info:
        docs[2][:5]
    assert info.value.path == str(path)


def test_a_loader_checks_the_corpus_files_once_a_read_and_once_after_each_batch(
    tmp_path, monkeypatch
):
    import streamseq.io.corpus as corpus

    path = tmp_path / "c.bin"
    (np.arange(4000, dtype=np.uint16) % 500).tofile(path)
    docs = token_corpus(path, index=np.arange(0, 4000, 10))  # 400 documents of 10 tokens
    loader = StreamLoader(docs, batch_size=8, tbins=16)
    stats = []
    stamp = corpus.file_stamp
    monkeypatch.setattr(corpus, "file_stamp", lambda p: stats.append(p) or stamp(p))
    batches = list(loader)
    reads = len(docs)  # (a document of 10 tokens: one read, 2 at most across a batch)
    assert len(stats) < reads + 2 * len(batches) + 20 < 2 * reads  # (not two a read)
    plain = list(StreamLoader([np.asarray(d[:]) for d in docs], batch_size=8, tbins=16))
    assert all(np.array_equal(a.data, b.data) for a, b in zip(batches, plain, strict=True))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_file_rewritten_while_a_batch_is_copied_is_an_error_naming_the_batch(
    tmp_path, monkeypatch, workers
):
    import streamseq.io.corpus as corpus

    path = tmp_path / "c.bin"
    (np.arange(400, dtype=np.uint16) + 1).tofile(path)
    docs = token_corpus(path, index=np.arange(0, 400, 20))
    read, as_arrays = corpus._Document._read, corpus._Document.as_arrays

    def rewrite(self):
        if self.start >= 200:  # (the documents of the second half: once the loader runs)
            with open(path, "r+b") as f:
                f.write(np.zeros(400, np.uint16).tobytes())
            os.utime(path, ns=(1, 1))

    def rewritten_during_the_batch(self, handle, a, b):
        rewrite(self)
        return read(self, handle, a, b)

    def rewritten_before_the_copy(self):  # (a batch's rows copied straight from the map)
        rewrite(self)
        return as_arrays(self)

    monkeypatch.setattr(corpus._Document, "_read", rewritten_during_the_batch)
    monkeypatch.setattr(corpus._Document, "as_arrays", rewritten_before_the_copy)
    loader = StreamLoader(docs, batch_size=2, tbins=5, num_workers=workers, timeout=60)
    with pytest.raises(SourceError, match="changed") as info:
        for batch in loader:  # what is delivered was read before the change
            valid = np.asarray(batch.valid)
            assert (np.asarray(batch.data)[valid] > 0).all()
    assert info.value.path == str(path) and "steps" in str(info.value)


def test_the_files_of_a_corpus_hide_in_their_repr_what_its_documents_hide(tmp_path):
    where = tmp_path / "x?token=SECRETQ"
    where.mkdir()
    path = where / "a.bin"
    write_docs(path, [np.arange(3), np.arange(4)])
    docs = token_corpus(path, eod=EOD)
    assert "SECRETQ" not in repr(docs[0])
    assert "SECRETQ" not in repr(docs.stores)
    assert "x?token=***" in repr(docs.stores)


def _read_document_rewritten_during_its_copy(docs, queue):
    """Read ``docs[2]`` (its file rewritten after the check, before the copy): what it gave."""
    try:
        queue.put(("read", docs[2][:5].tolist()))
    except SourceError as e:
        queue.put(("refused", e.path))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_read_outside_a_batch_checks_after_its_copy_in_a_forked_child_or_a_copied_context(
    tmp_path, monkeypatch
):
    import contextvars
    import queue as queues
    import threading

    import streamseq.io.corpus as corpus

    path = tmp_path / "c.bin"
    (np.arange(100, dtype=np.uint16) + 1).tofile(path)
    docs = token_corpus(path, index=[0, 10, 30, 60])
    check = corpus._check_unchanged

    def rewritten_after_the_check(files, a, b):
        check(files, a, b)
        if (a, b) != (30, 35):  # (the read's check, not the opening's)
            return
        with open(path, "r+b") as f:  # in place, the same size: the map reads the new bytes
            f.write(np.zeros(100, np.uint16).tobytes())
        os.utime(path, ns=(1, 1))

    monkeypatch.setattr(corpus, "_check_unchanged", rewritten_after_the_check)
    fork = multiprocessing.get_context("fork")
    child_got = fork.Queue()
    with docs.stores[0].batch():  # (a batch of a loader, whose check after it is not the child's)
        child = fork.Process(
            target=_read_document_rewritten_during_its_copy, args=(docs, child_got)
        )
        child.start()
        copied = contextvars.copy_context()  # (a thread's context, copied in the batch)
    child.join(60)
    assert child_got.get(timeout=60) == ("refused", str(path))
    (np.arange(100, dtype=np.uint16) + 1).tofile(path)
    docs = token_corpus(path, index=[0, 10, 30, 60])
    thread_got: queues.Queue = queues.Queue()
    thread = threading.Thread(
        target=copied.run, args=(_read_document_rewritten_during_its_copy, docs, thread_got)
    )
    thread.start()
    thread.join(60)
    assert thread_got.get(timeout=60) == ("refused", str(path))


def test_a_state_of_documents_is_refused_by_the_documents_read_with_another_dtype(tmp_path):
    path = tmp_path / "c.bin"
    np.arange(40, dtype=np.uint16).tofile(path)
    index = [0, 9, 20, 31]
    saving = StreamLoader(token_corpus(path, dtype=np.uint16, index=index), batch_size=2, tbins=3)
    next(iter(saving))
    state = saving.state_dict()
    other = StreamLoader(token_corpus(path, dtype=np.int16, index=index), batch_size=2, tbins=3)
    with pytest.raises(ValueError, match="the streams' reader options"):
        other.load_state_dict(state)
    same = StreamLoader(token_corpus(path, dtype="<u2", index=index), batch_size=2, tbins=3)
    same.load_state_dict(state)
    assert [b.data.tolist() for b in same] == [b.data.tolist() for b in list(saving)[1:]]


def test_a_loader_copies_a_corpus_tables_tokens_straight_from_the_map(tmp_path, monkeypatch):
    import streamseq.io.corpus as corpus

    path = tmp_path / "c.bin"
    tokens = (np.arange(4000) % 500).astype(np.uint16)
    tokens.tofile(path)
    docs = token_corpus(path, index=np.arange(0, 4000, 10))
    reads = []
    read = corpus._Document._read
    monkeypatch.setattr(
        corpus._Document, "_read", lambda self, h, a, b: reads.append(a) or read(self, h, a, b)
    )
    batches = list(StreamLoader(docs, batch_size=8, tbins=16))
    assert reads == [0]  # (its first step, to learn the data; then the batch's copy only)
    plain = list(StreamLoader([tokens[a : a + 10] for a in range(0, 4000, 10)], 8, 16))
    assert all(np.array_equal(a.data, b.data) for a, b in zip(batches, plain, strict=True))
    listed = list(StreamLoader(list(docs), batch_size=8, tbins=16))  # (a list: reads checked)
    assert len(reads) >= len(docs)
    assert all(np.array_equal(a.data, b.data) for a, b in zip(listed, plain, strict=True))


def _read_with_the_file_cut_short_after_a_check(path, queue):
    """A loader over a corpus whose file is truncated just after a batch's check: what came."""
    import streamseq.io.corpus as corpus

    docs = token_corpus(path, index=np.arange(0, 1 << 17, 1 << 12))
    check, seen = corpus.CorpusFiles.check, []

    def cut_short_after_the_third(self):
        check(self)
        seen.append(1)
        if len(seen) == 5:  # (before the third batch: after its check, before its copy)
            with open(path, "r+b") as f:
                f.truncate(4096)

    corpus.CorpusFiles.check = cut_short_after_the_third
    got = 0
    try:
        for _ in StreamLoader(docs, batch_size=8, tbins=1024):
            got += 1
        queue.put(("read", got))
    except SourceError as e:
        queue.put(("refused", got, e.path, str(e)))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_file_cut_short_between_the_check_and_the_copy_is_an_error_not_a_killed_process(
    tmp_path,
):
    _refused_in_a_forked_child(tmp_path, _read_with_the_file_cut_short_after_a_check)


def _refused_in_a_forked_child(tmp_path, read):
    """Run ``read`` on a corpus file in a forked child: it lives, and its read is refused."""
    path = tmp_path / "c.bin"
    (np.arange(1 << 17) % 500 + 1).astype(np.uint16).tofile(path)  # (256 kB: 64 pages)
    queue = multiprocessing.get_context("fork").Queue()
    child = multiprocessing.get_context("fork").Process(target=read, args=(str(path), queue))
    child.start()
    child.join(60)
    assert child.exitcode == 0  # (not killed by a SIGBUS)
    kind, got, where, message = queue.get(timeout=10)
    assert kind == "refused" and got == 2 and where == str(path)
    assert "stream" in message and "steps" in message


def _read_without_the_compiled_copy_cut_short_after_a_check(path, queue):
    """As above, the compiled copy absent (a build without a compiler): what came."""
    from streamseq.gather import writer

    writer.fill = None  # (the numpy path: a copy not guarded against SIGBUS)
    _read_with_the_file_cut_short_after_a_check(path, queue)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_without_the_compiled_copy_a_file_cut_short_after_a_check_is_an_error_not_a_kill(
    tmp_path,
):
    _refused_in_a_forked_child(tmp_path, _read_without_the_compiled_copy_cut_short_after_a_check)


class _Keep:
    """A transform that keeps what it is given (a user's cache, a debugging list)."""

    def __init__(self):
        self.kept = []

    def __call__(self, steps, info):
        self.kept.append((steps, steps.tolist()))
        return steps


@pytest.mark.parametrize("pad", ["zeros", "pack"])
def test_what_a_transform_keeps_of_a_corpus_never_changes_with_the_file(tmp_path, pad):
    path = tmp_path / "c.bin"
    (np.arange(4000) % 500 + 1).astype(np.uint16).tofile(path)
    docs = token_corpus(path, index=np.arange(0, 4000, 100))
    keep = _Keep()
    list(StreamLoader(docs, batch_size=4, tbins=30, transform=keep, pad=pad))
    assert keep.kept
    with open(path, "r+b") as f:  # rewritten in place after the pass (then cut short)
        f.write(np.zeros(4000, np.uint16).tobytes())
    for steps, seen in keep.kept:  # (a view of the map would read the zeros, or SIGBUS)
        assert steps.tolist() == seen


def test_a_read_begun_in_a_batch_that_ends_before_its_copy_is_checked_after_it(
    tmp_path, monkeypatch
):
    import contextvars
    import threading

    import streamseq.io.corpus as corpus

    path = tmp_path / "c.bin"
    (np.arange(100, dtype=np.uint16) + 1).tofile(path)
    docs = token_corpus(path, index=[0, 10, 30, 60])
    docs[2][:1]  # (the map made)
    asked, ended = threading.Event(), threading.Event()
    batch_checks = corpus._batch_checks

    def the_batch_ends_meanwhile(files):  # (a thread of the batch's context, reading on)
        got = batch_checks(files)
        if threading.current_thread() is not threading.main_thread() and not asked.is_set():
            asked.set()
            assert ended.wait(60)
        return got

    monkeypatch.setattr(corpus, "_batch_checks", the_batch_ends_meanwhile)
    got = []

    def read():
        try:
            got.append(docs[2][:5].tolist())
        except SourceError as e:
            got.append(e.path)

    with docs.stores[0].batch():
        thread = threading.Thread(target=contextvars.copy_context().run, args=(read,))
        thread.start()
        assert asked.wait(60)
    docs.stores[0].check()  # (the batch's check after it: nothing changed yet)
    with open(path, "r+b") as f:  # then rewritten in place, before the thread's copy
        f.write(np.zeros(100, np.uint16).tobytes())
    ended.set()
    thread.join(60)
    assert got in ([[31, 32, 33, 34, 35]], [str(path)])  # never the zeros, unchecked


@pytest.mark.timeout(30, method="signal")
@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero"])
def test_an_index_that_is_not_a_regular_file_is_refused_not_waited_for(tmp_path, kind):
    path, where = tmp_path / "c.bin", tmp_path / "offsets.npy"
    np.arange(100, dtype=np.uint16).tofile(path)
    if kind == "fifo":
        os.mkfifo(where)  # (opened for reading, it waits for a writer: for ever)
    else:
        os.symlink("/dev/zero", where)
    with pytest.raises(SourceError, match="not a regular file") as e:
        token_corpus(path, dtype=np.uint16, index=where)
    assert e.value.path == str(where)


@pytest.mark.parametrize("eod", [-1, 65536, 70000, 3.5, float("nan"), "0"])
def test_an_eod_that_no_token_of_the_file_can_be_is_refused_naming_the_file(tmp_path, eod):
    # (a token of uint16 is never -1 nor 70000: the file was one document; 3.5 was cut
    # to 3), silently
    path = tmp_path / "c.bin"
    np.arange(10, dtype=np.uint16).tofile(path)
    with pytest.raises(ValueError, match=r"c.bin: eod"):
        token_corpus(path, eod=eod)
    assert token_corpus(path, eod=3.0).lengths.tolist() == [4, 6]
    assert token_corpus(path, eod=np.int64(65535)).lengths.tolist() == [10]


def test_a_flat_file_of_tokens_that_are_not_integers_is_refused(tmp_path):
    # (a .npy file of floats was refused; a flat one read as floats compared with eod)
    path = tmp_path / "c.bin"
    np.arange(10, dtype=np.uint16).tofile(path)
    with pytest.raises(SourceError, match=r"c.bin: .*integer tokens.*float32"):
        token_corpus(path, dtype=np.float32, eod=0)


def test_an_eod_given_as_a_numpy_or_torch_scalar_array_is_the_token_it_holds(tmp_path):
    # (a 0-d array, as the id a tokenizer gives through numpy or torch, was refused as
    # "no token of uint16 (0 to 65535)", 3 being one)
    path = tmp_path / "c.bin"
    np.arange(10, dtype=np.uint16).tofile(path)
    torch = pytest.importorskip("torch")
    for eod in (np.array(3), np.array(3, np.uint16), np.uint16(3), np.int64(3), torch.tensor(3)):
        assert token_corpus(path, eod=eod).lengths.tolist() == [4, 6], repr(eod)


@pytest.mark.parametrize("eod", [True, False, np.bool_(False), "0", 3.5, np.array([3])])
def test_an_eod_that_is_not_a_whole_number_is_named_so_not_out_of_range(tmp_path, eod):
    # (False was refused as "no token of uint16 (0 to 65535)", as if out of that range)
    path = tmp_path / "c.bin"
    np.arange(10, dtype=np.uint16).tofile(path)
    with pytest.raises(ValueError, match=r"c.bin: eod .* is not a whole number") as e:
        token_corpus(path, eod=eod)
    assert "0 to 65535" not in str(e.value)
