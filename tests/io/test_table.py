import builtins
import multiprocessing
import operator
import os
import pickle
import sys
import time

import numpy as np
import pytest
from helpers import assert_same, live_children, no_children, state_refused
from hypothesis import given, settings
from hypothesis import strategies as st
from servers import RangeServer, http_folder, s3_server  # noqa: F401

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from streamseq import StreamLoader  # noqa: E402
from streamseq.errors import SourceError  # noqa: E402
from streamseq.io import remote, table  # noqa: E402
from streamseq.read.ref import StreamRef  # noqa: E402
from streamseq.testing import check_continuity  # noqa: E402

LENGTHS = {3: 23, 0: 17, 4: 31, 1: 9, 2: 40}  # episode -> frames, in file order


def frames(episodes=LENGTHS, state=6):
    """Rows of a LeRobot-like table: episode by episode, frames in order."""
    ep = np.concatenate([np.full(n, e) for e, n in episodes.items()])
    frame = np.concatenate([np.arange(n) for n in episodes.values()])
    values = ep * 1000.0 + frame
    last = np.concatenate([np.full(n, n - 1) for n in episodes.values()])
    st = values[:, None] + np.arange(state) / 10
    return pa.table(
        {
            "episode_index": pa.array(ep, pa.int64()),
            "frame_index": pa.array(frame, pa.int64()),
            "observation.state": pa.FixedSizeListArray.from_arrays(
                pa.array(st.ravel(), pa.float32()), state
            ),
            "action": pa.array([[v, -v] for v in values], pa.list_(pa.float64())),
            "timestamp": pa.array(frame / 30, pa.float32()),
            "next.done": pa.array(frame == last),
        }
    )


@pytest.fixture
def parquet(tmp_path):
    path = tmp_path / "data.parquet"
    data = frames()
    pq.write_table(data, path, row_group_size=16)  # 120 rows: 8 row groups
    return path, data


def rows_of(data, episode, columns):
    mask = data.column("episode_index").to_numpy() == episode
    return data.filter(pa.array(mask)).select(columns).to_pydict()


def test_each_episode_is_its_rows_in_order(parquet):
    path, data = parquet
    columns = ["frame_index", "observation.state", "action", "next.done"]
    episodes = table(path, columns=columns)
    assert [e.group for e in episodes] == list(LENGTHS)  # order of first appearance
    for e in episodes:
        assert len(e) == LENGTHS[e.group]
        steps = e[:]
        assert list(steps) == columns
        assert steps["observation.state"].shape == (len(e), 6)
        assert steps["observation.state"].dtype == np.float32
        assert steps["action"].shape == (len(e), 2) and steps["next.done"].dtype == bool
        want = rows_of(data, e.group, columns)
        for name in columns:
            np.testing.assert_array_equal(steps[name], np.asarray(want[name]))
    one = episodes[2][5]
    assert one["frame_index"] == 5 and one["observation.state"].shape == (6,)
    assert [e.group for e in table(path, sort=True)] == [0, 1, 2, 3, 4]


