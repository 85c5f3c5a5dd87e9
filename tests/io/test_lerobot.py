import json
import pickle
import shutil
import sys

import numpy as np
import pytest
from helpers import as_numpy, assert_same, state_refused
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from media import LEROBOT_CAMERAS, plain_video_times, write_lerobot
from servers import s3_server  # noqa: F401

from streamseq import StreamLoader
from streamseq.errors import SourceError
from streamseq.io import lerobot
from streamseq.testing import check_continuity

pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")

LENGTHS = [12, 20, 15, 9]
CAMERAS = list(LEROBOT_CAMERAS)
VERSIONS = ["v3.0", "v2.1"]
_PLAIN: dict = {}  # plain decodes of the video files, by path


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """One dataset of each layout, written once."""
    root = tmp_path_factory.mktemp("lerobot")
    return {v: write_lerobot(root / v, v, LENGTHS) for v in VERSIONS}


def plain(path):
    if str(path) not in _PLAIN:
        _PLAIN[str(path)] = plain_video_times(path)
    return _PLAIN[str(path)]


def expected(root, version, episode):
    """An episode read by hand: the table's rows, and the frames of a plain decode."""
    if version == "v3.0":
        meta = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
        row = meta[episode]
        data = root / f"data/chunk-000/file-{row['data/file_index']:03d}.parquet"
    else:
        data = root / f"data/chunk-000/episode_{episode:06d}.parquet"
    rows = pq.read_table(data).to_pandas()
    rows = rows[rows["episode_index"] == episode]
    out = {name: np.stack(rows[name].to_numpy()) for name in ("observation.state", "action")}
    out["timestamp"] = rows["timestamp"].to_numpy()
    for cam in CAMERAS:
        if version == "v3.0":
            path = root / f"videos/{cam}/chunk-000/file-{row[f'videos/{cam}/file_index']:03d}.mp4"
            start, stop = row[f"videos/{cam}/from_timestamp"], row[f"videos/{cam}/to_timestamp"]
        else:
            path = root / f"videos/chunk-000/{cam}/episode_{episode:06d}.mp4"
            start, stop = 0.0, np.inf
        frames, times = plain(path)
        inside = (times >= start - 1e-6) & (times < stop - 1e-6)
        out[cam] = frames[inside]
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_episodes_frame_by_frame(datasets, version):
    root = datasets[version]
    episodes = lerobot(root, columns=["observation.state", "action", "timestamp"])
    assert [len(e) for e in episodes] == LENGTHS
    assert [e.index for e in episodes] == [0, 1, 2, 3]
    for e in episodes:
        want = expected(root, version, e.index)
        got = {k: np.concatenate(v) for k, v in _chunks(e, 4).items()}
        assert set(got) == {*CAMERAS, "observation.state", "action", "timestamp"}
        for key, value in want.items():
            np.testing.assert_array_equal(got[key], value, err_msg=f"{e!r} {key}")
        assert got[CAMERAS[0]].shape == (len(e), 24, 32, 3) and got[CAMERAS[0]].dtype == np.uint8
        step = e[len(e) - 1]
        np.testing.assert_array_equal(step[CAMERAS[1]], want[CAMERAS[1]][-1])


def _chunks(e, k):
    out = {}
    for a in range(0, len(e), k):
        for key, value in e[a : a + k].items():
            out.setdefault(key, []).append(value)
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_read_anywhere_and_choose(datasets, version):
    root = datasets[version]
    episodes = lerobot(root, cameras=[CAMERAS[1]], columns=["action"], episodes=[3, 1])
    assert [e.index for e in episodes] == [3, 1]
    want = expected(root, version, 1)
    e = episodes[1]
    for a, b in [(15, 20), (2, 9), (0, 1), (9, 16)]:
        got = e[a:b]
        assert set(got) == {CAMERAS[1], "action"}
        np.testing.assert_array_equal(got[CAMERAS[1]], want[CAMERAS[1]][a:b])
        np.testing.assert_array_equal(got["action"], want["action"][a:b])
    assert e[5:5][CAMERAS[1]].shape == (0, 24, 32, 3)
    assert lerobot(root, cameras=[], columns=["timestamp"])[0][:3].keys() == {"timestamp"}


@pytest.mark.parametrize("version", VERSIONS)
def test_planning_opens_no_video_and_no_table(datasets, version, monkeypatch):
    video_module = sys.modules["streamseq.io.video"]
    table_module = sys.modules["streamseq.io.table"]
    opened = []
    monkeypatch.setattr(video_module, "_probe", lambda *a: opened.append(a) or None)
    monkeypatch.setattr(table_module, "_Reader", lambda *a: opened.append(a) or None)
    monkeypatch.setattr(video_module.av, "open", lambda *a, **k: opened.append(a))
    episodes = lerobot(datasets[version])
    assert [len(e) for e in episodes] == LENGTHS
    episodes = pickle.loads(pickle.dumps(episodes))
    assert [len(e) for e in episodes] == LENGTHS and opened == []


