"""The files of a store: the manifest, the step layout, the data files and the done log.

A store is a folder::

    manifest.json   version, step layout, lengths' digest, every stream's identity, the
                    generation of the files below, the size, times and inode of every
                    data file once written whole, and a digest of all that
    index.npy       int64 [n, 2]: first step of every stream in the data files, its length
    leaf-<i>.<g>.bin  the steps of every stream, one file per array of a step (one for
                    arrays), of generation ``g``
    done.<g>.log    int64 pairs (stream, stream ^ DONE_KEY) appended once a stream is written
    .lock           taken (``fcntl.flock``) by the process that builds

A stream is written into its own place in the data files (known from the lengths before
anything is written), the files synced, and only then its entry appended to the done log
(synced too): a stream is read from the store only when it is whole. A record cut short
by a crash, or one that does not check, is ignored: that stream is written again.

A stream recorded as written is never written again in the same files: a store made
again, or a stream whose source changed, is written into the files of a new generation,
which the manifest names once they hold every stream kept (the manifest is replaced
atomically); the files of older generations are then removed, and a process that mapped
them keeps reading the steps it mapped.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from typing import Any

import numpy as np

from streamseq._files import open_regular

#: the layout of the files; a store of another version is made again
VERSION = 2
#: what a record of ``done.log`` is checked with
DONE_KEY = 0x5EA1ED5EA1ED
MANIFEST, INDEX, LOCK = "manifest.json", "index.npy", ".lock"
#: the names of the files of a generation, and of files written atomically (left by a crash)
GENERATED = re.compile(
    r"(leaf-\d+\.[0-9a-f]+\.bin|done\.[0-9a-f]+\.log)"
    r"|(manifest\.json|index\.npy|done\.[0-9a-f]+\.log)\.tmp\d+"
)

#: the names of the data files and done log of version 1, which had no generations
LEGACY = re.compile(r"leaf-\d+\.bin|done\.log")


class Damaged(ValueError):
    """A file of a store is missing, unreadable or does not agree with the manifest."""


def new_generation() -> str:
    """A name for a new generation of data files (unique in practice).

    Example:
        >>> len(new_generation())
        12
    """
    return secrets.token_hex(6)


def leaf_file(i: int, generation: str) -> str:
    """The name of the data file of leaf ``i`` of the steps, of ``generation``.

    Example:
        >>> leaf_file(2, "a1")
        'leaf-2.a1.bin'
    """
    return f"leaf-{i}.{generation}.bin"


def done_file(generation: str) -> str:
    """The name of the done log of ``generation``.

    Example:
        >>> done_file("a1")
        'done.a1.log'
    """
    return f"done.{generation}.log"


def generation_files(folder: str, generation: str) -> list[str]:
    """The names in ``folder`` of the data files and done log of ``generation``."""
    suffixes = (f".{generation}.bin", f".{generation}.log")
    return sorted(n for n in os.listdir(folder) if n.endswith(suffixes))


def remove_other_generations(folder: str, keep: str) -> None:
    """Remove the data files and done logs of every generation but ``keep``.

    A process that mapped a removed file keeps reading it (POSIX keeps the file while
    it is open or mapped).
    """
    names = os.listdir(folder)
    legacy = set(legacy_names(names))
    for name in names:
        parts = name.split(".")
        if (GENERATED.fullmatch(name) and len(parts) == 3 and parts[1] != keep) or name in legacy:
            os.remove(os.path.join(folder, name))


def legacy_names(names: list[str]) -> list[str]:
    """The files of a store of version 1 among ``names`` (a folder's).

    They are a store's only beside its manifest and its first data file: a ``done.log``
    alone may be anyone's.

    Example:
        >>> legacy_names(["manifest.json", "leaf-0.bin", "done.log", "a.mp4"])
        ['leaf-0.bin', 'done.log']
        >>> legacy_names(["done.log", "a.mp4"])
        []
    """
    if MANIFEST not in names or "leaf-0.bin" not in names:
        return []
    return [n for n in names if LEGACY.fullmatch(n)]


def foreign_names(folder: str) -> list[str]:
    """The names in ``folder`` that are not a store's (files a build must leave alone).

    ``manifest.json`` and ``index.npy`` are a store's only beside the files of a
    generation: alone, they may be anyone's. Hidden names (``.nfs*`` files of a
    removed file still mapped on NFS, ``.DS_Store``) are nobody's concern: a build
    neither writes nor removes them.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     for name in ("index.npy", "clip.mp4", LOCK, ".nfs0001"):
        ...         open(os.path.join(d, name), "w").close()
        ...     foreign_names(d)
        ['clip.mp4', 'index.npy']
    """
    names = os.listdir(folder)
    legacy = legacy_names(names)  # (a store of version 1, made again)
    generated = bool(legacy) or any(GENERATED.fullmatch(n) for n in names)
    ours = {LOCK, MANIFEST, INDEX, *legacy} if generated else {LOCK}
    return sorted(
        n for n in names if not n.startswith(".") and n not in ours and not GENERATED.fullmatch(n)
    )


def encode_spec(spec: Any) -> Any:
    """The step layout of zero-step arrays (or a dict, tuple or list of them) as JSON.

    Leaves are numbered in the order of :func:`streamseq._tree.leaves`.

    Raises:
        TypeError: a dict key that is not a string, or a leaf that is not an array of a
            :func:`storable` dtype.

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
        if not storable(node.dtype):
            raise TypeError(
                f"a stored step is made of arrays of numbers, text or bytes, got an array "
                f"of dtype {node.dtype} (object and structured arrays hold what a data "
                "file cannot: give their fields as a dict of arrays)"
            )
        leaf = {
            "leaf": count[0],
            "dtype": np.lib.format.dtype_to_descr(node.dtype),
            "shape": list(node.shape[1:]),
        }
        count[0] += 1
        return leaf

    return enc(spec)


