"""Join stopped worker processes in the background, so that none stays a zombie.

A stopped worker exits by itself once it has said goodbye (see :mod:`streamseq.workers`,
"Shutdown"); joining it at once would wait for its interpreter to exit (milliseconds with
torch loaded). :func:`exiting` hands it to a reaper thread instead, which joins it as
soon as it has exited, kills it past a grace period, and ends when none is left.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from . import ownership

POLL = 0.02
GRACE = 5.0

_lock = threading.Lock()
_exiting: list[tuple[Any, float]] = []  # (process, deadline to exit by itself)
_thread: threading.Thread | None = None


def _forget() -> None:
    """In a forked child: the parent's processes are not its children."""
    global _lock, _thread
    _lock = threading.Lock()  # (the parent's reaper may have held it at the fork)
    ownership.disown(p for p, _ in _exiting)  # (nor multiprocessing's to end at exit)
    _exiting.clear()
    _thread = None


os.register_at_fork(after_in_child=_forget)


def exiting(processes: list[Any], grace: float = GRACE) -> None:
    """Join ``processes`` once they exit; kill those still alive after ``grace`` seconds.

    Example:
        >>> import multiprocessing
        >>> p = multiprocessing.get_context("spawn").Process(target=print, args=("",))
        >>> p.start()
        >>> exiting([p])
        >>> wait(10)
        True
    """
    global _thread
    deadline = time.monotonic() + grace
    if sys.is_finalizing():  # no thread can start now: the workers are stopped at once
        for p in processes:
            if p.exitcode is None:
                p.kill()
            p.join(1.0)
        return
    with _lock:
        _exiting.extend((p, deadline) for p in processes if p not in pending())
        if _exiting and (_thread is None or not _thread.is_alive()):
            _thread = threading.Thread(target=_run, name="streamseq-reaper", daemon=True)
            _thread.start()
    reap()


def pending() -> list[Any]:
    """The processes handed to :func:`exiting` and not joined yet."""
    return [p for p, _ in list(_exiting)]


def reap() -> None:
    """Join the processes that have exited; kill those past their deadline."""
    now = time.monotonic()
    with _lock:
        for entry in list(_exiting):
            p, deadline = entry
            if p.exitcode is None and now >= deadline:
                p.kill()  # (never outlives its owner for long)
                p.join(1.0)
            if p.exitcode is not None:
                _exiting.remove(entry)
                p.close()


def wait(timeout: float) -> bool:
    """Reap until none is left or ``timeout`` seconds passed; True when none is left."""
    deadline = time.monotonic() + timeout
    while True:
        reap()
        if not _exiting:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL)


def _run() -> None:
    global _thread
    while True:
        reap()
        with _lock:
            if not _exiting:
                _thread = None
                return
        time.sleep(POLL)
