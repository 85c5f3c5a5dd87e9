"""io.manifest: a Parquet or CSV table of files with their lengths, as a table of streams."""

import hashlib
import os
import pickle
import pickletools

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from helpers import assert_same
from hypothesis import given, settings
from hypothesis import strategies as st
from media import write_audio, write_video

from streamseq import StreamLoader, StreamTable
from streamseq.errors import SourceError, StreamError
from streamseq.io import audio, manifest, tokens, video
from streamseq.io.remote import is_url
from streamseq.plan.identities import Identities
from streamseq.read.ref import identity


def write(table, path):
    """Write a pyarrow table as Parquet or CSV, by the extension of ``path``."""
    if str(path).endswith(".csv"):
        pacsv.write_csv(table, path)
    else:
        pq.write_table(table, path)
    return path


@pytest.fixture(scope="module")
def token_files(tmp_path_factory):
    """Five flat uint16 token files of 0 to 70 tokens, in a folder ``data``."""
    folder = tmp_path_factory.mktemp("tokens")
    (folder / "data").mkdir()
    names, lengths = [], [13, 0, 70, 41, 7]
    for i, n in enumerate(lengths):
        name = f"data/doc{i}.bin"
        (np.arange(n, dtype=np.uint16) + 100 * i).tofile(folder / name)
        names.append(name)
    return folder, names, lengths


@pytest.fixture(scope="module")
def media_files(tmp_path_factory):
    """Two small videos and two small audio files."""
    folder = tmp_path_factory.mktemp("media")
    videos = [write_video(folder / f"v{i}.mp4", n) for i, n in enumerate([9, 14])]
    sounds = [write_audio(folder / f"a{i}.wav", n) for i, n in enumerate([5000, 9000])]
    return folder, videos, sounds


def batches(streams, **kwargs):
    return list(StreamLoader(streams, 2, 8, **kwargs))


@pytest.mark.parametrize("ext", ["parquet", "csv"])
def test_tokens_manifest_equals_the_list_of_the_same_streams(token_files, ext):
    folder, names, lengths = token_files
    where = write(pa.table({"path": names, "length": lengths}), folder / f"m.{ext}")
    table = manifest(where, "tokens", dtype=np.uint16)
    assert isinstance(table, StreamTable) and len(table) == 5
    assert table.lengths.tolist() == lengths and table.step_spec() == (np.dtype(np.uint16), ())
    paths = [os.path.join(folder, n) for n in names]
    assert list(table.identities) == paths
    same = [tokens(p, np.uint16) for p in paths]
    for shuffle in (False, True):
        assert_same(batches(table, shuffle=shuffle), batches(same, shuffle=shuffle))
    a, b = StreamLoader(table, 2, 8, shuffle=True), StreamLoader(same, 2, 8, shuffle=True)
    next(iter(a)), next(iter(b))
    assert pickle.dumps(a.state_dict()) == pickle.dumps(b.state_dict())
    resumed = StreamLoader(same, 2, 8, shuffle=True)
    resumed.load_state_dict(a.state_dict())  # a manifest's state loads on the list
    assert_same(list(resumed), list(StreamLoader(table, 2, 8, shuffle=True))[1:])


