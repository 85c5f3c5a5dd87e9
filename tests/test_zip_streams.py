import functools
import os
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import streamseq
from streamseq import zip_streams
from streamseq.testing import check_continuity


def _streams(n):
    return {
        "frame": np.arange(n * 6, dtype=np.uint8).reshape(n, 2, 3),
        "state": np.arange(n, dtype=np.float32) / 2,
    }


def test_dict_steps_and_slices():
    parts = _streams(5)
    s = zip_streams(parts)
    assert len(s) == 5
    step = s[3]
    assert set(step) == {"frame", "state"}
    np.testing.assert_array_equal(step["frame"], parts["frame"][3])
    block = s[1:4]
    np.testing.assert_array_equal(block["state"], parts["state"][1:4])
    assert s[-1]["state"] == parts["state"][-1]
    assert s[4:10]["frame"].shape == (1, 2, 3) and s[7:9]["state"].shape == (0,)


def test_tuple_steps():
    a, b = np.arange(4), np.arange(8).reshape(4, 2)
    s = zip_streams((a, b))
    assert isinstance(s[0], tuple) and isinstance(s[1:3], tuple)
    np.testing.assert_array_equal(s[1:3][1], b[1:3])
    assert s[2][0] == 2 and np.array_equal(s[2][1], b[2])


def test_lengths_are_checked_naming_the_key():
    with pytest.raises(ValueError, match=r"'state' has 4 steps, 'frame' has 5"):
        zip_streams({"frame": np.zeros((5, 2)), "state": np.zeros(4)})
    with pytest.raises(ValueError, match=r"stream 2 has 1 steps, stream 0 has 2"):
        zip_streams([np.zeros(2), np.zeros(2), np.zeros(1)])
    with pytest.raises(ValueError, match="no stream"):
        zip_streams({})


def test_indexing_errors():
    s = zip_streams(_streams(3))
    with pytest.raises(IndexError):
        s[3]
    with pytest.raises(TypeError):
        s[1.5]
    with pytest.raises(ValueError, match="contiguous"):
        s[::2]


def test_pickles_with_its_streams():
    s = zip_streams(_streams(4))
    back = pickle.loads(pickle.dumps(s))
    assert len(back) == 4
    np.testing.assert_array_equal(back[1:3]["frame"], s[1:3]["frame"])
    assert "zip_streams({'frame'" in repr(s)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 12),
    a=st.integers(-15, 15),
    b=st.integers(-15, 15),
    as_tuple=st.booleans(),
)
def test_a_slice_is_the_slices_of_the_streams(n, a, b, as_tuple):
    parts = _streams(n)
    s = zip_streams(tuple(parts.values()) if as_tuple else parts)
    got = s[a:b]
    for i, (key, stream) in enumerate(parts.items()):
        np.testing.assert_array_equal(got[i if as_tuple else key], stream[a:b])
    if n:
        got = s[a % n]
        for i, (key, stream) in enumerate(parts.items()):
            np.testing.assert_array_equal(got[i if as_tuple else key], stream[a % n])


@pytest.mark.parametrize("workers", [0, 2])
def test_the_loader_reads_dict_steps(workers):
    lengths = [5, 9, 3, 7]
    streams = [zip_streams(_streams(n)) for n in lengths]
    loader = streamseq.StreamLoader(streams, 2, 4, num_workers=workers)
    batches = list(loader)
    check_continuity(batches, lengths, sources=streams)
    assert set(batches[0].data) == {"frame", "state"}


class Short:
    """A stream whose len() says more steps than its reads give."""

    def __init__(self, n, has):
        self.n, self.has = n, has

    def __len__(self):
        return self.n

    def __getitem__(self, key):
        return np.arange(self.has)[key]


class Opener:
    """A picklable opener that counts its calls (in this process)."""

    calls = 0

    def __init__(self, n):
        self.n = n

    def __call__(self):
        Opener.calls += 1
        return np.arange(self.n) * 10


def test_a_dict_of_arrays_is_a_part_of_its_arrays_length():
    parts = {"obs": {"x": np.zeros(9), "y": np.ones((9, 2))}, "act": np.arange(9)}
    s = zip_streams(parts)
    assert len(s) == 9
    assert s[2:5]["obs"]["y"].shape == (3, 2) and s[4]["obs"]["x"] == 0
    with pytest.raises(ValueError, match=r"'obs': 'y' has 2 steps, 'x' has 9"):
        zip_streams({"obs": {"x": np.zeros(9), "y": np.ones(2)}, "act": np.arange(9)})
    with pytest.raises(ValueError, match=r"'act' has 9 steps, 'obs' has 4"):
        zip_streams({"obs": {"x": np.zeros(4)}, "act": np.arange(9)})


