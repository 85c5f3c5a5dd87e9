"""Streams of one recording side by side: one stream of dict (or tuple) steps."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._index import slice_bounds, step_index


class _Zip:
    """Streams of one length read together: step ``i`` holds step ``i`` of each."""

    def __init__(self, streams: dict[Any, Any] | tuple[Any, ...], length: int):
        self.streams = streams
        self.length = length

    def __repr__(self) -> str:
        if isinstance(self.streams, dict):
            inner = ", ".join(f"{k!r}: {v!r}" for k, v in self.streams.items())
            return f"zip_streams({{{inner}}})"
        return f"zip_streams(({', '.join(map(repr, self.streams))},))"

    def __len__(self) -> int:
        return self.length

    def _each(self, key: Any) -> dict[Any, Any] | tuple[Any, ...]:
        if isinstance(self.streams, dict):
            return {k: s[key] for k, s in self.streams.items()}
        return tuple(s[key] for s in self.streams)

    def __getitem__(self, key: int | slice) -> dict[Any, Any] | tuple[Any, ...]:
        if isinstance(key, slice):
            return self._each(slice(*slice_bounds(key, self.length)))  # clamped like numpy's
        return self._each(step_index(key, self.length))

    def close(self) -> None:
        """Close every stream that can be closed (each reopens on its next read)."""
        values = self.streams.values() if isinstance(self.streams, dict) else self.streams
        for stream in values:
            close = getattr(stream, "close", None)
            if callable(close):
                close()


def zip_streams(
    streams: Mapping[Any, Sequence[Any]] | Sequence[Sequence[Any]],
) -> _Zip:
    """Put streams of one length side by side: one stream whose steps hold a step of each.

    The streams of one recording (its video, the rows of its table, its labels) become one
    stream, which the loader reads as any other: step ``i`` is a dict ``{key: step i of
    that stream}`` (a tuple for a tuple of streams), and ``s[a:b]`` a dict (or tuple) of
    each stream's slice ``a:b``, so that a batch's ``data`` is a dict of arrays
    ``[B, T, ...]``. The lengths are compared here, once; nothing is read until a step
    is. The zipped stream is picklable when its streams are (the sources of
    :mod:`streamseq.io` are, and open their files in the process that reads), and its
    ``close`` closes them.

    Args:
        streams: a dict of streams (any key), or a tuple (or list) of streams, of one length.

    Returns:
        A stream of ``len`` the streams' length, of dict (or tuple) steps.

    Raises:
        ValueError: no stream given, or a stream of another length than the first, naming
            both keys (positions for a tuple) and their lengths.

    Example:
        >>> import numpy as np
        >>> s = zip_streams({"frame": np.zeros((4, 2, 2), np.uint8), "state": np.arange(4.0)})
        >>> len(s), s[1:3]["state"], s[-1]["frame"].shape
        (4, array([1., 2.]), (2, 2))
        >>> zip_streams((np.arange(4), np.arange(3)))
        Traceback (most recent call last):
        ...
        ValueError: zip_streams: stream 1 has 3 steps, stream 0 has 4
    """
    if isinstance(streams, Mapping):
        zipped: dict[Any, Any] | tuple[Any, ...] = dict(streams)
        items = list(zipped.items())
        name = repr
    else:
        zipped = tuple(streams)
        items = list(enumerate(zipped))
        name = "stream {}".format  # noqa: UP032 - applied to each key
    if not items:
        raise ValueError("zip_streams: no stream given")
    first_key, first = items[0]
    length = len(first)
    for key, stream in items[1:]:
        if len(stream) != length:
            raise ValueError(
                f"zip_streams: {name(key)} has {len(stream)} steps, {name(first_key)} has {length}"
            )
    return _Zip(zipped, length)
