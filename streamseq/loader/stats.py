"""Figures of a pass, to see whether data is the bottleneck: :attr:`StreamLoader.stats`.

A pass measures, for every batch, how long the training loop waited in ``next()`` for
it, and counts its valid and padding steps (two clock reads, and one count of ``valid``
a batch, on the arrays the workers wrote it in); the workers send the seconds they spent
reading and idle with every block they hand over (:mod:`streamseq.workers.timing`).
:class:`Meter` keeps the figures of one pass as it runs, :class:`PassStats` is what they
are at one moment, and :class:`Latest` holds the meter of the latest pass that delivered
a batch, for its loader.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from time import perf_counter

from ..workers.timing import Timing

logger = logging.getLogger("streamseq")


@dataclasses.dataclass(frozen=True)
class WorkerStats:
    """Where the time of one worker went during a pass.

    Attributes:
        read_seconds: reading its blocks of micro-batches (opening, decoding, the
            ``transform``, writing its rows in the shared slot).
        idle_seconds: waiting for the main process to take what it handed over (the
            hand-over queue was full: it could have read more).
        blocks: the blocks it handed over.

    Example:
        >>> WorkerStats(1.5, 0.25, 12)
        WorkerStats(read 1.5 s, idle 0.25 s, 12 blocks)
    """

    read_seconds: float
    idle_seconds: float
    blocks: int

    def __repr__(self) -> str:
        return (
            f"WorkerStats(read {self.read_seconds:.3g} s, idle {self.idle_seconds:.3g} s, "
            f"{self.blocks} blocks)"
        )


@dataclasses.dataclass(frozen=True)
class PassStats:
    """Figures of a pass over a loader, so far or in all: is data the bottleneck.

    ``wait_fraction`` is the share of the pass the training loop spent blocked in
    ``next()``, waiting for a batch: near 0 the model is the bottleneck (faster reading
    changes nothing), near 1 the data is. ``workers`` says where each worker's time went;
    without workers (``num_workers=0``) it is empty and the reading is part of the wait.

    Attributes:
        epoch: the epoch the pass reads.
        batches: batches delivered.
        steps: valid steps delivered (``valid`` summed over the batches).
        padding_steps: padding steps delivered (``~valid`` summed).
        seconds: wall time from the first ``next()`` to the end of the pass (or to now,
            while it runs).
        wait_seconds: time the training loop spent in ``next()``, waiting for a batch.
        workers: one :class:`WorkerStats` per worker (none without workers).
        running: whether the pass is still running.

    Example:
        >>> stats = PassStats(0, batches=10, steps=900, padding_steps=100, seconds=2.0,
        ...                   wait_seconds=0.5)
        >>> stats.steps_per_second, stats.wait_fraction
        (450.0, 0.25)
        >>> stats  # doctest: +ELLIPSIS
        PassStats(epoch 0, 10 batches, 900 steps + 100 padding, 2 s, 450 steps/s, wait_fraction...)
        >>> stats.postfix()
        {'steps/s': '450', 'wait': '25%'}
    """

    epoch: int
    batches: int = 0
    steps: int = 0
    padding_steps: int = 0
    seconds: float = 0.0
    wait_seconds: float = 0.0
    workers: tuple[WorkerStats, ...] = ()
    running: bool = False

    @property
    def steps_per_second(self) -> float:
        """Valid steps delivered per second of the pass (0 before any time passed)."""
        return self.steps / self.seconds if self.seconds > 0 else 0.0

    @property
    def wait_fraction(self) -> float:
        """``wait_seconds / seconds``: the share of the pass spent waiting for data."""
        return min(1.0, self.wait_seconds / self.seconds) if self.seconds > 0 else 0.0

    def postfix(self) -> dict[str, str]:
        """Steps per second and the wait, for a progress bar: ``bar.set_postfix(...)``."""
        return {"steps/s": _si(self.steps_per_second), "wait": f"{self.wait_fraction:.0%}"}

    def __repr__(self) -> str:
        text = (
            f"PassStats(epoch {self.epoch}, {self.batches} batches, {self.steps} steps + "
            f"{self.padding_steps} padding, {self.seconds:.3g} s, "
            f"{self.steps_per_second:.4g} steps/s, wait_fraction {self.wait_fraction:.2f}"
        )
        for w, figures in enumerate(self.workers):
            text += f", worker {w}: read {figures.read_seconds:.3g} s"
            text += f" idle {figures.idle_seconds:.3g} s"
        return text + (", running)" if self.running else ")")


def _si(x: float) -> str:
    """``x`` with three significant digits and a k, M or G suffix.

    Example:
        >>> [_si(x) for x in (0.5, 450, 22646, 3.1e7)]
        ['0.5', '450', '22.6k', '31M']
    """
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:.3g}"


class Meter:
    """The figures of one pass as it runs: batches, steps, wait and the workers' time.

    The pass reads the clock when ``next()`` is called, calls :meth:`delivered` with the
    batch it returns, and :meth:`end` when it ends; :meth:`stats` reads the figures.

    Args:
        epoch: the epoch the pass reads.
        size: the steps a batch holds (rows x tbins), valid or padding.
        timings: the workers' :class:`~streamseq.workers.timing.Timing` (one per
            prefetch), counted from now on.

    Example:
        >>> from time import perf_counter
        >>> meter = Meter(3, size=4)
        >>> meter.delivered(3, perf_counter())
        >>> stats = meter.stats()
        >>> stats.batches, stats.steps, stats.padding_steps, stats.running
        (1, 3, 1, True)
        >>> meter.end(), meter.end(), meter.stats().running
        (True, False, False)
    """

    __slots__ = ("base", "batches", "began", "ended", "epoch", "size", "steps", "timings")
    __slots__ += ("wait",)

    def __init__(self, epoch: int, size: int, timings: Sequence[Timing] = ()):
        self.epoch, self.size, self.timings = epoch, size, list(timings)
        self.base = [t.totals() for t in self.timings]
        self.batches = self.steps = 0
        self.wait = 0.0
        self.began: float | None = None  # the first next()
        self.ended: float | None = None

    def delivered(self, steps: int, asked: float) -> None:
        """A batch of ``steps`` valid steps delivered by a ``next()`` called at ``asked``.

        The pass starts when its first batch was asked for.
        """
        self.wait += perf_counter() - asked
        self.batches += 1
        self.steps += steps
        if self.began is None:
            self.began = asked

    def end(self) -> bool:
        """End the pass now; True the first time, once it started."""
        if self.ended is not None or self.began is None:
            return False
        self.ended = perf_counter()
        return True

    def stats(self) -> PassStats:
        """The figures now: of the pass so far, or in all once it ended."""
        end = perf_counter() if self.ended is None else self.ended
        seconds = 0.0 if self.began is None else end - self.began
        workers = []
        for timing, base in zip(self.timings, self.base, strict=True):
            now = timing.totals()
            base = base + [(0.0, 0.0, 0)] * (len(now) - len(base))
            for (read, idle, n), (read0, idle0, n0) in zip(now, base, strict=True):
                workers.append(WorkerStats(read - read0, idle - idle0, n - n0))
        return PassStats(
            self.epoch,
            self.batches,
            self.steps,
            self.batches * self.size - self.steps,
            seconds,
            self.wait,
            tuple(workers),
            self.ended is None,
        )

    def log(self, how: str = "ended") -> None:
        """One INFO line on the ``streamseq`` logger: the pass ``how`` (ended, stopped)."""
        if logger.isEnabledFor(logging.INFO):
            logger.info("pass %s, %s", how, describe(self.stats()))


def describe(stats: PassStats) -> str:
    """The figures of a pass in words, on one line (what the log line says).

    Example:
        >>> print(describe(PassStats(1, 10, 900, 100, 2.0, 0.5, (WorkerStats(1.5, 0.25, 4),))))
        epoch 1: 10 batches, 900 steps (+100 padding) in 2 s, 450 steps/s; waited 0.5 s for data (25%); worker 0 read 1.5 s, idle 0.25 s
    """  # noqa: E501
    text = (
        f"epoch {stats.epoch}: {stats.batches} batches, {stats.steps} steps "
        f"(+{stats.padding_steps} padding) in {stats.seconds:.3g} s, "
        f"{_si(stats.steps_per_second)} steps/s; waited {stats.wait_seconds:.3g} s for data "
        f"({stats.wait_fraction:.0%})"
    )
    for w, figures in enumerate(stats.workers):
        text += (
            f"; worker {w} read {figures.read_seconds:.3g} s, idle {figures.idle_seconds:.3g} s"
        )
    return text


class Latest:
    """The meter of the latest pass of a loader that delivered a batch.

    A pass reports its meter at its first batch (an iterator made and never used,
    as ``tqdm.auto`` makes, leaves the figures alone).

    Example:
        >>> latest = Latest()
        >>> latest.stats(0)
        PassStats(epoch 0, 0 batches, 0 steps + 0 padding, 0 s, 0 steps/s, wait_fraction 0.00)
    """

    __slots__ = ("meter",)

    def __init__(self) -> None:
        self.meter: Meter | None = None

    def started(self, meter: Meter) -> None:
        """``meter``'s pass delivered its first batch."""
        self.meter = meter

    def stats(self, epoch: int) -> PassStats:
        """The figures of the latest pass, or none yet (of ``epoch``) before any."""
        return PassStats(epoch) if self.meter is None else self.meter.stats()
