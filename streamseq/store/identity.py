"""What a store records of every source: a name, and what identifies its file."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from typing import Any

import numpy as np

from streamseq._redact import redact_urls
from streamseq._tree import leaves
from streamseq.errors import SourceError, StreamError
from streamseq.read.ref import StreamRef, identity, is_stream

#: bytes of an array hashed at once (a copy only where the array is not contiguous)
CHUNK = 16 << 20


def source_record(ref: StreamRef) -> list[Any]:
    """``[name, state]`` of the stream of ``ref`` as JSON keeps it (see :func:`_record`)."""
    return json.loads(json.dumps(_record(ref), default=str))


def _record(ref: StreamRef) -> list[Any]:
    """``[name, state]`` of the stream of ``ref``: its :func:`identity`, and its file's state.

    The state is what the source recorded of its file when it was made (a source of
    :mod:`streamseq.io`), the state of the local files an opener's ``functools.partial``
    names, or the files of memory-mapped arrays (``np.load(path, mmap_mode="r")``), or
    those of the parts of a stream made of streams (see :func:`_parts_state`); for
    arrays in memory (or a dict, tuple or list of them) a digest of their bytes;
    ``None`` for other streams.

    Example:
        >>> import numpy as np
        >>> _record(StreamRef(0, np.arange(3)))[1]["content"][:7]
        'sha256:'
    """
    source = ref.source
    if is_stream(source):
        state = getattr(source, "_file_state", None)
        if state is None:
            return [identity(source), _parts_state(source) or _array_state(source)]
        return [identity(source), _with_ctime(source, dict(state))]
    if isinstance(source, functools.partial):
        paths = [os.fspath(a) for a in source.args if isinstance(a, (str, os.PathLike))]
        local = [p for p in paths if os.path.isfile(p)]
        return [identity(source), {p: local_state(p) for p in local} or None]
    return [identity(source), None]


def local_state(path: str) -> dict[str, Any]:
    """What identifies a local file in a store: its size, times and inode.

    The time of its last change of inode (``ctime``) is kept besides the one of its
    data: a file written again (in place, or removed and made again on an inode used
    again) with its size and modification time restored (``os.utime``) changes it, and
    no call can set it back.

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile() as f:
        ...     sorted(local_state(f.name))
        ['ctime_ns', 'inode', 'mtime_ns', 'size']
    """
    from streamseq.io._base import file_state  # (streamseq.io is loaded on first use)

    st = os.stat(path)
    return {**file_state(path, st), "ctime_ns": int(st.st_ctime_ns)}


def _parts_state(source: Any) -> dict[str, Any] | None:
    """The files of a stream made of streams, which records none itself.

    A LeRobot episode (its ``path``, a local data file, and its ``videos``), a
    recording (the sources of its ``modalities``), streams zipped (their ``streams``),
    events given as an ``array`` (its file, or a digest of its bytes):
    every part's file by path (a URL's credentials hidden), with the state it recorded;
    a part of arrays in memory by its name, with a digest of their bytes.

    Example:
        >>> _parts_state(np.arange(3)) is None
        True
    """
    found: dict[str, Any] = {}
    path = getattr(source, "path", None)
    if isinstance(path, str) and os.path.isfile(path):
        found[path] = local_state(path)
    array = getattr(source, "array", None)  # (events given as an array: no file)
    if isinstance(array, np.ndarray) and array is not source:
        state = _array_state(array)
        found.update({"array": state} if state and "content" in state else state or {})
    for name, part in _parts(source):
        state = getattr(part, "_file_state", None) if is_stream(part) else None
        where = getattr(part, "path", None)
        if isinstance(state, dict) and isinstance(where, str):
            found[redact_urls(where)] = _with_ctime(part, dict(state))
            continue
        inner = _parts_state(part) if _parts(part) else None
        if inner is None:
            inner = _array_state(part)
            if inner is not None and "content" in inner:
                inner = {name: inner}
        found.update(inner or {})
    return found or None


def _parts(source: Any) -> list[tuple[str, Any]]:
    """The named streams a stream is made of (see :func:`_parts_state`), if any."""
    parts = getattr(source, "videos", None)
    if not isinstance(parts, dict):
        modalities = getattr(source, "modalities", None)
        if isinstance(modalities, dict):
            parts = {k: getattr(m, "source", None) for k, m in modalities.items()}
    if not isinstance(parts, dict) and not isinstance(source, np.ndarray):
        parts = getattr(source, "streams", None)
    if isinstance(parts, (tuple, list)):
        parts = dict(enumerate(parts))
    if not isinstance(parts, dict):
        return []
    return [(str(k), v) for k, v in parts.items() if v is not None]


def _with_ctime(source: Any, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` of a source of one local file, with its ``ctime`` (see :func:`local_state`)."""
    path = getattr(source, "path", None)
    if getattr(source, "_remote", None) is not None or "inode" not in state or path is None:
        return state
    try:
        st = os.stat(path)
    except (OSError, TypeError, ValueError):
        return state  # (the source's own check tells a file gone)
    return {**state, "ctime_ns": int(st.st_ctime_ns)}


