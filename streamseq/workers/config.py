"""How workers run: one frozen set of options, checked once, passed as a value."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._checks import check_timeout, check_workers


@dataclass(frozen=True)
class WorkerConfig:
    """The options of a set of workers (see :func:`~streamseq.prefetch` for each).

    Checked when made: a config that exists is valid (``timeout`` is kept as
    :func:`~streamseq._checks.check_timeout` returns it: seconds, or None).

    Args:
        num_workers: worker processes or threads; 0 evaluates in the calling process.
        method: ``"process"`` or ``"thread"``.
        max_buffered: items in flight plus delivered items still referenced.
        timeout: seconds the workers may go without delivering anything (None: no bound).
        persistent_workers: keep the workers when an access restarts them elsewhere.
        start_hook: called in each worker with its index when it starts.
        shm_size: total shared memory in bytes, or None to size it from the first item.

    Example:
        >>> WorkerConfig(2, timeout=float("inf")).timeout is None
        True
        >>> WorkerConfig(1, "thread", max_buffered=0)
        Traceback (most recent call last):
        ...
        ValueError: max_buffered too small for the thread backend: 0
    """

    num_workers: int
    method: str = "process"
    max_buffered: int = 6
    timeout: float | None = None
    persistent_workers: bool = False
    start_hook: Callable[[int], Any] | None = None
    shm_size: int | None = None

    def __post_init__(self) -> None:
        check_workers(self.num_workers, self.method, self.max_buffered)
        object.__setattr__(self, "timeout", check_timeout(self.timeout))
        object.__setattr__(self, "persistent_workers", bool(self.persistent_workers))
