"""Event-camera recordings as streams of fixed time windows, and a synthetic recorder.

An event camera reports per-pixel brightness changes as events ``(t, x, y, p)``: a time
in microseconds, a pixel, and a polarity (on: brighter, off: darker). A recording is a
structured array of events sorted by ``t``; the stream cuts it into windows of
``window_us`` microseconds, each delivered as a histogram of events per polarity and pixel.
"""

from __future__ import annotations

import bisect
import math
import os
from typing import Any

import numpy as np

from streamseq._checks import check_int
from streamseq._redact import redacted_repr
from streamseq.errors import SourceError
from streamseq.io._base import Source, check_file
from streamseq.io._mapped import MappedFile
from streamseq.io._noise import value_noise
from streamseq.io._npy import RemoteArray, read_npy_header
from streamseq.io._options import read_options, reads
from streamseq.io.remote import locate

#: the dtype :func:`synthetic_events` produces (any dtype with fields t, x, y, p will do)
EVENT_DTYPE = np.dtype([("t", "<i8"), ("x", "<u2"), ("y", "<u2"), ("p", "i1")])
_FIELDS = ("t", "x", "y", "p")

#: events whose times are compared at once when a recording's order is checked (a block
#: of the ``t`` column: 8 MiB of ``int64`` times, 13 MiB of :data:`EVENT_DTYPE` rows read)
_ORDER_BLOCK = 1 << 20

#: the times a window's arithmetic holds (microseconds, as ``int64``)
_INT64 = np.iinfo(np.int64)


def _whole(name: str, value: Any, least: int | None = None) -> int:
    """``value`` as an int of ``int64`` (:func:`~streamseq._checks.check_int`: 1000.0 is 1000).

    Raises:
        TypeError: not a whole number (``2.5``, NaN, a string).
        ValueError: smaller than ``least``, or out of ``int64``.

    Example:
        >>> _whole("window_us", 1000.0), _whole("t0", np.int32(-5))
        (1000, -5)
        >>> _whole("t0", 2**70)
        Traceback (most recent call last):
        ...
        ValueError: t0 must be within int64, got 1180591620717411303424
    """
    number = check_int(value, name, least)
    if not _INT64.min <= number <= _INT64.max:
        raise ValueError(f"{name} must be within int64, got {number}")
    return number


def _time(t: Any) -> int:
    """An event's time as an int, a float one rounded down (the window that holds it)."""
    return int(math.floor(t)) if isinstance(t, (float, np.floating)) else int(t)


def first_out_of_order(recording: Any) -> int | None:
    """The first event whose ``t`` is smaller than the one before it; None if sorted.

    One pass over the ``t`` column, a block of :data:`_ORDER_BLOCK` events at a time (a
    memory-mapped or remote recording is read once, never held whole). Equal times are
    in order; a NaN is in order with nothing (the event after it, or it, is named).

    Example:
        >>> rec = np.zeros(4, EVENT_DTYPE)
        >>> rec["t"] = [0, 5, 5, 9]
        >>> first_out_of_order(rec) is None
        True
        >>> rec["t"][3] = 4
        >>> first_out_of_order(rec)
        3
    """
    last = None  # the time of the event before the block
    for a in range(0, len(recording), _ORDER_BLOCK):
        t = np.asarray(recording[a : a + _ORDER_BLOCK]["t"])
        if last is not None and not t[0] >= last:
            return a
        late = np.flatnonzero(~(t[1:] >= t[:-1]))
        if len(late):
            return a + 1 + int(late[0])
        last = t[-1]
    return None


