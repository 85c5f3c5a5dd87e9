"""Workers belong to the process that started them: a forked child never stops them.

``os.fork()`` copies every object of the process, the workers' handles included: their
pipes, their shared memory, their :class:`multiprocessing.Process` objects and the
finalizers that stop them. Without care, a child that exits (multiprocessing's exit
handler terminates the daemon processes it knows), calls ``close()``, or lets the
garbage collector run a finalizer would stop its parent's workers, and a pass started in
the child would send jobs down its parent's pipes.

So every object that holds workers records the process that started them, and
registers here (:func:`track`): right after a fork, in the child, each is told
(``forked()``) and lets go of its parent's workers without touching them. The child's
next use starts workers of its own (or reads in-process); its ``close()``, exit and
collections stop only those.
"""

from __future__ import annotations

import contextlib
import multiprocessing.process
import os
import weakref
from collections.abc import Iterable
from typing import Any, Protocol


class Forkable(Protocol):
    """An object that holds workers and lets go of them in a forked child."""

    def forked(self) -> None:
        """Called in a forked child, at once: let go of the parent's workers."""


_tracked: weakref.WeakSet = weakref.WeakSet()


def track(obj: Forkable) -> None:
    """Call ``obj.forked()`` in every child forked from this process while it lives.

    Example:
        >>> class Holder:
        ...     def forked(self):
        ...         pass
        >>> holder = Holder()
        >>> track(holder)
        >>> holder in _tracked
        True
    """
    _tracked.add(obj)


def disown(processes: Iterable[Any]) -> None:
    """Forget ``processes`` (multiprocessing's), started by the parent of this child.

    multiprocessing remembers the processes it started in a set that a forked child
    inherits; at exit it terminates the daemonic ones. In a child they are not its own.
    """
    children = getattr(multiprocessing.process, "_children", None)
    if children is not None:
        for p in processes:
            children.discard(p)


def _in_child() -> None:
    for obj in list(_tracked):
        with contextlib.suppress(Exception):  # (nothing may stop the child here)
            obj.forked()


os.register_at_fork(after_in_child=_in_child)
