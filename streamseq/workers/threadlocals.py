"""What other threads keep in thread-locals is never freed in a forked child.

In the child of ``os.fork()`` only the forking thread exists, and CPython clears the
state of every other thread right away (``PyOS_AfterFork_Child``, before any code of the
child runs): the values those threads kept in :class:`threading.local` objects are freed
there. A value whose freeing needs a thread of the parent then waits forever. PyAV (19
and later) keeps a scaler per thread (``VideoFrame.reformat``, ``to_ndarray(format=...)``),
and freeing a scaler that has slice threads waits for those threads
(``pthread_cond_destroy`` in ``sws_freeContext``), which exist only in the parent: a
worker forked from another thread than the one that converted a frame (the workers of a
pass started from a thread, or a user's thread that converted frames) hangs before its
start hook.

So, just before every fork, the per-thread values of the known thread-locals are
referenced from here (:data:`_kept`): in the child they are never freed (kept, unused,
for its whole life, as :mod:`streamseq.read.handle` keeps what a child inherits, in
:data:`_inherited`, which its own forks never let go of); the parent lets go of them
once no fork is under way (:data:`streamseq._fork_count.FORKS`: two threads may fork
at once, and the fork of one may end while the other's still waits for a lock of
another hook). The thread-locals are PyAV's, once it is imported, and those given to
:func:`keep`.
"""

from __future__ import annotations

import gc
import sys
import threading
import weakref
from typing import Any

from .._fork_count import FORKS

_known: weakref.WeakSet = weakref.WeakSet()  # thread-locals given to :func:`keep`
_kept: list[Any] = []  # their per-thread values while forks are under way
_inherited: list[Any] = []  # in a forked child: what its parent's threads kept, for good


def keep(local: threading.local) -> None:
    """Never free in a forked child what the threads of this process keep in ``local``.

    Example:
        >>> cache = threading.local()
        >>> keep(cache)
        >>> cache in _thread_locals()
        True
    """
    _known.add(local)


def _thread_locals() -> list[threading.local]:
    """The thread-locals whose values are kept at a fork: PyAV's scalers, and :func:`keep`'s."""
    out = list(_known)
    frame = sys.modules.get("av.video.frame")  # (never imported here)
    local = getattr(frame, "_thread_local", None)
    if isinstance(local, threading.local):
        out.append(local)
    return out


def values(local: threading.local) -> list[dict]:
    """The attributes of ``local`` in every thread: one dict per thread that set any.

    CPython's thread-local refers (for the collector) to a dict of its per-thread dicts,
    in every release from 3.10 on.

    Example:
        >>> cache = threading.local()
        >>> cache.scaler = "main"
        >>> worker = threading.Thread(target=lambda: setattr(cache, "scaler", "other"))
        >>> worker.start(); worker.join()  # (its values are freed when it ends)
        >>> values(cache)
        [{'scaler': 'main'}]
    """
    out = []
    for referent in gc.get_referents(local):
        if isinstance(referent, dict):
            out += [d for d in list(referent.values()) if isinstance(d, dict)]
    return out


class _Keeping:
    """Watches the forks under way: their values are kept from the first to the last."""

    def begin(self, first: bool) -> None:
        """A fork begins: the values the threads keep now are referenced from here."""
        _kept.extend(d for local in _thread_locals() for d in values(local))

    def end(self) -> None:
        """No fork is under way: the parent lets go of them."""
        _kept.clear()

    def child(self) -> None:
        """In a forked child: the other threads are gone, their values never freed here."""
        _inherited.extend(_kept)
        _kept.clear()


FORKS.watch(_Keeping())