def test_v3_windows_of_a_file_share_its_demuxing_pass(datasets, monkeypatch):
    video_module = sys.modules["streamseq.io.video"]
    calls = []
    real = video_module._probe
    monkeypatch.setattr(video_module, "_probe", lambda *a: calls.append(a[0]) or real(*a))
    video_module._PROBES.clear()
    for e in pickle.loads(pickle.dumps(lerobot(datasets["v3.0"]))):
        e[:2]
    # two cameras, two files each (episodes 0-2 and 3)
    assert len(calls) == len(set(calls)) == 4


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("workers", [0, 2])
def test_loader_same_batches_any_workers_and_resume(datasets, version, workers):
    episodes = lerobot(datasets[version], columns=["observation.state", "timestamp"])
    reference = as_numpy(StreamLoader(episodes, 2, 5))
    loader = StreamLoader(episodes, 2, 5, num_workers=workers)
    batches = list(loader)
    check_continuity(batches, LENGTHS, sources=episodes)
    assert_same(as_numpy(batches), reference)
    assert tuple(batches[0].data[CAMERAS[0]].shape) == (2, 5, 24, 32, 3)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    resumed = StreamLoader(episodes, 2, 5, num_workers=workers)
    resumed.load_state_dict(state)
    assert_same(as_numpy(resumed), reference[3:])


@pytest.mark.parametrize("version", VERSIONS)
def test_through_s3(datasets, version, request):
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    server = request.getfixturevalue("s3_server")
    root = datasets[version]
    prefix = f"lerobot-{version}"
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        server.upload(path, f"{prefix}/{path.relative_to(root).as_posix()}")
    url = f"s3://{server.bucket}/{prefix}"
    remote = lerobot(url, storage_options=server.options, episodes=[2, 0, 3])
    local = lerobot(root, episodes=[2, 0, 3])
    assert [len(e) for e in remote] == [15, 12, 9]
    assert "testing" not in repr(remote) and remote[0].path.startswith(url)
    for r, loc in zip(remote, local, strict=True):
        got, want = r[:], loc[:]
        for key in want:
            np.testing.assert_array_equal(got[key], want[key])
    batches = list(StreamLoader(remote, 2, 4, num_workers=2))
    check_continuity(batches, [15, 12, 9], sources=local)
    with pytest.raises(SourceError) as error:
        lerobot(url, cameras=["observation.images.side"], storage_options=server.options)
    assert "testing" not in str(error.value) and url in str(error.value)


# -- bad input -----------------------------------------------------------------------------


@pytest.fixture
def copy(datasets, tmp_path):
    def make(version):
        root = tmp_path / version
        shutil.copytree(datasets[version], root)
        return root

    return make


def _edit_info(root, **changes):
    info = json.loads((root / "meta/info.json").read_text())
    info.update(changes)
    (root / "meta/info.json").write_text(json.dumps(info))


def _edit_episodes(root, column, episode, value):
    path = root / "meta/episodes/chunk-000/file-000.parquet"
    meta = pq.read_table(path).to_pydict()
    meta[column][episode] = value
    pq.write_table(pa.table(meta), path)


def test_unknown_version_lists_the_supported_ones(copy):
    root = copy("v3.0")
    _edit_info(root, codebase_version="v1.6")
    with pytest.raises(SourceError, match=r"codebase_version 'v1.6' .* v2.1, v3.0") as e:
        lerobot(root)
    assert str(root) in str(e.value)


@pytest.mark.parametrize("version", VERSIONS)
def test_missing_camera_or_column(datasets, version):
    root = datasets[version]
    with pytest.raises(SourceError, match=r"no camera 'observation.images.side'") as e:
        lerobot(root, cameras=["observation.images.side"])
    assert str(root) in str(e.value) and CAMERAS[0] in str(e.value)
    with pytest.raises(SourceError, match=r"no column 'effort'") as e:
        lerobot(root, columns=["action", "effort"])
    assert str(root) in str(e.value)
    with pytest.raises(SourceError, match="a camera"):
        lerobot(root, columns=[CAMERAS[0]])
    with pytest.raises(SourceError, match="no episode 7"):
        lerobot(root, episodes=[7])


def test_missing_camera_in_the_episodes_metadata(copy):
    root = copy("v3.0")
    path = root / "meta/episodes/chunk-000/file-000.parquet"
    meta = pq.read_table(path)
    pq.write_table(meta.drop_columns([f"videos/{CAMERAS[1]}/from_timestamp"]), path)
    with pytest.raises(SourceError, match=rf"camera '{CAMERAS[1]}'.* no column"):
        lerobot(root)