def test_an_opener_part_is_probed_or_declared_and_opened_where_it_is_read():
    Opener.calls = 0
    s = zip_streams({"v": Opener(9), "label": np.arange(9)})
    assert len(s) == 9 and Opener.calls == 1  # probed once
    back = pickle.loads(pickle.dumps(s))
    assert back[3:5]["v"].tolist() == [30, 40] and back[2]["v"] == 20
    Opener.calls = 0
    declared = zip_streams({"v": Opener(9), "label": np.arange(9)}, length=9)
    assert len(declared) == 9 and Opener.calls == 0  # not probed
    assert declared[7:9]["v"].tolist() == [70, 80] and Opener.calls == 1
    with pytest.raises(ValueError, match=r"'v' has 6 steps, 'label' has 9"):
        zip_streams({"label": np.arange(9), "v": Opener(6)})
    with pytest.raises(ValueError, match=r"'label' has 9 steps, the declared length is 6"):
        zip_streams({"v": Opener(6), "label": np.arange(9)}, length=6)


def test_a_part_that_reads_short_is_named_with_the_steps():
    s = zip_streams({"a": np.arange(9), "b": Short(9, 6)})
    assert s[0:6]["b"].tolist() == list(range(6))
    with pytest.raises(ValueError, match=r"zip_streams: 'b' \(.*\) gave 2 steps for steps 4:9"):
        s[4:9]
    short = zip_streams({"a": np.arange(9), "v": Opener(6)}, length=9)  # declared wrong
    with pytest.raises(ValueError, match=r"'v' .*declared length 9 but it has 6 steps"):
        short[0:2]
    loader = streamseq.StreamLoader([s], batch_size=1, tbins=3)
    with pytest.raises(streamseq.StreamError, match=r"stream 0.*'b'.*steps 6:9"):
        list(loader)


def test_declared_lengths_are_checked_against_the_parts():
    s = zip_streams({"a": np.arange(9), "b": np.arange(9)})
    with pytest.raises(streamseq.StreamError, match="declared length 6 but the stream has 9"):
        streamseq.StreamLoader([s], batch_size=1, tbins=3, lengths=[6])
    loader = streamseq.StreamLoader([s], batch_size=1, tbins=3, lengths=[9])
    assert sum(int(b.valid.sum()) for b in loader) == 9


def test_zipped_tables_are_named_without_making_a_zip_per_stream():
    from streamseq import StreamTable
    from streamseq.read.ref import identity

    made = []

    def piece(length):
        made.append(length)
        return np.zeros(length)

    # (a table without identities makes its streams to name them, zipped or not)
    table = StreamTable(piece, np.full(1000, 3), step_spec=(np.float64, ()), identities="p")
    zipped = zip_streams({"a": table, "b": table})
    made.clear()
    assert len(zipped.identities.digest()) == 64 and not made
    assert list(zipped.identities[:2]) == [identity(zipped[0])] * 2  # as a list names them


def _docs(folder, name, shift=0):
    """Eight documents of 6 tokens of one file (``shift`` added to every token)."""
    from streamseq.io import token_corpus

    path = str(folder / name)
    (np.arange(48, dtype=np.uint16) + shift).tofile(path)
    return token_corpus(path, index=np.arange(0, 48, 6))


def _refused(saving, resuming):
    """Whether a loader of ``resuming`` refuses the state of one of ``saving``."""
    return _refusal(saving, resuming) is not None


def _refusal(saving, resuming):
    """The error of a loader of ``resuming`` refusing the state of one of ``saving``, or None."""
    loader = streamseq.StreamLoader(saving, batch_size=2, tbins=3)
    next(iter(loader))
    state = loader.state_dict()
    other = streamseq.StreamLoader(resuming, batch_size=2, tbins=3)
    try:
        other.load_state_dict(state)
    except ValueError as e:
        assert "this state was made by another plan" in str(e)
        return e
    return None


def test_a_state_of_zips_is_refused_by_zips_of_other_streams_of_equal_lengths(tmp_path):
    a, b = _docs(tmp_path, "a.bin"), _docs(tmp_path, "b.bin", 100)
    # tables zipped: another file, another key order, other documents of one file
    assert _refused(zip_streams({"x": a, "y": a}), zip_streams({"x": a, "y": b}))
    assert _refused(zip_streams({"x": a, "y": b}), zip_streams({"x": b, "y": a}))
    assert _refused(zip_streams({"x": a, "y": b}), zip_streams({"y": a, "x": b}))
    assert _refused(zip_streams((a[:4],)), zip_streams((a[4:],)))
    assert _refused(zip_streams((a[:4], a[4:])), zip_streams((a[4:], a[:4])))
    # zips of single streams, as a list
    assert _refused(
        [zip_streams((a[i],)) for i in range(4)], [zip_streams((a[i + 4],)) for i in range(4)]
    )
    assert _refused(
        [zip_streams({"x": a[i]}) for i in range(4)], [zip_streams({"x": b[i]}) for i in range(4)]
    )
    # the same zips accept it, made as a table or as a list
    assert not _refused(
        zip_streams({"x": a[:4], "y": b[:4]}), zip_streams({"x": a[:4], "y": b[:4]})
    )
    assert not _refused(
        zip_streams({"x": a[:4], "y": b[:4]}),
        [zip_streams({"x": a[i], "y": b[i]}) for i in range(4)],
    )
    plain = [zip_streams((np.arange(6), np.arange(6.0))) for _ in range(4)]
    assert not _refused(plain, [zip_streams((np.ones(6), np.ones(6))) for _ in range(4)])


