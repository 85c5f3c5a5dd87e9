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
once no fork is under way (two threads may fork at once: the fork of one may end while
the other's, its before hooks run, still waits for the lock of another hook). The
thread-locals are PyAV's, once it is imported, and those given to :func:`keep`.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import weakref
from typing import Any

_known: weakref.WeakSet = weakref.WeakSet()  # thread-locals given to :func:`keep`
_kept: list[Any] = []  # their per-thread values while forks are under way
_forks = 0  # forks under way: their before hook ran, their after hook not yet
_lock = threading.Lock()  # (a before hook of one thread may run while another's after hook runs)
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


def _before() -> None:
    global _forks
    kept = [d for local in _thread_locals() for d in values(local)]
    with _lock:
        _forks += 1
        _kept.extend(kept)


def _after_in_parent() -> None:
    global _forks
    with _lock:
        _forks = max(0, _forks - 1)
        if not _forks:
            _kept.clear()


def _after_in_child() -> None:
    global _forks, _lock
    _lock = threading.Lock()  # (another thread may have held it at the fork)
    _inherited.extend(_kept)  # (the other threads are gone: never freed here)
    _kept.clear()
    _forks = 0


os.register_at_fork(
    before=_before, after_in_parent=_after_in_parent, after_in_child=_after_in_child
)
