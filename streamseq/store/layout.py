"""The files of a store: the manifest, the step layout, the data files and the done log.

A store is a folder::

    manifest.json   version, step layout, lengths' digest, every stream's identity
    index.npy       int64 [n, 2]: first step of every stream in the data files, its length
    leaf-<i>.bin    the steps of every stream, one file per array of a step (one for arrays)
    done.log        int64 pairs (stream, stream ^ DONE_KEY) appended once a stream is written
    .lock           taken (``fcntl.flock``) by the process that builds

A stream is written into its own place in the data files (known from the lengths before
anything is written), the files synced, and only then its entry appended to ``done.log``
(synced too): a stream is read from the store only when it is whole. A record cut short
by a crash, or one that does not check, is ignored: that stream is written again.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

#: the layout of the files; a store of another version is made again
VERSION = 1
#: what a record of ``done.log`` is checked with
DONE_KEY = 0x5EA1ED5EA1ED
MANIFEST, INDEX, DONE, LOCK = "manifest.json", "index.npy", "done.log", ".lock"


def leaf_file(i: int) -> str:
    """The name of the data file of leaf ``i`` of the steps.

    Example:
        >>> leaf_file(2)
        'leaf-2.bin'
    """
    return f"leaf-{i}.bin"


def encode_spec(spec: Any) -> Any:
    """The step layout of zero-step arrays (or a dict, tuple or list of them) as JSON.

    Leaves are numbered in the order of :func:`streamseq._tree.leaves`.

    Raises:
        TypeError: a dict key that is not a string, or a leaf that is not an array.

    Example:
        >>> encode_spec({"x": np.zeros((0, 2), np.uint8), "y": np.zeros(0)})
        {'dict': {'x': {'leaf': 0, 'dtype': '|u1', 'shape': [2]}, 'y': {'leaf': 1, 'dtype': '<f8', 'shape': []}}}
    """  # noqa: E501
    count = [0]

    def enc(node: Any) -> Any:
        if isinstance(node, dict):
            bad = [k for k in node if not isinstance(k, str)]
            if bad:
                raise TypeError(f"a stored step needs string keys, got {bad[0]!r}")
            return {"dict": {k: enc(v) for k, v in node.items()}}
        if isinstance(node, (tuple, list)):
            return {("list" if isinstance(node, list) else "tuple"): [enc(v) for v in node]}
        if not isinstance(node, np.ndarray):
            raise TypeError(f"a stored step is made of arrays, got {type(node).__name__}")
        leaf = {
            "leaf": count[0],
            "dtype": np.lib.format.dtype_to_descr(node.dtype),
            "shape": list(node.shape[1:]),
        }
        count[0] += 1
        return leaf

    return enc(spec)


def decode_spec(code: Any, make: Any) -> Any:
    """The tree of ``make(leaf, dtype, shape)`` for the layout ``code`` (see :func:`encode_spec`).

    Example:
        >>> code = encode_spec((np.zeros((0, 3), np.int16),))
        >>> decode_spec(code, lambda i, dtype, shape: (i, dtype.name, shape))
        ((0, 'int16', (3,)),)
    """
    if "dict" in code:
        return {k: decode_spec(v, make) for k, v in code["dict"].items()}
    if "tuple" in code:
        return tuple(decode_spec(v, make) for v in code["tuple"])
    if "list" in code:
        return [decode_spec(v, make) for v in code["list"]]
    dtype = np.lib.format.descr_to_dtype(_descr(code["dtype"]))
    return make(code["leaf"], dtype, tuple(code["shape"]))


def _descr(d: Any) -> Any:
    """A dtype description back from JSON (lists of fields become the tuples numpy takes)."""
    if isinstance(d, list):
        return [tuple(_descr(x) for x in field) for field in d]
    return d


def leaf_layout(code: Any) -> list[tuple[np.dtype, tuple[int, ...]]]:
    """(dtype, step shape) of every leaf, in leaf order.

    Example:
        >>> leaf_layout(encode_spec({"x": np.zeros((0, 2), np.uint8)}))
        [(dtype('uint8'), (2,))]
    """
    found: dict[int, tuple[np.dtype, tuple[int, ...]]] = {}
    decode_spec(code, lambda i, dtype, shape: found.__setitem__(i, (dtype, shape)))
    return [found[i] for i in range(len(found))]


def step_bytes(code: Any) -> int:
    """The bytes of one step, every leaf together.

    Example:
        >>> step_bytes(encode_spec(np.zeros((0, 4, 4, 3), np.uint8)))
        48
    """
    return sum(int(d.itemsize * np.prod(s, dtype=np.int64)) for d, s in leaf_layout(code))


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a synced file renamed over it."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    sync_folder(os.path.dirname(path))


def sync_folder(folder: str) -> None:
    """Make the names in ``folder`` durable (a rename, a new file)."""
    fd = os.open(folder or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_manifest(folder: str) -> dict[str, Any] | None:
    """The manifest of the store in ``folder``, or ``None`` when there is none (or unreadable)."""
    try:
        with open(os.path.join(folder, MANIFEST), "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None


def write_manifest(folder: str, manifest: dict[str, Any]) -> None:
    """Write the manifest of the store in ``folder`` atomically."""
    write_atomic(os.path.join(folder, MANIFEST), json.dumps(manifest).encode())


def read_done(folder: str, n: int) -> np.ndarray:
    """Whether every one of the ``n`` streams is written whole (bool [n]).

    Records cut short or that do not check (a crash while appending) are ignored.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     append_done(d, np.array([2, 0]))
        ...     with open(os.path.join(d, DONE), "ab") as f:
        ...         _ = f.write(b"torn")
        ...     read_done(d, 4).tolist()
        [True, False, True, False]
    """
    done = np.zeros(n, bool)
    try:
        raw = np.fromfile(os.path.join(folder, DONE), dtype="<i8")
    except FileNotFoundError:
        return done
    pairs = raw[: len(raw) // 2 * 2].reshape(-1, 2)
    ok = (pairs[:, 1] == (pairs[:, 0] ^ DONE_KEY)) & (pairs[:, 0] >= 0) & (pairs[:, 0] < n)
    done[pairs[ok, 0]] = True
    return done


def append_done(folder: str, streams: np.ndarray) -> None:
    """Record ``streams`` as written whole (appended and synced)."""
    streams = np.asarray(streams, "<i8")
    pairs = np.stack([streams, streams ^ DONE_KEY], axis=1).astype("<i8")
    fd = os.open(os.path.join(folder, DONE), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, pairs.tobytes())
        os.fsync(fd)
    finally:
        os.close(fd)


def rewrite_done(folder: str, done: np.ndarray) -> None:
    """Keep only the streams still marked in ``done`` (bool [n]) in the done log."""
    keep = np.flatnonzero(done).astype("<i8")
    pairs = np.stack([keep, keep ^ DONE_KEY], axis=1).astype("<i8")
    write_atomic(os.path.join(folder, DONE), pairs.tobytes())