def _array_state(source: Any) -> dict[str, Any] | None:
    """The files of a stream of memory-mapped arrays, or a digest of arrays in memory."""
    arrays = leaves(source) if isinstance(source, (np.ndarray, dict, tuple, list)) else []
    if not arrays or not all(isinstance(a, np.ndarray) for a in arrays):
        return None
    files = [_mapped_file(a) for a in arrays]
    if all(files):
        return {p: local_state(p) for p in files if p is not None}
    return {"content": content_digest(arrays)}


def _mapped_file(array: np.ndarray) -> str | None:
    """The local file ``array`` maps (a :class:`numpy.memmap` or a view of one), if any."""
    while array is not None:
        path = getattr(array, "filename", None)
        if isinstance(array, np.memmap) and path is not None and os.path.isfile(path):
            return os.fspath(path)
        array = array.base if isinstance(array.base, np.ndarray) else None
    return None


def content_digest(arrays: list[np.ndarray]) -> str:
    """A digest of the dtypes, shapes and bytes of ``arrays``.

    The bytes are read in pieces of :data:`CHUNK` bytes, copied only where an array is
    not contiguous.

    Example:
        >>> content_digest([np.zeros(3, "<i2")]) == content_digest([np.zeros(3, "<i2")])
        True
        >>> content_digest([np.zeros(3, "<i2")]) == content_digest([np.zeros(3, "<i4")])
        False
    """
    h = hashlib.sha256()
    for a in arrays:
        h.update(f"{a.dtype.str}{a.shape};".encode())
        if a.dtype.hasobject:
            h.update(repr(a.tolist()).encode())
            continue
        rows = a.reshape(1) if a.ndim == 0 else a
        step = max(1, CHUNK // max(1, rows.itemsize * int(np.prod(rows.shape[1:]))))
        for i in range(0, len(rows), step):
            piece = np.ascontiguousarray(rows[i : i + step])
            h.update(piece.reshape(-1).view(np.uint8))
    return "sha256:" + h.hexdigest()


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
    files: list[str] | None = None
    if before[0] != now[0]:
        what = f"another source ({before[0]!r} -> {now[0]!r})"
    else:
        old, new = before[1] or {}, now[1] or {}
        if old and all(isinstance(v, dict) for v in old.values()):  # files it reads
            files = [p for p in old if old[p] != new.get(p)] or list(old)
            words = [w for p in files for w in state_changes(old[p], new.get(p, {}))]
        else:
            words = state_changes(old, new)
        what = f"its file changed ({', '.join(words) or 'another record'})"
        if "content" in old:
            what = "its steps changed in memory"
    where = files[0] if files else getattr(ref.source, "path", None) or now[0]
    error = SourceError(
        str(where),
        f"{what} since the store was made: its stored steps would be stale; it is written "
        "again with on_change='rebuild'",
    )
    ref.locate(error)
    return error


def check_copied(ref: StreamRef, record: list[Any], steps: int) -> None:
    """Raise a :class:`SourceError` when a file of ``ref``'s stream changed while it was copied.

    ``record`` is the stream's :func:`source_record` taken before its ``steps`` steps were
    read: the local files it names are measured again (their size, times and inode: a
    ``stat``, nothing read), so that steps read partly from a file written during the
    copy, whatever its size and modification time, are never recorded as the stream's.

    Raises:
        SourceError: naming the stream, the file and the steps; the stream is not
            recorded, and the next build writes it again.
    """
    from streamseq.io._base import state_changes

    state = record[1]
    if not isinstance(state, dict) or "content" in state:
        return
    if "ctime_ns" in state:  # a source of one local file
        files = {os.fspath(getattr(ref.source, "path", "")): state}
    else:
        files = {p: s for p, s in state.items() if isinstance(s, dict) and "ctime_ns" in s}
    for path, before in files.items():
        try:
            now = local_state(path)
        except (OSError, ValueError):
            words = ["the file no longer exists"]
        else:
            words = state_changes({k: before.get(k) for k in now}, now)
        if words:
            error = SourceError(
                path,
                f"changed while its steps were copied into the store ({', '.join(words)}): "
                "the steps copied may mix the old file and the new; the stream is not "
                "recorded as written: call materialize again to write it from the new file",
            )
            ref.locate(error, (0, steps))
            raise error
