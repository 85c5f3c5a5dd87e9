"""What a store records of every source: a name, and what identifies its file."""

from __future__ import annotations

import functools
import json
import os
from typing import Any

from streamseq.errors import SourceError, StreamError
from streamseq.read.ref import StreamRef, identity, is_stream


def source_record(ref: StreamRef) -> list[Any]:
    """``[name, state]`` of the stream of ``ref`` as JSON keeps it (see :func:`_record`)."""
    return json.loads(json.dumps(_record(ref), default=str))


def _record(ref: StreamRef) -> list[Any]:
    """``[name, state]`` of the stream of ``ref``: its :func:`identity`, and its file's state.

    The state is what the source recorded of its file when it was made (a source of
    :mod:`streamseq.io`), or the state of the local files an opener's
    ``functools.partial`` names; ``None`` for streams in memory.

    Example:
        >>> import numpy as np
        >>> _record(StreamRef(0, np.arange(3)))
        ['ndarray', None]
    """
    from streamseq.io._base import file_state  # (streamseq.io is loaded on first use)

    source = ref.source
    if is_stream(source):
        state = getattr(source, "_file_state", None)
        return [identity(source), None if state is None else dict(state)]
    if isinstance(source, functools.partial):
        paths = [os.fspath(a) for a in source.args if isinstance(a, (str, os.PathLike))]
        local = [p for p in paths if os.path.isfile(p)]
        return [identity(source), {p: file_state(p) for p in local} or None]
    return [identity(source), None]


def check_source(ref: StreamRef) -> None:
    """Raise the source's own :class:`SourceError` when its file changed since it was made.

    Raises:
        SourceError: naming the stream and the file.
    """
    source = ref.source
    change = getattr(source, "_change", None) if is_stream(source) else None
    if change is None:
        return
    error = change()
    if error is not None:
        ref.locate(error)
        raise error


def record_change(ref: StreamRef, before: list[Any], now: list[Any]) -> StreamError | None:
    """The error saying how stream ``ref`` differs from what the store recorded, or ``None``."""
    from streamseq.io._base import state_changes

    if before == now:
        return None
    if before[0] != now[0]:
        what = f"another source ({before[0]!r} -> {now[0]!r})"
    else:
        old, new = before[1] or {}, now[1] or {}
        if old and all(isinstance(v, dict) for v in old.values()):  # an opener's files
            words = [w for p in old for w in state_changes(old[p], new.get(p, {}))]
        else:
            words = state_changes(old, new)
        what = f"its file changed ({', '.join(words) or 'another record'})"
    where = getattr(ref.source, "path", None) or now[0]
    error = SourceError(
        str(where),
        f"{what} since the store was made: its stored steps would be stale; it is written "
        "again with on_change='rebuild'",
    )
    ref.locate(error)
    return error
