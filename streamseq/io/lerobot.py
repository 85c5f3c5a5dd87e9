"""LeRobot datasets (layouts v2.1 and v3.0) as one stream per episode of dict steps.

A LeRobot dataset keeps one row per frame in Parquet tables (the robot's state, its
action, the episode, the frame's ``timestamp`` in seconds from the episode's start) and
the images of every camera in MP4 files (AV1 or H.264). ``meta/info.json`` tells the
layout by its ``codebase_version``:

- **v2.1**: ``meta/episodes.jsonl`` (one line per episode: ``episode_index``,
  ``length``), one table per episode (``data/chunk-XXX/episode_XXXXXX.parquet``) and one
  video per episode and camera (``videos/chunk-XXX/<camera>/episode_XXXXXX.mp4``), the
  paths made from the templates ``data_path`` and ``video_path`` of ``info.json`` with
  ``chunks_size`` episodes per chunk;
- **v3.0**: ``meta/episodes/chunk-XXX/file-XXX.parquet`` (one row per episode: its
  ``length``, the data file that holds its rows, ``data/chunk_index`` and
  ``data/file_index``, their global indices ``dataset_from_index`` to
  ``dataset_to_index``, and per camera the video file, ``videos/<camera>/chunk_index``
  and ``videos/<camera>/file_index``, and the window of it that is the episode,
  ``videos/<camera>/from_timestamp`` to ``videos/<camera>/to_timestamp``), tables of
  many episodes (``data/chunk-XXX/file-XXX.parquet``) and videos of many episodes one
  after the other (``videos/<camera>/chunk-XXX/file-XXX.mp4``).

Planning reads the metadata only: the length of every episode comes from it, and no
table row or video is read before an episode is. An episode reads, in the process that
reads it, only the row groups that hold its rows (:mod:`streamseq.io.table`'s reader of
the file, shared by its episodes) and only its window of each video
(:func:`streamseq.io.video` with ``start`` and ``stop``, whose demuxing pass is made once
per file and process). The frame of a row is the one a player shows at the row's time
(the episode's ``from_timestamp`` plus the row's ``timestamp``), within half a frame, as
LeRobot checks it: the frame whose time is nearest, which must be less than half a frame
away.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from streamseq._redact import redacted_repr
from streamseq.errors import SourceError, StreamError
from streamseq.io import remote
from streamseq.io._base import Source
from streamseq.io.table import _READERS, _Episode, _Key, _Options, _pyarrow, _Reader
from streamseq.io.video import TIME_TOLERANCE, _Video, shown_frames, video

T = TypeVar("T")

#: the layouts read, by ``codebase_version``
SUPPORTED_VERSIONS = ("v2.1", "v3.0")

_DEFAULT_PATHS = {
    "v2.1": (
        "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
        "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
    ),
    "v3.0": (
        "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
    ),
}

#: feature dtypes that are not table columns of numbers (cameras; images in the table)
_NOT_COLUMNS = ("video", "image")


@dataclass(frozen=True)
class _Camera:
    """One camera of an episode: its video (a window of a file) and the episode's start in it."""

    name: str
    video: _Video
    offset: float  # seconds of the video at the episode's time 0


