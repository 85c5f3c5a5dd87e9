"""Time-aligned recordings: named modalities zipped onto one grid of time steps.

A recording holds several streams of one scene (a video, its audio, an event camera,
labels) that run at their own rates. :func:`recording` cuts time into steps of ``step``
seconds and gives, for step ``i`` (the interval ``[i * step, (i + 1) * step)``), every
modality's data of that interval with a fixed shape:

- **video** (:func:`~streamseq.io.video`): the frame shown at the interval's start (the
  video at the constant rate ``1 / step``: :meth:`~streamseq.io.video.at_fps`);
- **audio** (:func:`~streamseq.io.audio`): the ``rate * step`` samples of the interval,
  ``[rate * step, channels]`` (the last step padded with zeros);
- **events** (:func:`~streamseq.io.events`): the histogram of the events of the interval,
  ``[2, height, width]``: what the events stream gives for a window of ``step``;
- **labels**: the label in force at the interval's start, from an array with one label per
  step, a pair ``(times, values)`` (a label holds from its time to the next one's) or a
  table episode (:func:`~streamseq.io.table`; with a ``timestamp`` column, its rows are
  labels at those times, else one row per step).

Each modality reads its own slice, forward, when the steps are read in order (its decoder
goes on), and seeks as it would alone otherwise. A recording is a picklable stream of dict
steps; its decoders are opened in the process that reads.
"""

from __future__ import annotations

import functools
import math
import operator
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from streamseq._redact import redacted_repr
from streamseq._tree import tree_map
from streamseq.errors import SourceError, StreamError
from streamseq.io._base import Source
from streamseq.io.audio import _Audio, audio
from streamseq.io.events import _Events
from streamseq.io.remote import is_url, public_url
from streamseq.io.table import _Episode
from streamseq.io.video import _Video, duration, grid_steps, shown_frames, video

#: a fraction of a step within which two times or rates count as equal
STEP_TOLERANCE = 1e-6

_VIDEO_EXT = (".mp4", ".mkv", ".avi", ".mov", ".webm", ".m4v", ".ts")
_AUDIO_EXT = (".wav", ".flac", ".mp3", ".m4a", ".aac", ".ogg", ".opus")


def _whole(x: float, what: str) -> int:
    """``x`` as an integer, if it is one within :data:`STEP_TOLERANCE` (else ValueError)."""
    if not math.isfinite(x):
        raise ValueError(what)
    k = round(x)
    if abs(x - k) > STEP_TOLERANCE * max(1.0, abs(x)):
        raise ValueError(what)
    return int(k)


class _Modality:
    """One modality on the grid: ``length`` steps from its first, read as (data, valid).

    Subclasses set ``source`` (what they read), ``seconds`` (the time it covers, from its
    start) and implement :meth:`steps` and :meth:`read`.
    """

    kind = "steps"
    source: Any

    def __repr__(self) -> str:
        return repr(self.source)

    @property
    def path(self) -> str | None:
        return getattr(self.source, "path", None)

    def steps(self) -> int:
        """The number of steps, from the modality's first."""
        return len(self.source)

    def seconds(self, step: float) -> float:
        return self.steps() * step

    def empty(self) -> Any:
        """Data with no step: the dtype and shape of a step."""
        return self.source[0:0]

    def read(self, a: int, b: int) -> tuple[Any, np.ndarray | None]:
        """Steps ``a`` to ``b`` (``0 <= a < b <= steps()``) and which hold data (None: all)."""
        return self.source[a:b], None


class _Frames(_Modality):
    """A video at the constant rate of the grid: the frame shown at each step's start."""

    kind = "video"

    def __init__(self, source: _Video, step: float):
        rate = 1.0 / step
        if source.step_rate is not None:
            if abs(source.step_rate - rate) > STEP_TOLERANCE * rate:
                raise ValueError(
                    f"mismatched rates: the video runs at fps={source.step_rate:g}, "
                    f"the steps at {rate:g} per second"
                )
            self.source = source
        else:
            self.source = source.at_fps(rate)

    def seconds(self, step: float) -> float:
        return self.source.duration


