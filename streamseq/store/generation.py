"""A new generation of a store's data files, made beside the one that processes may map.

The steps of a stream recorded as written are never written again in the same files:
a process (this one, another reader of the store) may hold memory maps of them, and a
delivered batch must never change (invariant 8). A store made again, or one where a
written stream's source changed, gets new data files: the streams kept are copied into
them, the done log of the new files names those streams, and only then does the
manifest name the new generation (an atomic replace). The old files are removed after;
a process that mapped them keeps its steps (a removed file lives while it is mapped).
"""

from __future__ import annotations

import os
import shutil
from typing import Any, NamedTuple

import numpy as np

from streamseq.store import layout


class Plan(NamedTuple):
    """Where a build writes.

    Attributes:
        generation: the generation of the files it writes into.
        done: the streams already there (bool [n]).
        copy_from: the generation its files are copied from (``None``: new empty files,
            or the current ones kept).
    """

    generation: str
    done: np.ndarray
    copy_from: str | None


def start_generation(folder: str, plan: Plan, manifest: dict[str, Any], index: np.ndarray) -> None:
    """Make the files of ``plan.generation`` and name them in the manifest, last.

    The data files are copies of those of ``plan.copy_from``, or empty files of the size
    of every step (sparse); the done log names ``plan.done``; the index is written;
    every file synced before the manifest names them.
    """
    generation = plan.generation
    sizes = layout.leaf_bytes(manifest["spec"], manifest["steps"])
    for i, size in enumerate(sizes):
        path = os.path.join(folder, layout.leaf_file(i, generation))
        if plan.copy_from is not None:
            shutil.copyfile(os.path.join(folder, layout.leaf_file(i, plan.copy_from)), path)
        try:
            with open(path, "r+b" if plan.copy_from is not None else "wb") as f:
                f.truncate(size)
                os.fsync(f.fileno())
        except OSError as e:  # (a file size limit, a full disk: EFBIG, ENOSPC)
            raise OSError(
                e.errno,
                f"cannot make the store's data file of {size} bytes ({e.strerror or e}); "
                "nothing of the new files is read: make room and call materialize again",
                path,
            ) from None
    layout.write_done(folder, generation, plan.done)
    layout.write_atomic(os.path.join(folder, layout.INDEX), _npy(index))
    layout.sync_folder(folder)
    layout.write_manifest(folder, manifest)


def _npy(array: np.ndarray) -> bytes:
    """The bytes of ``array`` as an ``.npy`` file."""
    import io

    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()
