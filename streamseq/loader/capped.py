"""Packed rows whose chunks hold a capped number of streams: ``max_streams_per_chunk``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._checks import check_int
from ..interleave import Row
from ..plan.planner import EpochPlan
from ..tbin import tbin
from ..zip_batch import ZipBatch
from .topology import Reading


def check_cap(cap: Any, pad: str) -> int | None:
    """``max_streams_per_chunk`` checked: None, or an integer >= 1 with ``pad="pack"``.

    Example:
        >>> check_cap(2, "pack"), check_cap(None, "zeros")
        (2, None)
        >>> check_cap(2, "zeros")
        Traceback (most recent call last):
        ...
        ValueError: max_streams_per_chunk=2 caps packed chunks: it needs pad="pack", not 'zeros'
    """
    if cap is None:
        return None
    cap = int(check_int(cap, "max_streams_per_chunk", 1))
    if pad != "pack":
        raise ValueError(
            f'max_streams_per_chunk={cap} caps packed chunks: it needs pad="pack", not {pad!r}'
        )
    return cap


class CappedReading(Reading):
    """Reading whose packed chunks hold at most ``spec.max_streams_per_chunk`` streams.

    As :class:`~streamseq.loader.topology.Reading`, with the cap given to every
    :func:`~streamseq.tbin`.
    """

    def group(self, plan: EpochPlan, rows: Sequence[Row]) -> ZipBatch:
        """The sequence of micro-batches of a group of rows of ``plan``'s epoch."""
        spec = self.spec
        cap = spec.max_streams_per_chunk
        parts = [tbin(r, spec.tbins, pack=True, max_streams_per_chunk=cap) for r in rows]
        return ZipBatch(parts, pad=spec.pad, length=plan.length, spec=self.data.of(plan.epoch))
