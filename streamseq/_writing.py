"""Whether the calling thread is writing a batch now, of any writer.

The batch writer (:mod:`streamseq.gather.writer`) counts the batches each thread is
writing; a batch asked for by such a thread (a transform or a source asking a pass for a
batch) may be one that the thread waiting for this batch holds: a pass raises instead of
waiting (:meth:`streamseq.loader.run.Pass.__next__`), and a bounded read runs in the
asking thread (:func:`streamseq.workers.inline.in_thread`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_THREAD = threading.local()  # ``writing``: the batches this thread is writing


def writing_here() -> bool:
    """Whether the calling thread is writing a batch now.

    Example:
        >>> writing_here()
        False
        >>> with writing():
        ...     writing_here()
        True
    """
    return getattr(_THREAD, "writing", 0) > 0


@contextlib.contextmanager
def writing() -> Iterator[None]:
    """The calling thread writes a batch for the block's duration (nested: counted)."""
    _THREAD.writing = getattr(_THREAD, "writing", 0) + 1
    try:
        yield
    finally:
        _THREAD.writing -= 1
