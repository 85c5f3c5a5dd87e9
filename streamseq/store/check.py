"""A store's files read and checked against its manifest before any step is served.

The manifest checks itself (a digest); the index must give every stream the length the
manifest's digest of the lengths names, and start it where the streams before it end;
every data file must have exactly the bytes of the manifest's step layout times the
steps, and, where the manifest records them (stores made since it does), the size,
modification and inode-change times and inode the file had when the build ended
(:func:`file_identity`): a file edited in place after the build, even with its size and
modification time kept, is told (its ``ctime`` cannot be set back). A file whose
identity differs but whose bytes have the digest the build recorded (:func:`file_digest`:
a store copied, ``cp -r``, ``rsync -a``, hard links) is the build's: it is read, and
its new identity recorded (:func:`keep_verified`). A store that fails any check is
:class:`~streamseq.store.layout.Damaged`:
:func:`~streamseq.store.open_store` refuses it, :func:`~streamseq.materialize` makes it
again.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import time
from typing import Any, NamedTuple

import numpy as np

from streamseq.store import layout
from streamseq.store.layout import Damaged

log = logging.getLogger(__name__)

#: what a manifest holds besides the records of the sources, and the type of each
FIELDS = {"streams": int, "steps": int, "lengths_sha256": str, "generation": str}


class Contents(NamedTuple):
    """A store's manifest and index, checked, and what its current generation holds.

    ``verified`` names the data files whose identity differed from the manifest's but
    whose bytes have the digest the build recorded (a copy of the store): ``manifest``
    records their identity now, and :func:`keep_verified` writes it.
    """

    manifest: dict[str, Any]
    index: np.ndarray
    done: np.ndarray
    verified: tuple[str, ...] = ()


def lengths_digest(lengths: np.ndarray) -> str:
    """The digest of the streams' lengths the manifest keeps.

    Example:
        >>> lengths_digest(np.array([3, 0])) == lengths_digest(np.array([3, 0], np.int32))
        True
    """
    return hashlib.sha256(np.asarray(lengths).astype("<i8").tobytes()).hexdigest()


def make_index(lengths: np.ndarray) -> np.ndarray:
    """The index of streams of ``lengths``: every stream's first step and its length.

    Example:
        >>> make_index(np.array([3, 0, 2])).tolist()
        [[0, 3], [3, 0], [3, 2]]
    """
    lengths = np.asarray(lengths, np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return np.stack([offsets, lengths], axis=1)


def read_store(folder: str) -> Contents | None:
    """The checked contents of the store in ``folder``; ``None`` when there is no manifest.

    Raises:
        Damaged: a file is missing or unreadable, or does not agree with the manifest
            (the message names the file, and the stream where it is one stream's).
    """
    manifest = layout.read_manifest(folder)
    if manifest is None:
        return None
    if manifest.get("version") != layout.VERSION:
        raise Damaged(f"a store of version {manifest.get('version')}, not {layout.VERSION}")
    for field, kind in FIELDS.items():
        if not isinstance(manifest.get(field), kind):
            raise Damaged(f"{layout.MANIFEST} has no {field}")
    generation = manifest["generation"]
    if not re.fullmatch(r"[0-9a-f]+", generation):
        raise Damaged(
            f"{layout.MANIFEST} names a generation {generation!r} that is not one of a "
            "store's (hexadecimal digits): its files would be looked for outside the store's"
        )
    index = _read_index(folder, manifest)
    expected = layout.leaf_bytes(manifest.get("spec"), manifest["steps"])
    records = recorded_files(manifest, len(expected))
    copies = []
    for i, size in enumerate(expected):
        path = os.path.join(folder, layout.leaf_file(i, generation))
        now = check_leaf(path, size, None if records is None else records[i])
        if now is not None and records is not None:
            records = [*records[:i], now, *records[i + 1 :]]
            copies.append(os.path.basename(path))
    if copies:
        manifest = {**manifest, "files": records}
    done = layout.read_done(folder, generation, len(index))
    return Contents(manifest, index, done, tuple(copies))


def check_leaf(
    path: str, size: int, record: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """Raise :class:`Damaged` when the data file ``path`` is missing or not as recorded.

    A file whose identity differs from ``record`` but whose bytes have the digest it
    records (a copy of the store) is the build's.

    Args:
        path: the data file.
        size: its size in bytes, from the manifest's step layout.
        record: its :func:`file_identity` at the end of the build, and the digest of its
            bytes (``None`` for a store made before the manifest recorded it: its size
            alone is checked; one without a digest: its identity alone).

    Returns:
        The record of the file as it is now, when its identity differed and its bytes
        were verified against the recorded digest; else ``None``.
    """
    try:
        st = os.stat(path)
    except OSError as e:
        raise Damaged(f"{os.path.basename(path)} cannot be read ({e.strerror})") from None
    if st.st_size != size:
        raise Damaged(
            f"{os.path.basename(path)} has {st.st_size} bytes, not the {size} of the steps "
            "the manifest names (cut short, or replaced)"
        )
    if record is None:
        return None
    if not identity_changes(record, file_identity(st)):
        return None
    return verified(path, record)


#: what the manifest records of every data file (see :func:`file_identity`)
IDENTITY = ("size", "mtime_ns", "ctime_ns", "inode")
#: the digest of its bytes the manifest records besides (stores made since it does)
DIGEST = "blake2b"
#: bytes of a data file hashed at once
DIGEST_CHUNK = 8 << 20


def file_digest(path: str, fd: int | None = None) -> str:
    """The blake2b digest (32 bytes, hexadecimal) of the bytes of a file, streamed.

    Args:
        path: the file.
        fd: the file open (read there, whatever ``path`` names now), if it is.

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile() as f:
        ...     file_digest(f.name) == hashlib.blake2b(digest_size=32).hexdigest()
        True
    """
    if fd is None:
        fd = os.open(path, os.O_RDONLY)
        try:
            return _digest_of(fd)
        finally:
            os.close(fd)
    return _digest_of(fd)


def _digest_of(fd: int) -> str:
    """The digest of :func:`file_digest` of the file open as ``fd``."""
    h = hashlib.blake2b(digest_size=32)
    buffer = bytearray(DIGEST_CHUNK)
    view = memoryview(buffer)
    at = 0
    while True:
        n = os.preadv(fd, [buffer], at)
        if not n:
            break
        h.update(view[:n])
        at += n
    return h.hexdigest()


def verified(path: str, record: dict[str, Any], fd: int | None = None) -> dict[str, Any]:
    """The record of a data file whose identity is not ``record``'s, when its bytes are.

    A copy of the store, a file linked or made read-only (its ``ctime`` changed): its
    bytes are hashed once and compared with the digest the build recorded.

    Args:
        path: the data file.
        record: what the build recorded of it (its identity, its digest).
        fd: the file open (its bytes hashed there), if it is.

    Returns:
        Its :func:`file_identity` now (the one it had while it was hashed), with the digest.

    Raises:
        Damaged: the record has no digest (a store made before it did), the bytes differ,
            or the file changed while it was hashed.
    """
    name = os.path.basename(path)
    st = os.stat(path) if fd is None else os.fstat(fd)
    changed = identity_changes(record, file_identity(st))
    want = record.get(DIGEST)
    if want is None:
        raise Damaged(f"{name} {changed}")
    try:
        got = file_digest(path, fd)
        now = file_identity(os.stat(path) if fd is None else os.fstat(fd))
    except OSError as e:
        raise Damaged(f"{name} cannot be read ({e.strerror})") from None
    if got != want or identity_changes(file_identity(st), now):
        raise Damaged(
            f"{name} {changed}, and its bytes are not the build's (their {DIGEST} digest differs)"
        )
    log.info(
        "store: %s is the build's (%s; its %s digest checks): its identity now is kept",
        path,
        changed.split("(", 1)[1].split(")", 1)[0],
        DIGEST,
    )
    return {**now, DIGEST: want}


def file_identity(st: os.stat_result) -> dict[str, int]:
    """What identifies a data file's bytes: its size, its times of change and its inode.

    The time of the last change of its inode (``ctime``) is kept besides the one of its
    data: a file written in place with its size and modification time restored
    (``os.utime``) changes it, and no call sets it back. The device number is not kept:
    that of a network or virtual file system changes when it is mounted again, the
    store's files unchanged.

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile() as f:
        ...     sorted(file_identity(os.stat(f.name)))
        ['ctime_ns', 'inode', 'mtime_ns', 'size']
    """
    return {
        "size": int(st.st_size),
        "mtime_ns": int(st.st_mtime_ns),
        "ctime_ns": int(st.st_ctime_ns),
        "inode": int(st.st_ino),
    }


def identity_changes(record: dict[str, int], now: dict[str, int]) -> str:
    """How a data file differs from its ``record``, in words (empty when it does not).

    Example:
        >>> was = {"size": 8, "mtime_ns": 1, "ctime_ns": 1, "inode": 5}
        >>> identity_changes(was, {**was, "ctime_ns": 2})
        'changed since the store was made (ctime_ns 1 -> 2): its steps may not be the ones written'
        >>> identity_changes(was, dict(was))
        ''
    """
    changed = [f"{k} {record[k]} -> {now[k]}" for k in IDENTITY if record[k] != now[k]]
    if not changed:
        return ""
    return (
        f"changed since the store was made ({', '.join(changed)}): its steps may not be "
        "the ones written"
    )


def recorded_files(manifest: dict[str, Any], leaves: int) -> list[dict[str, int]] | None:
    """The manifest's :func:`file_identity` of each of its ``leaves`` data files, if kept.

    Raises:
        Damaged: the record is not one a build writes.

    Example:
        >>> recorded_files({"steps": 3}, 1) is None
        True
    """
    files = manifest.get("files")
    if files is None:
        return None
    if not isinstance(files, list) or len(files) != leaves:
        raise Damaged(f"{layout.MANIFEST} records {files!r}, not its {leaves} data files")
    for record in files:
        if not isinstance(record, dict) or set(record) - {DIGEST} != set(IDENTITY):
            raise Damaged(f"{layout.MANIFEST} records a data file as {record!r}")
        if not all(type(record[k]) is int for k in IDENTITY):
            raise Damaged(f"{layout.MANIFEST} records a data file as {record!r}")
        digest = record.get(DIGEST, "")
        if not isinstance(digest, str) or not re.fullmatch(r"([0-9a-f]{64})?", digest):
            raise Damaged(f"{layout.MANIFEST} records a data file as {record!r}")
    return files


def _read_index(folder: str, manifest: dict[str, Any]) -> np.ndarray:
    """The index, checked against the manifest's count, steps and digest of the lengths."""
    try:
        index = np.load(os.path.join(folder, layout.INDEX), allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise Damaged(f"{layout.INDEX} cannot be read ({type(e).__name__}: {e})") from None
    n = manifest["streams"]
    if index.dtype.kind not in "iu" or index.shape != (n, 2):
        raise Damaged(
            f"{layout.INDEX} holds {index.dtype}{list(index.shape)}, not the int64[{n}, 2] "
            "of the streams' offsets and lengths"
        )
    index = index.astype(np.int64)
    lengths = index[:, 1]
    if lengths_digest(lengths) != manifest["lengths_sha256"] or lengths.sum() != manifest["steps"]:
        raise Damaged(f"{layout.INDEX} gives other lengths than the manifest's")
    want = make_index(lengths)
    wrong = np.flatnonzero(want[:, 0] != index[:, 0])
    if len(wrong):
        i = int(wrong[0])
        raise Damaged(
            f"{layout.INDEX} starts stream {i} at step {int(index[i, 0])}, not at step "
            f"{int(want[i, 0])} where the streams before it end"
        )
    return want


#: seconds a build waits at most for the file system's clock to pass its data files' times
TICK_WAIT = 3.0


def record_files(folder: str, generation: str, leaves: int) -> list[dict[str, Any]]:
    """The identity and digest of the ``leaves`` data files of ``generation``, written whole.

    Called once every step is written and synced. Each file's :func:`file_identity`
    and its :func:`file_digest` (read once: a copy of the store is told from an edit by
    it, see :func:`check_leaf`). It returns once the file system's clock is past the
    files' times (a file's times are those of a clock tick, a few
    milliseconds; a coarser file system's, at most :data:`TICK_WAIT`): a file edited
    later gets later times, so even an edit right after the build is told.
    """
    paths = [os.path.join(folder, layout.leaf_file(i, generation)) for i in range(leaves)]
    digests = [file_digest(p) for p in paths]
    stats = [os.stat(p) for p in paths]
    newest = max(max(st.st_mtime_ns, st.st_ctime_ns) for st in stats)
    probe = os.path.join(folder, layout.done_file(generation))
    deadline = time.monotonic() + TICK_WAIT
    try:
        while True:
            os.utime(probe)  # (the times the file system gives a change made now)
            if os.stat(probe).st_mtime_ns > newest or time.monotonic() > deadline:
                break
            time.sleep(0.001)
    except OSError:  # (no done log: nothing was written by this build)
        pass
    return [{**file_identity(st), DIGEST: d} for st, d in zip(stats, digests, strict=True)]


def keep_verified(folder: str, contents: Contents, locked: bool = False) -> None:
    """Record in the manifest the identity of the data files of a copy, verified.

    Written atomically, as the build writes it, and only over the manifest that was
    verified (another process may have recorded it, or made the store again, since):
    with ``locked`` false the store's lock is taken, without waiting (a process
    building the store holds it). Where the manifest cannot be written (a read-only
    folder), the identity verified is kept by this process's streams, and every other
    open of the store hashes its files again (told in the log).
    """
    if not contents.verified:
        return
    from streamseq.store.lock import build_lock

    names = ", ".join(contents.verified)
    why = ""
    try:
        with contextlib.ExitStack() as stack:
            writable = locked or stack.enter_context(build_lock(folder, 0.0))
            current = layout.read_manifest(folder) or {}
            if current.get("digest") != contents.manifest.get("digest"):
                return  # (recorded by another process, or the store made again)
            if writable:
                layout.write_manifest(folder, contents.manifest)
                return
            why = "its folder cannot be written"
    except TimeoutError:
        why = "another process holds the store's lock"
    except (OSError, Damaged) as e:
        why = f"its manifest cannot be written ({type(e).__name__}: {getattr(e, 'strerror', e)})"
    log.warning(
        "store: %s: the identity of %s, verified by digest, is not recorded (%s): "
        "it is kept by this process's streams, and each open of the store hashes its "
        "data files again",
        folder,
        names,
        why,
    )
