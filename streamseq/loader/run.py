"""A pass over a loader's batches, the position it reports, and its figures."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from time import perf_counter
from typing import Any, NamedTuple

from ..batch import Batch
from ..deliver.assemble import Assembled, counted_from
from ..deliver.background import Background
from ..prefetch import Prefetched
from .stats import Latest, Meter


class EpochProgress(NamedTuple):
    """Where a run stands in its epoch: batches delivered and batches in all.

    Attributes:
        epoch: the epoch.
        done: its batches delivered, also those before a resume.
        total: its batches in all: ``done`` plus what the loader will deliver of it.
    """

    epoch: int
    done: int
    total: int


class Position:
    """Where a pass stands: the next batch it delivers, reported to its loader.

    ``pending``: a position loaded by :meth:`StreamLoader.load_state_dict` that no pass
    has used yet (the first batch delivered, or the end, uses it up). ``ended``: the
    pass delivered its last batch and reached the end. ``started``: a pass delivered a
    batch from here.

    Example:
        >>> p = Position(3, pending=True)
        >>> p.next, p.pending, p.ended, p.started
        (3, True, False, False)
    """

    __slots__ = ("ended", "next", "pending", "started")

    def __init__(self, next: int, pending: bool = False, ended: bool = False):
        self.next, self.pending, self.ended = next, pending, ended
        self.started = False

    def copy(self) -> Position:
        """A position of its own, at the same place."""
        p = Position(self.next, self.pending, self.ended)
        p.started = self.started
        return p


class Pass:
    """One pass over the batches of an epoch, from ``position.next`` to ``stop``.

    It reads ``batches`` and reports where it stands in ``position`` (its loader's
    state reads it), and its figures in ``meter`` (:mod:`.stats`: reported to ``latest``
    at its first batch, logged when it ends); it never touches the loader. A closed
    pass delivers nothing more; one superseded by a newer pass says so (see
    :meth:`StreamLoader.__iter__`).

    Args:
        position: where it starts, updated as batches are delivered.
        batches: the batches of the epoch.
        stop: the number of batches of the epoch.
        groups: the sequences of micro-batches the batches are assembled from (their
            files are released when the pass ends).
        prefetchers: the workers this pass started (stopped when it ends).
        newer_running: whether a newer pass of the same loader is running.
        failed: called when reading a batch raised, after the pass is closed: the
            loader stops its persistent workers there, all of them (the next pass
            starts new ones).
        meter: where its figures are kept (a meter of its own by default).
        latest: told of ``meter`` when the pass delivers its first batch.
    """

    def __init__(
        self,
        position: Position,
        batches: Assembled,
        stop: int,
        groups: list[Any],
        prefetchers: list[Prefetched],
        newer_running: Callable[[Pass], bool],
        failed: Callable[[], None] | None = None,
        meter: Meter | None = None,
        latest: Latest | None = None,
    ):
        self.position, self.batches, self.stop = position, batches, stop
        self.groups, self.prefetchers = groups, prefetchers
        self.newer_running, self.failed = newer_running, failed
        self.start = self.next = position.next
        self.closed = False
        self.superseded = False
        self.background: Background | None = None
        self.meter = Meter(-1, 0) if meter is None else meter
        self.latest = latest

    def __iter__(self) -> Pass:
        return self

    def __next__(self) -> Batch:
        if self.closed:
            if self.superseded and (self.next > self.start or self.newer_running(self)):
                raise RuntimeError(
                    "this iteration was superseded by a new iter(loader): a StreamLoader "
                    "runs one pass at a time (its position is what state_dict() saves); "
                    "end a pass before starting another, or index the loader (loader[i])"
                )
            raise StopIteration
        if self.next >= self.stop:
            self.position.pending = False
            self.position.ended = True  # the loader moves on to the next epoch
            self.close()
            raise StopIteration
        if self.background is not None and self.background.pid != os.getpid():
            self.background = None  # forked during the pass: the thread is the parent's
        asked = perf_counter()
        try:
            if not self.batches.share and self.batches.pin:
                if self.background is None:  # one thread assembles into pinned memory
                    produce = functools.partial(counted_from, self.batches, self.next)
                    self.background = Background(produce)
                batch, steps = next(self.background)
            else:
                batch, steps = self.batches.counted(self.next)
        except BaseException:
            self.close()
            if self.failed is not None:
                self.failed()
            raise
        self.meter.delivered(steps, asked)
        if self.next == self.start and self.latest is not None:
            self.latest.started(self.meter)
        self.next = self.position.next = self.next + 1
        self.position.pending = False  # a loaded position is used once
        self.position.started = True
        return batch

    def close(self, log: bool = True) -> None:
        """Stop the pinning thread and the worker processes; log the pass's figures once."""
        self.closed = True
        if self.meter.end() and log:
            self.meter.log("ended" if self.next >= self.stop else "stopped")
        if self.background is not None:
            self.background.close()
            self.background = None
        for pf in self.prefetchers:
            pf.close(wait=False)  # they exit by themselves meanwhile
        self.prefetchers = []
        for g in self.groups:
            g.release()
        self.batches.release()

    def __del__(self) -> None:
        try:
            self.close(log=False)  # (perhaps at interpreter shutdown)
        except Exception:
            pass
