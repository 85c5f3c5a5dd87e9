"""What names every stream across runs, as arrays: :class:`Identities`.

A state keeps a hash of the streams' identities (file paths, or types) joined by
NUL characters. Millions of streams mostly share a few identities (every document of a corpus
is its file's), so they are kept as the distinct names and one code per stream (or no
array at all when there is one name), and hashed in blocks, never as a string per
stream.

Streams that are ranges of one file (the documents of a corpus) are named by their file
and where each starts in it: the :attr:`Identities.offsets`, one int64 array (-1 for a
stream that is a whole file or no file), which a plan key hashes as one more field
(:attr:`~streamseq.plan.spec.PlanSpec.key`'s ``offsets``). With the lengths, they tell
any two selections of one file's documents apart.

A stream that zips others (:func:`~streamseq.zip_streams`) has no file of its own: its
offset is a code of what it zips (:func:`zipped_offsets`: every part's key, identity and
offset), so that zips of other streams of the same lengths are told apart too.

How a stream is read (a token file's dtype, a video's frame size, pixel format and rate,
an audio file's sample rate and layout) changes its steps, not its file: the
:attr:`Identities.readers` name every stream's reader and the options of it that change
the steps (one short text per distinct configuration, credentials never among them, and
a code per stream only when they differ), which a plan key hashes as one more field
(``readers``), only when some stream has a reader that says so.
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

#: streams hashed at a time (bounds the bytes joined at once)
BLOCK = 1 << 16


class Identities(Sequence):
    r"""The identity of every stream: ``names[codes[i]]`` (``names[0]`` without codes).

    Args:
        names: the distinct identities.
        codes: the index in ``names`` of every stream's identity, or None when every
            stream has ``names[0]``.
        count: the number of streams (the length of ``codes`` when given).

    Example:
        >>> ids = Identities.of(["a.bin", "ndarray", "a.bin"])
        >>> len(ids), ids[2], list(ids[1:])
        (3, 'a.bin', ['ndarray', 'a.bin'])
        >>> Identities.repeat("a.bin", 3).digest() == ids.replace_all("a.bin").digest()
        True
        >>> Identities.of(["x", "y"]).digest() == hashlib.sha256(b"x\x00y").hexdigest()
        True
        >>> docs = Identities.repeat("a.bin", 3, offsets=np.array([0, 4, 9]))
        >>> docs[::-1].offsets.tolist(), docs.digest() == ids.replace_all("a.bin").digest()
        ([9, 4, 0], True)
    """

    __slots__ = ("codes", "count", "names", "offsets", "readers")

    def __init__(
        self,
        names: Sequence[str],
        codes: np.ndarray | None,
        count: int,
        offsets: np.ndarray | None = None,
        readers: Identities | None = None,
    ):
        self.names = tuple(names)
        self.codes = None if codes is None else np.asarray(codes)
        self.count = int(count if codes is None else len(codes))
        if self.count and not self.names:
            raise ValueError("identities of streams need at least one name")
        if offsets is not None:
            offsets = np.asarray(offsets)
            if offsets.dtype != np.int64:
                offsets = offsets.astype(np.int64)
            if offsets.shape != (self.count,):
                raise ValueError(f"{offsets.shape[:1]} offsets for {self.count} streams")
        self.offsets = offsets
        self.readers = _checked_readers(readers, self.count)

    @classmethod
    def of(cls, identities: Iterable[str]) -> Identities:
        """The identities of a list of strings (one per stream)."""
        if isinstance(identities, Identities):
            return identities
        index: dict[str, int] = {}
        codes = np.fromiter((index.setdefault(s, len(index)) for s in identities), np.int64)
        return cls.coded(index, [codes], len(codes))

    @classmethod
    def coded(
        cls,
        names: Iterable[str],
        codes: Sequence[np.ndarray],
        count: int,
        offsets: np.ndarray | None = None,
        readers: Identities | None = None,
    ) -> Identities:
        """``count`` streams, stream ``i`` named ``names[code i]``.

        ``codes``: the code of every stream, in one or several int arrays one after
        another (joined, in the smallest dtype, only when there are several names).

        Example:
            >>> ids = Identities.coded(["a", "b"], [np.array([1, 1]), np.array([0])], 3)
            >>> list(ids), ids.codes.dtype.name
            (['b', 'b', 'a'], 'uint8')
        """
        names = tuple(names)
        if len(names) <= 1:
            return cls(names, None, count, offsets, readers)
        joined = np.concatenate(codes).astype(np.min_scalar_type(len(names) - 1))
        return cls(names, joined, count, offsets, readers)

    @classmethod
    def empty(cls) -> Identities:
        """No stream."""
        return cls((), None, 0)

    @classmethod
    def repeat(
        cls,
        name: str,
        count: int,
        offsets: np.ndarray | None = None,
        reader: str | None = None,
    ) -> Identities:
        """``count`` streams that all have the identity ``name`` (ranges at ``offsets``).

        ``reader``: how every one of them is read (see :attr:`readers`), or None.
        """
        if not count:
            return cls((), None, 0)
        readers = None if not reader else cls((reader,), None, count)
        return cls((name,), None, count, offsets, readers)

    @classmethod
    def concat(cls, parts: Sequence[Identities]) -> Identities:
        """The identities of ``parts``, one after another."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls((), None, 0)
        if len(parts) == 1:
            return parts[0]
        index: dict[str, int] = {}
        codes = []
        for p in parts:  # (a loop over parts, not streams)
            remap = np.array([index.setdefault(n, len(index)) for n in p.names], np.int64)
            codes.append(remap[p.codes] if p.codes is not None else np.full(p.count, remap[0]))
        offsets = None
        if any(p.offsets is not None for p in parts):
            offsets = np.concatenate(
                [p.offsets if p.offsets is not None else np.full(p.count, -1) for p in parts]
            ).astype(np.int64)
        readers = None
        if any(p.readers is not None for p in parts):
            readers = Identities.concat(
                [
                    p.readers if p.readers is not None else Identities.repeat("", p.count)
                    for p in parts
                ]
            )
        return cls.coded(index, codes, sum(p.count for p in parts), offsets, readers)

    def replace_all(self, name: str) -> Identities:
        """As many streams, all with the identity ``name`` (the same offsets and readers)."""
        return Identities(
            (name,) if self.count else (), None, self.count, self.offsets, self.readers
        )

    def with_readers(self, readers: Identities | None) -> Identities:
        """The same identities, read by ``readers`` (one per stream, see :attr:`readers`).

        Example:
            >>> ids = Identities.of(["a.bin", "b.bin"])
            >>> read = ids.with_readers(Identities.repeat("tokens(dtype=<u2)", 2))
            >>> read.readers_digest() is None, ids.readers_digest() is None
            (False, True)
        """
        return Identities(self.names, self.codes, self.count, self.offsets, readers)

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, (int, np.integer)):
            n = range(self.count)[i]  # (the IndexError of a list)
            return self.names[0 if self.codes is None else int(self.codes[n])]
        index = i if isinstance(i, slice) else np.asarray(i)
        offsets = None if self.offsets is None else self.offsets[index]
        readers = None if self.readers is None else self.readers[index]
        if self.codes is not None:
            return Identities(self.names, self.codes[index], 0, offsets, readers)
        if isinstance(index, slice):
            count = len(range(*index.indices(self.count)))
        else:
            count = len(np.arange(self.count)[index])
        return Identities(self.names, None, count, offsets, readers)

    def __iter__(self) -> Iterator[str]:
        for a in range(0, self.count, BLOCK):
            yield from self._block(a, min(a + BLOCK, self.count))

    def _block(self, a: int, b: int) -> list[str]:
        if self.codes is None:
            return [self.names[0]] * (b - a)
        codes = self.codes[a:b].tolist()
        if len(codes) == 1:
            return [self.names[codes[0]]]
        return list(operator.itemgetter(*codes)(self.names))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Identities):
            return (
                len(self) == len(other)
                and self.digest() == other.digest()
                and self.offsets_digest() == other.offsets_digest()
                and self.readers_digest() == other.readers_digest()
            )
        if isinstance(other, (tuple, list)):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Identities({len(self.names)} names, {self.count} streams)"

    def sha256(self) -> Any:
        """``hashlib.sha256`` of the identities joined by NUL characters, in blocks."""
        return self.feed(hashlib.sha256())

    def feed(self, h: Any) -> Any:
        """Update the hash ``h`` with the identities joined by NUL characters; return it."""
        if self.codes is None:
            if self.count:
                one = self.names[0].encode() + b"\0"
                whole = one * min(self.count, BLOCK)
                for a in range(0, self.count, BLOCK):
                    n = min(BLOCK, self.count - a)
                    part = whole if n == BLOCK else one * n
                    h.update(part if a + n < self.count else part[:-1])
            return h
        names = [n.encode() for n in self.names]
        for a in range(0, self.count, BLOCK):
            codes = self.codes[a : a + BLOCK].tolist()
            got = [names[codes[0]]] if len(codes) == 1 else operator.itemgetter(*codes)(names)
            if a:
                h.update(b"\0")
            h.update(b"\0".join(got))
        return h

    def digest(self) -> str:
        """The hex digest of :meth:`sha256`."""
        return self.sha256().hexdigest()

    def offsets_digest(self) -> str | None:
        """The hex digest of the offsets (int64, little-endian), or None without them.

        Example:
            >>> Identities.repeat("a.bin", 2, np.array([0, 5])).offsets_digest()[:8]
            'b15c0825'
            >>> Identities.repeat("a.bin", 2).offsets_digest() is None
            True
        """
        if self.offsets is None or not self.count or int(self.offsets.max()) < 0:
            return None  # (no stream is a range of a file)
        h = hashlib.sha256()
        for a in range(0, self.count, BLOCK * 16):  # (a copy only of a strided block)
            h.update(np.ascontiguousarray(self.offsets[a : a + BLOCK * 16], "<i8"))
        return h.hexdigest()

    def readers_digest(self) -> str | None:
        """A hex digest of how every stream is read (:attr:`readers`), or None.

        None when no stream has a reader that names its options (no ``readers``, or
        all of them empty). The digest is of the distinct readers in the order they
        first appear and of a small code per stream (:func:`tally_digest`): the same
        readers of the same streams give the same digest however they were gathered.

        Example:
            >>> ids = Identities.repeat("a.bin", 3, reader="tokens(dtype=<u2)")
            >>> ids.readers_digest() == Identities.of(["a", "b", "c"]).with_readers(
            ...     Identities.of(["tokens(dtype=<u2)"] * 3)).readers_digest()
            True
            >>> Identities.repeat("a.bin", 3).readers_digest() is None
            True
        """
        readers = self.readers
        if readers is None or not readers.count or not any(readers.names):
            return None
        return tally_digest(readers)


