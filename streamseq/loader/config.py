"""A loader's configuration, checked and frozen, and the DataLoader keywords it does not take."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .._checks import check_int, check_timeout, check_workers
from ..read.transform import Transform
from ..tbin import check_lookahead
from .checks import check_switch

# DataLoader's keywords that do not apply here, and what to use instead
DATALOADER_ONLY = {
    "drop_last": 'pad="drop" (stop before any row would be all padding)',
    "collate_fn": "transform= (runs in the workers) or a function of each Batch",
    "worker_init_fn": "transform= (it gets the stream, the steps and a seeded rng)",
    "prefetch_factor": "max_buffered= (micro-batches in flight per worker)",
    "sampler": "shuffle= and seed= (the plan decides the order of the streams)",
    "batch_sampler": "batch_size= and tbins= (rows and steps of every batch)",
    "generator": "seed= (the shuffle and info.rng in transforms derive from it)",
    "multiprocessing_context": 'method= ("process" or "thread")',
    "in_order": "nothing: batches always come in order",
    "pin_memory_device": "pin_memory=True, then batch.to(device, non_blocking=True)",
}


def check_keywords(unsupported: dict[str, Any]) -> None:
    """Raise TypeError for keywords StreamLoader does not take, saying what to use.

    Example:
        >>> check_keywords({"drop_last": True})
        Traceback (most recent call last):
        ...
        TypeError: StreamLoader does not take DataLoader's drop_last=: use pad="drop" ...
    """
    for name in unsupported:
        hint = DATALOADER_ONLY.get(name)
        if hint is not None:
            raise TypeError(f"StreamLoader does not take DataLoader's {name}=: use {hint} instead")
        raise TypeError(f"StreamLoader got an unexpected keyword argument {name!r}")


def resolve_rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """Rank and world size: as given, else from torch.distributed when initialised, else 0, 1.

    Example:
        >>> resolve_rank(None, None)
        (0, 1)
        >>> resolve_rank(1, 4)
        (1, 4)
    """
    if rank is None and world_size is None:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1
    if rank is None or world_size is None:
        raise ValueError("give both rank and world_size, or neither")
    rank, world_size = check_int(rank, "rank"), check_int(world_size, "world_size")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
    return int(rank), int(world_size)


def auto_workers() -> int:
    """The workers ``num_workers="auto"`` tries: one per core this process may use.

    Example:
        >>> auto_workers() >= 1
        True
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class LoaderConfig:
    """How a loader reads and delivers, as opposed to what (the plan's :class:`PlanSpec`).

    Attributes:
        num_workers: worker processes or threads; 0 reads in the calling process. With
            ``auto``, the number of workers tried (see :func:`auto_workers`).
        method: ``"process"`` or ``"thread"``.
        max_buffered: hand-overs in flight per worker.
        timeout: seconds a read may go without delivering (in workers or in this
            process), or None.
        pin_memory: page-locked tensors, prepared by one background thread.
        time_major: ``data`` as ``[T, B, ...]``.
        persistent_workers: keep the workers across passes.
        transform: ``fn(steps, info)`` run where the steps are read, or None.
        auto: ``num_workers="auto"``: the first batches are read both ways and the
            faster is kept (:class:`~.run.Trial`).
        lookahead: steps after each chunk that every row of a batch also holds
            (:func:`~streamseq.tbin`); not part of the plan, so states load across it.
    """

    num_workers: int = 0
    method: str = "process"
    max_buffered: int = 6
    timeout: float | None = None
    pin_memory: bool = False
    time_major: bool = False
    persistent_workers: bool = False
    transform: Callable[..., Any] | None = None
    auto: bool = False
    lookahead: int = 0

    @classmethod
    def checked(
        cls,
        *,
        num_workers: Any,
        method: str,
        max_buffered: Any,
        timeout: Any,
        pin_memory: Any,
        time_major: Any,
        persistent_workers: Any,
        transform: Any,
        lookahead: Any = 0,
    ) -> LoaderConfig:
        """The configuration of these arguments, checked (``timeout`` 0 or inf: none).

        Raises:
            ValueError: ``num_workers`` < 0 (or a string other than ``"auto"``), an
                unknown method, ``max_buffered`` too small for it, or a ``timeout`` that
                is negative or NaN, or a negative ``lookahead``.
            TypeError: an integer argument that is not an integer (``lookahead``: a
                float too), a ``timeout`` that is not a number, or a ``transform`` that
                is not callable.

        Example:
            >>> LoaderConfig.checked(num_workers=2, method="thread", max_buffered=6,
            ...                      timeout=0, pin_memory=False, time_major=False,
            ...                      persistent_workers=True, transform=None).timeout is None
            True
        """
        if timeout is not None and not isinstance(timeout, bool) and timeout == 0:
            timeout = None  # as in DataLoader: no timeout
        auto = isinstance(num_workers, str)
        if auto and num_workers != "auto":
            raise ValueError(f'num_workers must be an integer >= 0 or "auto", got {num_workers!r}')
        num_workers = auto_workers() if auto else check_int(num_workers, "num_workers", 0)
        max_buffered = check_int(max_buffered, "max_buffered")
        if transform is not None:
            Transform(transform)  # checks it now rather than in a worker
        check_workers(num_workers, method, max_buffered, name="method")
        return cls(
            num_workers=int(num_workers),
            method=method,
            max_buffered=max_buffered,
            timeout=check_timeout(timeout),
            pin_memory=check_switch(pin_memory, "pin_memory"),
            time_major=check_switch(time_major, "time_major"),
            persistent_workers=check_switch(persistent_workers, "persistent_workers")
            and num_workers > 0,
            transform=transform,
            auto=auto,
            lookahead=check_lookahead(lookahead),
        )

    def with_workers(self, chosen: int) -> LoaderConfig:
        """The configuration once ``num_workers="auto"`` chose ``chosen`` workers.

        Example:
            >>> auto = LoaderConfig(num_workers=8, auto=True, persistent_workers=True)
            >>> kept = auto.with_workers(0)
            >>> kept.num_workers, kept.auto, kept.persistent_workers
            (0, False, False)
        """
        return dataclasses.replace(
            self,
            num_workers=chosen,
            auto=False,
            persistent_workers=self.persistent_workers and chosen > 0,
        )