class _LeRobotEpisode(Source):
    """One episode of a LeRobot dataset: dict steps of its cameras' frames and its columns."""

    def __init__(
        self,
        dataset: str,
        index: int,
        length: int,
        key: _Key,
        rows: tuple[int, int],
        cameras: tuple[_Camera, ...],
        columns: tuple[str, ...],
        fps: float,
    ):
        super().__init__()
        self.dataset, self.index, self.length = dataset, int(index), int(length)
        self.key = key  # the data file, with the columns read (timestamp, episode_index too)
        self.rows = rows  # the episode's rows in the data file: first, end
        self.cameras = cameras
        self.columns = columns
        self.fps = float(fps)
        self._rows: _Episode | None = None  # made in the process that reads

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_rows"] = None  # found again from the file's footer where it is read
        return state

    def __repr__(self) -> str:
        return f"lerobot({redacted_repr(self.dataset)})[episode {self.index}]"

    def __len__(self) -> int:
        return self.length

    @property
    def path(self) -> str:
        """The data file that holds the episode's rows (its URL without credentials)."""
        return _public(self.key.path)

    @property
    def videos(self) -> dict[str, _Video]:
        """The video stream of every camera: the episode's window of its file."""
        return {c.name: c.video for c in self.cameras}

    def _where(self, camera: str | None = None) -> str:
        where = f"LeRobot dataset {self.dataset}, episode {self.index}"
        return where if camera is None else f"{where}, camera {camera!r}"

    def _open(self) -> None:
        return None  # the table's reader and every video open their own

    def close(self) -> None:
        """Close the videos' decoders of this process (the table's reader is shared)."""
        for camera in self.cameras:
            camera.video.close()

    def _empty(self) -> dict[str, np.ndarray]:
        return {k: v[:0] for k, v in self._locked_read(0, 1).items()}

    def _table_rows(self) -> _Episode:
        """The episode's rows as a stream of :mod:`streamseq.io.table` (from the footer)."""
        if self._rows is None:
            handle = _READERS.of(self.key)
            with handle.lock:
                reader = handle.get(functools.partial(_Reader, self.key))
            meta = reader.file.metadata
            sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
            bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
            first, end = self.rows
            if end > bounds[-1]:
                raise SourceError(
                    self.path,
                    f"{self._where()}: the metadata puts its rows at {first}:{end} of the "
                    f"data file, which holds {bounds[-1]}",
                )
            runs = []
            for g in range(int(np.searchsorted(bounds, first, side="right")) - 1, len(sizes)):
                lo, hi = max(first, bounds[g]), min(end, bounds[g + 1])
                if lo >= end:
                    break
                if lo < hi:
                    runs.append((g, lo - bounds[g], hi - bounds[g]))
            self._rows = _Episode(self.key, self.index, np.array(runs, np.int64))
        return self._rows

    def _read(self, handle: None, a: int, b: int) -> dict[str, np.ndarray]:
        try:
            rows = self._table_rows()[a:b]
        except StreamError as e:
            raise _named(e, self._where()) from e
        found = rows["episode_index"]
        if (found != self.index).any():
            k = int(np.flatnonzero(found != self.index)[0])
            raise SourceError(
                self.path,
                f"{self._where()}: step {a + k} is a row of episode {found[k]} "
                "(the metadata and the data file disagree)",
            )
        times = np.asarray(rows["timestamp"], np.float64)
        out = {c.name: self._frames(c, times, a) for c in self.cameras}
        out.update((name, rows[name]) for name in self.columns)
        return out

    def _frames(self, camera: _Camera, times: np.ndarray, a: int) -> np.ndarray:
        """The frames of ``camera`` shown at the times of steps ``a`` on."""
        where = self._where(camera.name)
        v = camera.video
        try:
            frame_times = v.timestamps  # the window's frames (demuxed once per file)
            if len(frame_times) < self.length:
                window = f"[{v.start:g}, {v.stop:g}) s" if v.windowed else "whole"
                raise SourceError(
                    _public(v.path),
                    f"{where}: the video window {window} holds {len(frame_times)} frames "
                    f"for {self.length} rows",
                )
            wanted = camera.offset + times
            half = 0.5 / self.fps
            index = shown_frames(frame_times, wanted + half)
            off = np.abs(frame_times[np.maximum(index, 0)] - wanted)
            bad = (index < 0) | (off > half + TIME_TOLERANCE)
            if bad.any():
                k = int(np.flatnonzero(bad)[0])
                raise SourceError(
                    _public(v.path),
                    f"{where}: step {a + k} (timestamp {times[k]:.6g} s, video time "
                    f"{wanted[k]:.6g} s) is {off[k]:.6g} s from the nearest frame, more than "
                    f"half a frame ({half:.6g} s at {self.fps:g} fps)",
                )
            lo, hi = int(index.min()), int(index.max()) + 1
            block = v[lo:hi]
        except StreamError as e:
            raise _named(e, where) from e
        return (
            block if hi - lo == len(index) and (np.diff(index) == 1).all() else block[index - lo]
        )


def _named(error: StreamError, where: str) -> StreamError:
    """``error`` with ``where`` (dataset, episode, camera) in its message, if not there yet."""
    if not isinstance(error, SourceError) or where in error.detail:
        return error
    return SourceError(error.path, f"{where}: {error.detail}")


def _public(path: str) -> str:
    return remote.public_url(path) if remote.is_url(path) else path


