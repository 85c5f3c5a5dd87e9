"""What the worker backends raise, as types: no message is ever matched by its text.

The backends know how the workers failed; :class:`~.prefetched.Prefetched` knows
which item was awaited and what it is, and turns the first three into the errors users
see (with the exit codes, once the workers are joined, and the item's description).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

from .._redact import describe
from ..errors import WorkerError


class WorkerGone(WorkerError):
    """A worker thread or process stopped without being asked.

    Args:
        worker: index of the worker, or ``None`` when it is not known which.
        item: the item it was evaluating, if known.
    """

    def __init__(self, worker: int | None, item: int | None = None):
        self.worker, self.item = worker, item
        super().__init__(f"worker {worker} stopped unexpectedly (item {item})")


class NotStarted(WorkerError):
    """A worker process did not reach its start hook within ``limit`` seconds of its start.

    Example:
        >>> str(NotStarted(1, 4242, 120.0))
        'worker process 1 (pid 4242) did not start within 120 s: it never reached its start hook'
    """

    def __init__(self, worker: int, pid: int | None, limit: float):
        self.worker, self.pid, self.limit = worker, pid, limit
        super().__init__(
            f"worker process {worker} (pid {pid}) did not start within {limit:g} s: it never "
            "reached its start hook"
        )


class NoResult(WorkerError):
    """The workers delivered nothing for ``timeout`` seconds (they may still be alive)."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        super().__init__(f"no result from the workers in {timeout:g} s")


class Cancelled(WorkerError):
    """The workers were closed (by another thread) while a result was awaited."""


class HookFailed(WorkerError):
    """A worker's start hook raised; the original error is its ``__cause__``.

    Example:
        >>> def hook(index):
        ...     pass
        >>> str(HookFailed(hook, 1, "thread", OSError("no device")))
        'worker thread 1 failed to start: start_hook hook raised OSError: no device'
    """

    def __init__(self, hook: Callable[[int], Any] | None, worker: int, kind: str, error: Any):
        self.worker = worker
        what = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else error
        super().__init__(
            f"worker {kind} {worker} failed to start: start_hook {describe_hook(hook)} "
            f"raised {what}"
        )


class NotUnpickled(HookFailed):
    """A worker process could not unpickle the sequence it was given; the error is its cause.

    Example:
        >>> str(NotUnpickled(0, ValueError("gone")))
        'worker process 0 failed to start: its sequence failed to unpickle: ValueError: gone'
    """

    def __init__(self, worker: int, error: Any):
        self.worker = worker
        what = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else error
        WorkerError.__init__(
            self,
            f"worker process {worker} failed to start: its sequence failed to unpickle: {what}",
        )


def describe_hook(hook: Any) -> str:
    """A start hook's qualified name (a function's) or its description.

    Example:
        >>> import functools
        >>> describe_hook(print), describe_hook(functools.partial(int, base=2))
        ('print', 'functools.partial(int, base=2)')
    """
    name = getattr(hook, "__qualname__", None)
    return name if isinstance(name, str) else describe(hook)


def describe_exits(ended: list[tuple[int, int | None]]) -> str:
    """How each worker process ended, from ``(pid, exit code)`` pairs.

    Example:
        >>> describe_exits([(12, -9), (13, 0), (14, None)])
        'process 12 killed by SIGKILL, process 13 exit code 0, process 14 stopped'
    """
    out = []
    for pid, code in ended:
        if code is not None and code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = "stopped" if code is None else f"exit code {code}"
        out.append(f"process {pid} {how}")
    return ", ".join(out)


def describe_item(seq: Any, item: int) -> str:
    """``item``, with what ``seq.describe_item(item)`` says it is when it can say.

    A sequence may define ``describe_item(i) -> str`` (a batch of the loader names its
    streams and steps); an error in it is ignored, the item is then named by its index.
    A sequence whose indices mean nothing to its users (the loader's blocks of batches)
    defines ``name_item(i) -> str`` instead, a name used alone.

    Example:
        >>> class Frames(list):
        ...     def describe_item(self, i):
        ...         return f"frame {i} of a.mp4"
        >>> describe_item(Frames(), 3), describe_item([], 3)
        ('item 3 (frame 3 of a.mp4)', 'item 3')
    """
    name = getattr(seq, "name_item", None)
    if callable(name):
        try:
            return str(name(item))
        except Exception:
            pass
    describe = getattr(seq, "describe_item", None)
    if callable(describe):
        try:
            return f"item {item} ({describe(item)})"
        except Exception:
            pass
    return f"item {item}"
