"""Which batch writers the calling thread is writing a batch of, now.

The batch writer (:mod:`streamseq.gather.writer`) notes each batch a thread writes; a
batch asked for by such a thread (a transform or a source asking for a batch) may be one
that the thread waiting for this batch holds: the writer itself raises instead of waiting
for the lock its own thread holds, a pass raises instead of waiting
(:meth:`streamseq.loader.run.Pass.__next__`), and a bounded read runs in the asking
thread (:func:`streamseq.workers.inline.in_thread`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

_THREAD = threading.local()  # ``writers``: those this thread is writing a batch of


def _writers() -> list[Any]:
    writers = getattr(_THREAD, "writers", None)
    if writers is None:
        writers = _THREAD.writers = []
    return writers


def writing_here(writer: Any = None) -> bool:
    """Whether the calling thread is writing a batch now (of ``writer``, if given).

    Example:
        >>> mine = object()
        >>> writing_here()
        False
        >>> with writing(mine):
        ...     writing_here(), writing_here(mine), writing_here(object())
        (True, True, False)
    """
    writers = _writers()
    return bool(writers) if writer is None else any(w is writer for w in writers)


@contextlib.contextmanager
def writing(writer: Any) -> Iterator[None]:
    """The calling thread writes a batch of ``writer`` for the block's duration."""
    writers = _writers()
    writers.append(writer)
    try:
        yield
    finally:
        writers.pop()