def test_a_read_touches_only_its_row_groups(parquet, monkeypatch):
    path, _ = parquet
    episodes = table(path, columns=["frame_index", "action"])
    seen = []
    real = pq.ParquetFile.read_row_group

    def spy(self, i, *args, **kwargs):
        seen.append(i)
        return real(self, i, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", spy)
    e4 = episodes[2]  # episode 4: rows 40 to 70, row groups 2, 3, 4
    assert e4.row_groups == [2, 3, 4]
    assert e4[10:20]["frame_index"].tolist() == list(range(10, 20))  # rows 50:60
    assert seen == [3]
    e4[0:3]
    assert seen == [3, 2]
    e4[0:31]
    assert seen == [3, 2, 4]  # the others were decoded already
    assert sorted(set(seen)) == e4.row_groups


def test_row_groups_are_decoded_once_while_cached(parquet, monkeypatch):
    path, _ = parquet
    episodes = table(path, columns=["frame_index"])
    seen = []
    real = pq.ParquetFile.read_row_group
    monkeypatch.setattr(
        pq.ParquetFile, "read_row_group", lambda s, i, **k: seen.append(i) or real(s, i, **k)
    )
    for e in episodes:
        for a in range(0, len(e), 4):
            e[a : a + 4]
    assert sorted(seen) == list(range(8))  # every row group once


def test_episodes_interleaved_with_row_groups(tmp_path):
    ep = np.array([7, 7, 2, 2, 7, 7, 2, 9, 9, 7])
    path = tmp_path / "mixed.parquet"
    pq.write_table(pa.table({"ep": ep, "x": np.arange(10) * 1.5}), path, row_group_size=3)
    episodes = table(path, "ep", ["x"])
    assert [e.group for e in episodes] == [7, 2, 9]
    for e in episodes:
        np.testing.assert_array_equal(e[:]["x"], np.flatnonzero(ep == e.group) * 1.5)
        for a in range(len(e)):
            for b in range(a, len(e) + 1):
                np.testing.assert_array_equal(e[a:b]["x"], e[:]["x"][a:b])
    assert episodes[0][2:2]["x"].shape == (0,)


def test_string_groups_and_all_columns(tmp_path):
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({"take": ["b", "b", "a"], "v": [1, 2, 3]}), path)
    episodes = table(path, "take")
    assert [(e.group, len(e)) for e in episodes] == [("b", 2), ("a", 1)]
    assert episodes[0][:]["v"].tolist() == [1, 2] and list(episodes[0][:]) == ["take", "v"]


def test_pickle_is_small_and_reads_elsewhere(parquet):
    path, data = parquet
    episodes = table(path, columns=["action"])
    episodes[0][:2]
    blob = pickle.dumps(episodes[4])
    assert len(blob) < 1000
    copy = pickle.loads(blob)
    np.testing.assert_array_equal(copy[:]["action"], episodes[4][:]["action"])


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_passes_check_continuity(parquet, workers):
    path, _ = parquet
    episodes = table(path, columns=["frame_index", "observation.state", "action"])
    loader = StreamLoader(episodes, batch_size=2, tbins=8, num_workers=workers)
    assert check_continuity(loader, [len(e) for e in episodes], sources=episodes) == len(loader)


def test_errors_name_the_file(parquet, tmp_path):
    path, _ = parquet
    with pytest.raises(SourceError, match="data.parquet: no column 'reward'") as e:
        table(path, columns=["action", "reward"])
    assert e.value.path == str(path)
    with pytest.raises(SourceError, match="no column 'episode'"):
        table(path, "episode")
    with pytest.raises(SourceError, match="nothing.parquet: no such file"):
        table(tmp_path / "nothing.parquet")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(SourceError, match="bad.parquet: cannot open as Parquet"):
        table(bad)
    ragged = tmp_path / "ragged.parquet"
    pq.write_table(pa.table({"episode_index": [0, 0], "a": [[1.0], [2.0, 3.0]]}), ragged)
    message = (
        "ragged.parquet: column 'a' holds a list of 2 values where most rows hold 1 at step 1"
    )
    with pytest.raises(SourceError, match=message):
        table(ragged)[0][:]
    holes = tmp_path / "holes.parquet"
    pq.write_table(pa.table({"episode_index": [0, None]}), holes)
    message = "holes.parquet: column 'episode_index' has a missing value at row 1"
    with pytest.raises(SourceError, match=message):
        table(holes)


def test_a_nan_episode_is_rejected_naming_the_file_and_the_row(tmp_path):
    path = tmp_path / "nan.parquet"
    ep = [0.0, 0.0, 1.0, np.nan, 2.0, np.nan]  # the NaN rows would fold into one episode
    pq.write_table(pa.table({"ep": ep, "x": np.arange(6)}), path, row_group_size=2)
    message = "nan.parquet: column 'ep' has NaN at row 3"
    with pytest.raises(SourceError, match=message) as e:
        table(path, "ep")
    assert e.value.path == str(path)
    pq.write_table(pa.table({"ep": [0.5, 0.5, 1.5], "x": np.arange(3)}), path)
    assert [(e.group, len(e)) for e in table(path, "ep")] == [(0.5, 2), (1.5, 1)]


