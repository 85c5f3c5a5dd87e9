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
table row or video is read before an episode is (but for an episode of length 0, never
read: the rows around its place in its data file are checked to be of others). An
episode reads, in the process that reads it, only the row groups that hold its rows
(:mod:`streamseq.io.table`'s reader of the file, shared by its episodes) and only its
window of each video
(:func:`streamseq.io.video` with ``start`` and ``stop``, whose demuxing pass is made once
per file and process). The frame of a row is the frame of the video nearest the row's
time (the episode's ``from_timestamp`` plus the row's ``timestamp``), by the video's own
timestamps, as LeRobot's reader takes it, and it must be at most half a frame of the video
away; the video's rate must be a whole multiple of ``info.json``'s ``fps`` (the rate of
the rows), every row of the episode at that rate within half a frame of a frame. Every
path made from the metadata stays inside the dataset's root, and malformed metadata is a
:class:`~streamseq.errors.SourceError` naming the dataset.
"""

from __future__ import annotations

import functools
import glob
import json
import math
import os
import posixpath
import re
import string
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from streamseq._files import open_regular
from streamseq._redact import redacted_repr
from streamseq.errors import SourceError, StreamError
from streamseq.io import remote
from streamseq.io._base import Source
from streamseq.io.table import (
    _READERS,
    _Episode,
    _Key,
    _Options,
    _pyarrow,
    _Reader,
    _to_numpy,
    local_stamp,
)
from streamseq.io.video import TIME_TOLERANCE, _Video, video
from streamseq.plan.identities import read_code
from streamseq.read.handle import ProcessLocal

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

#: how far the video's frame rate may be from a whole multiple of ``fps``: the rows'
#: period may differ from a whole number of the video's frames by this fraction of a frame
RATE_TOLERANCE = 0.02

#: the largest length, index or file number of the metadata (exact as a float)
MAX_COUNT = 2**53

#: the longest path a template of ``info.json`` may make (and its widths and precisions)
MAX_PATH = 4096


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
        self._frame_seconds: dict[str, float] = {}  # per camera, found where it is read
        self._file: ProcessLocal[_Reader] | None = None  # the data file's reader handle

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_rows"] = None  # found again from the file's footer where it is read
        state["_frame_seconds"] = {}
        state["_file"] = None  # taken again by key where it is read
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
    def file_offset(self) -> int:
        """With :attr:`path`, what names it in a state: its first row, columns and cameras.

        A code of its first row in the data file and the columns and cameras read
        (:func:`~streamseq.plan.identities.read_code`): episodes of one data file (v3.0)
        never share a first row, so a state of some episodes of a file (or of other
        columns or cameras of them) is refused by others of the same lengths.
        """
        read = (tuple(self.columns), tuple(c.name for c in self.cameras))
        return read_code(self.rows[0], repr(read))

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

    def _check_empty(self) -> None:
        """For an episode of length 0: a SourceError if its data file has rows of it.

        The rows around the place the metadata gives it must be of other episodes (as
        around every episode's rows, checked when it is read: an empty one is never read).
        """
        try:
            self._table_rows()
        except StreamError as e:
            raise _named(e, self._where()) from e
        finally:
            self._rows, self._file = None, None  # nothing kept open by planning

    def _empty(self) -> dict[str, np.ndarray]:
        if self.length:
            return {k: v[:0] for k, v in self._locked_read(0, 1).items()}
        try:  # no row to read: the shapes of the table's schema and of the videos
            self._table_rows()
            reader = self._reader()
            empty = reader.file.schema_arrow.empty_table()
            out = {c.name: c.video[0:0] for c in self.cameras}
            out.update((n, _to_numpy(empty.column(n), self.path, n)) for n in self.columns)
        except StreamError as e:
            raise _named(e, self._where()) from e
        return out

    def _reader(self) -> _Reader:
        """The reader of the data file in this process (held while this episode is).

        Raises:
            SourceError: naming the dataset and the episode, for a missing file (a path
                or a URL, its credentials never shown).
        """
        if self._file is None:
            self._file = _READERS.of(self.key)
        with self._file.lock:
            try:
                return self._file.get(functools.partial(_Reader, self.key))
            except FileNotFoundError:  # a URL's (a path's is a SourceError already)
                pass
        raise SourceError(self.path, f"{self._where()}: no such file")

    def _table_rows(self) -> _Episode:
        """The episode's rows as a stream of :mod:`streamseq.io.table` (from the footer)."""
        if self._rows is None:
            reader = self._reader()
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
            for row in (first - 1, end):  # the rows around the episode's: of others
                if 0 <= row < bounds[-1] and self._episode_at(reader, bounds, row) == self.index:
                    raise SourceError(
                        self.path,
                        f"{self._where()}: the metadata gives it {self.length} rows, at "
                        f"{first}:{end} of the data file, but row {row} of the file is of "
                        "this episode too: its length in the metadata is not its rows'",
                    )
            runs = []
            for g in range(int(np.searchsorted(bounds, first, side="right")) - 1, len(sizes)):
                lo, hi = max(first, bounds[g]), min(end, bounds[g + 1])
                if lo >= end:
                    break
                if lo < hi:
                    runs.append((g, lo - bounds[g], hi - bounds[g]))
            runs_array = np.array(runs, np.int64).reshape(len(runs), 3)
            self._rows = _Episode(self.key, self.index, runs_array)
        return self._rows

    def _episode_at(self, reader: _Reader, bounds: np.ndarray, row: int) -> Any:
        """The ``episode_index`` of row ``row`` of the data file (one column read)."""
        group = int(np.searchsorted(bounds, row, side="right")) - 1
        try:
            column = reader.file.read_row_group(group, columns=["episode_index"]).column(0)
        except Exception as e:  # pyarrow's errors
            raise SourceError(
                self.path, f"{self._where()}: cannot read row {row}: {type(e).__name__}: {e}"
            ) from None
        return column[row - int(bounds[group])].as_py()

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
        """The frames of ``camera`` nearest the times of steps ``a`` on.

        The nearest frame of the episode's window, by the video's own timestamps (the
        earlier of two at the same distance, as LeRobot's reader), which must be at most
        half a frame of the video away.
        """
        where = self._where(camera.name)
        v = camera.video
        b = a + len(times)
        try:
            frame_times = v.timestamps  # the window's frames (demuxed once per file)
            if len(frame_times) < self.length:
                window = f"[{v.start:g}, {v.stop:g}) s" if v.windowed else "whole"
                raise SourceError(
                    _public(v.path),
                    f"{where}: the video window {window} holds {len(frame_times)} frames "
                    f"for {self.length} rows",
                )
            seconds = self._seconds_per_frame(camera, where, a, b, frame_times)
            wanted = camera.offset + times
            index = _nearest_frames(frame_times, wanted)
            off = np.abs(frame_times[index] - wanted)
            half = 0.5 * seconds
            bad = ~(off <= half + TIME_TOLERANCE)  # NaN times too
            if bad.any():
                k = int(np.flatnonzero(bad)[0])
                raise SourceError(
                    _public(v.path),
                    f"{where}: step {a + k} (timestamp {times[k]:.6g} s, video time "
                    f"{wanted[k]:.6g} s) is {off[k]:.6g} s from the nearest frame, more than "
                    f"half a frame ({half:.6g} s at {1 / seconds:.6g} frames per second)",
                )
            lo, hi = int(index.min()), int(index.max()) + 1
            block = v[lo:hi]
        except StreamError as e:
            raise _named(e, where) from e
        return (
            block if hi - lo == len(index) and (np.diff(index) == 1).all() else block[index - lo]
        )

    def _seconds_per_frame(
        self, camera: _Camera, where: str, a: int, b: int, window: np.ndarray
    ) -> float:
        """The duration of a frame of the camera's video, checked against ``fps``.

        The median interval of the file's frames (its average rate for a file of one
        frame; ``1 / fps`` when it tells none). Rows at ``info.json``'s ``fps`` must fall
        on frames: the video's rate must be a whole multiple of ``fps`` (within
        :data:`RATE_TOLERANCE`, relative), and every row of the episode, at ``k / fps``
        seconds after the first frame of its ``window`` (the frames' times, in seconds),
        must be within half a frame of a frame of it (so a dataset downsampled by keeping
        every k-th row reads the frames of its rows, and a rate off by a fraction of a
        frame per row is found however large the multiple).

        Raises:
            SourceError: naming the dataset, the episode, the camera and the steps read,
                when the rates disagree.
        """
        seconds = self._frame_seconds.get(camera.name)
        if seconds is not None:
            return seconds
        v = camera.video
        times = v.probe().times
        if len(times) > 1:
            seconds = float(np.median(np.diff(times)))
        else:
            rate = float(v.fps)
            seconds = 1 / rate if math.isfinite(rate) and rate > 0 else 1 / self.fps
        ratio = 1 / (seconds * self.fps) if seconds > 0 else math.inf
        whole = round(ratio) if math.isfinite(ratio) else 0
        bad = whole < 1 or abs(ratio - whole) > RATE_TOLERANCE * whole
        detail = ""
        if not bad and len(window) and self.length > 1:
            rows = window[0] + np.arange(self.length) / self.fps  # rows at fps
            off = np.abs(window[_nearest_frames(window, rows)] - rows)
            far = ~(off <= seconds / 2 + TIME_TOLERANCE)
            if far.any():
                k = int(np.flatnonzero(far)[0])
                bad, detail = True, f": its row {k} at {k / self.fps:.6g} s is {off[k]:.6g} s "
                detail += "from the nearest frame"
        if bad:
            raise SourceError(
                _public(v.path),
                f"{where}: steps {a} to {b}: info.json's fps {self.fps:g} disagrees with the "
                f"video, at {1 / seconds if seconds > 0 else math.inf:.6g} frames per second "
                f"(rows at that rate do not fall on its frames{detail})",
            )
        self._frame_seconds[camera.name] = seconds
        return seconds


def _nearest_frames(times: np.ndarray, times_asked: np.ndarray) -> np.ndarray:
    """The frame nearest each time (the earlier of two at the same distance).

    Args:
        times: seconds of the frames, sorted (at least one).
        times_asked: seconds to look up.

    Returns:
        The frame index at each time (int64).

    Example:
        >>> _nearest_frames(np.array([0.0, 0.1, 0.2]), np.array([0.04, 0.05, 0.06, 0.5, -1]))
        array([0, 0, 1, 2, 0])
    """
    asked = np.asarray(times_asked, np.float64)
    if len(times) == 1:
        return np.zeros(len(asked), np.int64)
    after = np.clip(np.searchsorted(times, asked, side="left"), 1, len(times) - 1)
    before = after - 1
    earlier = asked - times[before] <= times[after] - asked
    return np.where(earlier, before, after).astype(np.int64)


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

    def inside(self, relative: str, key: str, what: str) -> str:
        """The path of ``relative``, a path made from the metadata's ``key``.

        It must stay inside the dataset's root once its ``..`` are resolved, a backslash
        taken as a ``/`` (for a URL, once its path is percent-decoded: ``%2e%2e%5c`` is
        ``../``). Symbolic links inside the root are the user's layout and are followed:
        a hub cache's snapshot links every file to a blob outside the snapshot's folder.

        Raises:
            SourceError: naming the dataset, ``what`` (the episode, the camera) and
                ``key``, for a path that leaves the root.
        """
        plain = urllib.parse.unquote(relative) if self.url else relative
        plain = plain.replace("\\", "/")
        normal = posixpath.normpath(plain)
        escapes = normal == ".." or normal.startswith(("../", "/")) or "://" in plain
        escapes = escapes or (self.url and any(c in plain for c in "?#"))
        escapes = escapes or (not self.url and os.path.isabs(relative))
        if escapes:
            raise self.error(f"{what}: {key} gives {relative!r}, outside the dataset: refused")
        return self.path(relative)

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
        if self.url:
            file = remote.RemoteFile(path, self.options, None, "blockcache")
        else:
            file = open_regular(path)
        with file:
            return pq.read_table(file, columns=list(columns))

    def _parquet_names(self, path: str) -> list[str]:
        pq = _pyarrow()
        if self.url:
            file = remote.RemoteFile(path, self.options, None, "blockcache")
        else:
            file = open_regular(path)
        with file:
            return pq.read_schema(file).names


def _read_local(path: str) -> bytes:
    with open_regular(path) as f:
        return f.read()


def _json(files: _Files, text: str | bytes, what: str) -> Any:
    """``text`` parsed as JSON, or a SourceError naming the dataset and ``what``.

    Not UTF-8, malformed, nested deeper than the parser recurses or holding an integer
    of more digits than Python converts: each is an error of the metadata.
    """
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError too
        detail = str(e) if not isinstance(e, RecursionError) else "nested too deeply"
        raise files.error(f"{what} is not JSON: {type(e).__name__}: {detail}") from None


def _template(files: _Files, info: dict[str, Any], name: str, default: str) -> str:
    value = info.get(name)
    if value is None:
        return default
    if not isinstance(value, str) or not value:
        raise files.error(f"info.json's {name} is {value!r}, not a path template")
    return value


class _PathFormatter(string.Formatter):
    """``str.format`` that refuses a width or a precision over :data:`MAX_PATH`.

    Example:
        >>> _PathFormatter().format("episode_{i:06d}", i=3)
        'episode_000003'
        >>> _PathFormatter().format("{i:>1000000000000}", i=3)
        Traceback (most recent call last):
        ...
        ValueError: the format '>1000000000000' asks for more than 4096 characters
    """

    def format_field(self, value: Any, format_spec: str) -> str:
        # a number in a spec is a width or a precision (a fill is followed by an align)
        numbers = re.findall(r"\d+", format_spec)
        if any(len(n.lstrip("0")) > 4 or int(n) > MAX_PATH for n in numbers):
            raise ValueError(
                f"the format {format_spec!r} asks for more than {MAX_PATH} characters"
            )
        return super().format_field(value, format_spec)


def _fill(files: _Files, template: str, name: str, what: str, **fields: Any) -> str:
    """``template`` (info.json's ``name``) with ``fields``; a SourceError if it cannot be.

    A path of more than :data:`MAX_PATH` characters is refused, before it is made.
    """
    try:
        path = _PathFormatter().vformat(template, (), fields)
        if len(path) > MAX_PATH:
            raise ValueError(f"a path of {len(path)} characters, more than {MAX_PATH}")
        return path
    except (KeyError, IndexError, ValueError, AttributeError, TypeError) as e:
        shown = template if len(template) <= 200 else f"{template[:197]}..."
        raise files.error(
            f"{what}: info.json's {name} {shown!r} cannot be filled with "
            f"{sorted(fields)}: {type(e).__name__}: {e}"
        ) from None


def _integer(value: Any) -> int | None:
    """``value`` as an int when it is one (a bool is not), else None."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        return None
    return int(value)


def _shown(value: Any) -> str:
    """The repr of a value of the metadata, cut to 40 characters.

    Example:
        >>> _shown(10**60)
        '1000000000000000000000000000000000000...'
    """
    if isinstance(value, int) and value.bit_length() > 4000:  # repr refuses some
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _seconds(value: Any) -> float | None:
    """``value`` as a finite float when it is a number (a bool is not), else None.

    Example:
        >>> _seconds(2), _seconds(10**400), _seconds(float("nan")), _seconds(True)
        (2.0, None, None, None)
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        return None
    try:
        value = float(value)
    except OverflowError:  # an int too large for a float
        return None
    return value if math.isfinite(value) else None


def _fps(files: _Files, info: dict[str, Any]) -> float:
    """info.json's ``fps``: a finite positive number, or a SourceError saying what it is."""
    fps = _seconds(info.get("fps"))
    if fps is None or fps <= 0:
        raise files.error(
            f"info.json's fps is {_shown(info.get('fps', 'missing'))}, not a positive number of "
            "frames per second"
        )
    return fps


def _counts(files: _Files, what: str, fields: Mapping[str, Any]) -> dict[str, int]:
    """The ``fields`` (names to values) as ints from 0 to :data:`MAX_COUNT`.

    Raises:
        SourceError: naming ``what`` and the field, for any other value.
    """
    out = {}
    for name, value in fields.items():
        number = _integer(value)
        if number is None or not 0 <= number <= MAX_COUNT:
            raise files.error(
                f"{what}: {name} is {_shown(value)}, not an integer from 0 to 2**53 (MAX_COUNT)"
            )
        out[name] = number
    return out


def _v21_episodes(files: _Files, info: dict[str, Any]) -> list[dict[str, Any]]:
    """Per episode: index, length, data file and rows, and per camera video and window."""
    lines = files.read("meta/episodes.jsonl").decode(errors="replace").splitlines()
    data_path, video_path = (
        _template(files, info, n, d)
        for n, d in zip(("data_path", "video_path"), _DEFAULT_PATHS["v2.1"], strict=True)
    )
    chunks = info.get("chunks_size", 1000)
    if _integer(chunks) is None or chunks <= 0:
        raise files.error(f"info.json's chunks_size is {chunks!r}, not an integer > 0")
    episodes = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"meta/episodes.jsonl line {number}"
        entry = _json(files, line, where)
        if not isinstance(entry, dict):
            raise files.error(f"{where} is not an object")
        for name in ("episode_index", "length"):
            if name not in entry:
                raise files.error(f"{where}: no {name!r}")
        fields = _counts(files, where, {n: entry[n] for n in ("episode_index", "length")})
        index, length = fields["episode_index"], fields["length"]
        what = f"episode {index}"
        chunk = index // chunks
        videos = {}
        for cam in _video_features(files, info):
            relative = _fill(
                files,
                video_path,
                "video_path",
                f"{what}, camera {cam!r}",
                episode_chunk=chunk,
                video_key=cam,
                episode_index=index,
            )
            videos[cam] = (relative, None)
        data = _fill(files, data_path, "data_path", what, episode_chunk=chunk, episode_index=index)
        episodes.append(
            {"index": index, "length": length, "data": data, "rows": (0, length), "videos": videos}
        )
    return episodes


def _v30_episodes(
    files: _Files, info: dict[str, Any], cameras: list[str], fps: float
) -> list[dict[str, Any]]:
    """As :func:`_v21_episodes`, from ``meta/episodes/*/*.parquet``.

    A camera's window must last the episode's rows (``length / fps`` seconds) within a
    frame, and the windows of one video file must not overlap: a window elsewhere in
    the video would give frames of other episodes.
    """
    data_path, video_path = (
        _template(files, info, n, d)
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
    rows = []  # per episode: its checked integers
    for k in range(len(columns["episode_index"])):
        fields = {name: columns[name][k] for name in base}
        where = f"the episodes' metadata, row {k}"
        if _integer(fields["episode_index"]) is not None:
            where = f"episode {fields['episode_index']}"
        row = _counts(files, where, fields)
        if row["dataset_to_index"] - row["dataset_from_index"] != row["length"]:
            raise files.error(
                f"{where}: length {row['length']} is not dataset_to_index - "
                f"dataset_from_index ({row['dataset_to_index']} - {row['dataset_from_index']})"
            )
        rows.append(row)
    first_row: dict[tuple[int, int], int] = {}  # global index of each data file's first row
    for row in rows:
        where = (row["data/chunk_index"], row["data/file_index"])
        first_row[where] = min(
            first_row.get(where, row["dataset_from_index"]), row["dataset_from_index"]
        )
    episodes = []
    for k, row in enumerate(rows):
        index, length = row["episode_index"], row["length"]
        chunk, file = row["data/chunk_index"], row["data/file_index"]
        start = row["dataset_from_index"] - first_row[(chunk, file)]
        videos = {}
        for cam in cameras:
            what = f"episode {index}, camera {cam!r}"
            v = {f: columns[f"videos/{cam}/{f}"][k] for f in per_camera}
            where = _counts(files, what, {f: v[f] for f in ("chunk_index", "file_index")})
            window = tuple(_seconds(v[f]) for f in ("from_timestamp", "to_timestamp"))
            if None in window or not (window[0] < window[1] or (length == 0 <= window[0])):
                raise files.error(
                    f"{what}: the window from_timestamp {v['from_timestamp']!r} to "
                    f"to_timestamp {v['to_timestamp']!r} is not one of the video (seconds)"
                )
            lasts = window[1] - window[0]
            if length and abs(lasts - length / fps) > 1 / fps + TIME_TOLERANCE:
                raise files.error(
                    f"{what}: the window from_timestamp {window[0]:g} to to_timestamp "
                    f"{window[1]:g} lasts {lasts:g} s, not the {length / fps:g} s of its "
                    f"{length} rows at {fps:g} fps"
                )
            path = _fill(
                files,
                video_path,
                "video_path",
                what,
                video_key=cam,
                chunk_index=where["chunk_index"],
                file_index=where["file_index"],
            )
            videos[cam] = (path, window)
        data = _fill(
            files,
            data_path,
            "data_path",
            f"episode {index}",
            chunk_index=chunk,
            file_index=file,
        )
        episodes.append(
            {
                "index": index,
                "length": length,
                "data": data,
                "rows": (start, start + length),
                "videos": videos,
            }
        )
    for cam in cameras:
        _no_overlap(files, cam, [(e["videos"][cam], e["index"]) for e in episodes if e["length"]])
    return episodes


def _no_overlap(
    files: _Files, camera: str, windows: list[tuple[tuple[str, tuple[float, float]], int]]
) -> None:
    """A SourceError when two episodes' windows of one video file overlap."""
    ordered = sorted(windows, key=lambda w: (w[0][0], w[0][1]))
    for ((path, (_, stop)), one), ((other, (start, _)), two) in zip(
        ordered, ordered[1:], strict=False
    ):
        if path == other and start < stop - TIME_TOLERANCE:
            raise files.error(
                f"episodes {one} and {two}, camera {camera!r}: their windows of {path} "
                f"overlap (one ends at {stop:g} s, the other starts at {start:g} s)"
            )


def _features(files: _Files, info: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """info.json's ``features``: names to objects, or a SourceError saying what is wrong."""
    features = info.get("features", {})
    if not isinstance(features, dict):
        raise files.error(f"info.json's features is {type(features).__name__}, not an object")
    for name, feature in features.items():
        if not isinstance(feature, dict):
            raise files.error(f"info.json's feature {name!r} is {feature!r}, not an object")
    return features


def _video_features(files: _Files, info: dict[str, Any]) -> list[str]:
    return [k for k, f in _features(files, info).items() if f.get("dtype") == "video"]


def _column_features(files: _Files, info: dict[str, Any]) -> list[str]:
    features = _features(files, info)
    return [k for k, f in features.items() if f.get("dtype") not in _NOT_COLUMNS]


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
    0 for v2.1's videos of one episode); its frame is the one of the video nearest that
    time (the earlier of two at the same distance, as LeRobot's reader), which must be at
    most half a frame of the video away. ``info.json``'s ``fps`` is the rows' rate: the
    video's must be a whole multiple of it (a dataset downsampled by keeping every k-th
    row reads the frames of its rows).

    The metadata is read here (``meta/info.json`` and the episodes' lengths and files),
    nothing else (but the footer and a row group or two of an episode of length 0's
    data file: an empty stream is never read, and the rows around its place must be of
    other episodes): ``len`` of an episode is its length in the metadata, and opens no
    file.
    An episode reads, in the process that reads it, the footer of its data file and the
    row groups that hold its rows (one reader per file and process, shared by the
    episodes of the file), and its window of each camera's video (seeking to the keyframe
    before it; the file is demuxed once per process for all its windows). Episodes are
    picklable: they go to worker processes, which open their own files.

    Args:
        root: the dataset's folder, or its URL (``s3://bucket/dataset``, any fsspec
            protocol; see :mod:`streamseq.io.remote`).
        cameras: the video features to read, a list of names, each once (all of them
            by default; ``[]`` for none).
        columns: the table's columns to give, a list of names, each once (by default,
            every feature that is not an image or a video; ``[]`` for none, with at
            least one camera).
        episodes: the ``episode_index`` of the episodes to read, a list of integers,
            each once, at least one, in this order (all, by index, by default). An
            episode of length 0 is an empty stream (its data file checked here to hold
            no row of it).
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
        TypeError: ``cameras``, ``columns`` or ``episodes`` is one name or one index
            (a string, an int), not a list of them.
        ValueError: ``storage_options`` given with a local path; nothing to read (no
            camera and no column); no episode asked for, or an index that is not an
            integer (a bool, a float); a camera, a column or an episode given twice.
        streamseq.errors.SourceError: naming the dataset (and the episode, the camera
            or the column concerned): ``codebase_version`` is not one of
            :data:`SUPPORTED_VERSIONS`, a file of the metadata is missing, not a regular
            file (a FIFO, a device: refused, never waited for nor read for ever) or
            malformed (not JSON, not UTF-8, nested too deeply; ``fps`` not a positive number, a
            length or an index not an integer from 0 to :data:`MAX_COUNT`, an episode
            listed twice, a path template that cannot be filled, or that makes a path
            of more than :data:`MAX_PATH` characters), a path made from the metadata
            leaves the dataset's root, a camera or a column is not in the dataset, an
            episode asked for is not, an episode of length 0 has rows in its data file;
            when an episode is read, its data file is missing, the video's rate is not
            a whole multiple of ``fps`` or a row at ``fps`` would be more than half a
            frame from every frame of its window, its video window holds fewer frames
            than it has rows, a row's time is more than half a frame from every frame,
            its rows are not in the data file where the metadata puts them or the file
            holds more of them.

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
    info = _json(files, files.read("meta/info.json"), "meta/info.json")
    if not isinstance(info, dict):
        raise files.error(f"meta/info.json holds {type(info).__name__}, not an object")
    version = info.get("codebase_version")
    if version not in SUPPORTED_VERSIONS:
        raise files.error(
            f"codebase_version {version!r} is not supported; the supported ones are "
            f"{', '.join(SUPPORTED_VERSIONS)}"
        )
    videos = _video_features(files, info)
    chosen = list(videos if cameras is None else _names(files, "cameras", cameras))
    for cam in chosen:
        if cam not in videos:
            raise files.error(f"no camera {cam!r}; the cameras are {videos}")
    known = _column_features(files, info)
    wanted = tuple(known if columns is None else _names(files, "columns", columns))
    for name in wanted:
        if name not in known:
            kind = " (a camera: give it in cameras=)" if name in videos else ""
            raise files.error(f"no column {name!r}{kind}; the columns are {known}")
    for needed in ("timestamp", "episode_index"):
        if needed not in known:
            raise files.error(f"no column {needed!r} in info.json's features")
    if not chosen and not wanted:
        raise ValueError(
            f"LeRobot dataset {files.name}: nothing to read: give a camera or a column"
        )
    asked = None if episodes is None else _asked(files, episodes)
    fps = _fps(files, info)
    if version == "v2.1":
        found = _v21_episodes(files, info)
        for e in found:
            e["videos"] = {cam: e["videos"][cam] for cam in chosen}
    else:
        found = _v30_episodes(files, info, chosen, fps)
    by_index = {}
    for e in found:
        if by_index.setdefault(e["index"], e) is not e:
            raise files.error(f"episode {e['index']} is twice in the episodes' metadata")
    if asked is None:
        picked = [by_index[i] for i in sorted(by_index)]
    else:
        picked = []
        for i in asked:
            if i not in by_index:
                known_indices = (
                    f"indices {min(by_index)} to {max(by_index)}" if by_index else "none"
                )
                raise files.error(
                    f"no episode {i}; it has {len(by_index)} episodes, {known_indices}"
                )
            picked.append(by_index[i])
    read = tuple(dict.fromkeys((*wanted, "timestamp", "episode_index")))
    options = _Options(storage_options)
    whole: dict[str, _Video] = {}  # a video per file, cut into windows

    def camera(episode: dict[str, Any], cam: str) -> _Camera:
        relative, window = episode["videos"][cam]
        what = f"episode {episode['index']}, camera {cam!r}"
        path = files.inside(relative, "video_path", what)
        try:
            if path not in whole:
                whole[path] = video(path, storage_options=storage_options)
            if window is None:
                return _Camera(cam, whole.pop(path), 0.0)
            start, stop = window
            if not start < stop:  # an episode of no row: a window of no frame
                stop = start + TIME_TOLERANCE / 2
            return _Camera(cam, whole[path].replace(start=start, stop=stop), start)
        except FileNotFoundError:
            raise files.error(
                f"episode {episode['index']}, camera {cam!r}: no video file {relative}"
            ) from None

    stamps: dict[str, tuple[int, ...] | None] = {}  # (one stat a data file)
    out = [
        _LeRobotEpisode(
            files.name,
            e["index"],
            e["length"],
            _data_key(
                files.inside(e["data"], "data_path", f"episode {e['index']}"),
                read,
                options,
                stamps,
            ),
            e["rows"],
            tuple(camera(e, cam) for cam in chosen),
            wanted,
            fps,
        )
        for e in picked
    ]
    for episode in out:
        if not len(episode):
            episode._check_empty()
    return out


def _listed(files: _Files, name: str, given: Any) -> list[Any]:
    """``given`` (the argument ``name``) as a list: a TypeError for one name or index."""
    if isinstance(given, (str, bytes)) or not isinstance(given, Iterable):
        raise TypeError(
            f"LeRobot dataset {files.name}: {name}= is a list, got {type(given).__name__} "
            f"{given!r}: give [{given!r}] for one"
        )
    return list(given)


def _once(files: _Files, name: str, items: list[Any]) -> None:
    """A ValueError naming the first item of ``items`` (the argument ``name``) given twice."""
    seen: set[Any] = set()
    for item in items:
        try:
            if item in seen:
                raise ValueError(f"LeRobot dataset {files.name}: {name} gives {item!r} twice")
            seen.add(item)
        except TypeError:  # not a name (unhashable): refused where it is looked up
            continue


def _names(files: _Files, name: str, given: Any) -> list[str]:
    """The cameras or columns asked for (``name``): a list of names, each once."""
    names = _listed(files, name, given)
    _once(files, name, names)
    return names


def _asked(files: _Files, episodes: Any) -> list[int]:
    """The episode indices asked for, checked: integers (not bools), at least one, once each."""
    asked = _listed(files, "episodes", episodes)
    if not asked:
        raise ValueError(f"LeRobot dataset {files.name}: no episode asked for (episodes=[])")
    for i in asked:
        if _integer(i) is None:
            raise ValueError(
                f"LeRobot dataset {files.name}: episode indices are integers, got {i!r}"
            )
    indices = [int(i) for i in asked]
    _once(files, "episodes", indices)
    return indices


def _data_key(
    path: str, columns: tuple[str, ...], options: _Options, stamps: dict[str, Any]
) -> _Key:
    """The key of the reader of a data file, with its stamp (taken once a file, in ``stamps``)."""
    if path not in stamps:
        stamps[path] = local_stamp(path)
    return _Key(path, columns, options, None, stamps[path])