def storable(dtype: np.dtype) -> bool:
    """Whether steps of ``dtype`` are plain bytes a data file can hold and give back.

    Example:
        >>> storable(np.dtype("<i2")), storable(np.dtype(object)), storable(np.dtype("V4"))
        (True, False, False)
    """
    return not dtype.hasobject and dtype.kind != "V" and dtype.fields is None


def decode_spec(code: Any, make: Any) -> Any:
    """The tree of ``make(leaf, dtype, shape)`` for the layout ``code`` (see :func:`encode_spec`).

    Raises:
        Damaged: ``code`` is not a layout :func:`encode_spec` makes (a dtype that is not
            :func:`storable`, a shape or leaf number that is not a count).

    Example:
        >>> code = encode_spec((np.zeros((0, 3), np.int16),))
        >>> decode_spec(code, lambda i, dtype, shape: (i, dtype.name, shape))
        ((0, 'int16', (3,)),)
    """
    if not isinstance(code, dict):
        raise Damaged(f"the step layout holds {type(code).__name__}, not an object")
    if "dict" in code and isinstance(code["dict"], dict):
        return {k: decode_spec(v, make) for k, v in code["dict"].items()}
    if "tuple" in code and isinstance(code["tuple"], list):
        return tuple(decode_spec(v, make) for v in code["tuple"])
    if "list" in code and isinstance(code["list"], list):
        return [decode_spec(v, make) for v in code["list"]]
    leaf, descr, shape = code.get("leaf"), code.get("dtype"), code.get("shape")
    try:
        if not isinstance(descr, str):
            raise TypeError("not a dtype string")
        dtype = np.lib.format.descr_to_dtype(descr)
    except (TypeError, ValueError) as e:
        raise Damaged(f"the step layout has a dtype {descr!r} numpy cannot read ({e})") from None
    if not storable(dtype):
        raise Damaged(f"the step layout has a dtype {descr!r} a data file cannot hold")
    if not _count(leaf) or not isinstance(shape, list) or not all(map(_count, shape)):
        raise Damaged(f"the step layout has a leaf {leaf!r} of shape {shape!r}")
    return make(leaf, dtype, tuple(shape))


def _count(x: Any) -> bool:
    """Whether ``x`` is a JSON integer >= 0."""
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def leaf_layout(code: Any) -> list[tuple[np.dtype, tuple[int, ...]]]:
    """(dtype, step shape) of every leaf, in leaf order.

    Raises:
        Damaged: the layout does not read, or its leaves are not numbered 0, 1, ...

    Example:
        >>> leaf_layout(encode_spec({"x": np.zeros((0, 2), np.uint8)}))
        [(dtype('uint8'), (2,))]
    """
    found: list[tuple[int, np.dtype, tuple[int, ...]]] = []
    decode_spec(code, lambda i, dtype, shape: found.append((i, dtype, shape)))
    if sorted(i for i, _, _ in found) != list(range(len(found))):
        raise Damaged(f"the step layout numbers its leaves {[i for i, _, _ in found]}")
    return [(dtype, shape) for _, dtype, shape in sorted(found, key=lambda f: f[0])]


