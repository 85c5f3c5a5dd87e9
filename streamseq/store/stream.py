"""A stream read from a store: slices of memory maps, no copy."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from streamseq._index import slice_bounds, step_index
from streamseq._tree import tree_map
from streamseq.errors import SourceError
from streamseq.read.handle import ProcessLocal
from streamseq.read.ref import ArrayTree
from streamseq.store import layout
from streamseq.store.check import (
    DIGEST,
    check_leaf,
    file_identity,
    identity_changes,
    verified,
)
from streamseq.store.layout import Damaged


class _Files:
    """The data files of one store, memory-mapped once per process (dropped when pickled).

    Shared by the streams of the store (pickled once with them), so a worker maps every
    file once, whatever number of streams it reads.
    """

    def __init__(
        self,
        folder: str,
        spec: Any,
        steps: int,
        generation: str,
        records: list[dict[str, int]] | None = None,
    ):
        self.folder, self.spec, self.steps = folder, spec, steps
        self.generation = generation
        self.records = records  # (what the build recorded of every data file, if it did)
        self._maps: ProcessLocal[Any] = ProcessLocal()

    @property
    def read_options(self) -> str | None:
        """What the steps of the store are, as a reader would say how it reads: ``store(...)``.

        A digest of the digests the build recorded of its data files' bytes and of the
        step spec: a store made again in its folder from the same sources read another
        way (another dtype, frame size, rate) holds other bytes, so its streams are other
        streams and a state of the store before is refused; made again with the same
        bytes, they are the same. None for a store made before the digests were recorded.

        Example:
            >>> _Files("s", {"leaf": 0}, 0, "g", [{"blake2b": "ab"}]).read_options
            'store(244d923080beda39)'
            >>> _Files("s", {"leaf": 0}, 0, "g").read_options is None
            True
        """
        records = self.records
        if not records or not all(r.get(DIGEST) for r in records):
            return None
        text = repr((self.spec, [r[DIGEST] for r in records]))
        return f"store({hashlib.sha256(text.encode()).hexdigest()[:16]})"

    def __del__(self) -> None:
        # (the files this process opened, closed with their owner: maps keep their own)
        try:
            opened = self._maps.peek()
        except Exception:  # (half made, or at interpreter exit)
            return
        for file, *_ in () if opened is None else opened[1]:
            file.close()

    def maps(self) -> Any:
        """The tree of read-only memory maps of the whole data files (this process's)."""
        return self._maps.get(self._open)[0]

    def check(self) -> None:
        """Raise a :class:`SourceError` when a data file this process mapped changed.

        A mapped page past the end of a file cut short in place (``truncate``) kills
        the process that touches it (``SIGBUS``, no Python error), and a file written in
        place gives other steps: the loader calls this before each batch it reads from
        the store (and after it). The file's size, modification time and ``ctime`` are
        those of the file mapped (an open file: a store made again, or removed, keeps it
        whole), compared with what the build recorded of it (one ``fstat`` a file; the
        ``ctime`` of a file removed, which its removal sets, is not); a file whose
        ``ctime`` alone changed (linked by ``cp -al``, made read-only) is hashed once, and
        read on when its digest is the build's; a store made before the build recorded
        them has its files' size checked only.
        Files not mapped in this process yet are checked when they are.
        """
        opened = self._maps.peek()
        files = [] if opened is None else opened[1]
        for k, (file, size, record) in enumerate(files):
            st = os.fstat(file.fileno())
            if st.st_size < size:
                raise SourceError(
                    file.name,
                    f"the store's data file was cut short to {st.st_size} bytes while "
                    f"mapped (it had {size}): its steps cannot be read; run materialize to "
                    "make the store again",
                )
            if record is not None and (st.st_size, st.st_mtime_ns, st.st_ctime_ns) != record[0]:
                if st.st_nlink and (st.st_size, st.st_mtime_ns) == record[0][:2]:
                    # (its ctime alone: linked, made read-only, or edited with its times
                    # set back: its bytes hashed once, their digest tells)
                    now = _verified(file, record[1])
                    files[k] = (file, size, (_times(now), now))
                elif st.st_nlink or (st.st_size, st.st_mtime_ns) != record[0][:2]:
                    raise _changed(file.name, record[1], st)
                # (removed, by a store made again: its ctime is the removal's, its steps kept)

    def _open(self) -> tuple[Any, list[tuple[Any, int, Any]]]:
        files: list[tuple[Any, int, Any]] = []  # (the open file, its size, its record): check

        def open_leaf(i: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
            path = os.path.join(self.folder, layout.leaf_file(i, self.generation))
            size = self.steps * dtype.itemsize * int(np.prod(shape, dtype=np.int64))
            record = None if self.records is None else self.records[i]
            try:
                check_leaf(path, size)
                file = open(path, "rb")  # noqa: SIM115 (kept open with the map: check)
                st = os.fstat(file.fileno())
            except (Damaged, OSError, ValueError) as e:
                raise SourceError(
                    path,
                    f"cannot map the store's data file: {e} (the store was made again "
                    "or damaged since these streams were opened: open it again)",
                ) from None
            if record is not None and identity_changes(record, file_identity(st)):
                try:
                    record = _verified(file, record)  # (a copy, linked, made read-only)
                except SourceError:
                    file.close()
                    raise
            if size == 0:
                file.close()
                return np.zeros((self.steps, *shape), dtype)
            known = None if record is None else (_times(record), record)
            files.append((file, size, known))
            try:
                return np.memmap(file, dtype, mode="r", shape=(self.steps, *shape))
            except (OSError, ValueError) as e:
                raise SourceError(path, f"cannot map the store's data file: {e}") from None

        return layout.decode_spec(self.spec, open_leaf), files


def _times(record: dict[str, int]) -> tuple[int, int, int]:
    """The size, modification time and ``ctime`` of a data file's record (what fstat tells)."""
    return record["size"], record["mtime_ns"], record["ctime_ns"]


def _verified(file: Any, record: dict[str, Any]) -> dict[str, Any]:
    """The record of the open data file ``file`` now, when its bytes are the build's.

    Raises:
        SourceError: they are not (or the record has no digest to tell).
    """
    try:
        return verified(file.name, record, file.fileno())
    except Damaged:
        raise _changed(file.name, record, os.fstat(file.fileno())) from None


def _changed(path: str, record: dict[str, int], st: os.stat_result) -> SourceError:
    """The error of a data file that is not the one the build recorded."""
    return SourceError(
        path,
        f"the store's data file {identity_changes(record, file_identity(st))} (edited in "
        "place, or written over); nothing of it is read: run materialize to make the store "
        "again",
    )


class StoredStream:
    """Steps ``offset:offset + length`` of a store's data files, as one stream.

    Made by :func:`~streamseq.materialize` and :func:`open_store`; small and picklable
    (the memory maps are opened on the first read in each process). ``s[a:b]`` returns
    read-only memory-map slices (no copy); the loader copies its batches straight out of
    the memory maps (:meth:`as_arrays`), every row with one compiled pass, in the calling
    process when every stream is stored and there is no ``transform``.

    Attributes:
        path: the store's folder.
        index: the stream's index in the list the store was made from.
        offset: its first step in the data files.
    """

    def __init__(self, files: _Files, index: int, offset: int, length: int):
        self._files, self.index = files, int(index)
        self.offset, self.length = int(offset), int(length)

    @property
    def path(self) -> str:
        """The store's folder."""
        return self._files.folder

    @property
    def file_offset(self) -> int:
        """Where the stream's steps start in the store (with the store, what names it)."""
        return self.offset

    @property
    def read_options(self) -> str | None:
        """What the store's steps are (:attr:`_Files.read_options`): part of the stream's name."""
        return self._files.read_options

    def __repr__(self) -> str:
        return f"StoredStream({self.path!r}, index={self.index}, length={self.length})"

    def _key(self) -> tuple[str, str, int, int, int]:
        files = self._files
        return files.folder, files.generation, self.index, self.offset, self.length

    def __eq__(self, other: object) -> bool:
        """The same steps of the same store (made again by its table, or unpickled)."""
        if not isinstance(other, StoredStream):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, key: int | slice) -> Any:
        if isinstance(key, slice):
            a, b = slice_bounds(key, self.length)
            b = max(a, b)
            sl = slice(self.offset + a, self.offset + b)
            return tree_map(lambda m: m[sl], self._files.maps())
        i = self.offset + step_index(key, self.length)
        return tree_map(lambda m: m[i], self._files.maps())

    def step_spec(self) -> tuple[np.dtype, tuple[int, ...]] | None:
        """The dtype and shape of a step when the steps are one array (else ``None``).

        Example:
            >>> import tempfile
            >>> from streamseq.store import materialize
            >>> with tempfile.TemporaryDirectory() as d:
            ...     s = materialize([np.zeros((3, 2), np.uint8)], d)
            ...     s[0].step_spec()
            (dtype('uint8'), (2,))
        """
        spec = self._files.spec
        if "leaf" not in spec:
            return None
        ((dtype, shape),) = layout.leaf_layout(spec)
        return dtype, shape

    def as_arrays(self) -> Any:
        """The stream's steps as read-only memory-map slices (no copy, nothing read yet).

        One array when the steps are arrays, else an
        :class:`~streamseq.read.ref.ArrayTree` of them: the loader copies every row's
        steps out of them with one compiled pass per batch, as it does for arrays.

        Example:
            >>> import tempfile
            >>> from streamseq.store import materialize
            >>> with tempfile.TemporaryDirectory() as d:
            ...     s = materialize([np.arange(4), np.arange(3) * 10], d)
            ...     a = s[1].as_arrays()
            ...     type(a).__name__, a.tolist(), a.flags.writeable
            ('memmap', [0, 10, 20], False)
        """
        sl = slice(self.offset, self.offset + self.length)
        steps = tree_map(lambda m: m[sl], self._files.maps())
        return steps if isinstance(steps, np.ndarray) else ArrayTree(steps)

    def read_into(self, start: int, stop: int, out: np.ndarray) -> int | None:
        """Copy steps ``start:stop`` into ``out`` (one copy, from the memory map).

        Returns:
            The steps written, or ``None`` when ``out`` is not of the steps' dtype and
            shape (or the steps are a dict or tuple).
        """
        known = self.step_spec()
        if known is None or out.dtype != known[0] or out.shape[1:] != known[1]:
            return None
        a, b = slice_bounds(slice(start, stop), self.length)
        b = max(a, b)
        out[: b - a] = self._files.maps()[self.offset + a : self.offset + b]
        return b - a


def store_files(sources: Sequence[Any]) -> list[_Files]:
    """The stores (their data files) that the :class:`StoredStream` among ``sources`` read.

    Streams zipped (:func:`~streamseq.zip_streams`) are looked into.

    Example:
        >>> import tempfile
        >>> from streamseq.store import materialize
        >>> with tempfile.TemporaryDirectory() as d:
        ...     s = materialize([np.arange(3), np.arange(2)], d)
        ...     len(store_files([*s, np.arange(4)]))
        1
    """
    from streamseq.zip_streams import _Zip  # (zipped streams: their parts)

    found: dict[int, _Files] = {}
    todo = list(sources)
    while todo:
        source = todo.pop()
        if isinstance(source, StoredStream):
            found.setdefault(id(source._files), source._files)
        elif isinstance(source, _Zip):
            parts = source.streams
            todo.extend(parts.values() if isinstance(parts, dict) else parts)
    return list(found.values())