def test_video_and_audio_manifests(media_files):
    folder, videos, sounds = media_files
    rel = [os.path.basename(p) for p in videos]
    where = write(pa.table({"path": rel, "length": [9, 14]}), folder / "videos.parquet")
    table = manifest(where, "video", size=(16, 24))
    assert table.step_spec() == (np.dtype(np.uint8), (16, 24, 3))
    same = [video(p, size=(16, 24)) for p in videos]
    assert list(table.identities) == [str(p) for p in videos]
    assert_same(batches(table, num_workers=2), batches(same))
    frames = [1 + (5000 - 1) // 1000, 1 + (9000 - 1) // 1000]
    where = write(
        pa.table({"path": [str(p) for p in sounds], "length": frames}), folder / "sound.csv"
    )
    table = manifest(where, "audio", frame=1000, layout=1)
    assert table.step_spec() == (np.dtype(np.float32), (1000, 1))
    assert_same(batches(table), batches([audio(p, frame=1000, layout=1) for p in sounds]))


def test_video_windows_are_seconds(media_files):
    folder, videos, _ = media_files
    path = str(videos[1])
    rows = pa.table(
        {"path": [path, path], "length": [5, 4], "start": [0.0, 0.2], "stop": [0.2, None]}
    )
    table = manifest(rows, "video")
    whole = video(path)[:]
    np.testing.assert_array_equal(table[0][:], whole[:5])
    assert len(video(path, start=0.2)) == 9  # the row declares 4: the read says so
    with pytest.raises(SourceError, match="declares 4 steps, the file has 9"):
        table[1][:1]


def test_step_ranges_of_one_file(token_files):
    folder, names, _ = token_files
    rows = pa.table({"path": [names[2]] * 3, "length": [10, 30, 30], "start": [0, 10, 40]})
    table = manifest(rows, "tokens", root=folder, dtype=np.uint16)
    whole = np.arange(70) + 200
    assert [t[:].tolist() for t in table] == [
        whole[:10].tolist(),
        whole[10:40].tolist(),
        whole[40:70].tolist(),
    ]
    out = np.zeros(5, np.uint16)
    assert table[1].read_into(2, 7, out) in (5, None)
    bad = pa.table({"path": [names[2]], "length": [30], "start": [50]})
    with pytest.raises(SourceError, match=r"declares steps 50:80 of the file, which has 70"):
        manifest(bad, "tokens", root=folder, dtype=np.uint16)[0][:]


def test_paths_join_the_manifest_folder_and_may_leave_it(token_files, tmp_path):
    folder, names, lengths = token_files
    sub = folder / "lists"
    sub.mkdir(exist_ok=True)
    rows = pa.table({"path": ["../" + names[0], str(folder / names[3])], "length": [13, 41]})
    table = manifest(write(rows, sub / "m.parquet"), "tokens", dtype=np.uint16)
    assert list(table.identities) == [os.path.join(sub, "../" + names[0]), str(folder / names[3])]
    assert table[0][:].tolist() == list(range(13))


def test_a_wrong_declared_length_names_the_stream_the_file_and_the_steps(token_files):
    folder, names, lengths = token_files
    rows = pa.table({"path": names, "length": [13, 0, 71, 41, 7]})
    table = manifest(rows, "tokens", root=folder, dtype=np.uint16)
    with pytest.raises(StreamError) as caught:
        list(StreamLoader(table, 2, 8))
    text = str(caught.value)
    assert "stream 2" in text and "doc2.bin" in text and "declares 71 steps" in text
    assert caught.value.steps is not None
    # without the check, the declared length is believed until a read finds fewer steps
    unchecked = manifest(rows, "tokens", root=folder, dtype=np.uint16, check_length=False)
    with pytest.raises(StreamError, match="stream 2"):
        list(StreamLoader(unchecked, 2, 8))


@pytest.mark.parametrize(
    ("columns", "kwargs", "error", "match"),
    [
        ({"file": ["a"], "length": [1]}, {}, SourceError, "no column 'path'"),
        ({"path": ["a"], "steps": [1]}, {}, SourceError, "no column 'length'"),
        ({"path": ["a", "b"], "length": [1, -2]}, {}, SourceError, r"row 1 \('b'\): negative"),
        ({"path": ["a", "b"], "length": [1.0, 2.5]}, {}, SourceError, "2.5 is not a whole"),
        ({"path": ["a", "b"], "length": [1, None]}, {}, SourceError, "row 1.*no length"),
        ({"path": ["a", None], "length": [1, 2]}, {}, SourceError, "row 1.*no path"),
        ({"path": ["a"], "length": ["x"]}, {}, SourceError, "not whole numbers"),
        ({"path": ["a"], "length": [3], "start": [5], "stop": [2]}, {}, SourceError, "5.0 > stop"),
        ({"path": ["a"], "length": [3], "start": [1], "stop": [9]}, {}, SourceError, "are 8"),
        ({"path": ["a"], "length": [1]}, {"kind": "pictures"}, ValueError, "unknown kind"),
        ({"path": ["a"], "length": [1]}, {"sizes": (2, 2)}, TypeError, "no option"),
        ({"path": ["a"], "length": [1]}, {"length": 3}, ValueError, "columns"),
        ({"path": ["a"], "length": [1]}, {"kind": "events"}, TypeError, "needs the options"),
        (
            {"path": pa.array([], pa.string()), "length": pa.array([], pa.int64())},
            {},
            SourceError,
            "no rows",
        ),
    ],
)
def test_bad_manifests_are_refused_when_read(tmp_path, columns, kwargs, error, match):
    kind = kwargs.pop("kind", "tokens")
    where = write(pa.table(columns), tmp_path / "m.parquet")
    with pytest.raises(error, match=match) as caught:
        manifest(where, kind, **kwargs)
    if error is SourceError:
        assert "m.parquet" in str(caught.value)


def test_csv_paths_that_look_like_numbers_stay_paths(token_files, tmp_path):
    folder, names, _ = token_files
    os.symlink(folder / names[0], tmp_path / "0001")
    (tmp_path / "m.csv").write_text("path,length\n0001,13\n")
    table = manifest(tmp_path / "m.csv", "tokens", dtype=np.uint16)
    assert table.identities[0] == os.path.join(tmp_path, "0001")
    assert table[0][:].tolist() == list(range(13))


def test_unreadable_manifest_files(tmp_path):
    with pytest.raises(SourceError, match="no such manifest"):
        manifest(tmp_path / "none.parquet", "tokens")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(SourceError, match="cannot read the manifest as parquet"):
        manifest(tmp_path / "junk.parquet", "tokens")
    with pytest.raises(ValueError, match="format"):
        manifest(tmp_path / "junk.parquet", "tokens", format="json")


def test_no_secret_in_identities_reprs_or_errors(tmp_path):
    url = "https://me:hunter2@example.invalid/clips/a.mp4?X-Amz-Signature=tok3n"
    rows = pa.table({"path": [url, "b.mp4"], "length": [3, -1]})
    with pytest.raises(SourceError) as caught:
        manifest(rows, "video", storage_options={"key": "s3cr3t"})
    table = manifest(rows.slice(0, 1), "video", storage_options={"key": "s3cr3t"})
    texts = [str(caught.value), repr(table), repr(table[0]), list(table.identities)[0]]
    texts.append(repr(table.make))
    for text in texts:
        assert "hunter2" not in text and "tok3n" not in text and "s3cr3t" not in text, text
    assert table.identities[0] == identity(table[0])  # as for a list of io.video(url)
    assert table.identities[0].startswith("https://***@example.invalid/clips/a.mp4")
    assert table[0].path == url  # the reader gets the whole URL


def test_a_large_manifest_pickles_to_its_arrays(tmp_path):
    n = 100_000
    paths = pa.array([f"clips/{i:06d}.mp4" for i in range(n)])
    rows = pa.table({"path": paths, "length": np.arange(n) % 500 + 1})
    table = manifest(write(rows, tmp_path / "m.parquet"), "video", size=(8, 8))
    blob = pickle.dumps(table, protocol=5)
    arrays = table.lengths.nbytes * 5 + len(table[0].path.encode()) * n + n  # columns, paths
    assert len(blob) < arrays + 10_000
    strings = sum(op.name.endswith("UNICODE") for op, _, _ in pickletools.genops(blob))
    assert strings < 50  # names and options, never a path per row
    back = pickle.loads(blob)
    assert back.identities.digest() == Identities.of(list(table.identities)).digest()
    assert back[n - 1].path == os.path.join(tmp_path, f"clips/{n - 1:06d}.mp4")
    sub = table[10:20]
    assert list(sub.identities) == [
        os.path.join(tmp_path, f"clips/{i:06d}.mp4") for i in range(10, 20)
    ]


@settings(max_examples=25, deadline=None)
@given(
    names=st.lists(
        st.text(st.characters(blacklist_categories=["Cs", "Cc"]), min_size=1, max_size=6),
        min_size=1,
        max_size=8,
    ),
    data=st.data(),
)
def test_identities_of_any_selection_hash_as_the_list(names, data):
    rows = pa.table({"path": names, "length": [1] * len(names)})
    table = manifest(rows, "tokens")  # (any path: no root to stay in)
    index = data.draw(st.lists(st.integers(0, len(names) - 1), max_size=10))
    for ids in (
        table.identities,
        table.identities[np.array(index, np.int64)],
        table.identities[::-1],
    ):
        expected = list(ids)
        assert expected == [ids[i] for i in range(len(ids))]
        assert ids.digest() == Identities.of(expected).digest()
    assert list(table.identities) == [
        n if n.startswith("/") or is_url(n) else os.path.join(os.getcwd(), n) for n in names
    ]


def test_events_manifest(tmp_path):
    from streamseq.io import EVENT_DTYPE, events

    paths, lengths = [], []
    for i, n in enumerate([30, 80]):
        ev = np.zeros(n, EVENT_DTYPE)
        ev["t"] = np.arange(n) * 7
        ev["x"], ev["y"], ev["p"] = np.arange(n) % 4, i, np.arange(n) % 2
        np.save(tmp_path / f"e{i}.npy", ev)
        paths.append(f"e{i}.npy")
        lengths.append(len(events(tmp_path / paths[-1], window_us=50, height=2, width=4)))
    where = write(pa.table({"path": paths, "length": lengths}), tmp_path / "events.parquet")
    table = manifest(where, "events", window_us=50, height=2, width=4)
    assert table.step_spec() == (np.dtype(np.float32), (2, 2, 4))
    same = [events(tmp_path / p, window_us=50, height=2, width=4) for p in paths]
    assert_same(batches(table), batches(same))


@pytest.mark.parametrize(
    "path",
    [
        "../../../../../../etc/passwd",
        "sub/../../outside.bin",
        "..",
        "/etc/passwd",
        "https://user:pw@example.invalid/a.bin?token=s3cr3t",
    ],
)
def test_a_root_keeps_every_row_inside_it(token_files, path):
    folder, names, _ = token_files
    rows = pa.table({"path": [names[0], path], "length": [13, 10]})
    with pytest.raises(SourceError, match=r"row 1 .*outside the root") as info:
        manifest(rows, "tokens", root=folder, dtype=np.uint8)
    text = str(info.value)
    assert "pw" not in text and "s3cr3t" not in text
    inside = pa.table({"path": [names[0], str(folder / names[1]), "sub/./..x"], "length": [1] * 3})
    assert list(manifest(inside, "tokens", root=folder, dtype=np.uint8).identities) == [
        str(folder / names[0]),
        str(folder / names[1]),
        os.path.join(folder, "sub/./..x"),
    ]


def test_a_column_given_twice_names_the_manifest(token_files):
    folder, names, _ = token_files
    where = folder / "twice.csv"
    where.write_text(f"path,length,length\n{names[0]},13,5\n")
    with pytest.raises(SourceError, match=r"twice.csv: .*column 'length' 2 times"):
        manifest(where, "tokens", dtype=np.uint16)


@pytest.mark.parametrize("length", ["1e300", "99999999999999999999", "inf", "9.3e18"])
def test_a_length_past_int64_is_refused_as_too_large(token_files, length):
    folder, names, _ = token_files
    where = folder / "huge.csv"
    where.write_text(f"path,length\n{names[0]},{length}\n")
    with pytest.raises(SourceError, match=r"row 0 .*length .* (too large|whole number)"):
        manifest(where, "tokens", dtype=np.uint16)


def test_a_file_shorter_than_declared_without_check_says_what_it_has(token_files):
    folder, names, lengths = token_files
    rows = pa.table({"path": [names[0]], "length": [lengths[0] + 5]})
    table = manifest(rows, "tokens", root=folder, dtype=np.uint16, check_length=False)
    with pytest.raises(StreamError) as info:
        list(StreamLoader(table, batch_size=1, tbins=4))
    text = str(info.value)
    assert f"declares {lengths[0] + 5} steps" in text and names[0] in text
    assert f"has {lengths[0]}" in text and "steps" in text


def test_a_path_with_a_nul_character_names_its_row():
    rows = pa.table({"path": ["a.bin", "b\0c.bin"], "length": [1, 2]})
    with pytest.raises(SourceError, match=r"row 1 .*NUL"):
        manifest(rows, "tokens", dtype=np.uint8)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_token_file_truncated_under_the_loader_is_an_error(tmp_path, workers):
    paths = [str(tmp_path / f"t{k}.bin") for k in range(2)]
    for p in paths:
        (np.arange(100, dtype=np.uint16) + 1).tofile(p)
    table = manifest(pa.table({"path": paths, "length": [100, 100]}), "tokens", dtype=np.uint16)
    it = iter(StreamLoader(table, batch_size=2, tbins=5, num_workers=workers))
    next(it)
    with open(paths[1], "r+b") as f:
        f.truncate(40)
    error = None
    try:
        for batch in it:  # what workers read before the truncation is right; never zeros
            assert (np.asarray(batch.data)[np.asarray(batch.valid)] != 0).all()
    except SourceError as e:
        error = e
    if workers == 0:
        assert error is not None
    if error is not None:
        assert "changed" in str(error) and error.path == paths[1] and error.steps is not None


def test_a_state_of_some_step_ranges_of_a_file_is_refused_by_other_ranges(token_files):
    folder, names, _ = token_files
    rows = pa.table({"path": [names[2]] * 6, "length": [10] * 6, "start": np.arange(0, 60, 10)})
    table = manifest(rows, "tokens", root=folder, dtype=np.uint16)
    even = StreamLoader(table[::2], batch_size=2, tbins=5)
    next(iter(even))
    state = even.state_dict()
    odd = StreamLoader(table[1::2], batch_size=2, tbins=5)
    with pytest.raises(ValueError, match="sources"):
        odd.load_state_dict(state)
    for same in (table[[0, 2, 4]], list(table[::2])):  # made another way, or a list
        again = StreamLoader(same, batch_size=2, tbins=5)
        assert again.spec.fingerprint == even.spec.fingerprint
        again.load_state_dict(state)
    with pytest.raises(ValueError, match="sources"):
        StreamLoader(list(table[1::2]), batch_size=2, tbins=5).load_state_dict(state)
    # rows without a start (whole files, or a file's first steps) are named as before
    plain = manifest(
        pa.table({"path": names, "length": [13, 0, 70, 41, 7]}),
        "tokens",
        root=folder,
        dtype=np.uint16,
    )
    assert plain.identities.offsets is None
    assert "offsets" not in StreamLoader(plain, 2, 8).state_dict()["plan"]


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_any_two_selections_of_ranges_of_a_file_refuse_each_others_state(token_files, data):
    folder, names, _ = token_files
    starts = np.arange(0, 36, 4)  # nine ranges of 4 steps of one file: told apart by place
    rows = pa.table({"path": [names[2]] * 9, "length": [4] * 9, "start": starts})
    table = manifest(rows, "tokens", root=folder, dtype=np.uint16)
    pick = st.lists(st.integers(0, 8), min_size=1, max_size=4, unique=True)
    a, b = data.draw(pick), data.draw(pick)
    saving = StreamLoader(table[a], batch_size=1, tbins=2)
    next(iter(saving))
    state = saving.state_dict()
    if a != b:
        with pytest.raises(ValueError, match="this state was made by another plan"):
            StreamLoader(table[b], batch_size=1, tbins=2).load_state_dict(state)
    order = np.array(data.draw(st.permutations(range(9))))
    same = manifest(rows, "tokens", root=folder, dtype=np.uint16)[order][np.argsort(order)[a]]
    for again in (same, list(same)):
        StreamLoader(again, batch_size=1, tbins=2).load_state_dict(state)


def test_a_state_of_ranges_saved_without_offsets_still_loads(token_files):
    folder, names, _ = token_files
    rows = pa.table({"path": [names[2]] * 6, "length": [10] * 6, "start": np.arange(0, 60, 10)})
    table = manifest(rows, "tokens", root=folder, dtype=np.uint16)
    loader = StreamLoader(table[::2], batch_size=2, tbins=5, shuffle=True)
    next(iter(loader))
    state = loader.state_dict()
    # as states were saved before ranges were named by their place: the fingerprint of
    # the key without offsets, by the rule of that time
    plan = {k: v for k, v in state["plan"].items() if k != "offsets"}
    older = dict(state, plan=plan)
    older["fingerprint"] = hashlib.sha256(repr(sorted(plan.items())).encode()).hexdigest()[:16]
    again = StreamLoader(table[::2], batch_size=2, tbins=5, shuffle=True)
    again.load_state_dict(older)
    assert_same(list(again), list(StreamLoader(table[::2], 2, 5, shuffle=True))[1:])
    with pytest.raises(ValueError, match="fingerprint"):
        again.load_state_dict(dict(older, fingerprint=state["fingerprint"]))


def test_a_state_of_a_video_window_is_refused_by_another_window_of_the_file(media_files):
    folder, videos, _ = media_files
    path = str(videos[1])
    rows = pa.table(
        {"path": [path] * 2, "length": [5, 5], "start": [0.0, 0.2], "stop": [0.2, 0.4]}
    )
    table = manifest(rows, "video")
    first = StreamLoader(table[[0]], batch_size=1, tbins=2)
    next(iter(first))
    state = first.state_dict()
    with pytest.raises(ValueError, match="sources"):
        StreamLoader(table[[1]], batch_size=1, tbins=2).load_state_dict(state)
    for same in (manifest(rows, "video")[:1], list(table[:1])):
        StreamLoader(same, batch_size=1, tbins=2).load_state_dict(state)


def test_a_state_of_token_rows_is_refused_by_the_rows_read_with_another_dtype(tmp_path):
    path = str(tmp_path / "t.bin")
    np.arange(80, dtype=np.uint16).tofile(path)
    rows = pa.table({"path": [path] * 2, "length": [10, 10], "start": [0, 10], "stop": [10, 20]})
    saving = StreamLoader(manifest(rows, "tokens", dtype="uint16"), batch_size=2, tbins=3)
    next(iter(saving))
    state = saving.state_dict()
    other = StreamLoader(manifest(rows, "tokens", dtype="int8"), batch_size=2, tbins=3)
    with pytest.raises(ValueError, match="this state was made by another plan"):
        other.load_state_dict(state)


def test_a_state_of_video_rows_is_refused_by_the_rows_read_at_another_size(tmp_path):
    path = str(write_video(tmp_path / "v.mp4", 12))
    rows = pa.table({"path": [path, path], "length": [12, 12]})
    saving = StreamLoader(manifest(rows, "video", size=(48, 64)), batch_size=2, tbins=3)
    next(iter(saving))
    state = saving.state_dict()
    # (``format`` is the manifest file's own: a manifest reads its videos as rgb24)
    for options in ({"size": (24, 32)}, {"size": (48, 64), "fps": 12.5}):
        other = StreamLoader(manifest(rows, "video", **options), batch_size=2, tbins=3)
        with pytest.raises(ValueError, match="reader options") as raised:
            other.load_state_dict(state)
        assert "v.mp4" in str(raised.value)  # (the files named)
    same = StreamLoader(manifest(rows, "video", size=(48, 64), threads=2), batch_size=2, tbins=3)
    same.load_state_dict(state)  # (threads change no step)
    assert_same(list(same), list(saving)[1:])


def test_a_state_of_rows_at_a_url_is_refused_with_the_credentials_hidden(tmp_path):
    url = "https://user:s3cr3t@example.com/t.bin?token=t0k3n"
    rows = pa.table({"path": [url] * 2, "length": [10, 10], "start": [0, 10], "stop": [10, 20]})
    saving = StreamLoader(
        manifest(rows, "tokens", dtype="uint16", storage_options={"key": "k3y"}),
        batch_size=2,
        tbins=3,
    )
    state = saving.state_dict()
    text = repr(state)
    other = StreamLoader(
        manifest(rows, "tokens", dtype="int16", storage_options={"key": "k3y"}),
        batch_size=2,
        tbins=3,
    )
    with pytest.raises(ValueError, match="reader options") as raised:
        other.load_state_dict(state)
    text += str(raised.value)
    for secret in ("s3cr3t", "t0k3n", "k3y"):
        assert secret not in text
    # the same rows with other credentials are the same streams
    again = manifest(rows, "tokens", dtype="uint16", storage_options={"key": "other"})
    StreamLoader(again, batch_size=2, tbins=3).load_state_dict(state)


#: token dtypes of two bytes: the same files read with any of them have the same lengths
TWO_BYTES = ["<u2", "<i2", ">u2", ">i2", "<f2"]


@settings(max_examples=15, deadline=None)
@given(
    a=st.sampled_from(TWO_BYTES),
    b=st.sampled_from(TWO_BYTES),
    listed=st.booleans(),
    ranges=st.booleans(),
    saved_at=st.integers(1, 4),
)
def test_a_state_is_refused_by_streams_read_with_other_options_and_resumes_with_the_same(
    tmp_path_factory, a, b, listed, ranges, saved_at
):
    folder = tmp_path_factory.mktemp("t")
    paths = []
    for i, n in enumerate([9, 14, 5]):
        paths.append(str(folder / f"{i}.bin"))
        np.arange(100 * i, 100 * i + n, dtype=np.uint16).tofile(paths[-1])
    if ranges:
        rows = pa.table(
            {
                "path": [paths[1], paths[1], paths[0]],
                "length": [7, 7, 9],
                "start": [0, 7, 0],
                "stop": [7, 14, 9],
            }
        )
    else:
        rows = pa.table({"path": paths, "length": [9, 14, 5]})

    def streams(dtype):
        table = manifest(rows, "tokens", dtype=dtype)
        return list(table) if listed else table

    saving = StreamLoader(streams(a), batch_size=2, tbins=2)
    it = iter(saving)
    for _ in range(saved_at):
        next(it)
    state = saving.state_dict()
    whole = list(StreamLoader(streams(a), batch_size=2, tbins=2))
    other = StreamLoader(streams(b), batch_size=2, tbins=2)
    if np.dtype(a) != np.dtype(b):
        with pytest.raises(ValueError, match="the streams' reader options"):
            other.load_state_dict(state)
    else:
        other.load_state_dict(state)
        assert_same(list(other), whole[saved_at:])


@pytest.mark.parametrize("what", ["fifo", "folder"])
def test_a_manifest_that_is_not_a_regular_file_is_named_so_not_missing(tmp_path, what):
    path = tmp_path / "m.parquet"
    os.mkfifo(path) if what == "fifo" else path.mkdir()
    with pytest.raises(SourceError, match="not a regular file") as info:
        manifest(str(path), "video")
    assert "no such" not in str(info.value)
