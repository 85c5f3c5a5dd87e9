"""The cyclic garbage collector off while a count is under way, and as it was after.

Making many objects without cycles (references to a million streams) is slowed by the
collections it triggers, each walking every object made so far; and a fork must not
collect in the child before the child has left what it inherits out of collections (it
could free objects whose freeing waits for the parent's threads). Both turn the collector
off while something is under way: :class:`CollectorOff` watches a
:class:`~streamseq._fork_count.Count` and turns it off when the first thing begins, back
on when the last one ends, only if it was on when the first began (a user's
``gc.disable()`` before it stays); in a forked child what it inherits is left out of its
collections (``gc.freeze``) first, and it is on again (as before) once nothing of the
child's own is under way.

Pauses and forks are one count (:func:`across_forks` ties the forks to it): with a count
each, a pause that ended while another thread's fork began would turn the collector on
again (the fork's own count found it off, so never turned it off itself) before the fork,
and the child would collect before freezing what it inherits.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from ._fork_count import FORKS, Count


class CollectorOff:
    """A :class:`~streamseq._fork_count.Count`'s watcher: the collector off while it is.

    Example:
        >>> count = Count()
        >>> count.watch(CollectorOff())
        >>> with count.held():
        ...     gc.isenabled()
        False
        >>> gc.isenabled()
        True
    """

    def __init__(self) -> None:
        self.collecting = True  # whether it was on when the first thing under way began

    def begin(self, first: bool) -> None:
        """Off from the first thing on (as it was then is noted)."""
        if first:
            self.collecting = gc.isenabled()
        gc.disable()

    def end(self) -> None:
        """The last thing ended: on again if it was on before the first began."""
        if self.collecting:
            gc.enable()

    def child(self) -> None:
        """In a forked child: what it inherits is never collected (``end`` may follow)."""
        gc.freeze()


#: the pauses of this process's threads under way, and its forks once :func:`across_forks` ran
_OFF = Count()
_OFF.watch(CollectorOff())


def across_forks() -> None:
    """The collector off across every fork of this process from now on, in the same count.

    From the hooks before a fork to those after it (in the parent; in the child until what
    it inherits is left out of its collections), counted with the pauses: whichever of
    them ends last turns it on again.

    Example:
        >>> across_forks()
        >>> FORKS.enter()  # (a fork's hooks before it)
        >>> with paused():
        ...     pass
        >>> gc.isenabled()
        False
        >>> FORKS.leave()  # (its hooks after it, in the parent)
        >>> gc.isenabled()
        True
    """
    FORKS.tie(_OFF)


@contextmanager
def paused() -> Iterator[None]:
    """The collector off for the block's duration, in any thread, nested or not.

    It is on again when the last pause under way ends, if it was on when the first began.
    (A ``gc.disable()`` from another thread while pauses or forks are under way cannot be
    told from theirs: the last to end turns the collector on again.)

    Example:
        >>> with paused():
        ...     with paused():
        ...         gc.isenabled()
        ...     gc.isenabled()
        False
        False
        >>> gc.isenabled()
        True
    """
    with _OFF.held():
        yield