def test_a_window_shorter_than_its_rows(copy):
    root = copy("v3.0")
    _edit_episodes(root, f"videos/{CAMERAS[0]}/to_timestamp", 1, 1.2 + 18 / 10)
    with pytest.raises(SourceError) as e:
        lerobot(root)
    message = str(e.value)
    assert str(root) in message and "episode 1" in message and CAMERAS[0] in message
    assert "lasts 1.8 s, not the 2 s of its 20 rows at 10 fps" in message


def test_a_video_shorter_than_its_rows(copy):
    root = copy("v2.1")
    short = root / f"videos/chunk-000/{CAMERAS[0]}/episode_000003.mp4"  # 9 frames
    shutil.copy(short, root / f"videos/chunk-000/{CAMERAS[0]}/episode_000001.mp4")
    episodes = lerobot(root)
    episodes[0][:]  # others are fine
    with pytest.raises(SourceError) as e:
        episodes[1][:4]
    message = str(e.value)
    assert str(root) in message and "episode 1" in message and CAMERAS[0] in message
    assert "holds 9 frames for 20 rows" in message


@pytest.mark.parametrize("version", VERSIONS)
def test_timestamps_that_disagree_with_the_video(copy, version):
    root = copy(version)
    if version == "v3.0":
        path = root / "data/chunk-000/file-001.parquet"  # episodes 2 and 3
    else:
        path = root / "data/chunk-000/episode_000002.parquet"
    rows = pq.read_table(path).to_pydict()
    for k, e in enumerate(rows["episode_index"]):
        if e == 2 and rows["frame_index"][k] == 6:
            rows["timestamp"][k] += 1.0  # after the episode's last frame
        elif e == 2 and rows["frame_index"][k] == 4:
            rows["timestamp"][k] += 0.04  # less: the same frame
    pq.write_table(pa.Table.from_pydict(rows, schema=pq.read_schema(path)), path, row_group_size=8)
    episode = lerobot(root, episodes=[2])[0]
    np.testing.assert_array_equal(
        episode[:6][CAMERAS[0]], expected(root, version, 2)[CAMERAS[0]][:6]
    )
    with pytest.raises(SourceError) as e:
        episode[4:8]
    message = str(e.value)
    assert str(root) in message and "episode 2" in message and CAMERAS[0] in message
    assert "step 6" in message and "more than half a frame" in message


def test_rows_of_another_episode(copy):
    root = copy("v3.0")
    _edit_episodes(root, "dataset_from_index", 1, 10)  # two rows early
    _edit_episodes(root, "dataset_to_index", 1, 30)
    with pytest.raises(SourceError, match="episode 1: .* row 30 of the file is of this episode"):
        lerobot(root, episodes=[1])[0][:]
    _edit_episodes(root, "dataset_from_index", 1, 14)  # two rows late: past the file's end
    _edit_episodes(root, "dataset_to_index", 1, 34)
    with pytest.raises(SourceError, match="episode 1: .* rows at 14:34 .* holds 32"):
        lerobot(root, episodes=[1])[0][:]


def test_no_secret_in_errors(copy):
    root = copy("v3.0")
    options = {"key": "AKIASECRET", "secret": "hunter2"}
    with pytest.raises(ValueError, match="storage_options are for URLs") as e:
        lerobot(root, storage_options=options)
    assert "hunter2" not in str(e.value) and "AKIASECRET" not in str(e.value)
    with pytest.raises(SourceError) as e:
        lerobot("s3://me:hunter2@bucket/none?X-Amz-Signature=abc", storage_options=None)
    assert "hunter2" not in str(e.value) and "abc" not in str(e.value)


# -- frames: the nearest one, within half a frame of the video ------------------------------


def _rewrite_rows(path, keep):
    """Keep the rows of a data file for which ``keep(frame_index)`` is true."""
    rows = pq.read_table(path)
    mask = [bool(keep(k)) for k in rows.column("frame_index").to_pylist()]
    pq.write_table(rows.filter(pa.array(mask)), path, row_group_size=8)


def _set_lengths(root, version, lengths):
    """Write ``lengths`` (per episode) into the episodes' metadata (rows kept in order)."""
    if version == "v2.1":
        lines = (root / "meta/episodes.jsonl").read_text().splitlines()
        out = []
        for line, n in zip(lines, lengths, strict=True):
            entry = json.loads(line)
            entry["length"] = int(n)
            out.append(json.dumps(entry))
        (root / "meta/episodes.jsonl").write_text("\n".join(out) + "\n")
        return
    path = root / "meta/episodes/chunk-000/file-000.parquet"
    meta = pq.read_table(path).to_pydict()
    firsts = np.concatenate([[0], np.cumsum(lengths)]).astype(int)
    meta["length"] = [int(n) for n in lengths]
    meta["dataset_from_index"] = firsts[:-1].tolist()
    meta["dataset_to_index"] = firsts[1:].tolist()
    pq.write_table(pa.table(meta), path)


