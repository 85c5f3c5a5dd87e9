"""Counts of what this process's threads have under way, and the forks under way, kept once.

A count of things under way (forks, pauses of the collector) is shared by the threads
of a process: the first to begin and the last to end act on the process, the others only
count. ``os.fork()`` makes such a count wrong in the child: only the forking thread is
there, so what the other threads had under way never ends there, and the lock that
guards the count may have been held by one of them. So every :class:`Count` notes what
each thread entered, and in a forked child (before any of its code runs) it gets a new
lock and counts only what the forking thread itself has under way; when that is less
than the parent's count, its watchers' ``child`` runs, and then, when it is nothing, the
``end`` that the gone threads would have run.

:data:`FORKS` counts the forks under way (their hooks before the fork ran, those after
it not yet): two threads may fork at once, and the fork of one may end while the other's
still waits for a lock of another hook. A module that must hold something across every
fork watches it (:meth:`Count.watch`), or ties a count of its own to it
(:meth:`Count.tie`: the collector's pauses, so that one count turns it off for both);
this module registers the only hooks at fork.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol


class Watcher(Protocol):
    """What a count runs, under its lock, as things begin and end."""

    def begin(self, first: bool) -> None:
        """One thing begins (``first``: nothing else was under way)."""

    def end(self) -> None:
        """The last thing under way ended."""

    def child(self) -> None:
        """In a forked child: some of what the parent had under way is gone, and never ends.

        ``end`` follows when nothing is left under way there (what the forking thread
        itself had under way goes on, and ends as in the parent).
        """


_counts: weakref.WeakSet[Count] = weakref.WeakSet()  # every count of this process


class Count:
    """How many things this process's threads have under way; a forked child counts its own.

    Example:
        >>> class Say:
        ...     def begin(self, first): print("begin", first)
        ...     def end(self): print("end")
        ...     def child(self): print("child")
        >>> pauses = Count()
        >>> pauses.watch(Say())
        >>> with pauses.held():
        ...     with pauses.held():
        ...         pauses.value
        begin True
        begin False
        2
        end
        >>> pauses.value
        0
    """

    def __init__(self) -> None:
        self.value = 0
        self._lock = threading.Lock()
        self._watchers: list[Watcher] = []
        self._own = threading.local()  # .value: what this thread entered and has not left
        self._tied: list[Count] = []  # counts entered and left with this one
        _counts.add(self)

    def watch(self, watcher: Watcher) -> None:
        """Run ``watcher``'s ``begin``, ``end`` and ``child`` from now on."""
        with self._lock:
            self._watchers.append(watcher)

    def tie(self, other: Count) -> None:
        """Enter and leave ``other`` (in the same thread) with every enter and leave of this one.

        Example:
            >>> forks, pauses = Count(), Count()
            >>> forks.tie(pauses)
            >>> with forks.held():
            ...     pauses.value
            1
            >>> pauses.value
            0
        """
        with self._lock:
            if other not in self._tied:
                self._tied.append(other)

    def enter(self) -> None:
        """One more thing under way (in this thread)."""
        tied = tuple(self._tied)  # (what it leaves with this: not a count tied meanwhile)
        for other in tied:  # (first: under way there before here)
            other.enter()
        with self._lock:
            for watcher in self._watchers:
                watcher.begin(not self.value)
            self.value += 1
            self._own.value = getattr(self._own, "value", 0) + 1
            self._entered().append(tied)

    def leave(self) -> None:
        """One thing fewer under way (one this thread entered); never below nothing."""
        tied = self._entered()
        for other in tied.pop() if tied else ():
            other.leave()
        with self._lock:
            self._own.value = max(0, getattr(self._own, "value", 0) - 1)
            if not self.value:
                return
            self.value -= 1
            if not self.value:
                for watcher in self._watchers:
                    watcher.end()

    def _entered(self) -> list[tuple[Count, ...]]:
        """The counts tied to this one that each of this thread's enters entered, in order."""
        return self._own.__dict__.setdefault("tied", [])

    @contextmanager
    def held(self) -> Iterator[None]:
        """Under way for the block's duration."""
        self.enter()
        try:
            yield
        finally:
            self.leave()

    def _left_here(self) -> None:
        """In a forked child: what the forking thread entered for its fork is over here."""
        self._own.value = max(0, getattr(self._own, "value", 0) - 1)
        tied = self._entered()
        for other in tied.pop() if tied else ():
            other._left_here()

    def _restart(self) -> None:
        """In a forked child: a new lock, and only what the forking thread has under way."""
        self._lock = threading.Lock()  # (another thread of the parent may have held it)
        had, self.value = self.value, getattr(self._own, "value", 0)
        if had > self.value:
            for watcher in self._watchers:
                watcher.child()
            for watcher in self._watchers if not self.value else ():
                watcher.end()


#: the forks of this process under way: from their hooks before the fork to those after it
FORKS = Count()


def _after_fork_in_child() -> None:
    FORKS._left_here()  # (this fork: over here)
    for count in list(_counts):
        count._restart()


os.register_at_fork(
    before=FORKS.enter, after_in_parent=FORKS.leave, after_in_child=_after_fork_in_child
)