class _Events(Source):
    def __init__(
        self,
        source: str | os.PathLike | np.ndarray,
        window_us: int,
        height: int,
        width: int,
        t0: int | None,
        length: int | None,
        storage_options: dict[str, Any] | None = None,
    ):
        super().__init__(close=_close)
        window_us = _whole("window_us", window_us, least=1)
        height, width = _whole("height", height, least=1), _whole("width", width, least=1)
        t0 = None if t0 is None else _whole("t0", t0)
        length = None if length is None else _whole("length", length, least=0)
        self._remote = None
        if isinstance(source, np.ndarray):
            self.path = None
            self.array: np.ndarray | None = source
            recording = source
        else:
            path = os.fspath(source)
            self._remote = locate(path, storage_options)
            self.path = path if self._remote is not None else check_file(path)
            self._record_state(None if self._remote is None else dict(self._remote.stat))
            self.array = None
            recording = self._load()
        try:
            self._check(recording)
        except BaseException:
            _close(recording)
            raise
        self.window_us, self.height, self.width = window_us, height, width
        #: how it reads (:func:`~streamseq.io._options.read_options`): the options given
        self.read_options = read_options(
            "events", {"window_us": window_us, "height": height, "width": width, "t0": t0}
        )
        n = len(recording)
        t_first = _time(recording["t"][0]) if n else 0
        self.t0 = t_first if t0 is None else t0
        if length is not None:
            self.length = length
        elif n == 0:
            self.length = 0
        else:
            last = _time(recording["t"][-1])
            self.length = max(0, -(-(last - self.t0 + 1) // window_us))

    def _check(self, recording: np.ndarray | RemoteArray) -> None:
        """Refuse a recording that is not events sorted by ``t`` (one pass over ``t``).

        The windows of a stream are found by bisecting ``t``: one event out of order can
        end a bisection early, and the events after it would be left out of every window.

        Raises:
            ValueError: for an array given, or :class:`SourceError` naming the file: not a
                1-d array with fields ``t, x, y, p``, or an event earlier than the one
                before it (both named).
        """
        names = recording.dtype.names or ()
        missing = [f for f in _FIELDS if f not in names]
        problem = None
        if missing or recording.ndim != 1:
            problem = (
                f"events must be a 1-d structured array with fields {_FIELDS}, "
                f"got shape {recording.shape} and fields {names}"
            )
        else:
            problem = _fields_problem(recording.dtype) or _times_problem(recording)
        if problem is not None:
            if self.path is None:
                raise ValueError(problem)
            raise SourceError(self.path, problem)

    def __repr__(self) -> str:
        what = redacted_repr(self.path) if self.path is not None else f"<{len(self.array)} events>"
        return f"events({what}, window_us={self.window_us})"

    def _load(self) -> np.ndarray | RemoteArray:
        if self._remote is not None:
            file = self._remote.open("blockcache")  # bisection reads here and there
            try:
                shape, _, dtype, offset = read_npy_header(self.path, file)
            except BaseException:
                file.close()
                raise
            if dtype.hasobject:
                file.close()
                raise SourceError(self.path, "not a .npy array of events")
            return RemoteArray(file, shape, dtype, offset)
        mapped = self._map()
        mapped.close()  # (the map outlives the file: this process's handle opens its own)
        return mapped.array

    def _map(self) -> MappedFile:
        """The local file's events, memory-mapped, with the file open to check it."""
        path = self.path
        assert path is not None
        try:
            with open(path, "rb") as file:
                shape, fortran, dtype, offset = read_npy_header(path, file)
                file.seek(0)
                header = file.read(offset)
        except SourceError as e:
            raise SourceError(path, f"cannot load events, {e.detail}") from e
        except OSError as e:
            raise SourceError(path, f"cannot load events, not a valid .npy file: {e}") from e
        if dtype.hasobject:
            raise SourceError(path, "not a .npy array of events")
        order = "F" if fortran else "C"

        def mapped(file: Any) -> np.ndarray:
            if 0 in shape:  # (nothing to map: mmap refuses empty ranges)
                return np.zeros(shape, dtype, order=order)
            return np.memmap(file, dtype, mode="r", offset=offset, shape=shape, order=order)

        try:
            return MappedFile(path, mapped, header)
        except (OSError, ValueError) as e:  # (a file shorter than its header says)
            raise SourceError(path, f"cannot load events, not a valid .npy file: {e}") from e

    def __len__(self) -> int:
        return self.length

    def _open(self) -> np.ndarray | RemoteArray | MappedFile:
        if self.array is not None:
            return self.array
        return self._load() if self._remote is not None else self._map()

    def _empty(self) -> np.ndarray:
        return np.zeros((0, 2, self.height, self.width), np.float32)

    def step_spec(self) -> tuple[np.dtype, tuple[int, ...]]:
        """``float32`` histograms ``[2, height, width]``."""
        return np.dtype(np.float32), (2, self.height, self.width)

    def _read(self, handle: np.ndarray | RemoteArray | MappedFile, a: int, b: int) -> np.ndarray:
        if not isinstance(handle, MappedFile):
            return self._histograms(handle, a, b)
        handle.check()  # (a file cut short under the map: zeros, or a bus error)
        try:
            out = self._histograms(handle.array, a, b)
        except ValueError as e:  # (the map read new bytes: told as the file's change)
            try:
                handle.check()
            except SourceError as changed:
                raise changed from e
            raise
        handle.check()  # a change during the read: its steps refused
        return out

    def _histograms(self, recording: np.ndarray | RemoteArray, a: int, b: int) -> np.ndarray:
        """The histograms of windows ``a`` to ``b`` of ``recording``."""
        start, stop = self.t0 + a * self.window_us, self.t0 + b * self.window_us
        t, column = recording["t"], recording.dtype["t"]
        i0 = _first_at_least(t, start, column)  # O(log n) reads: never copies the column
        i1 = _first_at_least(t, stop, column, lo=i0)
        chunk = np.asarray(recording[i0:i1])
        ts = _floor(chunk["t"])
        if len(ts) > 1 and np.any(ts[1:] < ts[:-1]):
            raise ValueError(f"{self!r}: events are not sorted by t")
        # t - start is in [0, (b - a) * window_us): exact in uint64, where int64 may wrap
        # (times far apart); start >= t0 >= the least int64, and <= t when an event is read
        since = ts.astype(np.uint64) - np.uint64(start % (1 << 64))
        window = (since // np.uint64(self.window_us)).astype(np.int64)
        x, y = _floor(chunk["x"]), _floor(chunk["y"])
        if len(ts) and (
            x.min() < 0 or y.min() < 0 or x.max() >= self.width or y.max() >= self.height
        ):
            raise ValueError(
                f"{self!r}: event outside the {self.height}x{self.width} sensor "
                f"(x in [{x.min()}, {x.max()}], y in [{y.min()}, {y.max()}])"
            )
        polarity = (chunk["p"] > 0).astype(np.int64)
        index = ((window * 2 + polarity) * self.height + y) * self.width + x
        size = (b - a) * 2 * self.height * self.width
        counts = np.bincount(index, minlength=size)
        return counts.astype(np.float32).reshape(b - a, 2, self.height, self.width)


def _first_at_least(t: Any, time: int, column: np.dtype, lo: int = 0) -> int:
    """The first index from ``lo`` of the sorted times ``t`` (of dtype ``column``) >= ``time``.

    ``time`` is compared as the least value of ``column`` that is at least ``time``: a
    bisection with the int itself compares it in the column's precision (in ``float32``,
    ``2**24 + 1`` is ``2**24``: the events at ``2**24`` would fall in no window).

    Example:
        >>> t = np.array([0.0, 2.0**24, 2.0**24 + 2], np.float32)
        >>> _first_at_least(t, 2**24 + 1, t.dtype), _first_at_least(t, 2**24, t.dtype)
        (2, 1)
    """
    if column.kind == "f":
        with np.errstate(over="ignore"):  # (past the dtype's range: an infinity, as it is)
            key = column.type(time)
        if np.isfinite(key) and int(key) < time:
            key = np.nextafter(key, column.type(np.inf))
    else:
        info = np.iinfo(column)
        if time > info.max:
            return len(t)
        key = column.type(max(time, info.min))
    return bisect.bisect_left(t, key, lo=lo)


def _floor(values: np.ndarray) -> np.ndarray:
    """``values`` as ``int64``, floats rounded down (not toward zero: -0.5 is -1, not 0)."""
    if values.dtype.kind == "f":
        values = np.floor(values)
    return values.astype(np.int64)


def _fields_problem(dtype: np.dtype) -> str | None:
    """What makes the fields ``t, x, y, p`` of ``dtype`` not those of events, if anything.

    ``t`` is integers or floats (microseconds), ``x`` and ``y`` too (a float pixel
    rounded down), ``p`` those or booleans; each one value an event.
    """
    kinds = {"t": "iuf", "x": "iuf", "y": "iuf", "p": "biuf"}
    for name in _FIELDS:
        field = dtype.fields[name][0]
        if field.shape != ():
            return f"the field {name} must hold one value an event, got {field.shape}"
        if field.kind not in kinds[name]:
            return f"{name} of dtype {field} is not a number of microseconds or pixels"
    return None


def _times_problem(recording: np.ndarray | RemoteArray) -> str | None:
    """What makes the times of ``recording`` unfit for windows, if anything (one pass).

    Times must be sorted (an event out of order ends a bisection early: the events after
    it would be left out of every window), numbers (a NaN is sorted with nothing), and
    within ``int64`` once rounded down (the first and the last, the recording sorted).
    """
    late = first_out_of_order(recording)
    if late is not None:
        before, at = recording[late - 1]["t"], recording[late]["t"]
        for i, t in ((late - 1, before), (late, at)):
            if t != t:
                return f"event {i} has t={t}, not a time"
        return (
            f"events are not sorted by t: event {late} (t={at}) comes after event "
            f"{late - 1} (t={before})"
        )
    n = len(recording)
    for i in (0, n - 1) if n else ():
        t = recording[i]["t"]
        if not (np.isfinite(t) and _INT64.min <= _time(t) <= _INT64.max):
            return f"event {i} has t={t}, out of int64 microseconds"
    return None


def _close(recording: Any) -> None:
    if isinstance(recording, (RemoteArray, MappedFile)):
        recording.close()


@reads("events")
def events(
    source: str | os.PathLike | np.ndarray,
    *,
    window_us: int,
    height: int,
    width: int,
    t0: int | None = None,
    length: int | None = None,
    storage_options: dict[str, Any] | None = None,
) -> _Events:
    """Stream an event-camera recording as histograms over fixed time windows.

    Step ``k`` counts the events with ``t0 + k * window_us <= t < t0 + (k + 1) * window_us``
    per polarity and pixel: a float32 array ``[2, height, width]`` whose channel 0 counts
    the off events (``p <= 0``) and channel 1 the on events (``p > 0``). The events of a
    window are found by binary search on ``t``, so reading costs the size of the windows
    read, whatever the size of the recording. Making the stream checks that ``t`` is
    sorted, in one pass over the ``t`` column (about a second for a billion events of a
    local file in the page cache; a file at a URL is read whole once): one event out of
    order would end a binary search early, leaving the events after it out of every
    window.

    Args:
        source: a ``.npy`` file (memory-mapped, in each process that reads; at a URL,
            ``s3://``, ``https://`` or any fsspec protocol, read in ranges through a
            block cache) or an array, 1-d, structured with fields ``t`` (microseconds,
            sorted; integers, or floats each counted in the window that holds it),
            ``x``, ``y``, ``p``.
        window_us: duration of a step, in microseconds.
        height: sensor height (``y < height``).
        width: sensor width (``x < width``).
        t0: start of the first window; the time of the first event by default.
        length: number of steps; by default enough to cover the last event:
            ``ceil((t_last - t0 + 1) / window_us)``.
        storage_options: for a URL, the options of its fsspec filesystem (credentials,
            endpoint, ...); see :mod:`streamseq.io.remote`.

    Returns:
        A stream: ``e[a:b]`` is a float32 array ``[b - a, 2, height, width]``.

    Raises:
        FileNotFoundError: ``source`` is a path that does not exist.
        TypeError: ``window_us``, ``height``, ``width``, ``t0`` or ``length`` is not a
            whole number (``1000.0`` is 1000; ``2.5`` or NaN is refused, never cut).
        ValueError: one of them out of ``int64``, ``window_us``, ``height`` or ``width``
            below 1, ``length`` below 0; an array given lacks a field, has a field of
            another kind (``t``, ``x``, ``y`` numbers; a float rounded down), or its times
            are not sorted numbers within ``int64`` once rounded down (the first event out
            of order, NaN or out of range named); an event read lies outside the sensor.
        ImportError: ``source`` is a URL and fsspec (or the package of its protocol) is
            missing: ``pip install 'streamseq[remote]'``.
        streamseq.errors.SourceError: the file is not a readable ``.npy`` array of events
            sorted by ``t`` (what the ValueError of an array says, naming the file); a URL
            cannot be reached (after a few attempts); on a read, the file changed since
            the source was made (each process checks when it opens the file, and a local
            file's map before and after every read: a file cut short or written again in
            place is refused, never read as zeros or as other events; not a rewrite
            that keeps its size, its time and its ``.npy`` header).

    Example:
        >>> ev = np.zeros(4, EVENT_DTYPE)
        >>> ev["t"], ev["x"], ev["y"], ev["p"] = [0, 5, 12, 29], [0, 1, 1, 2], 0, [1, 1, 0, 1]
        >>> e = events(ev, window_us=10, height=1, width=3)
        >>> len(e), e[0:2].shape
        (3, (2, 2, 1, 3))
        >>> e[1].tolist()  # t=12: one off event at x=1
        [[[0.0, 1.0, 0.0]], [[0.0, 0.0, 0.0]]]
    """
    return _Events(source, window_us, height, width, t0, length, storage_options)


def synthetic_events(
    *,
    height: int = 64,
    width: int = 64,
    duration_us: int = 1_000_000,
    seed: int = 0,
    threshold: float = 0.2,
    step_us: int = 1000,
    noise_hz: float = 0.2,
    balls: int = 2,
) -> np.ndarray:
    """Record a synthetic scene with an idealised event camera.

    The scene is a still, softly textured background with bright balls moving along smooth
    looping paths. The camera fires an event each time the log intensity of a pixel moves
    by ``threshold`` from its level at the previous event (times interpolated within each
    rendering step of ``step_us``), plus background noise events at ``noise_hz`` per pixel.

    Args:
        height: sensor height.
        width: sensor width.
        duration_us: length of the recording in microseconds.
        seed: seed of the scene (paths, sizes, texture, noise).
        threshold: contrast threshold, in log intensity.
        step_us: rendering step, in microseconds.
        noise_hz: rate of noise events per pixel, per second.
        balls: number of moving balls.

    Returns:
        A structured array of dtype :data:`EVENT_DTYPE` sorted by ``t``.

    Example:
        >>> ev = synthetic_events(height=32, width=48, duration_us=100_000, seed=1)
        >>> ev.dtype.names, bool(np.all(np.diff(ev["t"]) >= 0)), len(ev) > 100
        (('t', 'x', 'y', 'p'), True, True)
        >>> int(ev["x"].max()) < 48 and int(ev["y"].max()) < 32
        True
    """
    rng = np.random.default_rng(seed)
    background = 0.15 + 0.25 * value_noise(rng, height, width, 6)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float64)
    size = min(height, width)
    radius = rng.uniform(0.08, 0.16, balls) * size
    level = rng.uniform(0.6, 1.0, balls)
    freq = rng.uniform(0.5, 2.0, (balls, 2)) * 2 * np.pi / 1e6  # radians per microsecond
    phase = rng.uniform(0, 2 * np.pi, (balls, 2))

    def render(t: float) -> np.ndarray:
        image = background.copy()
        for i in range(balls):
            cx = width / 2 + (width / 2 - radius[i]) * math.sin(freq[i, 0] * t + phase[i, 0])
            cy = height / 2 + (height / 2 - radius[i]) * math.sin(freq[i, 1] * t + phase[i, 1])
            d = np.sqrt((xx - cx) ** 2 + (yy - cy) ** 2)
            disk = np.clip(radius[i] + 0.5 - d, 0.0, 1.0)  # antialiased edge
            image = image * (1 - disk) + level[i] * disk
        return np.log(image + 1e-3)

    reference = render(0.0)
    found: list[tuple[np.ndarray, ...]] = []
    for t in range(step_us, duration_us + 1, step_us):
        diff = render(float(t)) - reference
        n = np.floor(np.abs(diff) / threshold).astype(np.int64)
        ys, xs = np.nonzero(n)
        if len(ys):
            counts = n[ys, xs]
            sign = np.sign(diff[ys, xs]).astype(np.int8)
            reference[ys, xs] += sign * counts * threshold
            rep = np.repeat(np.arange(len(ys)), counts)
            k = np.arange(len(rep)) - np.repeat(np.cumsum(counts) - counts, counts)
            times = t - step_us + (k + 1) * step_us // (counts[rep] + 1)
            found.append((times, xs[rep], ys[rep], sign[rep]))
    n_noise = rng.poisson(noise_hz * height * width * duration_us / 1e6)
    found.append(
        (
            rng.integers(0, duration_us, n_noise),
            rng.integers(0, width, n_noise),
            rng.integers(0, height, n_noise),
            rng.choice(np.array([-1, 1], np.int8), n_noise),
        )
    )
    t_all, x_all, y_all, p_all = (np.concatenate(parts) for parts in zip(*found, strict=True))
    order = np.argsort(t_all, kind="stable")
    out = np.empty(len(order), EVENT_DTYPE)
    out["t"], out["x"], out["y"], out["p"] = t_all[order], x_all[order], y_all[order], p_all[order]
    return out