def _checked_readers(readers: Identities | None, count: int) -> Identities | None:
    """``readers`` (one per stream), checked: as many as the streams."""
    if readers is None:
        return None
    if not isinstance(readers, Identities):
        readers = Identities.of(readers)
    if len(readers) != count:
        raise ValueError(f"{len(readers)} readers for {count} streams")
    return readers


def tally_digest(ids: Identities) -> str:
    """A hex digest of the strings of ``ids``, one per stream, a few bytes a stream.

    The distinct strings in the order they first appear, then the number of streams and,
    when there are several, the index of every stream's string among them (uint32): the
    same strings in the same order give the same digest, whatever the codes ``ids`` keeps
    (a selection may keep names it no longer uses).

    Example:
        >>> a = Identities.of(["x", "y", "x"])
        >>> tally_digest(a) == tally_digest(Identities.of(["z", "x", "y", "x"])[1:])
        True
        >>> tally_digest(a) == tally_digest(Identities.of(["x", "x", "y"]))
        False
        >>> two = Identities.of(["x", "z"])[[0, 0]]
        >>> tally_digest(Identities.repeat("x", 2)) == tally_digest(two)
        True
    """
    h = hashlib.sha256()
    if ids.codes is None:
        first, codes = [ids.names[0]] if ids.count else [], None
    else:
        used, at, inverse = np.unique(ids.codes, return_index=True, return_inverse=True)
        order = np.argsort(at, kind="stable")  # (the distinct codes as they first appear)
        rank = np.empty(len(order), np.uint32)
        rank[order] = np.arange(len(order), dtype=np.uint32)
        first = [ids.names[int(c)] for c in used[order]]  # (a loop over distinct names)
        codes = rank[inverse.reshape(-1)] if len(first) > 1 else None
    h.update(repr((first, ids.count)).encode())
    if codes is not None:
        h.update(np.ascontiguousarray(codes, "<u4"))
    return h.hexdigest()


