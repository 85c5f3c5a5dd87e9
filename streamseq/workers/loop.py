"""The worker loop: the same function runs in a worker thread and in a worker process.

A worker runs its start hook, then takes jobs (item indices) from its channel, evaluates
``seq[i]`` and puts the result back, or the error it raised, with the seconds it spent
reading the item and waiting for the job (:mod:`.timing`); a failing start hook is put
back as the result of :data:`HOOK`. The backends differ only in their channel: queues for
threads (:mod:`.threads`), pipes and a shared-memory slot per job for processes
(:mod:`.processes`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import seqtools

from ..errors import WorkerError, redact_error, redact_urls, where_marked
from .failures import describe_item

STOP = -1
"""The job that tells a worker to stop."""

HOOK = -2
"""The item of the result that reports a failed start hook (its value: the error)."""

STARTED = -3
"""The item of the message a worker process sends once it is set up, before its start hook."""


class Channel(Protocol):
    """How a worker takes jobs and gives results back."""

    def take(self) -> int | None:
        """The next item to evaluate; ``None`` when the worker must stop."""

    def building(self) -> contextlib.AbstractContextManager[Any]:
        """Where the item is built while it is evaluated (a shared-memory slot)."""

    def put(
        self, item: int, ok: bool, value: Any, spent: tuple[float, float] = (0.0, 0.0)
    ) -> bool:
        """Give back the result of ``item`` (or its error); False: nobody listens.

        ``spent``: the seconds spent reading the item, and waiting for its job before.
        """


def evaluate(seq: Sequence[Any], item: int) -> tuple[bool, Any]:
    """``(True, seq[item])``, or ``(False, error)`` for the error it raised.

    An ``Exception`` is given as itself; anything else (``SystemExit``,
    ``KeyboardInterrupt`` raised by the sequence) as a :class:`WorkerError` naming it
    and where it was raised (the stream and the steps, or what the item is), credentials
    hidden, so that it ends the evaluation, not the worker.

    Example:
        >>> evaluate([10, 11], 1), evaluate([], 0)[0]
        ((True, 11), False)
    """
    try:
        return True, seq[item]
    except Exception as e:
        return False, e
    except BaseException as e:
        where = where_marked(e) or describe_item(seq, item)
        redact_error(e)  # (its text, and what it chains, shows no credential)
        error = WorkerError(
            redact_urls(
                f"evaluating {where}, the worker was interrupted by {type(e).__name__}: {e}"
            )
        )
        error.__cause__ = e
        return False, error


def run(
    seq: Sequence[Any], index: int, start_hook: Callable[[int], Any] | None, channel: Channel
) -> None:
    """Run worker ``index``: its start hook, then every job of ``channel`` until told to stop.

    Errors of ``seq`` are results (they go back through the channel); seqtools sequences
    raise their own errors, not :class:`seqtools.EvaluationError` wrappers. Each result
    goes with the seconds spent reading it and waiting for its job (two clock reads a
    job).

    Example:
        >>> class Listed:
        ...     def __init__(self, jobs):
        ...         self.jobs, self.results = list(jobs), []
        ...     def take(self):
        ...         return self.jobs.pop(0) if self.jobs else None
        ...     def building(self):
        ...         return contextlib.nullcontext()
        ...     def put(self, item, ok, value, spent=(0.0, 0.0)):
        ...         self.results.append((item, ok, value))
        ...         return True
        >>> channel = Listed([2, 0])
        >>> run("abc", 0, None, channel)
        >>> channel.results
        [(2, True, 'c'), (0, True, 'a')]
    """
    if start_hook is not None:
        try:
            start_hook(index)
        except BaseException as e:
            channel.put(HOOK, False, e)
            return
    setting = seqtools.seterr()
    seqtools.seterr("passthrough")  # (a setting of this thread only)
    clock = time.perf_counter
    try:
        while True:
            asked = clock()
            item = channel.take()
            if item is None:
                return
            began = clock()
            with channel.building():
                ok, value = evaluate(seq, item)
            if not channel.put(item, ok, value, (clock() - began, began - asked)):
                return
            del value  # (a delivered item's buffers are not held here while waiting)
    finally:
        seqtools.seterr(setting)
