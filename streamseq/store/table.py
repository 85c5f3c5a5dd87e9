"""The streams of a store as one table: offsets and lengths as arrays, streams made on access.

:func:`open_store` opens a complete store as its table.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np

from streamseq.errors import SourceError
from streamseq.plan.identities import Identities
from streamseq.store import layout
from streamseq.store.check import keep_verified, read_store, recorded_files
from streamseq.store.layout import Damaged
from streamseq.store.stream import StoredStream, _Files
from streamseq.stream_table import StreamTable


def _stored(files: _Files, index: int, offset: int, length: int) -> StoredStream:
    """Stream ``index`` of a store: steps ``offset:offset + length`` of its data files."""
    return StoredStream(files, index, offset, length)


class StoreTable(StreamTable):
    """A table of the streams of one store (:class:`~streamseq.store.StoredStream` each).

    Its lengths, offsets and indices are arrays; a stream is made when it is indexed;
    slicing gives a table of the same store; pickling sends the arrays and the store's
    folder, never an object per stream. Whether every stream reads mapped arrays, and
    which store they read, are properties of the table (:attr:`stores`), answered once.

    Example:
        >>> import tempfile
        >>> from streamseq.store import materialize
        >>> with tempfile.TemporaryDirectory() as d:
        ...     table = materialize([np.arange(5), np.arange(3)], d)
        ...     type(table).__name__, table.lengths.tolist(), table[1:][0].index
        ('StoreTable', [5, 3], 1)
    """

    #: every stream of the table is arrays already mapped (see ``StoredStream.as_arrays``)
    mapped = True

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, store={self.make.args[0].folder!r})"

    @property
    def stores(self) -> list[_Files]:
        """The store (its data files) that the streams of the table read."""
        return [self.make.args[0]]


def store_table(folder: str, manifest: dict[str, Any], index: np.ndarray) -> StoreTable:
    """The streams of a store, from its manifest and its index (int64 [n, 2]), as a table.

    Stream ``i`` reads steps ``index[i, 0]:index[i, 0] + index[i, 1]`` of the data
    files; every stream is named by the store's folder and its offset in it across runs.
    """
    index = np.asarray(index, dtype=np.int64).reshape(-1, 2)
    total = int(index[:, 1].sum()) if len(index) else 0
    folder = os.path.abspath(folder)
    spec = manifest["spec"]
    records = recorded_files(manifest, len(layout.leaf_layout(spec)))
    files = _Files(folder, spec, total, manifest["generation"], records)
    step = layout.leaf_layout(spec)[0] if "leaf" in spec else None
    columns = [np.arange(len(index), dtype=np.int64), np.ascontiguousarray(index[:, 0])]
    make = functools.partial(_stored, files)
    # the folder, the offset, and what the steps are (the digests of the data's bytes)
    names = Identities.repeat(folder, len(index), columns[1], files.read_options)
    return StoreTable(
        make, np.ascontiguousarray(index[:, 1]), columns, step_spec=step, identities=names
    )


def open_store(path: str | os.PathLike) -> Any:
    """The streams of a complete store made by :func:`~streamseq.materialize`.

    The store is read as it is: the sources are not looked at (give them to
    :func:`~streamseq.materialize` to check the store against them).

    Args:
        path: the store's folder.

    Returns:
        A :class:`StoreTable` of the streams, in the order the
        store was made from: a :class:`StoredStream` made when one is indexed, the
        lengths as one array.

    Raises:
        SourceError: no store there, a store of another version, one not complete (it
            names the first stream missing), or one whose files do not agree with its
            manifest (an index or a data file missing, cut short or edited: it names the
            file, and the stream where it is one stream's). A copy of the store
            (``cp -r``, ``rsync -a``, hard links: its files' inodes and times are not the
            build's) opens when its bytes have the digests the build recorded: the first
            open reads them once and records their identity in the manifest.

    Example:
        >>> import tempfile
        >>> from streamseq.store import materialize
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = materialize([np.arange(5), np.arange(3) * 10], d)
        ...     streams = open_store(d)
        ...     streams[1][0:2].tolist(), len(streams[0])
        ([0, 10], 5)
    """
    folder = os.fspath(path)
    try:
        contents = read_store(folder)
    except Damaged as e:
        raise SourceError(folder, f"{e}; run materialize to make the store again") from None
    if contents is None:
        raise SourceError(folder, f"no store here (no {layout.MANIFEST})")
    manifest, index, done, _ = contents
    if not done.all():
        first = int(np.flatnonzero(~done)[0])
        raise SourceError(
            folder,
            f"the store is not complete: {int((~done).sum())} of {len(done)} streams are "
            f"not written, the first is stream {first}; run materialize to finish it",
        )
    keep_verified(folder, contents)
    return store_table(folder, manifest, index)