@pytest.mark.parametrize(
    "values",
    [
        pa.array([[0, 1], [0, 1], [2, 3]]),
        pa.array([[0], [0], [1]], pa.list_(pa.int64(), 1)),
        pa.array([{"a": 0}, {"a": 0}, {"a": 1}]),
    ],
    ids=["lists", "fixed-size-lists", "structs"],
)
def test_an_episode_column_of_lists_or_structs_names_the_file_and_the_column(tmp_path, values):
    path = tmp_path / "nested.parquet"
    pq.write_table(pa.table({"ep": values, "x": np.arange(3)}), path)
    with pytest.raises(SourceError, match=r"nested.parquet: column 'ep' holds .*(list|struct)"):
        table(path, "ep")


def flawed_table(path, flaw):
    """Episodes 0 to 3 of 6 rows in row groups of 4: a flaw at step 5 of episode 2 (row 17).

    Row group 4 (rows 16 to 19) holds steps 4, 5 of episode 2 and steps 0, 1 of episode 3.
    """
    ep = np.repeat(np.arange(4), 6)
    x = [[float(i), -float(i)] for i in range(24)]
    if flaw == "missing":
        x[17] = None
    elif flaw == "missing inside":
        x[17] = [1.0, None]
    else:
        x[17] = [1.0, 2.0, 3.0]
    pq.write_table(pa.table({"ep": ep, "x": pa.array(x)}), path, row_group_size=4)


FLAWS = {
    "missing": "has a missing value",
    "missing inside": "has a missing value",
    "ragged": "holds a list of 3 values where most rows hold 2",
}


@pytest.mark.parametrize("flaw", list(FLAWS))
def test_a_flawed_row_is_blamed_on_the_episode_and_the_step_holding_it(tmp_path, flaw):
    path = tmp_path / "flawed.parquet"
    flawed_table(path, flaw)
    episodes = table(path, "ep", ["x"])
    assert episodes[3][0:4]["x"][:, 0].tolist() == [18, 19, 20, 21]  # decodes row group 4
    assert episodes[2][0:5]["x"][:, 0].tolist() == [12, 13, 14, 15, 16]
    with pytest.raises(SourceError, match=f"flawed.parquet: column 'x' {FLAWS[flaw]} at step 5"):
        episodes[2][3:6]
    refs = [StreamRef(i, e) for i, e in enumerate(episodes)]
    refs[3].read(0, 4)
    pattern = rf"stream 2 \(.*\), steps 4:6: .*{FLAWS[flaw]} at step 5"
    with pytest.raises(SourceError, match=pattern) as e:
        refs[2].read(4, 6)
    assert e.value.index == 2 and e.value.steps == (4, 6) and e.value.path == str(path)


def test_lists_of_another_length_in_another_row_group_name_the_step(tmp_path):
    path = tmp_path / "widths.parquet"
    x = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0, 7.0], [8.0, 9.0, 10.0]]
    pq.write_table(pa.table({"ep": [0, 0, 0, 0], "x": x}), path, row_group_size=2)
    episode = table(path, "ep", ["x"])[0]
    assert episode[2:4]["x"].shape == (2, 3)
    message = r"widths.parquet: column 'x' holds steps of shape \(2,\) before step 2 and \(3,\)"
    with pytest.raises(SourceError, match=message):
        episode[1:3]


@pytest.mark.parametrize("workers", [0, 2])
def test_the_loader_names_the_stream_holding_a_flawed_row(tmp_path, workers):
    path = tmp_path / "flawed.parquet"
    flawed_table(path, "missing")
    episodes = table(path, "ep", ["x"])
    loader = StreamLoader(episodes[::-1], 2, 4, num_workers=workers)  # episode 3 comes first
    with pytest.raises(SourceError, match=r"stream 1 .*steps 4:6: .*missing value at step 5"):
        list(loader)