class _Samples(_Modality):
    """An audio stream cut into steps of ``rate * step`` samples."""

    kind = "audio"

    def __init__(self, source: _Audio, step: float):
        rate = source.rate
        try:
            n = _whole(rate * step, "")
        except ValueError:
            raise ValueError(
                f"mismatched rates that cannot divide a step: {rate} samples per second "
                f"make {rate * step:g} samples in a step of {step:g} s (a whole number "
                "is needed: choose the step, or resample with sample_rate=)"
            ) from None
        if source.frame == n:
            self.source = source
        else:
            self.source = source.replace(frame=n, length=None)  # its own decoder

    def seconds(self, step: float) -> float:
        return self.source.num_samples() / self.source.rate


class _Windows(_Modality):
    """An events stream re-cut into windows of one step."""

    kind = "events"

    def __init__(self, source: _Events, step: float):
        try:
            window = _whole(step * 1e6, "")
        except ValueError:
            raise ValueError(
                f"mismatched rates that cannot divide a step: a step of {step:g} s is not "
                "a whole number of microseconds"
            ) from None
        if window < 1:
            raise ValueError(
                f"a step of {step:g} s is shorter than a microsecond, the time unit of events"
            )
        self.covered_us = len(source) * source.window_us
        if source.window_us == window:
            self.source = source
        else:
            length = -(-self.covered_us // window)
            self.source = source.replace(window_us=window, length=length)

    def seconds(self, step: float) -> float:
        return self.covered_us / 1e6


class _Labels(_Modality):
    """Values at times: each step holds the one in force at its start."""

    kind = "labels"

    def __init__(self, times: Any, values: Any, step: float):
        self.times = np.asarray(times, np.float64).ravel()
        self.source = values
        self.step = step
        if len(self.times) != len(values):
            raise ValueError(f"{len(self.times)} times for {len(values)} values")
        if len(self.times) == 0:
            raise ValueError("no label")
        if np.any(np.diff(self.times) < 0):
            raise ValueError("the times of the labels are not sorted")

    def __repr__(self) -> str:
        return f"labels({len(self.times)} at times, {self.source!r})"

    def seconds(self, step: float) -> float:
        return float(self.times[0]) + duration(self.times, math.nan, 1.0 / step)

    def steps(self) -> int:
        return grid_steps(self.seconds(self.step), 1.0 / self.step)

    def read(self, a: int, b: int) -> tuple[Any, np.ndarray | None]:
        index = shown_frames(self.times, np.arange(a, b) * self.step)
        valid = index >= 0
        index = np.maximum(index, 0)
        lo, hi = int(index[0]), int(index[-1]) + 1
        block = self.source[lo:hi]
        return tree_map(lambda x: np.asarray(x)[index - lo], block), valid


def _zeros_like(n: int, x: Any) -> np.ndarray:
    """Zeros of ``n`` steps shaped as the steps of ``x``."""
    x = np.asarray(x)
    return np.zeros((n, *x.shape[1:]), x.dtype)


def _put(where: slice, valid: np.ndarray | None, dst: np.ndarray, src: Any) -> None:
    """Copy ``src`` into ``dst[where]``, zeros where it is not ``valid``."""
    dst[where] = src
    if valid is not None:
        dst[where][~valid] = 0


def _modality(name: str, value: Any, step: float) -> _Modality:
    """The modality that ``value`` makes (a source, a path, an array, a pair)."""
    if isinstance(value, (str, os.PathLike)):
        ext = os.path.splitext(os.fspath(value))[1].lower()
        if ext in _VIDEO_EXT:
            value = video(value)
        elif ext in _AUDIO_EXT:
            value = audio(value)
        else:
            raise ValueError(
                f"cannot tell the kind of {os.fspath(value)!r} from its extension: give "
                "io.video(...), io.audio(...) or io.events(...)"
            )
    if isinstance(value, _Video):
        return _Frames(value, step)
    if isinstance(value, _Audio):
        return _Samples(value, step)
    if isinstance(value, _Events):
        return _Windows(value, step)
    if isinstance(value, tuple) and len(value) == 2:
        return _Labels(value[0], value[1], step)
    if isinstance(value, _Episode) and "timestamp" in value.key[1]:
        return _Labels(value[:]["timestamp"], value, step)
    if hasattr(value, "__len__") and hasattr(value, "__getitem__"):
        labels = _Modality()
        labels.source = value
        return labels
    raise TypeError(f"modality {name!r}: cannot align a {type(value).__name__}")


class _Recording(Source):
    def __init__(
        self,
        step: float,
        modalities: dict[str, Any],
        offsets: dict[str, float] | None,
        ragged: bool,
        name: str | None,
    ):
        super().__init__()
        self.name = name or self._default_name(modalities)
        if not (step > 0 and math.isfinite(step)):
            raise ValueError(
                f"recording {self.name!r}: step must be a positive number of seconds, got {step}"
            )
        if not modalities:
            raise ValueError("a recording needs at least one modality")
        if "valid" in modalities:
            raise ValueError('"valid" names the validity masks: name the modality otherwise')
        self.step = float(step)
        self.ragged = bool(ragged)
        self.offsets: dict[str, int] = {}
        for key, seconds in (offsets or {}).items():
            if key not in modalities:
                raise ValueError(f"recording {self.name!r}: offset of no modality {key!r}")
            try:
                self.offsets[key] = _whole(seconds / self.step, "")
            except ValueError:
                raise ValueError(
                    f"recording {self.name!r}, modality {key!r}: offset {seconds:g} s is not "
                    f"a whole number of steps of {self.step:g} s"
                ) from None
            if self.offsets[key] < 0:
                raise ValueError(
                    f"recording {self.name!r}, modality {key!r}: negative offset {seconds:g} s"
                )
        self.modalities: dict[str, _Modality] = {}
        for key, value in modalities.items():
            self.modalities[key] = self._guard(key, None, _modality, key, value, self.step)
        self._spans: dict[str, tuple[int, int]] | None = None  # first step, end step

    @staticmethod
    def _default_name(modalities: dict[str, Any]) -> str:
        for value in modalities.values():
            path = value if isinstance(value, (str, os.PathLike)) else getattr(value, "path", None)
            if path is not None:
                path = os.fspath(path)
                path = public_url(path) if is_url(path) else path  # no query, no credential
                return os.path.splitext(os.path.basename(path))[0]
        return "recording"

    def __repr__(self) -> str:
        name, modalities = redacted_repr(self.name), ", ".join(self.modalities)
        return f"recording({name}, step={self.step:g}, {modalities})"

    def _guard(
        self, key: str, steps: tuple[int, int] | None, fn: Callable[..., Any], *args: Any
    ) -> Any:
        """``fn(*args)``, naming the recording, the modality (and the steps) in its errors."""
        where = f"recording {self.name!r}, modality {key!r}"
        if steps is not None:
            where += f", steps {steps[0]}:{steps[1]}"
        try:
            return fn(*args)
        except (StreamError, OSError, ValueError, TypeError) as e:
            path = getattr(e, "path", None) or getattr(e, "filename", None) or self.name
            detail = getattr(e, "detail", None) or getattr(e, "strerror", None) or str(e)
            raise SourceError(str(path), f"{where}: {detail}") from e

    def spans(self) -> dict[str, tuple[int, int]]:
        """The steps of every modality: ``(first, end)``, from its offset to its end.

        The first use measures the modalities (probes their files); a modality whose end
        is more than one step before the longest one's is an error unless ``ragged``.
        """
        if self._spans is None:
            spans, ends = {}, {}
            for key, m in self.modalities.items():
                first = self.offsets.get(key, 0)
                n = self._guard(key, None, m.steps)
                spans[key] = (first, first + n)
                seconds = self._guard(key, None, m.seconds, self.step)
                ends[key] = first * self.step + seconds
            longest = max(ends, key=ends.__getitem__)
            for key, end in ends.items():
                if not self.ragged and end < ends[longest] - self.step * (1 + STEP_TOLERANCE):
                    raise SourceError(
                        self.modalities[key].path or self.name,
                        f"recording {self.name!r}, modality {key!r}: shorter than the others, "
                        f"it ends at {end:.6g} s and {longest!r} at {ends[longest]:.6g} s "
                        f"(more than a step of {self.step:g} s apart; ragged=True pads it)",
                    )
            self._spans = spans
        return self._spans

    def __len__(self) -> int:
        return max(end for _, end in self.spans().values())

    def __getitem__(self, key: int | slice) -> dict[str, Any]:
        if isinstance(key, slice):
            return super().__getitem__(key)
        i = range(len(self))[key]  # IndexError, TypeError as for a sequence
        block = self._locked_read(i, i + 1)
        valid = {k: bool(v[0]) for k, v in block.pop("valid").items()}
        return {**tree_map(operator.itemgetter(0), block), "valid": valid}

    def _open(self) -> None:
        return None  # every modality opens its own

    def _empty(self) -> dict[str, Any]:
        return self._zeros(0)

    def _zeros(self, n: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, m in self.modalities.items():
            template = self._guard(key, None, m.empty)
            out[key] = tree_map(functools.partial(_zeros_like, n), template)
        out["valid"] = {key: np.zeros(n, bool) for key in self.modalities}
        return out

    def _read(self, handle: None, a: int, b: int) -> dict[str, Any]:
        out = self._zeros(b - a)
        for key, (first, end) in self.spans().items():
            lo, hi = max(a, first), min(b, end)
            if lo >= hi:
                continue
            m = self.modalities[key]
            steps = (lo - first, hi - first)
            data, valid = self._guard(key, steps, m.read, *steps)

            put = functools.partial(_put, slice(lo - a, hi - a), valid)
            tree_map(put, out[key], data)
            out["valid"][key][lo - a : hi - a] = True if valid is None else valid
        return out


def recording(
    step: float,
    *,
    ragged: bool = False,
    offsets: dict[str, float] | None = None,
    name: str | None = None,
    **modalities: Any,
) -> _Recording:
    """Zip named modalities of one recording onto a grid of time steps of ``step`` seconds.

    Step ``i`` covers the interval ``[i * step, (i + 1) * step)`` and holds, per
    modality, exactly what falls in it, with a fixed shape (see the module's
    documentation): the frame shown at the interval's start, its ``rate * step`` audio
    samples, the histogram of its events, the label in force at its start. Every modality
    starts at time 0 (its first frame, sample, window or label time 0), or at its offset.

    A step is a dict ``{name: data, ..., "valid": {name: bool}}``: a modality that has not
    started yet (an offset; labels before their first time) or has already ended gives
    zeros and ``valid`` False there; the last step of an audio modality is padded with
    zeros and valid. The recording ends with its longest modality: ``len(r)`` is the
    largest ``offset + steps`` of its modalities. By default every modality must end
    within one step of the longest (a video's end is that of its last frame, an audio's
    its last sample, an events stream's the end of its last window, labels' one mean
    interval after the last); ``ragged=True`` allows shorter ones, padded.

    Consecutive steps read every modality's slice forward (decoders go on); reading
    elsewhere seeks each as it would alone. The recording pickles without any open file
    (the probes of the files travel with it), so workers open their own.

    Args:
        step: seconds per step; ``rate * step`` must be a whole number of samples for
            every audio modality and a whole number of microseconds for events.
        ragged: allow modalities that end more than a step before the longest.
        offsets: seconds from the recording's start to a modality's (whole steps, >= 0).
        name: the recording's name in errors; the first file's name by default.
        **modalities: name to what is read: ``io.video(...)`` (or a video path),
            ``io.audio(...)`` (or an audio path), ``io.events(...)``, a pair ``(times,
            values)``, a table episode, or any sequence with one element per step (an
            array of per-step labels).

    Returns:
        A stream of dict steps: ``r[a:b]`` is ``{name: array [b - a, ...], "valid":
        {name: bool [b - a]}}``; ``r.spans()`` tells each modality's ``(first, end)``
        steps.

    Raises:
        streamseq.errors.SourceError: naming the recording and the modality (and the
            file, and the steps for a read): a missing file, rates that cannot divide a
            step, a modality shorter than the others, a read that fails.

    Example:
        >>> import numpy as np
        >>> from streamseq.io import events
        >>> ev = np.zeros(3, [("t", "<i8"), ("x", "<u2"), ("y", "<u2"), ("p", "i1")])
        >>> ev["t"], ev["p"] = [0, 150_000, 390_000], 1
        >>> r = recording(0.1, events=events(ev, window_us=1000, height=1, width=1, length=400),
        ...               label=(np.array([0.0, 0.2]), np.array([7, 8])))
        >>> len(r), r[0:4]["events"].sum(axis=(1, 2, 3)), r[0:4]["label"]
        (4, array([1., 1., 0., 1.], dtype=float32), array([7, 7, 8, 8]))
        >>> r[3]["valid"]
        {'events': True, 'label': True}
    """
    return _Recording(step, modalities, offsets, ragged, name)