class _Files:
    """The files of a dataset, a local folder or a URL (fsspec), for its metadata."""

    def __init__(self, root: str, options: Mapping[str, Any] | None):
        self.url = remote.is_url(root)
        if options and not self.url:
            raise ValueError(f"storage_options are for URLs, {root!r} is a local path")
        self.root = root.rstrip("/") if self.url else root
        self.options = dict(options or {})
        self.name = _public(self.root)

    def path(self, relative: str) -> str:
        if self.url:
            return f"{self.root}/{relative}"
        return os.path.join(self.root, *relative.split("/"))

    def error(self, what: str) -> SourceError:
        return SourceError(self.name, f"LeRobot dataset {self.name}: {self._scrub(what)}")

    def _scrub(self, text: str) -> str:
        """``text`` without the user information and query values of the root's URL."""
        if not self.url:
            return text
        parts = urllib.parse.urlsplit(self.root)
        secrets = [parts.netloc.rpartition("@")[0]]
        secrets += [v for _, v in urllib.parse.parse_qsl(parts.query)]
        for secret in sorted(filter(None, secrets), key=len, reverse=True):
            text = text.replace(secret, "***")
        return text

    def guard(self, what: str, call: Callable[[], T]) -> T:
        """``call()``; its failure a :class:`SourceError` naming the dataset and ``what``."""
        try:
            return call()
        except FileNotFoundError:
            raise self.error(f"no file {what}") from None
        except ImportError:
            raise
        except Exception as e:
            detail = e.detail if isinstance(e, SourceError) else f"{type(e).__name__}: {e}"
            error = self.error(f"cannot read {what}: {detail}")
        if self.name != self.root:  # the root has secrets: chain nothing that shows them
            raise error from None
        raise error

    def read(self, relative: str) -> bytes:
        path = self.path(relative)
        if not self.url:
            return self.guard(relative, lambda: _read_local(path))
        fs = remote.filesystem(path, self.options)
        return self.guard(
            relative, lambda: remote.retry(path, "reading", lambda: fs.cat_file(path))
        )

    def glob(self, pattern: str) -> list[str]:
        if not self.url:
            return sorted(glob.glob(self.path(pattern)))
        fs = remote.filesystem(self.root, self.options)
        protocol = self.root.split("://", 1)[0]
        found = self.guard(
            pattern,
            lambda: remote.retry(self.name, "listing", lambda: fs.glob(self.path(pattern))),
        )
        return sorted(p if "://" in p else f"{protocol}://{p}" for p in found)

    def parquet(self, path: str, columns: Sequence[str]) -> Any:
        return self.guard(path[len(self.root) + 1 :], lambda: self._parquet(path, columns))

    def parquet_names(self, path: str) -> list[str]:
        return self.guard(path[len(self.root) + 1 :], lambda: self._parquet_names(path))

    def _parquet(self, path: str, columns: Sequence[str]) -> Any:
        pq = _pyarrow()
        file = None
        if self.url:
            file = remote.RemoteFile(path, self.options, None, "blockcache")
        try:
            return pq.read_table(path if file is None else file, columns=list(columns))
        finally:
            if file is not None:
                file.close()

    def _parquet_names(self, path: str) -> list[str]:
        pq = _pyarrow()
        if not self.url:
            return pq.read_schema(path).names
        with remote.RemoteFile(path, self.options, None, "blockcache") as file:
            return pq.read_schema(file).names


