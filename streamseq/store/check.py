"""A store's files read and checked against its manifest before any step is served.

The manifest checks itself (a digest); the index must give every stream the length the
manifest's digest of the lengths names, and start it where the streams before it end;
every data file must have exactly the bytes of the manifest's step layout times the
steps. A store that fails any check is :class:`~streamseq.store.layout.Damaged`:
:func:`~streamseq.store.open_store` refuses it, :func:`~streamseq.materialize` makes it
again.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any, NamedTuple

import numpy as np

from streamseq.store import layout
from streamseq.store.layout import Damaged

#: what a manifest holds besides the records of the sources, and the type of each
FIELDS = {"streams": int, "steps": int, "lengths_sha256": str, "generation": str}


class Contents(NamedTuple):
    """A store's manifest and index, checked, and what its current generation holds."""

    manifest: dict[str, Any]
    index: np.ndarray
    done: np.ndarray


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
    for i, size in enumerate(expected):
        path = os.path.join(folder, layout.leaf_file(i, generation))
        check_leaf(path, size)
    done = layout.read_done(folder, generation, len(index))
    return Contents(manifest, index, done)


def check_leaf(path: str, size: int) -> None:
    """Raise :class:`Damaged` when the data file ``path`` is missing or not of ``size`` bytes."""
    try:
        got = os.stat(path).st_size
    except OSError as e:
        raise Damaged(f"{os.path.basename(path)} cannot be read ({e.strerror})") from None
    if got != size:
        raise Damaged(
            f"{os.path.basename(path)} has {got} bytes, not the {size} of the steps the "
            "manifest names (cut short, or replaced)"
        )


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
