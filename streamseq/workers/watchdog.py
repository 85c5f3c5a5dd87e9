"""A worker process ends when its parent is gone, whatever it is doing.

A worker that is reading (a stuck decoder, a hung network file, a transform that never
returns) does not look at its pipes, so it would not notice that the main process died,
killed included (``SIGKILL`` runs no handler). Two guards end it:

- **Parent death signal** (Linux): the kernel kills the worker (``SIGKILL``) as soon as
  the thread that started it ends. Set only when that thread is the main thread of the
  main process (which ends only with the process): a worker started from another thread
  (the pinning thread of a pass, which ends with the pass) must outlive it when it
  persists.
- **Watchdog thread**: every :data:`EVERY` seconds it checks that the worker's parent is
  the one it started with (an orphan is adopted by another process), and ends the worker
  with :func:`os._exit` when it is not. It runs while the worker's main thread is in
  Python code or in a call that releases the GIL (``time.sleep``, file and socket reads,
  most decoders).

The worker creates no shared memory of its own (:mod:`.shm`), so it has nothing to free
before it ends: the kernel unmaps what it mapped.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import signal
import sys
import threading

EVERY = 0.25  # seconds between two checks of the parent
PR_SET_PDEATHSIG = 1
ORPHANED = 70  # exit code of a worker whose parent is gone


def death_signal() -> bool:
    """Ask the kernel to kill this process when its parent thread ends (Linux only).

    Returns whether it was set.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        return _libc().prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library: the symbols this process has loaded already.

    Not ``ctypes.util.find_library``, which runs ``ldconfig`` (milliseconds at the start
    of every worker).
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl  # noqa: B018 (raises AttributeError where the C library is not loaded)
        return libc
    except (OSError, AttributeError):
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _watch(parent: int, every: float) -> None:
    while True:
        if os.getppid() != parent:
            os._exit(ORPHANED)
        threading.Event().wait(every)


def guard(parent: int, deathsig: bool, every: float = EVERY) -> None:
    """End this worker process when ``parent`` is no longer its parent.

    Args:
        parent: the process id the worker's parent must have.
        deathsig: also ask the kernel to kill the worker when its parent thread ends.
        every: seconds between two checks.
    """
    if deathsig:
        death_signal()
    if os.getppid() != parent:  # gone already (before the death signal was set)
        os._exit(ORPHANED)
    threading.Thread(
        target=_watch, args=(parent, every), name="streamseq-watchdog", daemon=True
    ).start()