def _read_local(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _template(info: dict[str, Any], name: str, default: str) -> str:
    value = info.get(name)
    return value if isinstance(value, str) and value else default


def _v21_episodes(files: _Files, info: dict[str, Any]) -> list[dict[str, Any]]:
    """Per episode: index, length, data file and rows, and per camera video and window."""
    lines = files.read("meta/episodes.jsonl").decode().splitlines()
    data_path, video_path = (
        _template(info, n, d)
        for n, d in zip(("data_path", "video_path"), _DEFAULT_PATHS["v2.1"], strict=True)
    )
    chunks = int(info.get("chunks_size") or 1000)
    episodes = []
    for line in lines:
        if not line.strip():
            continue
        entry = json.loads(line)
        index, length = int(entry["episode_index"]), int(entry["length"])
        chunk = index // chunks
        videos = {
            cam: (video_path.format(episode_chunk=chunk, video_key=cam, episode_index=index), None)
            for cam in _video_features(info)
        }
        episodes.append(
            {
                "index": index,
                "length": length,
                "data": data_path.format(episode_chunk=chunk, episode_index=index),
                "rows": (0, length),
                "videos": videos,
            }
        )
    return episodes


def _v30_episodes(files: _Files, info: dict[str, Any], cameras: list[str]) -> list[dict[str, Any]]:
    """As :func:`_v21_episodes`, from ``meta/episodes/*/*.parquet``."""
    data_path, video_path = (
        _template(info, n, d)
        for n, d in zip(("data_path", "video_path"), _DEFAULT_PATHS["v3.0"], strict=True)
    )
    found = files.glob("meta/episodes/*/*.parquet")
    if not found:
        raise files.error("no episode metadata in meta/episodes/")
    base = ["episode_index", "length", "data/chunk_index", "data/file_index"]
    base += ["dataset_from_index", "dataset_to_index"]
    per_camera = ["chunk_index", "file_index", "from_timestamp", "to_timestamp"]
    columns: dict[str, list[Any]] = {}
    for path in found:
        names = files.parquet_names(path)
        for name in base:
            if name not in names:
                raise files.error(f"the episodes' metadata has no column {name!r}")
        for cam in cameras:
            for field in per_camera:
                if f"videos/{cam}/{field}" not in names:
                    raise files.error(
                        f"camera {cam!r}: the episodes' metadata has no column "
                        f"'videos/{cam}/{field}'"
                    )
        wanted = base + [f"videos/{cam}/{field}" for cam in cameras for field in per_camera]
        part = files.parquet(path, wanted)
        for name in wanted:
            columns.setdefault(name, []).extend(part.column(name).to_pylist())
    data_files = list(zip(columns["data/chunk_index"], columns["data/file_index"], strict=True))
    first_row: dict[tuple[int, int], int] = {}  # global index of each data file's first row
    for where, start in zip(data_files, columns["dataset_from_index"], strict=True):
        first_row[where] = min(first_row.get(where, start), start)
    episodes = []
    for k, index in enumerate(columns["episode_index"]):
        chunk, file = data_files[k]
        start = columns["dataset_from_index"][k] - first_row[(chunk, file)]
        length = int(columns["length"][k])
        videos = {}
        for cam in cameras:
            v = {f: columns[f"videos/{cam}/{f}"][k] for f in per_camera}
            path = video_path.format(
                video_key=cam, chunk_index=v["chunk_index"], file_index=v["file_index"]
            )
            videos[cam] = (path, (float(v["from_timestamp"]), float(v["to_timestamp"])))
        episodes.append(
            {
                "index": int(index),
                "length": length,
                "data": data_path.format(chunk_index=chunk, file_index=file),
                "rows": (int(start), int(start) + length),
                "videos": videos,
            }
        )
    return episodes


def _video_features(info: dict[str, Any]) -> list[str]:
    return [k for k, f in info.get("features", {}).items() if f.get("dtype") == "video"]


def _column_features(info: dict[str, Any]) -> list[str]:
    return [k for k, f in info.get("features", {}).items() if f.get("dtype") not in _NOT_COLUMNS]


def lerobot(
    root: str | os.PathLike,
    cameras: Sequence[str] | None = None,
    columns: Sequence[str] | None = None,
    episodes: Sequence[int] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> list[_LeRobotEpisode]:
    """One stream per episode of a LeRobot dataset (v2.1 or v3.0): frames and table columns.

    Step ``i`` of an episode is a dict: for every camera (a feature of dtype ``video``,
    ``observation.images.*``), the frame shown at the time of the episode's ``i``-th row
    (``uint8 [H, W, 3]``), and the row's ``columns`` (``observation.state``, ``action``,
    ``timestamp``, ...; a vector column is ``[k]``), so a batch's ``data`` is a dict of
    ``[B, T, ...]`` arrays. The row's time is its ``timestamp`` (seconds from the
    episode's start) plus the episode's start in the video (v3.0's ``from_timestamp``;
    0 for v2.1's videos of one episode); its frame is the one nearest that time, which
    must be less than half a frame away (LeRobot's own check).

    The metadata is read here (``meta/info.json`` and the episodes' lengths and files),
    nothing else: ``len`` of an episode is its length in the metadata, and opens no file.
    An episode reads, in the process that reads it, the footer of its data file and the
    row groups that hold its rows (one reader per file and process, shared by the
    episodes of the file), and its window of each camera's video (seeking to the keyframe
    before it; the file is demuxed once per process for all its windows). Episodes are
    picklable: they go to worker processes, which open their own files.

    Args:
        root: the dataset's folder, or its URL (``s3://bucket/dataset``, any fsspec
            protocol; see :mod:`streamseq.io.remote`).
        cameras: the video features to read (all of them by default; ``[]`` for none).
        columns: the table's columns to give (by default, every feature that is not an
            image or a video).
        episodes: the ``episode_index`` of the episodes to read, in this order (all, by
            index, by default).
        storage_options: for a URL, the options of its fsspec filesystem (endpoint,
            credentials); kept by the episodes, so that every worker connects with
            them, and never shown.

    Returns:
        A list of streams, one per episode: ``e[a:b]`` is a dict of arrays of ``b - a``
        steps; ``e.index`` is its ``episode_index``, ``len(e)`` its length, ``e.videos``
        the video stream of each camera (the episode's window of its file).

    Raises:
        ImportError: pyarrow is missing (the ``table`` extra), or fsspec for a URL (the
            ``remote`` extra).
        ValueError: ``storage_options`` given with a local path.
        streamseq.errors.SourceError: naming the dataset (and the episode, the camera
            or the column concerned): ``codebase_version`` is not one of
            :data:`SUPPORTED_VERSIONS`, a file of the metadata is missing, a camera or a
            column is not in the dataset, an episode asked for is not; when an episode is
            read, its video window holds fewer frames than it has rows, a row's time is
            more than half a frame from every frame, its rows are not in the data file
            where the metadata puts them.

    Example:
        >>> import streamseq
        >>> episodes = lerobot("path/to/dataset", columns=["observation.state", "action"],
        ...                    episodes=[0, 1, 2])  # doctest: +SKIP
        >>> episodes[0][:8]["observation.images.top"].shape  # doctest: +SKIP
        (8, 480, 640, 3)
        >>> loader = streamseq.StreamLoader(episodes, batch_size=8, tbins=32,
        ...                                 num_workers=4)  # doctest: +SKIP
    """
    files = _Files(os.fspath(root), storage_options)
    _pyarrow()
    try:
        info = json.loads(files.read("meta/info.json"))
    except json.JSONDecodeError as e:
        raise files.error(f"meta/info.json is not JSON: {e}") from None
    version = info.get("codebase_version")
    if version not in SUPPORTED_VERSIONS:
        raise files.error(
            f"codebase_version {version!r} is not supported; the supported ones are "
            f"{', '.join(SUPPORTED_VERSIONS)}"
        )
    videos = _video_features(info)
    chosen = list(videos if cameras is None else cameras)
    for cam in chosen:
        if cam not in videos:
            raise files.error(f"no camera {cam!r}; the cameras are {videos}")
    known = _column_features(info)
    wanted = tuple(known if columns is None else columns)
    for name in wanted:
        if name not in known:
            kind = " (a camera: give it in cameras=)" if name in videos else ""
            raise files.error(f"no column {name!r}{kind}; the columns are {known}")
    for needed in ("timestamp", "episode_index"):
        if needed not in known:
            raise files.error(f"no column {needed!r} in info.json's features")
    fps = float(info["fps"])
    if version == "v2.1":
        found = _v21_episodes(files, info)
        for e in found:
            e["videos"] = {cam: e["videos"][cam] for cam in chosen}
    else:
        found = _v30_episodes(files, info, chosen)
    by_index = {e["index"]: e for e in found}
    if episodes is None:
        picked = [by_index[i] for i in sorted(by_index)]
    else:
        picked = []
        for i in episodes:
            if i not in by_index:
                raise files.error(
                    f"no episode {i}; it has {len(by_index)} episodes, indices "
                    f"{min(by_index)} to {max(by_index)}"
                )
            picked.append(by_index[i])
    read = tuple(dict.fromkeys((*wanted, "timestamp", "episode_index")))
    options = _Options(storage_options)
    whole: dict[str, _Video] = {}  # a video per file, cut into windows

    def camera(episode: dict[str, Any], cam: str) -> _Camera:
        relative, window = episode["videos"][cam]
        path = files.path(relative)
        try:
            if path not in whole:
                whole[path] = video(path, storage_options=storage_options)
            if window is None:
                return _Camera(cam, whole.pop(path), 0.0)
            start, stop = window
            return _Camera(cam, whole[path].replace(start=start, stop=stop), start)
        except FileNotFoundError:
            raise files.error(
                f"episode {episode['index']}, camera {cam!r}: no video file {relative}"
            ) from None

    return [
        _LeRobotEpisode(
            files.name,
            e["index"],
            e["length"],
            _Key(files.path(e["data"]), read, options, None),
            e["rows"],
            tuple(camera(e, cam) for cam in chosen),
            wanted,
            fps,
        )
        for e in picked
    ]