@st.composite
def episode_tables(draw):
    """An episode column (ints, or floats with NaN possible), missing values in a data
    column (by row: "missing" or "missing inside"), and a row group size."""
    n = draw(st.integers(1, 30))
    groups = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    floats = draw(st.booleans())
    ep = np.asarray(groups, np.float64 if floats else np.int64)
    if floats and draw(st.booleans()):
        ep[draw(st.integers(0, n - 1))] = np.nan
    kinds = st.sampled_from(["missing", "missing inside"])
    flaws = draw(st.dictionaries(st.integers(0, n - 1), kinds, max_size=3))
    return ep, flaws, draw(st.integers(1, 8))


@settings(max_examples=40)
@given(episode_tables())
def test_episodes_are_their_rows_or_an_error_naming_the_flaw(tmp_path_factory, drawn):
    ep, flaws, row_group_size = drawn
    path = tmp_path_factory.mktemp("t") / "t.parquet"
    x = [[float(i), -float(i)] for i in range(len(ep))]
    for row, flaw in flaws.items():
        x[row] = None if flaw == "missing" else [1.0, None]
    pq.write_table(pa.table({"ep": ep, "x": pa.array(x)}), path, row_group_size=row_group_size)
    if np.isnan(ep.astype(float)).any():
        row = int(np.flatnonzero(np.isnan(ep))[0])
        with pytest.raises(SourceError, match=f"t.parquet: column 'ep' has NaN at row {row}:"):
            table(path, "ep")
        return
    episodes = table(path, "ep", ["x"])
    assert sorted(e.group for e in episodes) == sorted(set(ep.tolist()))
    for e in episodes:
        rows = np.flatnonzero(ep == e.group)
        assert len(e) == len(rows)
        for a, b in [(0, len(e)), (0, 1), (len(e) // 2, len(e))]:
            bad = [k for k in range(a, b) if int(rows[k]) in flaws]
            if bad:
                with pytest.raises(SourceError, match=f"missing value at step {bad[0]}$"):
                    e[a:b]
            else:
                np.testing.assert_array_equal(e[a:b]["x"][:, 0], rows[a:b].astype(float))


def test_without_pyarrow_the_error_names_the_extra(parquet, monkeypatch):
    real_import = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name.startswith("pyarrow"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(ImportError, match=r"pip install 'streamseq\[table\]'"):
        table(parquet[0])


# --- URLs: read through streamseq.io.remote, with storage_options ---------------------

SECRET = "Sh0uld-N3ver-Be-Shown"


@pytest.fixture(scope="module")
def in_bucket(request, tmp_path_factory):
    """The table of ``parquet``, in the bucket of the local S3 server: (url, options, path)."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    server = request.getfixturevalue("s3_server")
    path = tmp_path_factory.mktemp("bucket") / "episodes.parquet"
    pq.write_table(frames(), path, row_group_size=16)
    return server.upload(path), server.options, path


def test_url_with_storage_options_is_the_local_table(in_bucket):
    url, options, path = in_bucket
    columns = ["frame_index", "observation.state", "action", "next.done"]
    episodes = table(url, columns=columns, storage_options=options)
    local = table(path, columns=columns)
    assert [(e.group, len(e), e.row_groups) for e in episodes] == [
        (e.group, len(e), e.row_groups) for e in local
    ]
    assert episodes[0].path == url
    for e, ref in zip(episodes, local, strict=True):
        for a, b in [(0, len(e)), (5, 9), (len(e) - 1, len(e))]:
            got, want = e[a:b], ref[a:b]
            for name in columns:
                np.testing.assert_array_equal(got[name], want[name])
    copy = pickle.loads(pickle.dumps(episodes[3]))  # carries the options
    np.testing.assert_array_equal(copy[:]["action"], local[3][:]["action"])


@pytest.mark.parametrize("workers", [0, 2])
def test_url_batches_equal_local(in_bucket, workers):
    url, options, path = in_bucket
    columns = ["frame_index", "observation.state", "action"]
    episodes = table(url, columns=columns, storage_options=options)
    local = table(path, columns=columns)
    lengths = [len(e) for e in episodes]
    batches = list(StreamLoader(episodes, batch_size=2, tbins=8, num_workers=workers))
    check_continuity(batches, lengths, sources=local)
    assert_same(batches, list(StreamLoader(local, batch_size=2, tbins=8)))


def test_url_reads_only_its_row_groups(in_bucket, monkeypatch):
    url, options, _ = in_bucket
    episodes = table(url, columns=["frame_index"], storage_options=options)
    seen = []
    real = pq.ParquetFile.read_row_group
    monkeypatch.setattr(
        pq.ParquetFile, "read_row_group", lambda s, i, **k: seen.append(i) or real(s, i, **k)
    )
    e4 = episodes[2]  # episode 4: rows 40 to 70, row groups 2, 3, 4
    assert e4[10:20]["frame_index"].tolist() == list(range(10, 20))
    e4[0:31]
    assert seen == [3, 2, 4]


def test_a_spawned_process_connects_with_the_options(in_bucket):
    url, options, path = in_bucket
    episode = table(url, columns=["action"], storage_options=options)[1]
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        got = pool.apply(operator.getitem, (episode, slice(2, 6)))
    np.testing.assert_array_equal(got["action"], table(path)[1][2:6]["action"])


def test_credentials_are_never_shown(in_bucket):
    url, options, _ = in_bucket
    options = {**options, "secret": SECRET}  # moto takes any secret
    episodes = table(url, columns=["action"], storage_options=options)
    assert SECRET not in repr(episodes) and SECRET not in str(episodes)
    assert repr(episodes[0]) == f"table({url!r})[3]"
    assert SECRET not in repr(episodes[0].key)
    missing = url.replace("episodes.parquet", "nothing.parquet")
    start = time.monotonic()
    with pytest.raises(SourceError, match="nothing.parquet: no such file") as e:
        table(missing, storage_options=options)
    assert time.monotonic() - start < 5  # not retried
    assert e.value.path == missing and SECRET not in str(e.value)
    with pytest.raises(SourceError, match="no column 'reward'") as e:
        table(url, columns=["reward"], storage_options=options)
    assert SECRET not in str(e.value)
    with pytest.raises(ValueError, match="storage_options are for URLs"):
        table(in_bucket[2], storage_options=options)


def test_unreachable_server_names_the_url_not_the_credentials(http_folder):  # noqa: F811
    pytest.importorskip("aiohttp")
    pq.write_table(frames(), http_folder / "gone.parquet", row_group_size=16)
    server = RangeServer(http_folder).start()
    url = f"{server.url}/gone.parquet"
    server.stop()
    options = {"headers": {"Authorization": f"Bearer {SECRET}"}}
    with pytest.raises(SourceError, match=url) as e:
        table(url, storage_options=options)
    assert "3 attempts" in str(e.value) and SECRET not in str(e.value)


@pytest.mark.parametrize("workers", [0, 2])
def test_server_stops_in_the_middle_of_an_epoch(http_folder, workers, monkeypatch):  # noqa: F811
    pytest.importorskip("aiohttp")
    before = {c.pid for c in live_children()}
    monkeypatch.setattr(remote, "BLOCK_SIZE", 4096)  # the file is 15 blocks, 8 are cached
    many = {e: 40 for e in range(12)}
    pq.write_table(frames(many), http_folder / "long.parquet", row_group_size=16)
    server = RangeServer(http_folder).start()
    url = f"{server.url}/long.parquet"
    options = {"headers": {"Authorization": f"Bearer {SECRET}"}}
    try:
        episodes = table(url, columns=["frame_index", "action"], storage_options=options)
        loader = StreamLoader(episodes, 2, 8, num_workers=workers, max_buffered=4)
        it = iter(loader)
        assert next(it).data["action"].shape == (2, 8, 2)
        server.stop()
        start = time.monotonic()
        with pytest.raises(SourceError, match=url) as e:
            for _ in it:
                pass
        assert time.monotonic() - start < 20  # the retries, not a hang
        assert "attempts" in str(e.value) and SECRET not in str(e.value)
        loader.close()
        del it, loader
    finally:
        server.stop()
    assert no_children(before)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/fd")
def test_open_files_stay_flat_over_tables_read_and_dropped(tmp_path):
    import gc
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    def read(k):
        path = tmp_path / f"t{k}.parquet"
        pq.write_table(pa.table({"episode_index": [0, 0, 1], "x": [k, 1, 2]}), path)
        episodes = table(path)
        assert episodes[0][:]["x"].tolist() == [k, 1] and episodes[1][0]["x"] == 2
        return len(os.listdir("/proc/self/fd"))

    read(-1)
    gc.collect()
    before = len(os.listdir("/proc/self/fd"))
    for k in range(100):
        read(k)
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) <= before


def _refused(saving, resuming):
    return state_refused(saving, resuming, batch_size=2)


def test_a_state_of_some_episodes_is_refused_by_other_episodes_of_the_file(tmp_path):
    path = tmp_path / "equal.parquet"
    pq.write_table(frames({e: 6 for e in range(4)}), path, row_group_size=8)
    episodes = table(path)
    assert _refused(episodes[:2], episodes[2:])
    assert _refused(episodes[:2], episodes[1::-1])
    assert _refused(episodes, table(path, sort=True)[::-1])
    assert not _refused(episodes[:2], table(path)[:2])
    assert not _refused(episodes[:2], table(path, sort=True)[:2])


def test_a_state_of_episodes_saved_before_they_were_named_by_their_first_row_still_loads(
    tmp_path, monkeypatch
):
    import json
    import os

    old = os.path.join(
        os.path.dirname(__file__), "..", "data", "states_without_zip_or_episode_names.json"
    )
    with open(old) as f:
        saved = json.load(f)["table"]
    assert "offsets" not in saved["state"]["plan"]
    monkeypatch.chdir(tmp_path)
    ep, frame = np.repeat([0, 1, 2, 3], 6), np.tile(np.arange(6), 4)
    data = pa.table({"episode_index": ep, "v": ep * 100.0 + frame})
    pq.write_table(data, "t.parquet", row_group_size=8)
    loader = StreamLoader(table("t.parquet")[1:4], batch_size=2, tbins=3, shuffle=True, seed=3)
    assert "offsets" in loader.state_dict()["plan"]  # (states saved now name the episodes)
    loader.load_state_dict(saved["state"])
    rest = list(loader)
    assert [b.stream.tolist() for b in rest] == [b["stream"] for b in saved["rest"]]
    assert [b.step.tolist() for b in rest] == [b["step"] for b in saved["rest"]]
    assert [b.reset.tolist() for b in rest] == [b["reset"] for b in saved["rest"]]
    assert [{k: v.tolist() for k, v in b.data.items()} for b in rest] == [
        b["data"] for b in saved["rest"]
    ]


def test_a_state_of_some_columns_is_refused_by_other_columns_of_the_episodes(tmp_path):
    path = tmp_path / "equal.parquet"
    pq.write_table(frames({e: 6 for e in range(2)}), path, row_group_size=8)
    assert _refused(table(path, columns=["action"]), table(path, columns=["frame_index"]))
    assert _refused(table(path, columns=["action", "timestamp"]), table(path, columns=["action"]))
    assert not _refused(table(path, columns=["action"]), table(path, columns=["action"]))


def test_a_table_of_a_file_replaced_reads_the_new_file_not_the_old_reader(tmp_path):
    path = tmp_path / "t.parquet"

    def write(shift, where):
        pq.write_table(pa.table({"episode_index": [0, 0, 0, 1], "x": [shift + 1.0] * 4}), where)

    write(0, path)
    first = table(path, columns=["x"])
    assert first[0][0:3]["x"].tolist() == [1.0] * 3  # (its reader is open here)
    write(100, tmp_path / "new.parquet")
    os.replace(tmp_path / "new.parquet", path)
    second = table(path, columns=["x"])
    assert second[0][0:3]["x"].tolist() == [101.0] * 3


def _x_table(path, x, how):
    """A table of 3 episodes (7, 5, 9 rows) of one column ``x``, written ``how``."""
    rows = np.repeat(np.arange(3), [7, 5, 9])
    data = pa.table({"episode_index": rows, "x": np.asarray(x, np.float32)})
    if how == "rename":
        pq.write_table(data, f"{path}.new", row_group_size=8)
        os.replace(f"{path}.new", path)
    else:
        pq.write_table(data, path, row_group_size=8)
        st_ = os.stat(path)
        os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns + 1))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("how", ["rename", "in place"])
def test_a_file_changed_after_the_table_was_made_is_an_error_not_other_rows(
    tmp_path, workers, how
):
    path = str(tmp_path / "d.parquet")
    _x_table(path, np.arange(21), "in place")
    episodes = table(path, columns=["x"])
    _x_table(path, -np.arange(21) - 100, how)  # the same episodes, other values
    with pytest.raises(SourceError) as e:
        list(StreamLoader(episodes, 2, 4, num_workers=workers))
    text = str(e.value)
    assert e.value.path == path and "changed since the source was made" in text
    assert e.value.index is not None and e.value.steps is not None and "steps" in text


def test_a_file_rewritten_in_place_under_an_open_reader_is_an_error_not_other_rows(tmp_path):
    path = str(tmp_path / "d.parquet")
    _x_table(path, np.arange(21), "in place")
    first, _, last = table(path, columns=["x"])
    assert first[0:2]["x"].tolist() == [0, 1]  # the reader is open, row group 0 decoded
    _x_table(path, -np.arange(21) - 100, "in place")
    with pytest.raises(SourceError, match="changed since the source was made") as e:
        last[0:9]  # (row groups 1 and 2: decoded now)
    assert e.value.path == path


@pytest.mark.parametrize("what", ["fifo", "folder"])
def test_a_path_that_is_not_a_regular_file_is_named_so_not_missing(tmp_path, what):
    path = tmp_path / "episodes.parquet"
    os.mkfifo(path) if what == "fifo" else path.mkdir()
    with pytest.raises(SourceError, match="not a regular file") as info:
        table(str(path), columns=["x"])
    assert "no such file" not in str(info.value)


@pytest.mark.parametrize("how", ["chmod", "hard link", "atime"])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_file_whose_metadata_changed_but_not_its_content_is_read(tmp_path, how, workers):
    path = str(tmp_path / "d.parquet")
    _x_table(path, np.arange(21), "in place")
    episodes = table(path, columns=["x"])
    if how == "chmod":
        os.chmod(path, 0o444)
    elif how == "hard link":
        os.link(path, tmp_path / "linked.parquet")
    else:
        os.utime(path, ns=(1, os.stat(path).st_mtime_ns))
    assert episodes[1][0:5]["x"].tolist() == [7.0, 8.0, 9.0, 10.0, 11.0]
    got = list(StreamLoader(table(path, columns=["x"]), 2, 4, num_workers=workers))
    assert sum(int(b.valid.sum()) for b in got) == 21


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def _osfile_tells_its_descriptor(path):
    import pyarrow as pa

    with pa.OSFile(path) as f:
        try:
            f.fileno()
        except AttributeError:
            return False
    return True


def test_a_local_file_read_holds_one_descriptor_that_is_also_measured(tmp_path):
    import gc

    paths = [str(tmp_path / f"{i}.parquet") for i in range(12)]
    for i, path in enumerate(paths):
        _x_table(path, np.arange(21) + i, "in place")
    gc.collect()
    before = len(os.listdir("/proc/self/fd"))
    tables = [table(path, columns=["x"]) for path in paths]
    assert [t[1][0:1]["x"].tolist() for t in tables] == [[7.0 + i] for i in range(12)]
    # (pyarrow 16's OSFile cannot tell its descriptor: the file is opened again to measure)
    each = 1 if _osfile_tells_its_descriptor(paths[0]) else 2
    assert len(os.listdir("/proc/self/fd")) - before <= each * len(paths)
    _x_table(paths[0], -np.arange(21), "in place")  # (under the open reader)
    with pytest.raises(SourceError, match="changed since the source was made"):
        tables[0][2][0:2]
    del tables
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) <= before