#: states saved before zips were named by their parts (and episodes by their first row),
#: and the batches they resumed to there (how each was made: its ``made_by``)
OLD_STATES = os.path.join(
    os.path.dirname(__file__), "data", "states_without_zip_or_episode_names.json"
)


@pytest.mark.parametrize("case", ["zip_tables", "zip_list"])
def test_a_state_of_zips_saved_before_they_were_named_by_their_parts_still_loads(
    case, tmp_path, monkeypatch
):
    import json

    from streamseq.io import token_corpus

    monkeypatch.chdir(tmp_path)
    np.arange(80, dtype=np.uint16).tofile("c.bin")
    docs = token_corpus("c.bin", index=np.arange(0, 80, 10))
    with open(OLD_STATES) as f:
        saved = json.load(f)[case]
    assert "offsets" not in saved["state"]["plan"]
    if case == "zip_tables":
        streams = zip_streams({"a": docs[::2], "b": docs[1::2]})
    else:
        streams = [zip_streams((docs[i], docs[i + 4])) for i in range(4)]
    loader = streamseq.StreamLoader(streams, batch_size=2, tbins=3, shuffle=True, seed=3)
    assert "offsets" in loader.state_dict()["plan"]  # (states saved now name the parts)
    loader.load_state_dict(saved["state"])
    rest = list(loader)
    assert [b.stream.tolist() for b in rest] == [b["stream"] for b in saved["rest"]]
    assert [b.step.tolist() for b in rest] == [b["step"] for b in saved["rest"]]
    assert [b.reset.tolist() for b in rest] == [b["reset"] for b in saved["rest"]]
    data = [b["data"] for b in saved["rest"]]
    if case == "zip_tables":
        assert [{k: v.tolist() for k, v in b.data.items()} for b in rest] == data
    else:
        assert [[v.tolist() for v in b.data] for b in rest] == data


def test_zips_of_manifest_rows_are_named_by_their_files(tmp_path):
    import pyarrow as pa

    from streamseq.io import manifest

    for name in "ab":
        np.arange(40, dtype=np.uint16).tofile(tmp_path / f"{name}.bin")

    def rows(names):
        paths = [str(tmp_path / f"{n}.bin") for n in names]
        table = pa.table({"path": paths, "length": [40] * len(paths)})
        return zip_streams({"x": manifest(table, "tokens", dtype="uint16")})

    assert _refused(rows("ab"), rows("ba"))
    assert not _refused(rows("ab"), rows("ab"))


def _token_files(folder, lengths=(6, 9, 7)):
    """Token files of ``lengths`` (uint16 0, 1, ...): read with any 2-byte dtype, one length."""
    paths = []
    for i, n in enumerate(lengths):
        paths.append(str(folder / f"z{i}.bin"))
        np.arange(n, dtype=np.uint16).tofile(paths[-1])
    return paths


def test_a_state_of_zips_is_refused_by_zips_of_the_same_files_read_another_way(tmp_path):
    import pyarrow as pa

    from streamseq.io import manifest, tokens

    paths = _token_files(tmp_path)
    rows = pa.table({"path": paths, "length": [6, 9, 7]})

    def listed(dtype, opener=False, keys=("x", "y")):
        parts = [
            (functools.partial(tokens, p, "<u2"), functools.partial(tokens, p, dtype))
            if opener
            else (tokens(p, "<u2"), tokens(p, dtype))
            for p in paths
        ]
        return [zip_streams(dict(zip(keys, z, strict=True))) for z in parts]

    def tabled(dtype, keys=("x", "y")):
        tables = (manifest(rows, "tokens", dtype="<u2"), manifest(rows, "tokens", dtype=dtype))
        return zip_streams(dict(zip(keys, tables, strict=True)))

    for make in (listed, tabled, functools.partial(listed, opener=True)):
        assert _refused(make("<u2"), make(">u2"))
        assert _refused(make(">i2"), make("<i2"))
        assert not _refused(make("<i2"), make("<i2"))
    for make in (listed, tabled):  # (an opener's text arguments name it: not these)
        assert not _refused(make("<u2"), make("uint16"))  # (one dtype, spelled otherwise)
    assert _refused(listed("<u2"), listed("<i2", keys=("y", "x")))
    # a zip of tables and the list of its zips name the same streams, read the same way
    assert not _refused(tabled("<i2"), listed("<i2")) and not _refused(
        listed(">u2"), tabled(">u2")
    )
    assert _refused(tabled("<i2"), listed("<u2"))
    message = str(_refusal(tabled("<u2"), tabled("<i2")))
    assert "reader options" in message and "tokens(dtype=<i2)" in message
