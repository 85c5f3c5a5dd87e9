"""The one wait loop: poll for a result, checking liveness and a deadline in between."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from .failures import Cancelled, NoResult

T = TypeVar("T")


def _nothing() -> None:
    pass


def poll(
    get: Callable[[float], T],
    every: float,
    check: Callable[[], None] = _nothing,
    timeout: float | None = None,
    cancelled: threading.Event | None = None,
) -> T:
    """Wait for ``get``'s result, checking every ``every`` seconds whether to go on.

    ``get(seconds)`` waits at most that long and returns the result, or raises
    :class:`queue.Empty` when nothing came. Between two tries, in this order: the wait
    ends with :class:`~.failures.Cancelled` once ``cancelled`` is set, ``check()``
    raises when waiting on is pointless (a worker is gone), and
    :class:`~.failures.NoResult` is raised once ``timeout`` seconds have passed.

    Args:
        get: waits (at most the seconds given) for the result.
        every: seconds between two checks.
        check: raises to end the wait (liveness of the other side).
        timeout: seconds to wait in all (None: as long as ``check`` allows).
        cancelled: set by another thread to end the wait.

    Returns:
        What ``get`` returned.

    Raises:
        Cancelled: ``cancelled`` was set meanwhile.
        NoResult: nothing came within ``timeout`` seconds.

    Example:
        >>> results = queue.Queue()
        >>> results.put("done")
        >>> poll(lambda s: results.get(timeout=s), every=0.01)
        'done'
        >>> poll(lambda s: results.get(timeout=s), every=0.01, timeout=0.02)
        Traceback (most recent call last):
        ...
        streamseq.workers.failures.NoResult: no result from the workers in 0.02 s
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = every if deadline is None else min(every, max(0.0, deadline - time.monotonic()))
        try:
            return get(left)
        except queue.Empty:
            pass
        if cancelled is not None and cancelled.is_set():
            raise Cancelled("the workers were closed while a result was awaited")
        check()
        if deadline is not None and time.monotonic() >= deadline:
            raise NoResult(timeout)
