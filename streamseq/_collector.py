"""The cyclic garbage collector off while a count is under way, and as it was after.

Making many objects without cycles (references to a million streams) is slowed by the
collections it triggers, each walking every object made so far; and a fork must not
collect in the child before the child has left what it inherits out of collections (it
could free objects whose freeing waits for the parent's threads). Both turn the collector
off while something is under way: :class:`CollectorOff` watches a
:class:`~streamseq._fork_count.Count` and turns it off when the first thing begins, back
on when the last one ends, only if it was on when the first began (a user's
``gc.disable()`` stays), and in a forked child where nothing of the child's own is under
way any more, on again (as before) once what the child inherits is left out of its
collections (``gc.freeze``).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from ._fork_count import Count


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
        """In a forked child: what it inherits is never collected; then as it was before."""
        gc.freeze()
        self.end()


_PAUSES = Count()  # the pauses of this process's threads under way
_PAUSES.watch(CollectorOff())


@contextmanager
def paused() -> Iterator[None]:
    """The collector off for the block's duration, in any thread, nested or not.

    It is on again when the last pause under way ends, if it was on when the first began.

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
    with _PAUSES.held():
        yield
