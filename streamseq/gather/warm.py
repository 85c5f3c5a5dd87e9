"""The first batch a process writes: its rows' streams opened and read concurrently.

A pass starts with every row opening a stream. Each open and each first read may wait on
a network (a file at an ``s3://`` URL: a request to stat it, one for its header, one for
its first steps) or on a decoder, and one row after the other those waits add up. For
the first batch that a process writes in a pass, the streams of its rows are opened from
a few threads at once, then the first chunk of every row whose stream is not an array
is read the same way, and the batch writer takes those reads instead of making them.

In a worker process only the streams that wait on a network are read so (their
source's ``on_network``): the workers already share the cores, and the decoding of local
files gains nothing from more threads there (on two cores and two workers, their first
batches came 15% later, the threads' start included).

Nothing else changes: the data is what the writer's own reads give (each row reads its
own stream, once), and a failure here is dropped, so that the writer's own read, row by
row and in order, raises it as it always does. Rows whose streams share a source are left
to the writer (a source is read by one thread at a time).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from ..read.stream import ArrayTree

if TYPE_CHECKING:
    from ..interleave import Row
    from .positions import Positions

#: the threads that open and read the first streams of one batch
THREADS = 8


def _each(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run ``calls`` from up to :data:`THREADS` threads; a call that raises gives None."""

    def attempt(call: Callable[[], Any]) -> Any:
        try:
            return call()
        except Exception:
            return None

    with ThreadPoolExecutor(min(THREADS, len(calls)), "streamseq-first-reads") as pool:
        return list(pool.map(attempt, calls))


def first_reads(rows: Sequence[Row], first: Sequence[int], blk: Positions, k: int) -> dict:
    """Open the streams of batch ``k`` of ``blk`` concurrently; read the non-arrays.

    Args:
        rows: the rows of the chunk map.
        first: the first position of each row (``ChunkMap.first_list``).
        blk: where the rows read.
        k: the batch within ``blk``.

    Returns:
        ``{row: steps}``: what :meth:`Row.read` gave for the rows whose stream is not an
        array (or a tree of arrays), each row's steps of batch ``k``. Empty when fewer
        than two rows would wait.

    Example:
        >>> from streamseq import interleave_streams, tbin
        >>> from streamseq.gather.writer import BatchWriter
        >>> rows = interleave_streams([np.arange(5), np.arange(4)], 2)
        >>> writer = BatchWriter([tbin(r, 2) for r in rows], "zeros", 2)
        >>> first_reads(writer.rows, writer.first_list, writer.positions(0, 1), 0)
        {}
    """
    work, sources = [], set()
    worker = multiprocessing.parent_process() is not None
    for r in np.flatnonzero(blk.active[k] & (blk.count[k] > 0)).tolist():
        j = int(blk.pos[k, r]) - first[r]
        ref = rows[r].refs[j]
        if not _waits(ref.source, worker):  # an array given as it is: nothing to wait for
            continue
        if id(ref.source) not in sources:  # one thread per source
            sources.add(id(ref.source))
            work.append((r, j, int(blk.start[k, r]), int(blk.count[k, r])))
    if len(work) < 2:
        return {}
    opened = _each([lambda r=r, j=j: rows[r].switch(j).open() for r, j, _, _ in work])
    reads = [w for w, s in zip(work, opened, strict=True) if _waits(s, worker)]
    if len(reads) < 2:
        return {}
    data = _each([lambda r=r, j=j, a=a, n=n: rows[r].read(j, a, a + n) for r, j, a, n in reads])
    return {w[0]: d for w, d in zip(reads, data, strict=True) if d is not None}


def in_memory(stream: Any) -> Any:
    """``stream`` as arrays when it is arrays already mapped (a store's), else itself.

    A stream with an ``as_arrays`` method (:class:`~streamseq.store.stream.StoredStream`)
    is read as the arrays that method returns: memory-map slices, copied into batches
    as arrays are.

    Example:
        >>> in_memory(np.arange(3)).tolist()
        [0, 1, 2]
    """
    as_arrays = getattr(type(stream), "as_arrays", None)
    return stream if as_arrays is None else as_arrays(stream)


def _waits(stream: Any, worker: bool = False) -> bool:
    """Whether reading ``stream`` may wait (not arrays in memory, nor a failed open).

    In a worker process (``worker``), only on a network (a source's ``on_network``;
    any stream that does not say, or cannot: :func:`_on_network`): the
    worker processes share the cores already, and the work of local files (decoding)
    gains nothing from more threads there.
    """
    return (
        stream is not None
        and not isinstance(stream, (np.ndarray, ArrayTree))
        and getattr(type(stream), "as_arrays", None) is None
        and (not worker or _on_network(stream))
    )


def _on_network(stream: Any) -> bool:
    """A stream's ``on_network``; True where it does not say, or cannot.

    An ``on_network`` that raises, or is None, counts as True; any other answer as its
    truth (an array of several: True). Whether the first reads overlap is only a way to
    read, never an error of its own.

    Example:
        >>> _on_network(np.arange(3)), _on_network(type("Local", (), {"on_network": False})())
        (True, False)
    """
    try:
        said = getattr(stream, "on_network", True)
        return True if said is None else bool(said)
    except Exception:  # (a property that raises; an array of several values)
        return True
