"""Where the workers' time goes: reading, and waiting for the next job.

A worker measures, for every job, the seconds it waited for it (idle) and the seconds it
spent evaluating it (reading: opening, decoding, the transform, the copy into its
shared-memory slot), and sends both with the result (:func:`~.loop.run`). A worker
waits for a job when the main process has not taken what it handed over yet: every
item it may have in flight is done (the hand-over queue is full), so idle time is time
the workers could have read more. The main process adds the figures up in a
:class:`Timing` as it receives the results (one thread receives at a time: no lock).
"""

from __future__ import annotations

import time


class Timing:
    """Seconds each worker spent reading and idle, summed over the results received.

    :meth:`restart` marks a new start of the jobs (workers started, or persistent workers
    asked again after idling between two passes): the idle time sent with the first
    result of each worker after it counts only from there.

    Example:
        >>> t = Timing()
        >>> t.add(0, read=0.5, idle=0.0)
        >>> t.add(1, read=0.25, idle=0.125)
        >>> t.add(0, read=0.5, idle=0.25)
        >>> t.totals()
        [(1.0, 0.25, 2), (0.25, 0.125, 1)]
        >>> t.restart()
        >>> t.add(0, read=0.0, idle=3600.0)  # waited an hour, between two passes
        >>> t.totals()[0][1] < 1.0
        True
    """

    __slots__ = ("idle", "items", "read", "since", "waiting")

    def __init__(self) -> None:
        self.read: list[float] = []
        self.idle: list[float] = []
        self.items: list[int] = []
        self.since: float | None = None  # the last restart
        self.waiting: set[int] = set()  # workers with no result since the restart

    def restart(self) -> None:
        """Jobs start again now: earlier idle time is none of the workers' business."""
        self.since = time.perf_counter()
        self.waiting = set(range(len(self.items)))

    def add(self, worker: int, read: float, idle: float) -> None:
        """Add the figures that ``worker`` sent with a result."""
        while len(self.items) <= worker:
            self.read.append(0.0)
            self.idle.append(0.0)
            self.items.append(0)
        if self.since is not None and (worker in self.waiting or not self.items[worker]):
            self.waiting.discard(worker)  # its wait began before the restart, maybe
            idle = min(idle, max(0.0, time.perf_counter() - self.since - read))
        self.read[worker] += read
        self.idle[worker] += idle
        self.items[worker] += 1

    def totals(self) -> list[tuple[float, float, int]]:
        """``(read seconds, idle seconds, results)`` of each worker, in worker order."""
        return list(zip(self.read, self.idle, self.items, strict=True))