def _data_files(root):
    return sorted((root / "data").rglob("*.parquet"))


@pytest.mark.parametrize("version", VERSIONS)
def test_a_downsampled_dataset_reads_the_nearest_frames(copy, version):
    # every other row kept (timestamps i / 5), fps 5, the videos still at 10 fps
    root = copy(version)
    for path in _data_files(root):
        _rewrite_rows(path, lambda k: k % 2 == 0)
    _set_lengths(root, version, [(n + 1) // 2 for n in LENGTHS])
    _edit_info(root, fps=5)
    for e in lerobot(root):
        want = expected(root, version, e.index)
        got = {k: np.concatenate(v) for k, v in _chunks(e, 3).items()}
        for cam in CAMERAS:
            np.testing.assert_array_equal(got[cam], want[cam][::2], err_msg=f"{e!r} {cam}")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("fps", [4, 30, 7.5, 0.35, 0.2, 0.013, 1e-300])
def test_an_fps_that_disagrees_with_the_video(copy, version, fps):
    # the rows and the videos at 10 fps, info.json saying otherwise: rows at its rate
    # cannot all fall on frames of the video
    root = copy(version)
    _edit_info(root, fps=fps)
    with pytest.raises(SourceError) as e:
        lerobot(root, episodes=[1])[0][:]  # v3.0: its windows last other times than its rows
    message = str(e.value)
    assert str(root) in message and "episode" in message and "fps" in message
    assert CAMERAS[0] in message
    if version == "v2.1":
        assert "episode 1" in message and "steps 0 to 20" in message


@pytest.mark.parametrize("fps", [float("nan"), 0, -10, "10", None, True, float("inf"), "drop"])
def test_an_fps_that_is_not_a_positive_number(copy, fps):
    root = copy("v3.0")
    if fps == "drop":
        info = json.loads((root / "meta/info.json").read_text())
        del info["fps"]
        (root / "meta/info.json").write_text(json.dumps(info))
    else:
        _edit_info(root, fps=fps)
    with pytest.raises(SourceError, match="fps") as e:
        lerobot(root)
    assert str(root) in str(e.value)


@pytest.mark.parametrize("version", VERSIONS)
def test_rows_between_frames_take_the_nearest_or_fail(copy, version):
    # a row 0.045 s late shows the next frame's neighbour; 0.06 s late, the next frame
    root = copy(version)
    for path in _data_files(root):
        rows = pq.read_table(path).to_pydict()
        for k, (e, f) in enumerate(zip(rows["episode_index"], rows["frame_index"], strict=True)):
            if e == 0 and f == 3:
                rows["timestamp"][k] -= 0.045  # nearest: frame 3
            elif e == 0 and f == 5:
                rows["timestamp"][k] += 0.06  # nearest: frame 6
        pq.write_table(pa.Table.from_pydict(rows, schema=pq.read_schema(path)), path)
    episode = lerobot(root, episodes=[0])[0]
    want = expected(root, version, 0)[CAMERAS[1]]
    got = episode[:][CAMERAS[1]]
    np.testing.assert_array_equal(got[3], want[3])
    np.testing.assert_array_equal(got[5], want[6])
    keep = [k for k in range(len(want)) if k != 5]
    np.testing.assert_array_equal(got[keep], want[keep])


# -- paths from the metadata stay inside the dataset --------------------------------------


def _outside(copy, version, tmp_path):
    """A dataset whose files are all outside its root but its metadata; returns both."""
    inner = copy(version)
    root = tmp_path / "only-meta"
    root.mkdir()
    shutil.copytree(inner / "meta", root / "meta")
    return root, inner


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("key", ["data_path", "video_path"])
def test_a_path_template_leaving_the_root_is_refused(copy, tmp_path, version, key):
    root, inner = _outside(copy, version, tmp_path)
    shutil.copytree(inner / "data", root / "data")
    shutil.copytree(inner / "videos", root / "videos")
    info = json.loads((root / "meta/info.json").read_text())
    info[key] = f"../{version}/{info[key]}"  # the same files, in the other dataset
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(SourceError, match=key) as e:
        episodes = lerobot(root)
        episodes[0][:]
    assert str(root) in str(e.value) and "outside" in str(e.value)
    info[key] = f"data/../{info[key][3:].split('/', 1)[1]}"  # out of data/, in the root
    (root / "meta/info.json").write_text(json.dumps(info))
    assert len(lerobot(root)[0][:]["action"]) == LENGTHS[0]


def test_a_camera_name_leaving_the_root_is_refused(copy):
    root = copy("v2.1")
    info = json.loads((root / "meta/info.json").read_text())
    info["features"]["../../../../../../tmp"] = info["features"].pop(CAMERAS[0])
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(SourceError, match="video_path") as e:
        lerobot(root)
    assert str(root) in str(e.value) and "outside" in str(e.value)


def test_a_hub_cache_snapshot_of_links_reads_its_frames(datasets, tmp_path):
    """Every file a link to a blob outside the snapshot (a hub cache): the user's layout."""
    source = datasets["v3.0"]
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshots" / "abc"
    blobs.mkdir()
    for i, path in enumerate(sorted(p for p in source.rglob("*") if p.is_file())):
        blob = blobs / f"blob{i}"
        shutil.copyfile(path, blob)
        link = snapshot / path.relative_to(source)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(blob)
    linked, plain = lerobot(snapshot), lerobot(source)
    assert [len(e) for e in linked] == LENGTHS
    for a, b in zip(linked, plain, strict=True):
        for key in CAMERAS:
            np.testing.assert_array_equal(a[:][key], b[:][key])


@pytest.mark.parametrize("up", ["..", "%2e%2e", "%2E.", "..%5c..", "%2e%2e%5c.."])
def test_a_url_path_leaving_the_root_is_refused(copy, tmp_path, up):
    from servers import RangeServer

    http_folder = tmp_path / "served"
    inner = copy("v2.1")
    shutil.copytree(inner, http_folder / "outside", dirs_exist_ok=True)
    shutil.copytree(inner / "meta", http_folder / "ds" / "meta", dirs_exist_ok=True)
    info = json.loads((inner / "meta/info.json").read_text())
    info["data_path"] = f"{up}/outside/{info['data_path']}"
    (http_folder / "ds/meta/info.json").write_text(json.dumps(info))
    server = RangeServer(http_folder).start()
    try:
        url = f"{server.url}/ds"
        with pytest.raises(SourceError, match="data_path") as e:
            lerobot(url, cameras=[])[0][:]
        assert url in str(e.value) and "outside" in str(e.value)
    finally:
        server.stop()


def test_a_missing_data_file_over_http_names_the_dataset_and_episode(copy):
    # over HTTP (no listing: v2.1), as on a disk
    from servers import RangeServer

    root = copy("v2.1")
    (root / "data/chunk-000/episode_000001.parquet").unlink()
    server = RangeServer(root.parent).start()
    try:
        url = f"{server.url}/v2.1".replace("://", "://me:hunter2@")
        with pytest.raises(SourceError) as e:
            lerobot(url, cameras=[], episodes=[1])[0][:]
        message = str(e.value)
        assert f"{server.url}/v2.1".split("://")[1] in message and "episode 1" in message
        assert "hunter2" not in message and "hunter2" not in repr(e.value.__cause__)
        assert "no such file" in message
    finally:
        server.stop()


# -- malformed metadata ------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("change", [-2, 3])
def test_a_length_that_is_not_the_rows_is_an_error(copy, version, change):
    root = copy(version)
    lengths = list(LENGTHS)
    lengths[1] += change
    _set_lengths(root, version, lengths)  # the rows stay where they are
    with pytest.raises(SourceError) as e:
        episodes = lerobot(root)  # v3.0: the windows of the videos last other times
        episodes[0][:]
        episodes[1][:]
    message = str(e.value)
    assert str(root) in message and "episode 1" in message


def test_a_v3_length_that_disagrees_with_the_indices(copy):
    root = copy("v3.0")
    _edit_episodes(root, "length", 1, 18)
    with pytest.raises(SourceError, match="episode 1.*length 18") as e:
        lerobot(root)
    assert str(root) in str(e.value)


@pytest.mark.parametrize(
    "info",
    [
        {"chunks_size": 0},
        {"chunks_size": -3},
        {"chunks_size": "many"},
        {"features": []},
        {"features": {"x": 3}},
        {"data_path": "data/{nope}.parquet"},
        {"video_path": "{video_key.__class__}"},
        {"data_path": 7},
        {"data_path": "{episode_index:>1000000000000}"},
        {"data_path": "{episode_index:.5000f}"},
        {"video_path": "{video_key:>5000}"},
        {"data_path": "data/" + "x" * 5000 + "{episode_index}"},
    ],
)
def test_malformed_info_names_the_dataset(copy, info):
    root = copy("v2.1")
    _edit_info(root, **info)
    with pytest.raises(SourceError) as e:
        lerobot(root)[0][:]
    assert str(root) in str(e.value)


@pytest.mark.parametrize(
    "line",
    [
        "{}",
        '{"episode_index": 0}',
        '{"episode_index": "zero", "length": 12}',
        '{"episode_index": 0, "length": -1}',
        '{"episode_index": 0, "length": 12.5}',
        '{"episode_index": true, "length": 12}',
        "[0, 12]",
        "not json",
        '{"episode_index": 1, "length": 20}',  # twice the same episode
    ],
)
def test_malformed_episode_lines_name_the_dataset(copy, line):
    root = copy("v2.1")
    lines = (root / "meta/episodes.jsonl").read_text().splitlines()
    lines[0] = line
    (root / "meta/episodes.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(SourceError) as e:
        lerobot(root)
    assert str(root) in str(e.value)


@pytest.mark.parametrize(
    "text",
    [
        b'{"fps": 10, "x": "\xff"}',  # not UTF-8
        b"[" * 100_000 + b"]" * 100_000,  # nested deeper than a parser recurses
        b'{"fps": 1' + b"0" * 5000 + b"}",  # more digits than Python converts
    ],
)
def test_unreadable_info_json_names_the_dataset(copy, text):
    root = copy("v3.0")
    (root / "meta/info.json").write_bytes(text)
    with pytest.raises(SourceError, match="info.json") as e:
        lerobot(root)
    assert str(root) in str(e.value)


def test_an_unreadable_episode_line_names_the_dataset(copy):
    root = copy("v2.1")
    lines = (root / "meta/episodes.jsonl").read_text().splitlines()
    lines[1] = "[" * 100_000 + "]" * 100_000
    (root / "meta/episodes.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(SourceError, match="line 2") as e:
        lerobot(root)
    assert str(root) in str(e.value)


@pytest.mark.parametrize("version", VERSIONS)
def test_an_fps_too_large_for_a_float(copy, version):
    root = copy(version)
    _edit_info(root, fps=10**400)
    with pytest.raises(SourceError, match="fps") as e:
        lerobot(root)
    assert str(root) in str(e.value)


@pytest.mark.parametrize("column", ["length", "episode_index"])
@pytest.mark.parametrize("value", [2**64, 2**53 + 1])
def test_integers_too_large_in_the_metadata(copy, column, value):
    root = copy("v2.1")
    lines = (root / "meta/episodes.jsonl").read_text().splitlines()
    entry = json.loads(lines[0])
    entry[column] = value
    lines[0] = json.dumps(entry)
    (root / "meta/episodes.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(SourceError, match=column) as e:
        lerobot(root)[0][:]
    assert str(root) in str(e.value) and "line 1" in str(e.value)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_length_0_for_an_episode_with_rows_is_an_error(copy, version):
    root = copy(version)
    if version == "v2.1":
        lines = (root / "meta/episodes.jsonl").read_text().splitlines()
        entry = json.loads(lines[0])
        entry["length"] = 0
        lines[0] = json.dumps(entry)
        (root / "meta/episodes.jsonl").write_text("\n".join(lines) + "\n")
    else:
        _edit_episodes(root, "length", 0, 0)
        _edit_episodes(root, "dataset_to_index", 0, 0)
    with pytest.raises(SourceError, match="episode 0") as e:
        lerobot(root)
    assert str(root) in str(e.value) and "row 0 of the file is of this episode" in str(e.value)
    with pytest.raises(SourceError, match="episode 0"):
        lerobot(root, episodes=[0], cameras=[])


# -- selections ----------------------------------------------------------------------------


def test_empty_and_odd_selections(datasets):
    root = datasets["v3.0"]
    with pytest.raises(ValueError, match="nothing to read") as e:
        lerobot(root, cameras=[], columns=[])
    assert str(root) in str(e.value)
    with pytest.raises(ValueError, match="no episode asked for"):
        lerobot(root, episodes=[])
    for bad in (True, 1.0, "1", np.float64(1)):
        with pytest.raises(ValueError, match="episode indices are integers"):
            lerobot(root, episodes=[bad])
    assert [e.index for e in lerobot(root, episodes=[np.int64(2)])] == [2]


@pytest.mark.parametrize("version", VERSIONS)
def test_duplicates_in_a_selection_are_refused(datasets, version):
    root = datasets[version]
    with pytest.raises(ValueError, match=r"cameras .*observation.images.top.* twice") as e:
        lerobot(root, cameras=[CAMERAS[0], CAMERAS[1], CAMERAS[0]])
    assert str(root) in str(e.value)
    with pytest.raises(ValueError, match=r"columns .*'action'.* twice"):
        lerobot(root, columns=["action", "timestamp", "action"])
    with pytest.raises(ValueError, match=r"episodes .*1.* twice"):
        lerobot(root, episodes=[1, 3, 1])
    with pytest.raises(ValueError, match=r"episodes .*2.* twice"):
        lerobot(root, episodes=[2, np.int64(2)])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"episodes": 1},
        {"episodes": np.int64(1)},
        {"episodes": "1"},
        {"cameras": CAMERAS[0]},
        {"columns": "action"},
        {"columns": b"action"},
        {"cameras": 3},
    ],
)
def test_a_single_name_or_index_instead_of_a_list_is_refused(datasets, kwargs):
    ((name, value),) = kwargs.items()
    with pytest.raises(TypeError, match=rf"{name}= is a list") as e:
        lerobot(datasets["v2.1"], **kwargs)
    assert str(datasets["v2.1"]) in str(e.value)


def test_a_length_0_episode_is_an_empty_stream(copy):
    root = copy("v2.1")
    (root / "meta/episodes.jsonl").write_text(
        (root / "meta/episodes.jsonl").read_text()
        + json.dumps({"episode_index": 4, "length": 0})
        + "\n"
    )
    src = root / "data/chunk-000/episode_000003.parquet"
    pq.write_table(pq.read_table(src).slice(0, 0), root / "data/chunk-000/episode_000004.parquet")
    for cam in CAMERAS:
        shutil.copy(
            root / f"videos/chunk-000/{cam}/episode_000003.mp4",
            root / f"videos/chunk-000/{cam}/episode_000004.mp4",
        )
    episodes = lerobot(root, columns=["action"])
    assert [len(e) for e in episodes] == [*LENGTHS, 0]
    empty = episodes[4][0:0]
    assert empty["action"].shape == (0, 2) and empty[CAMERAS[0]].shape == (0, 24, 32, 3)
    batches = list(StreamLoader(episodes, 2, 5))
    check_continuity(batches, [*LENGTHS, 0], sources=episodes)


# -- open files ------------------------------------------------------------------------------


def _open_files():
    import os

    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/fd")
def test_open_files_stay_flat_over_datasets_read_and_dropped(datasets, tmp_path):
    import gc

    def read(k):
        root = tmp_path / f"copy-{k}"
        shutil.copytree(datasets["v3.0"], root)
        for e in lerobot(root, cameras=[] if k % 10 else None):
            e[:3]
        shutil.rmtree(root)

    read(-1)
    gc.collect()
    before = _open_files()
    for k in range(100):
        read(k)
    gc.collect()
    assert _open_files() <= before


# -- any mutation of valid metadata: the right frames, or an error naming the dataset ------

_REFERENCE: dict = {}  # per layout: every episode of the valid dataset, read whole
_ODD_VALUES = [None, "x", [], {}, True, float("nan"), 0, -1, 1.5, 10**9, "../../../etc"]
_ODD_VALUES += [2**64, 10**400, 0.35, 1e-300, "{episode_index:>1000000000000}", "..%5c..%5cx"]
_INFO_KEYS = ["fps", "codebase_version", "features", "data_path", "video_path", "chunks_size"]


def _mutation():
    value = st.sampled_from(_ODD_VALUES) | st.sampled_from(["drop", "+1", "-1", "../"])
    info = st.tuples(st.just("info"), st.sampled_from(_INFO_KEYS), value)
    columns = ["episode_index", "length", "dataset_from_index", "dataset_to_index"]
    columns += [f"videos/{c}/{f}" for c in CAMERAS for f in ("from_timestamp", "file_index")]
    episode = st.tuples(st.integers(0, len(LENGTHS) - 1), st.sampled_from(columns), value)
    return info | st.tuples(st.just("episodes"), episode, st.none())


def _changed(old, how):
    if how == "+1" or how == "-1":
        number = _seconds_or_none(old)
        return old if number is None else type(old)(number + int(how))
    if how == "../":
        return f"../{old}" if isinstance(old, str) else "../"
    return how


def _seconds_or_none(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _mutate(root, version, mutation):
    kind, what, how = mutation
    if kind == "info":
        key = what
        info = json.loads((root / "meta/info.json").read_text())
        if how == "drop":
            info.pop(key, None)
        else:
            info[key] = _changed(info.get(key), how)
        (root / "meta/info.json").write_text(json.dumps(info))
        return
    episode, column, how = what
    if version == "v2.1":
        if column not in ("episode_index", "length"):
            return
        lines = (root / "meta/episodes.jsonl").read_text().splitlines()
        entry = json.loads(lines[episode])
        if how == "drop":
            entry.pop(column)
        else:
            entry[column] = _changed(entry[column], how)
        lines[episode] = json.dumps(entry)
        (root / "meta/episodes.jsonl").write_text("\n".join(lines) + "\n")
        return
    path = root / "meta/episodes/chunk-000/file-000.parquet"
    meta = pq.read_table(path).to_pydict()
    if how == "drop":
        del meta[column]
    else:
        meta[column][episode] = _changed(meta[column][episode], how)
    try:
        table = pa.table(meta)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        table = pa.table({k: pa.array([repr(v) for v in vs]) for k, vs in meta.items()})
    pq.write_table(table, path)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(version=st.sampled_from(VERSIONS), mutation=_mutation())
@example(version="v2.1", mutation=("episodes", (0, "length", 0), None))
@example(version="v2.1", mutation=("episodes", (2, "length", 2**64), None))
@example(version="v2.1", mutation=("info", "fps", 0.35))
@example(version="v3.0", mutation=("info", "fps", 10**400))
@example(version="v2.1", mutation=("info", "data_path", "{episode_index:>1000000000000}"))
def test_mutated_metadata_reads_right_or_names_the_dataset(
    datasets, tmp_path_factory, version, mutation
):
    if version not in _REFERENCE:
        _REFERENCE[version] = {e.index: e[:] for e in lerobot(datasets[version])}
    root = tmp_path_factory.mktemp("mutant") / version
    shutil.copytree(datasets[version], root)
    _mutate(root, version, mutation)
    try:
        episodes = lerobot(root)
        for e in episodes:
            got = e[:] if len(e) else e[0:0]
            want = _REFERENCE[version][e.index]
            assert got.keys() == want.keys()
            for key in want:
                np.testing.assert_array_equal(got[key], want[key], err_msg=f"{mutation} {key}")
    except (SourceError, ValueError) as error:
        assert str(root) in str(error), mutation
    finally:
        shutil.rmtree(root)


def _refused(saving, resuming, state=None):
    return state_refused(saving, resuming, state, batch_size=1)


def test_a_state_of_some_episodes_is_refused_by_other_episodes_of_one_file(tmp_path):
    from streamseq.plan.spec import key_fingerprint

    root = write_lerobot(tmp_path / "equal", "v3.0", [8, 8, 8, 8])
    episodes = lerobot(root, cameras=[], columns=["observation.state"])
    assert episodes[0].path == episodes[1].path  # (two episodes of one data file)
    assert _refused(episodes[:1], episodes[1:2])
    assert _refused(episodes[:2], episodes[1::-1])
    state = ["observation.state"]
    assert _refused(episodes[:2], lerobot(root, cameras=[], columns=state, episodes=[1, 0]))
    assert not _refused(episodes[:2], lerobot(root, cameras=[], columns=state, episodes=[0, 1]))
    # the same episodes, other columns or cameras read: other streams
    assert _refused(episodes[:2], lerobot(root, cameras=[], columns=["action"])[:2])
    assert _refused(episodes[:2], lerobot(root, cameras=CAMERAS[:1], columns=state)[:2])
    # a state saved before episodes were named by their rows: loads, checked by its key
    loader = StreamLoader(episodes[:2], batch_size=1, tbins=3)
    next(iter(loader))
    state = loader.state_dict()
    assert "offsets" in state["plan"]
    state["plan"] = {k: v for k, v in state["plan"].items() if k != "offsets"}
    state["fingerprint"] = key_fingerprint(state["plan"])
    assert not _refused(None, episodes[:2], state)
    assert _refused(None, episodes[2:], state)  # (another file)


def test_a_data_file_replaced_is_read_anew_not_through_the_old_reader(tmp_path):
    root = write_lerobot(tmp_path / "lr", "v2.1", [4, 4])
    first = lerobot(root, columns=["observation.state"])
    was = first[0][0:4]["observation.state"].tolist()  # (its reader is open here)
    data = root / "data" / "chunk-000" / "episode_000000.parquet"
    rows = pq.read_table(data)
    state = rows.column("observation.state")
    shifted = pa.array([[x + 100 for x in r] for r in state.to_pylist()], state.type)
    pq.write_table(
        rows.set_column(
            rows.schema.get_field_index("observation.state"), "observation.state", shifted
        ),
        tmp_path / "new.parquet",
    )
    shutil.move(tmp_path / "new.parquet", data)
    assert not np.array_equal(was, shifted.to_numpy(False).tolist())
    second = lerobot(root, columns=["observation.state"])
    assert np.array_equal(second[0][0:4]["observation.state"], shifted.to_numpy(False).tolist())


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "version, name",
    [
        ("v2.1", "meta/info.json"),
        ("v2.1", "meta/episodes.jsonl"),
        ("v3.0", "meta/episodes/chunk-000/file-000.parquet"),
    ],
)
@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero"])
def test_metadata_that_is_not_a_regular_file_is_refused_not_waited_for(copy, version, name, kind):
    import os

    root = copy(version)
    (root / name).unlink()
    if kind == "fifo":
        os.mkfifo(root / name)  # (opened for reading, it waits for a writer: for ever)
    else:
        os.symlink("/dev/zero", root / name)  # (read whole, it never ends)
    with pytest.raises(SourceError, match="not a regular file") as e:
        lerobot(root)
    assert str(root) in str(e.value) and name in str(e.value)
