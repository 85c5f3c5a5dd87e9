"""Items evaluated ahead by workers, delivered in order: the prefetch window."""

from __future__ import annotations

from typing import Any, Protocol


class Backend(Protocol):
    """What a window needs of a backend (:mod:`.threads`, :mod:`.processes`)."""

    def submit(self, item: int) -> None:
        """Evaluate ``item`` in some worker."""

    def wait(self) -> tuple[int, bool, Any]:
        """The next result of any worker: ``(item, ok, value or error)``."""


class Window:
    """Items ``start, start + 1, ...`` of ``stop``, at most ``depth`` of them in flight.

    Jobs are submitted ahead, results kept until asked for, and one more job submitted
    for each item taken. Items are taken in order: another index is a new window.

    Args:
        workers: the backend that evaluates the jobs.
        start: the first item.
        stop: the number of items (no job is submitted at or past it).
        depth: jobs in flight.

    Example:
        >>> class Now:  # evaluates each job at once
        ...     def __init__(self):
        ...         self.done = []
        ...     def submit(self, item):
        ...         self.done.append((item, True, item * 10))
        ...     def wait(self):
        ...         return self.done.pop(0)
        >>> window = Window(Now(), 3, 5, depth=4)
        >>> window.take(), window.take(), window.next
        ((True, 30), (True, 40), 5)
    """

    def __init__(self, workers: Backend, start: int, stop: int, depth: int):
        self.workers, self.next, self.ahead, self.stop = workers, start, start, stop
        self.depth = depth
        self.done: dict[int, tuple[bool, Any]] = {}
        for _ in range(depth):
            self._submit()

    def _submit(self) -> None:
        if self.ahead < self.stop:
            self.workers.submit(self.ahead)
            self.ahead += 1

    def drain(self) -> None:
        """Wait for the jobs in flight and drop their results: the workers are then idle.

        Example:
            >>> class Later:  # results come when asked for
            ...     def __init__(self):
            ...         self.jobs = []
            ...     def submit(self, item):
            ...         self.jobs.append(item)
            ...     def wait(self):
            ...         item = self.jobs.pop(0)
            ...         return item, True, item
            >>> workers = Later()
            >>> window = Window(workers, 0, 10, depth=3)
            >>> window.drain(); workers.jobs, window.done
            ([], {})
        """
        while self.ahead - self.next > len(self.done):
            done, ok, value = self.workers.wait()
            self.done[done] = ok, value
        self.done.clear()
        self.next = self.ahead

    def take(self) -> tuple[bool, Any]:
        """``(ok, value or error)`` of the next item, once a worker delivered it."""
        item = self.next
        while item not in self.done:
            done, ok, value = self.workers.wait()
            self.done[done] = ok, value
        self.next = item + 1
        self._submit()
        return self.done.pop(item)
