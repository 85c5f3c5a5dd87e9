"""Join stopped worker processes in the background, so that none stays a zombie.

A stopped worker exits by itself once it has said goodbye (see :mod:`streamseq.workers`,
"Shutdown"); joining it at once would wait for its interpreter to exit (milliseconds with
torch loaded). :func:`exiting` hands it to a reaper thread instead, which joins it as
soon as it has exited, kills it past a grace period, and ends when none is left.

At interpreter exit, the processes still exiting are finished before multiprocessing's
own exit handler runs (:func:`_at_exit`): that handler joins every child it knows of, one
after another, and the reaper thread, still running meanwhile, would close one of them
under it (``ValueError: process object is closed``).
"""

from __future__ import annotations

import atexit
import multiprocessing.util  # noqa: F401 (its exit handler is registered first: ours runs first)
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
_closed = False  # the interpreter is exiting: the processes are finished at once, here


def _forget() -> None:
    """In a forked child: the parent's processes are not its children."""
    global _lock, _thread, _closed
    _lock = threading.Lock()  # (the parent's reaper may have held it at the fork)
    ownership.disown(p for p, _ in _exiting)  # (nor multiprocessing's to end at exit)
    _exiting.clear()
    _thread = None
    _closed = False


os.register_at_fork(after_in_child=_forget)


def _finish(processes: list[Any]) -> None:
    """Kill those of ``processes`` still running, join and close them all (bounded)."""
    for p in processes:
        if p.exitcode is None:
            p.kill()
    for p in processes:
        p.join(1.0)
        if p.exitcode is not None:
            p.close()


def _at_exit() -> None:
    """At interpreter exit: no reaping from the thread any more; finish what is left now.

    Registered after multiprocessing's exit handler, so it runs before it: once the
    processes are closed here, that handler no longer knows them, and the reaper thread
    (a daemon, still running while exit handlers run) touches none of them again.
    """
    global _closed
    with _lock:  # (waits for a reap in progress)
        _closed = True
        left = [p for p, _ in _exiting]
        _exiting.clear()
    _finish(left)


atexit.register(_at_exit)


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
    if _closed or sys.is_finalizing():  # exiting: the workers are stopped at once
        _finish(processes)
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
        if _closed:  # (finished by :func:`_at_exit`)
            return
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
