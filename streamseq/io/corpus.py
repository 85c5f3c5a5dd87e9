"""One token file split into documents, each a stream of a shared memory map.

A corpus file (nanoGPT's ``.bin``: flat ``uint16`` tokens with an end-of-document token
after each document; a ``.npy`` array; Megatron's ``.bin`` with its ``.idx``) holds many
documents back to back. :func:`token_corpus` finds their boundaries once, with numpy
(never a Python loop over tokens), and returns them as a table of streams
(:class:`~streamseq.StreamTable`): the documents' starts and lengths as two arrays, a
document made only when it is indexed (the file's key and its token range), and named
across runs (in a state's plan key) by its file and where it starts in it. A document
maps nothing of its own: every document of a file reads through one memory map per
process, made on the first read in that process (a
:class:`~streamseq.read.handle.SharedHandles` of this module, by file), so ten million
documents cost two arrays, and pickle to them.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import mmap
import operator
import os
import struct
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from streamseq._files import open_regular
from streamseq._redact import redacted_repr
from streamseq.errors import SourceError
from streamseq.io._base import Source
from streamseq.io._npy import read_npy_header
from streamseq.io._options import read_options
from streamseq.plan.identities import Identities
from streamseq.read.handle import ProcessLocal, SharedHandles, current_pid
from streamseq.read.ref import identity
from streamseq.stream_table import StreamTable, file_stamp

_NPY_MAGIC = b"\x93NUMPY"
#: tokens compared with ``eod`` at a time (bounds the temporary boolean array)
BLOCK = 1 << 24

#: Megatron's index: header, version, dtype code, then the sequence and document counts
_IDX_MAGIC = b"MMIDIDX\x00\x00"
_IDX_HEAD = struct.Struct("<9sQBQQ")
_IDX_DTYPES = {
    1: np.uint8,
    2: np.int8,
    3: np.int16,
    4: np.int32,
    5: np.int64,
    6: np.float64,
    7: np.float32,
    8: np.uint16,
}

#: (path, dtype, byte offset, tokens, the file's stamp) -> the memory map of this process
#: (the stamp: a file replaced at the same path is mapped again, never read through the
#: map of the file it replaced)
_Key = tuple[str, str, int, int, tuple[int, int, int]]
_MAPS: SharedHandles[_Key, np.ndarray] = SharedHandles()


def _map(key: _Key) -> np.ndarray:
    path, dtype, offset, count = key[:4]
    if count == 0:  # mmap refuses empty files
        return np.zeros(0, dtype)
    return np.memmap(path, np.dtype(dtype), mode="r", offset=offset, shape=(count,))


#: what tells a file changed: its size, modification time and inode
_Stamp = tuple[int, int, int]
#: the files a corpus reads through maps (its tokens, a mapped index) and their stamps
_Files = tuple[tuple[str, _Stamp], ...]


def _check_unchanged(files: _Files, a: int, b: int) -> None:
    """Raise when one of ``files`` is no longer what was split (tokens ``a:b`` asked).

    A memory map reads what the file holds now: a file truncated under it reads as zeros
    (or kills the process), one rewritten in place gives other tokens (or, an index,
    other documents). One ``stat`` a file before every read tells it, and the read is
    refused.
    """
    for path, stamp in files:
        _check_file(path, stamp, f"tokens {a}:{b}")


def _check_file(path: str, stamp: _Stamp, what: str) -> None:
    try:
        now = file_stamp(path)
    except OSError as e:
        raise SourceError(path, f"the file changed since the corpus was read ({what}): {e}") from e
    if now != stamp:
        changes = [
            f"{name} {was} -> {new}"
            for name, was, new in zip(("size", "mtime_ns", "inode"), stamp, now, strict=True)
            if was != new
        ]
        raise SourceError(
            path,
            f"the file changed since the corpus was read ({', '.join(changes)}): {what} not read",
        )


class _Batch:
    """The files a batch being written checks after it, in the process that writes it.

    Closed when the batch is written (before its check): a context copied in the batch
    (a thread's) or inherited (a child forked in it) reads on after it, checked by no one.
    """

    __slots__ = ("files", "open", "pid")

    def __init__(self, files: _Files):
        self.files, self.pid, self.open = files, current_pid(), True

    def checks(self, files: _Files) -> bool:
        """Whether this batch checks ``files`` after a read made now, here."""
        return (
            self.open
            and (self.files is files or self.files == files)
            and self.pid == current_pid()
        )


#: the batches being written (:class:`CorpusFiles`): the reads of the files they check
#: after them check before the read only
_BATCH_CHECKED: contextvars.ContextVar[tuple[_Batch, ...]] = contextvars.ContextVar(
    "streamseq_corpus_batch_checked", default=()
)


def _batch_checks(files: _Files) -> bool:
    """Whether a batch being written here checks ``files`` after it (:class:`_Batch`)."""
    batches = _BATCH_CHECKED.get()
    return bool(batches) and any(b.checks(files) for b in batches)


class CorpusFiles:
    """The files of a corpus, checked by a loader once more after each batch.

    A document's read checks its files (the token file, a mapped index) before it reads
    (a memory map of a file cut short kills the process that reads it: checked just
    before, the window is a read's). Read alone, it copies the tokens and checks again,
    so a change during the copy is an error; read by a loader that checks the files
    after the whole batch (:meth:`batch`), it is not checked again after its copy (and
    the batch's compiled copy reads the map itself): one ``stat`` a file a read and one a
    batch, not two a read. A file changed before or
    during the batch is a :class:`~streamseq.errors.SourceError` naming it (the loader
    adds the streams and the steps of the batch).

    Example:
        >>> import tempfile, numpy as np
        >>> path = tempfile.mkdtemp() + "/c.bin"
        >>> np.arange(6, dtype=np.uint16).tofile(path)
        >>> files = token_corpus(path, index=[0, 2]).stores[0]
        >>> files.check()
        >>> with files.batch():
        ...     token_corpus(path, index=[0, 2])[1][:2].tolist()
        [2, 3]
    """

    def __init__(self, files: _Files):
        self.files = files

    def __repr__(self) -> str:
        return f"CorpusFiles({redacted_repr([path for path, _ in self.files])})"

    def check(self) -> None:
        """Raise a :class:`~streamseq.errors.SourceError` when a file changed."""
        for path, stamp in self.files:
            _check_file(path, stamp, "this batch")

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """While a batch is written: the reads of these files copy and check nothing after."""
        batch = _Batch(self.files)
        token = _BATCH_CHECKED.set((*_BATCH_CHECKED.get(), batch))
        try:
            yield
        finally:
            batch.open = False
            _BATCH_CHECKED.reset(token)


class CorpusTable(StreamTable):
    """The documents of a corpus (:func:`token_corpus`): a table that names its files."""

    @property
    def stores(self) -> list[CorpusFiles]:
        """The files the documents read, which a loader checks around each batch."""
        files = self.make.args[1]
        return [CorpusFiles(files)] if files else []


def _guarded_copy() -> bool:
    """Whether a batch's compiled copy, guarded against ``SIGBUS``, is built here.

    Without it (a build without a compiler), a batch is copied by numpy, which a file cut
    short during the copy would kill: a document is then read with its own checks.
    """
    from streamseq.gather import writer  # (the writer imports the readers: not at import)

    return writer.fill is not None


class _Document(Source):
    """Tokens ``start:stop`` of a file, read through the file's shared memory map.

    With ``files`` (the files read through maps and what
    :func:`~streamseq.stream_table.file_stamp` gave of them when the corpus was split),
    every read first checks that they are unchanged.
    """

    __slots__ = ("_handle", "files", "key", "start", "stop")

    def __init__(
        self,
        key: _Key,
        start: int,
        stop: int,
        handle: ProcessLocal | None = None,
        files: _Files = (),
    ):
        # no Source.__init__: the handle is the file's, shared by all its documents
        self.key, self.start, self.stop, self.files = key, start, stop, files
        self._handle = _MAPS.of(key) if handle is None else handle

    def __reduce__(self) -> tuple:
        return (_Document, (self.key, self.start, self.stop, None, self.files))

    def _new_handle(self) -> ProcessLocal[np.ndarray]:
        return _MAPS.of(self.key)  # a copy reads through the file's map too

    @property
    def path(self) -> str:
        """The token file."""
        return self.key[0]

    @property
    def file_offset(self) -> int:
        """Where the document starts in the file (with the file, what names it)."""
        return self.start

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the tokens."""
        return np.dtype(self.key[1])

    @property
    def read_options(self) -> str:
        """How it reads (:func:`~streamseq.io._options.read_options`): the tokens' dtype."""
        return read_options("token_corpus", {"dtype": self.key[1]})

    def __repr__(self) -> str:
        return f"document({redacted_repr(self.key[0])}, {self.start}:{self.stop})"

    def __len__(self) -> int:
        return self.stop - self.start

    def _open(self) -> np.ndarray:
        _check_unchanged(self.files, self.start, self.stop)
        return _map(self.key)

    #: a list of documents is not arrays already mapped (a store's): its reads check
    #: their files each (:meth:`as_arrays` gives arrays only to a batch that checks them)
    mapped = False

    def as_arrays(self) -> Any:
        """The tokens as a read-only slice of the file's map, while a batch checks the files.

        A loader's batch that checks the files before and after it (:meth:`CorpusFiles.batch`,
        in this process) copies the tokens of its rows straight out of the map, in one
        compiled pass: a file cut short during the copy is an error of the batch (the
        compiled copy is guarded against ``SIGBUS``), one rewritten in place is found by
        the check after it. Anywhere else (a list of documents, a read of its own, a
        forked child, a context copied out of the batch, a build without the compiled
        copy), the document itself: its reads check the files before and after each copy.

        Example:
            >>> import tempfile, numpy as np
            >>> path = tempfile.mkdtemp() + "/c.bin"
            >>> np.arange(6, dtype=np.uint16).tofile(path)
            >>> docs = token_corpus(path, index=[0, 2])
            >>> doc = docs[1]
            >>> doc.as_arrays() is doc  # (no batch checks the files: the document)
            True
            >>> with docs.stores[0].batch():
            ...     type(doc.as_arrays()).__name__, doc.as_arrays().tolist()
            ('memmap', [2, 3, 4, 5])
        """
        files = self.files
        if not files or not _batch_checks(files) or not _guarded_copy():
            return self
        handle = self._handle.get(self._open_checked)  # (made once a process: its own lock)
        if self.stop > len(handle):  # (a range past the end of the file: the read says so)
            return self
        return handle[self.start : self.stop]

    def _read(self, handle: Any, a: int, b: int) -> np.ndarray:
        if self.files:  # (before every read: a map of a file cut short kills its reader)
            _check_unchanged(self.files, self.start + a, self.start + b)
        if self.start + b > len(handle) and b > a:  # a range past the end of the file
            raise SourceError(
                self.key[0],
                f"tokens {self.start + a}:{self.start + b} are past the end of the file "
                f"({len(handle)} tokens)",
            )
        # copied, always: what a read gives (to a transform, a batch's look-ahead or packed
        # rows) may be kept past the batch, and a view of the map would change with the
        # file (or kill its reader, the file cut short); a batch's compiled copy reads the
        # map itself (:meth:`as_arrays`)
        tokens = np.array(handle[self.start + a : self.start + b])
        tokens.flags.writeable = False
        # checked again (what a change during the copy gave) unless a batch that checks the
        # files after it is still open here: asked after the copy, so that a read begun in
        # a batch that ends meanwhile (a thread of its context) is checked
        if self.files and not _batch_checks(self.files):
            _check_unchanged(self.files, self.start + a, self.start + b)
        return tokens

    def _empty(self) -> np.ndarray:
        return np.zeros(0, self.key[1])

    def step_spec(self) -> tuple[np.dtype, tuple[int, ...]]:
        """One token of the file's dtype a step."""
        return self.dtype, ()

    def close(self) -> None:
        """Leave the file's map open: every document of the file in this process uses it."""


def _document(key: _Key, files: _Files, start: int, length: int) -> _Document:
    """The document of ``length`` tokens at ``start`` of the file ``key`` names."""
    return _Document(key, start, start + length, None, files)


def _layout(path: str, dtype: npt.DTypeLike | None, size: int) -> tuple[np.dtype, int, int]:
    """dtype, byte offset and number of tokens of a flat or ``.npy`` token file."""
    with open(path, "rb") as f:
        is_npy = f.read(len(_NPY_MAGIC)) == _NPY_MAGIC
    if is_npy:
        shape, fortran, file_dtype, offset = read_npy_header(path)
        if dtype is not None and np.dtype(dtype) != file_dtype:
            raise ValueError(f"{path}: dtype {np.dtype(dtype)} given, file has {file_dtype}")
        if len(shape) != 1 or file_dtype.kind not in "iu":
            raise SourceError(
                path, f"a corpus is a 1-d array of integer tokens, not {file_dtype} {shape}"
            )
        count = int(shape[0])
        if size < offset + count * file_dtype.itemsize:
            expected = offset + count * file_dtype.itemsize
            raise SourceError(path, f"truncated: {size} bytes, {expected} expected")
        return file_dtype, offset, count
    dtype = np.dtype(np.uint16 if dtype is None else dtype)
    if dtype.kind not in "iu":
        raise SourceError(path, f"a corpus holds integer tokens, not {dtype}")
    if size % dtype.itemsize:
        raise SourceError(path, f"size {size} is not a multiple of {dtype} ({dtype.itemsize})")
    return dtype, 0, size // dtype.itemsize


def _eod_token(path: str, eod: Any, dtype: np.dtype) -> int:
    """``eod`` as an int that a token of ``dtype`` can be (``3.0`` is 3).

    An integer of any kind (numpy's, a 0-d array or tensor of integers: what
    :func:`operator.index` takes) or a whole float; never a bool.

    Raises:
        ValueError: naming the file: ``eod`` is not a whole number (``3.5``, NaN, a
            string, a bool) or out of the range of ``dtype`` (no document would end).

    Example:
        >>> u16 = np.dtype(np.uint16)
        >>> _eod_token("a.bin", 50256.0, u16), _eod_token("a.bin", np.array(7), u16)
        (50256, 7)
        >>> _eod_token("a.bin", -1, np.dtype(np.uint16))
        Traceback (most recent call last):
        ...
        ValueError: a.bin: eod -1 is no token of uint16 (0 to 65535)
        >>> _eod_token("a.bin", False, np.dtype(np.uint16))
        Traceback (most recent call last):
        ...
        ValueError: a.bin: eod False is not a whole number (a bool), no token of uint16
    """
    token = None
    if isinstance(eod, (bool, np.bool_)) or "bool" in str(getattr(eod, "dtype", "")):
        kind = " (a bool)"
    elif isinstance(eod, (float, np.floating)):
        kind = ""
        if float(eod).is_integer():
            token = int(eod)
    else:
        kind = ""
        try:
            token = operator.index(eod)
        except TypeError:
            pass
    if token is None:
        raise ValueError(f"{path}: eod {eod!r} is not a whole number{kind}, no token of {dtype}")
    info = np.iinfo(dtype)
    if not info.min <= token <= info.max:
        raise ValueError(f"{path}: eod {eod!r} is no token of {dtype} ({info.min} to {info.max})")
    return token


def _eod_bounds(tokens: np.ndarray, eod: int) -> tuple[np.ndarray, np.ndarray]:
    """Documents that each end with an ``eod`` token (the last one may lack it)."""
    ends = [
        np.flatnonzero(tokens[i : i + BLOCK] == eod) + (i + 1)
        for i in range(0, len(tokens), BLOCK)
    ]
    stops = np.concatenate([np.zeros(0, np.int64), *ends]).astype(np.int64)
    if not len(stops) or stops[-1] != len(tokens):
        stops = np.append(stops, len(tokens))  # tokens after the last eod: one more document
    starts = np.concatenate([[0], stops[:-1]]).astype(np.int64)
    return starts, stops


def _index_bounds(path: str, index: Any, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Documents from their start offsets (an array, or a ``.npy`` file of them)."""
    if isinstance(index, (str, os.PathLike)):
        where = os.fspath(index)
        try:
            open_regular(where).close()  # (a FIFO would be waited for, a device read for ever)
            offsets = np.load(where, mmap_mode="r")
        except (OSError, ValueError) as e:
            raise SourceError(where, f"cannot read the document index: {e}") from e
    else:
        offsets = np.asarray(index)
    if offsets.ndim != 1 or not len(offsets) or offsets.dtype.kind not in "iu":
        raise SourceError(
            path,
            "the index must be a non-empty 1-d array of integer offsets, "
            f"got {offsets.dtype} {offsets.shape}",
        )
    if offsets.dtype == np.uint64:  # (past int64: out of range, before the cast wraps it)
        big = np.flatnonzero(offsets > np.uint64(count))
        if len(big):
            bad = int(big[0])
            raise SourceError(
                path,
                f"index[{bad}] = {int(offsets[bad])} is out of range for a file of {count} tokens",
            )
    starts = np.asarray(offsets, np.int64)
    if starts[0] < 0 or starts[-1] > count:
        bad = int(np.flatnonzero((starts < 0) | (starts > count))[0])
        raise SourceError(
            path, f"index[{bad}] = {starts[bad]} is out of range for a file of {count} tokens"
        )
    down = np.flatnonzero(np.diff(starts) < 0)
    if len(down):
        i = int(down[0])
        raise SourceError(
            path,
            f"the index decreases: index[{i}] = {starts[i]} > index[{i + 1}] = {starts[i + 1]}",
        )
    if len(starts) > 1 and starts[-1] == count:
        starts = starts[:-1]  # a final boundary at the end of the file, not an empty document
    stops = np.append(starts[1:], count)
    return starts, stops


def _mapped(array: np.ndarray) -> bool:
    """Whether ``array`` reads a memory map (a view of one, not a copy)."""
    base: Any = array
    while base is not None:
        if isinstance(base, (np.memmap, mmap.mmap)):
            return True
        base = getattr(base, "base", None)
    return False


def _megatron(bin_path: str, idx_path: str, dtype: npt.DTypeLike | None, size: int) -> tuple:
    """dtype, token count and document bounds of a Megatron ``.bin`` and its ``.idx``.

    The ``.idx`` (``megatron/core/datasets/indexed_dataset.py``, ``_IndexWriter``): the
    header ``MMIDIDX`` and two zero bytes, version 1 (``<Q``), the dtype code (``<B``), the
    number of sequences and of document indices (``<Q`` each), then the length of every
    sequence (int32), its byte offset in the ``.bin`` (int64), and the document indices
    (int64: document ``d`` is sequences ``doc[d]:doc[d + 1]``).
    """
    try:
        with open(idx_path, "rb") as f:
            head = f.read(_IDX_HEAD.size)
    except OSError as e:
        raise SourceError(idx_path, f"cannot read the index: {e}") from e
    if len(head) < _IDX_HEAD.size or head[:9] != _IDX_MAGIC:
        raise SourceError(idx_path, "not a Megatron index (no MMIDIDX header)")
    _, version, code, sequences, documents = _IDX_HEAD.unpack(head)
    if version != 1 or code not in _IDX_DTYPES:
        raise SourceError(idx_path, f"unsupported index: version {version}, dtype code {code}")
    file_dtype = np.dtype(_IDX_DTYPES[code])
    if dtype is not None and np.dtype(dtype) != file_dtype:
        raise ValueError(f"{idx_path}: dtype {np.dtype(dtype)} given, index has {file_dtype}")
    need = _IDX_HEAD.size + sequences * 12 + documents * 8
    if os.path.getsize(idx_path) < need:
        raise SourceError(
            idx_path, f"truncated: {os.path.getsize(idx_path)} bytes, {need} expected"
        )
    raw = np.memmap(idx_path, np.uint8, mode="r")
    at = _IDX_HEAD.size
    lengths = np.frombuffer(raw, "<i4", sequences, at).astype(np.int64)
    pointers = np.frombuffer(raw, "<i8", sequences, at + 4 * sequences)
    doc = np.frombuffer(raw, "<i8", documents, at + 12 * sequences).astype(np.int64)
    if size % file_dtype.itemsize:
        raise SourceError(bin_path, f"size {size} is not a multiple of {file_dtype}")
    count = size // file_dtype.itemsize
    item = file_dtype.itemsize
    expected = np.concatenate([[0], np.cumsum(lengths * item)[:-1]]) if sequences else lengths
    if len(lengths) and ((lengths < 0).any() or not np.array_equal(pointers, expected)):
        raise SourceError(idx_path, "the sequence offsets do not follow the sequence lengths")
    if len(doc) == 0 or doc[0] != 0 or doc[-1] != sequences or (np.diff(doc) < 0).any():
        raise SourceError(idx_path, "the document indices do not cover the sequences in order")
    token_at = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    if token_at[-1] > count:
        raise SourceError(
            bin_path, f"the index covers {token_at[-1]} tokens, the file has {count}"
        )
    return file_dtype, count, token_at[doc[:-1]], token_at[doc[1:]]


def token_corpus(
    path: str | os.PathLike,
    *,
    dtype: npt.DTypeLike | None = None,
    eod: int | None = None,
    index: npt.ArrayLike | str | os.PathLike | None = None,
) -> StreamTable:
    """Split one token file into documents: a table of memory-mapped streams, one a document.

    The documents come either from an end-of-document token, ``eod`` (nanoGPT's layout:
    each document followed by it), found by one vectorised pass over the file, or from an
    ``index``: the start offsets of the documents (an array or a ``.npy`` file), or the
    path of Megatron's ``.idx`` file for its ``.bin`` (sequences grouped into documents).

    With ``eod``, each document ends with its ``eod`` token, kept (a model learns where
    documents end), so the documents concatenated give back the file exactly; tokens after
    the last ``eod`` are one more document, and a file without ``eod`` is one document.
    With an ``index``, document ``i`` runs from ``index[i]`` to ``index[i + 1]`` (the last
    one to the end of the file; a last offset equal to the number of tokens is that end,
    as cumulative sums give, not one more document), and tokens before ``index[0]`` are
    in none. Equal offsets make documents with no token: they are kept, empty (a loader
    skips them), so that document ``i`` is the ``i``-th of the index.

    Every document reads the file through one memory map per process, made on the first
    read in that process; the table pickles to its file and two arrays (the starts and
    lengths of the documents), never tokens nor an object per document.

    Args:
        path: the token file: flat binary (``.bin``) or ``.npy`` (a 1-d integer array).
        dtype: of the tokens of a flat file (default ``uint16``, as nanoGPT writes);
            read from the header of a ``.npy`` file and from a Megatron ``.idx``, and
            checked against them when given.
        eod: the end-of-document token id (an integer, numpy's or a 0-d array or tensor of
            one too, or a whole float; not a bool).
        index: the document start offsets (in tokens), as an array or a ``.npy`` file,
            or the path of a Megatron ``.idx`` file (ending in ``.idx``).

    Returns:
        A :class:`~streamseq.StreamTable` of the documents, in file order (a sequence of
        streams: ``docs[i]`` is document ``i``, ``len(doc)`` its number of tokens and
        ``doc[a:b]`` its tokens, read-only, copied out of the file's one memory map
        and the file checked before and after the copy; ``docs.lengths`` all their
        lengths, one array; ``docs[a:b]`` a smaller table).

    Raises:
        ValueError: neither or both of ``eod`` and ``index``, a ``dtype`` that
            contradicts the file, or an ``eod`` that no token of the file's dtype can be
            (not a whole number, or out of its range).
        streamseq.errors.SourceError: naming the file: it is missing, empty, not a whole
            number of tokens, a flat file of a ``dtype`` that is not integers, a ``.npy``
            array that is not 1-d integers, or the index is
            out of range, decreasing or (``.idx``) damaged.

    Example:
        >>> import tempfile, os, numpy as np
        >>> path = os.path.join(tempfile.mkdtemp(), "train.bin")
        >>> np.array([5, 6, 0, 7, 0, 8, 9], np.uint16).tofile(path)
        >>> docs = token_corpus(path, eod=0)
        >>> [d[:].tolist() for d in docs], len(docs[2])
        ([[5, 6, 0], [7, 0], [8, 9]], 2)
        >>> token_corpus(path, index=[0, 3, 3]).lengths.tolist()
        [3, 0, 4]
        >>> docs[1:].lengths.tolist(), len(docs)
        ([2, 2], 3)
    """
    if (eod is None) == (index is None):
        raise ValueError("give either eod (the end-of-document token) or index (the offsets)")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise SourceError(path, "no such file")
    stamp = file_stamp(path)
    size = stamp[0]
    megatron = isinstance(index, (str, os.PathLike)) and os.fspath(index).endswith(".idx")
    if megatron:
        file_dtype, count, starts, stops = _megatron(path, os.fspath(index), dtype, size)  # type: ignore[arg-type]
        offset = 0
    else:
        file_dtype, offset, count = _layout(path, dtype, size)
    if count == 0:
        raise SourceError(path, "empty: no token")
    key: _Key = (path, file_dtype.str, offset, count, stamp)
    files: _Files = ((path, stamp),)
    if not megatron:
        if eod is not None:
            token = _eod_token(path, eod, file_dtype)
            starts, stops = _eod_bounds(_MAPS.of(key).get(lambda: _map(key)), token)
        else:
            starts, stops = _index_bounds(path, index, count)
            if isinstance(index, (str, os.PathLike)) and _mapped(starts):
                where = os.fspath(index)  # the starts read the index's pages: check it too
                files += ((where, file_stamp(where)),)
    starts = np.asarray(starts, np.int64)
    return CorpusTable(
        functools.partial(_document, key, files),
        np.asarray(stops, np.int64) - starts,
        [starts],
        step_spec=(file_dtype, ()),
        # a document is named by its file and where it starts in it (its length is the
        # plan's): one array, the starts themselves; and by how it is read (the dtype)
        identities=Identities.repeat(
            identity(_Document(key, 0, 0)),
            len(starts),
            starts,
            read_options("token_corpus", {"dtype": file_dtype}),
        ),
    )