def leaf_bytes(code: Any, steps: int) -> list[int]:
    """The size in bytes of every data file of a store of ``steps`` steps.

    Example:
        >>> leaf_bytes(encode_spec((np.zeros((0, 3), np.int16), np.zeros(0))), 10)
        [60, 80]
    """
    return [steps * d.itemsize * int(np.prod(s, dtype=np.int64)) for d, s in leaf_layout(code)]


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


def manifest_body(manifest: dict[str, Any], *also: str) -> dict[str, Any]:
    """The manifest without its ``digest`` (nor the fields ``also``).

    Example:
        >>> manifest_body({"steps": 3, "files": [], "digest": "ab"}, "files")
        {'steps': 3}
    """
    return {k: v for k, v in manifest.items() if k != "digest" and k not in also}


def _digest(manifest: dict[str, Any]) -> str:
    """The sha256 of the manifest's canonical JSON, its ``digest`` left out."""
    text = json.dumps(manifest_body(manifest), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def read_manifest(folder: str) -> dict[str, Any] | None:
    """The manifest of the store in ``folder``, or ``None`` when there is none.

    Raises:
        Damaged: the manifest does not read as JSON, or (for a store of this
            :data:`VERSION`) its digest does not check: it was edited, or damaged.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     write_manifest(d, {"version": VERSION, "steps": 4})
        ...     read_manifest(d)["steps"]
        4
    """
    try:
        with open_regular(os.path.join(folder, MANIFEST)) as f:  # (never a FIFO's wait)
            manifest = json.loads(f.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise Damaged(f"{MANIFEST} does not read ({e})") from None
    if not isinstance(manifest, dict):
        raise Damaged(f"{MANIFEST} holds {type(manifest).__name__}, not an object")
    if manifest.get("version") == VERSION and manifest.get("digest") != _digest(manifest):
        raise Damaged(f"{MANIFEST} does not match its digest: it was edited or damaged")
    return manifest


def write_manifest(folder: str, manifest: dict[str, Any]) -> None:
    """Write the manifest of the store in ``folder`` atomically, with its digest (new)."""
    text = json.dumps({**manifest_body(manifest), "digest": _digest(manifest)})
    write_atomic(os.path.join(folder, MANIFEST), text.encode())


def read_done(folder: str, generation: str, n: int) -> np.ndarray:
    """Whether every one of the ``n`` streams is written whole (bool [n]) in ``generation``.

    Records cut short or that do not check (a crash while appending) are ignored.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     append_done(d, "g", np.array([2, 0]))
        ...     with open(os.path.join(d, done_file("g")), "ab") as f:
        ...         _ = f.write(b"torn")
        ...     read_done(d, "g", 4).tolist()
        [True, False, True, False]
    """
    done = np.zeros(n, bool)
    try:
        raw = np.fromfile(os.path.join(folder, done_file(generation)), dtype="<i8")
    except FileNotFoundError:
        return done
    pairs = raw[: len(raw) // 2 * 2].reshape(-1, 2)
    ok = (pairs[:, 1] == (pairs[:, 0] ^ DONE_KEY)) & (pairs[:, 0] >= 0) & (pairs[:, 0] < n)
    done[pairs[ok, 0]] = True
    return done


def append_done(folder: str, generation: str, streams: np.ndarray) -> None:
    """Record ``streams`` as written whole in ``generation`` (appended and synced)."""
    streams = np.asarray(streams, "<i8")
    pairs = np.stack([streams, streams ^ DONE_KEY], axis=1).astype("<i8")
    path = os.path.join(folder, done_file(generation))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, pairs.tobytes())
        os.fsync(fd)
    finally:
        os.close(fd)


def write_done(folder: str, generation: str, done: np.ndarray) -> None:
    """Write the done log of ``generation``: the streams marked in ``done`` (bool [n])."""
    keep = np.flatnonzero(done).astype("<i8")
    pairs = np.stack([keep, keep ^ DONE_KEY], axis=1).astype("<i8")
    write_atomic(os.path.join(folder, done_file(generation)), pairs.tobytes())