#: the constants of splitmix64 (a bijective mix of 64-bit integers)
_MIX = (
    np.uint64(0x9E3779B97F4A7C15),
    np.uint64(0xBF58476D1CE4E5B9),
    np.uint64(0x94D049BB133111EB),
)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 of every element of the uint64 array ``x``."""
    with np.errstate(over="ignore"):
        x = x + _MIX[0]
        x = (x ^ (x >> np.uint64(30))) * _MIX[1]
        x = (x ^ (x >> np.uint64(27))) * _MIX[2]
    return x ^ (x >> np.uint64(31))


def zipped_offsets(keys: Sequence[str], parts: Sequence[Identities]) -> np.ndarray:
    """The offset of every stream that zips a stream of each of ``parts``, under ``keys``.

    A non-negative int64 code of every part's key, identity and offset (-1 without one),
    in order: zips of other streams (another file, another range of it, other keys) get
    other codes. Array code: a hash per distinct identity of a part, none per stream.

    Example:
        >>> a = Identities.repeat("a.bin", 2, np.array([0, 6]))
        >>> b = Identities.of(["ndarray", "ndarray"])
        >>> codes = zipped_offsets(["x", "y"], [a, b])
        >>> bool((codes >= 0).all()), bool(codes[0] != codes[1])
        (True, True)
        >>> bool(zipped_offsets(["y", "x"], [a, b])[0] != codes[0])
        True
        >>> int(zipped_offsets(["x", "y"], [a[1:], b[1:]])[0]) == int(codes[1])
        True
    """
    count = len(parts[0]) if parts else 0
    code = np.zeros(count, np.uint64)
    with np.errstate(over="ignore"):
        for key, part in zip(keys, parts, strict=True):  # (a loop over parts, not streams)
            at = part.offsets if part.offsets is not None else np.full(count, -1, np.int64)
            if type(part) is not Identities:  # (names made from its streams: once, in blocks)
                part = Identities.of(list(part))
            named = np.array(
                [
                    int.from_bytes(hashlib.sha256(f"{key}\0{n}".encode()).digest()[:8], "little")
                    for n in part.names
                ]
                or [0],
                np.uint64,
            )
            mine = named[part.codes] if part.codes is not None else np.full(count, named[0])
            mine = _mix(mine ^ _mix(at.astype(np.int64).view(np.uint64)))
            code = _mix(code * np.uint64(0x100000001B3) + mine)
    return (code >> np.uint64(1)).astype(np.int64)


def zipped_readers(keys: Sequence[str], parts: Sequence[Identities]) -> Identities | None:
    """How every stream that zips a stream of each of ``parts`` is read, or None.

    One text per distinct combination of the parts' readers (:attr:`Identities.readers`),
    ``zip(key: reader, ...)`` (``-`` for a part that names no reader), so that zips of
    the same files read another way (a dtype, a frame size) get other readers; None
    when no part names one (the zips of arrays, as before readers were named). Array
    code: a text per distinct combination, none per stream.

    Example:
        >>> a = Identities.repeat("a.bin", 2, reader="tokens(dtype=<u2)")
        >>> b = Identities.of(["ndarray", "ndarray"])
        >>> list(zipped_readers(["x", "y"], [a, b]))
        ['zip(x: tokens(dtype=<u2), y: -)', 'zip(x: tokens(dtype=<u2), y: -)']
        >>> zipped_readers(["x", "y"], [b, b]) is None
        True
    """
    readers = [p.readers for p in parts]
    if all(r is None or not any(r.names) for r in readers):
        return None
    count = len(parts[0])
    names = [("",) if r is None else r.names for r in readers]
    codes = [None if r is None else r.codes for r in readers]
    if all(c is None for c in codes):  # (one reader a part: one text)
        return Identities((_zip_text(keys, [n[0] for n in names]),), None, count)
    stacked = np.stack(
        [np.zeros(count, np.int64) if c is None else c.astype(np.int64) for c in codes], 1
    )
    combos, inverse = np.unique(stacked, axis=0, return_inverse=True)
    index: dict[str, int] = {}
    remap = np.array(  # (a loop over distinct combinations, not streams)
        [
            index.setdefault(_zip_text(keys, [names[j][c] for j, c in enumerate(row)]), len(index))
            for row in combos.tolist()
        ],
        np.int64,
    )
    return Identities.coded(index, [remap[inverse.reshape(-1)]], count)


def _zip_text(keys: Sequence[str], readers: Sequence[str]) -> str:
    """``zip(key: reader, ...)``: how a zip's parts are read, ``-`` for none."""
    return "zip(" + ", ".join(f"{k}: {r or '-'}" for k, r in zip(keys, readers, strict=True)) + ")"


def read_code(offset: int, settings: str) -> int:
    """A stream's offset naming where it starts in its file and what of it is read.

    For a source that reads some fields of its file's rows (the columns of a table): a
    non-negative int64 code of its first row and ``settings`` (the fields, in order),
    so that other rows or other fields of the same lengths get another code.

    Example:
        >>> read_code(6, "('a',)") == read_code(6, "('a',)"), read_code(6, "('a',)") >= 0
        (True, True)
        >>> read_code(6, "('a',)") == read_code(6, "('b',)")
        False
    """
    h = hashlib.sha256(f"{int(offset)}\0{settings}".encode()).digest()[:8]
    return int.from_bytes(h, "little") >> 1


def as_identities(sources: Any) -> Identities:
    """``sources`` (a tuple of strings, as older code gave) as :class:`Identities`.

    Example:
        >>> as_identities(("a", "a")).names
        ('a',)
    """
    return sources if isinstance(sources, Identities) else Identities.of(sources)
