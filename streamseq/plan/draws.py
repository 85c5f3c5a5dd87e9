"""The draws of a mixture: the units every epoch reads from groups of weighted streams.

A mixture splits the streams into named groups (consecutive ranges of stream indices)
with a weight each. Weights are shares of the epoch's steps: group ``g`` is given
``S_g = steps * w_g / sum(w)`` steps (``steps``: all groups' steps by default). It reads
its units (streams, or segments) whole: ``k = S_g // size_g`` full rounds of every unit,
then the shortest prefix of a permutation of its units, drawn from ``(seed, epoch)``,
whose steps come nearest to the remainder. A group asking for more than it has is read
again (every unit ``k`` or ``k + 1`` times), one asking for less gives a subset without
repeats; with weights proportional to the groups' sizes every unit is read once.

A group whose share is below its longest unit (``S_g`` less than one of its streams) is
never rounded to the nearest prefix, which could be empty in every epoch: its prefix is
rounded at random instead (:meth:`Draws.rounded`), the units whose running total stays
within ``S_g``, then the next one with the probability that makes the expected steps
exactly ``S_g``. Such a group is read in some epochs and not in others, drawn from
``(seed, epoch)``, and over epochs it gets its share on average.

The epoch's *draw* lists the unit of every occurrence, sorted: the plan deals occurrences
out to rows as it deals units (a unit may occur several times), and the progress of the
epoch has one bit per occurrence. The draw is a function of ``(seed, epoch, weights)``,
so a state never holds it (except after the weights changed on resuming, see
:func:`reweigh`).
"""

from __future__ import annotations

import base64
import hashlib
import math
import zlib
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .epoch import segments_at_chunks
from .fields import short
from .identities import as_identities
from .rows import row_cost

if TYPE_CHECKING:
    from .progress import Progress

#: mixed into the seed of the draws, so that they differ from the shuffle's generator
_DRAW = 0x6D6978
#: mixed into the seed of the draws of a rest of an epoch after the weights changed
_REWEIGH = 0x726577


@dataclass(frozen=True)
class MixSpec:
    """The groups of a mixture and their weights: what the plan needs of a mixture.

    Attributes:
        names: the groups, in order.
        bounds: stream index where each group starts, and the number of streams last.
        weights: the weight of each group, or None (every unit once, as without groups).
        steps: steps of an epoch, or None for all groups' steps.

    Example:
        >>> mix = MixSpec(("a", "b"), (0, 2, 3), (1.0, 3.0))
        >>> mix.group_of(np.array([0, 1, 2])).tolist(), mix.counts
        ([0, 0, 1], (2, 1))
    """

    names: tuple[str, ...]
    bounds: tuple[int, ...]
    weights: tuple[float, ...] | None = None
    steps: int | None = None

    @property
    def counts(self) -> tuple[int, ...]:
        """Streams of each group."""
        return tuple(b - a for a, b in zip(self.bounds[:-1], self.bounds[1:], strict=True))

    def group_of(self, streams: np.ndarray) -> np.ndarray:
        """The group of each stream index."""
        return np.searchsorted(np.asarray(self.bounds[1:]), streams, side="right")

    def key(self, lengths: np.ndarray, sources: Any) -> dict[str, Any]:
        """What names the mixture in a state: every group's streams and weight.

        Example:
            >>> key = MixSpec(("a",), (0, 1), (2,)).key(np.array([4]), ("ndarray",))
            >>> key["groups"][0]["name"], key["groups"][0]["weight"], key["steps"]
            ('a', 2.0, None)
        """
        groups = []
        for g, name in enumerate(self.names):
            a, b = self.bounds[g], self.bounds[g + 1]
            h = hashlib.sha256(np.ascontiguousarray(lengths[a:b], np.int64).tobytes())
            s = as_identities(sources)[a:b].sha256() if sources else None
            groups.append(
                {
                    "name": name,
                    "streams": b - a,
                    "lengths": h.hexdigest()[:16],
                    "sources": None if s is None else s.hexdigest()[:16],
                    "weight": None if self.weights is None else float(self.weights[g]),
                }
            )
        return {"groups": groups, "steps": self.steps}


def nearest_prefix(cum: np.ndarray, target: float) -> int:
    """How many items to take so that their running total ``cum`` is nearest ``target``.

    Ties go to fewer items.

    Example:
        >>> nearest_prefix(np.array([3, 5, 9]), 6.5), nearest_prefix(np.array([3, 5]), 4.0)
        (2, 1)
    """
    totals = np.concatenate([[0], cum])
    i = int(np.searchsorted(totals, target))
    if i >= len(totals):
        return len(totals) - 1
    if i > 0 and target - totals[i - 1] <= totals[i] - target:
        return i - 1
    return i


def fractional_knapsack(steps: np.ndarray, cost: np.ndarray, budget: float, most: bool) -> float:
    """The most cost items of at most ``budget`` steps have (``most``), or the least of at least.

    Items may be taken in part: a bound on any whole choice.

    Example:
        >>> steps, cost = np.array([1, 4, 4]), np.array([1, 1, 4])
        >>> fractional_knapsack(steps, cost, 5, True), fractional_knapsack(steps, cost, 5, False)
        (5.0, 2.0)
    """
    keep = steps > 0
    steps, cost = steps[keep].astype(float), cost[keep].astype(float)
    budget = min(max(budget, 0.0), float(steps.sum()))
    ratio = cost / steps if len(steps) else steps
    order = np.argsort(-ratio if most else ratio, kind="stable")
    cum = np.cumsum(steps[order])
    whole = int(np.searchsorted(cum, budget, side="right"))
    got = float(cost[order[:whole]].sum())
    if whole < len(order):
        left = budget - (float(cum[whole - 1]) if whole else 0.0)
        got += float(cost[order[whole]] * left / steps[order[whole]])
    return got


class Shape(Protocol):
    """What :meth:`Draws.epoch_length` takes of the plan's settings (a ``PlanSpec``)."""

    pad: str
    tbins: int
    max_streams_per_chunk: int | None
    segment_length: int | None
    version: int

    @property
    def rows(self) -> int:
        """Global rows (all ranks)."""
        ...


def exact_sum(steps: np.ndarray) -> int:
    """The sum of non-negative int64 ``steps``, exact past 2**63 (where numpy's wraps).

    Example:
        >>> exact_sum(np.array([2**62, 2**62, 2**62])) == 3 * 2**62
        True
    """
    steps = np.asarray(steps, dtype=np.int64)
    if not len(steps) or int(steps.max()) <= (2**63 - 1) // len(steps):
        return int(steps.sum())  # (cannot wrap: no copy)
    return (int((steps >> 32).sum()) << 32) + int((steps & 0xFFFFFFFF).sum())


#: the most rounds of a group an epoch reads: a state counts a unit's occurrences in 32 bits
MOST_ROUNDS = 2**32 - 2


class Draws:
    """The draws of a mixture's epochs (see the module), and the epochs' length.

    Made by :attr:`PlanSpec.draws <streamseq.plan.spec.PlanSpec.draws>`.

    Args:
        mix: the groups and their weights.
        seed: the seed of the plan.
        units: ``(source, start, length)`` of every unit the groups' streams give.

    Raises:
        ValueError: a group with a positive weight has no steps, or would be read more
            than :data:`MOST_ROUNDS` rounds an epoch (naming it).

    Example:
        >>> from streamseq.plan.spec import PlanSpec
        >>> spec = PlanSpec(np.array([4, 4, 2]), 1, 2,
        ...                 mixture=MixSpec(("a", "b"), (0, 2, 3), (1.0, 1.0)))
        >>> draws = spec.draws
        >>> draws.rounds, draws.fixed
        ((0, 2), False)
        >>> sorted(np.bincount(draws.of(0), minlength=3).tolist())
        [0, 1, 2]
    """

    def __init__(self, mix: MixSpec, seed: int, units: tuple[np.ndarray, ...]):
        self.mix, self.seed = mix, seed
        source, start, length = units
        self.length = length
        self.start = start  # (where each unit starts in its stream)
        self.group = mix.group_of(source)
        self.units = [np.flatnonzero(self.group == g) for g in range(len(mix.names))]
        self.sizes = [exact_sum(length[u]) for u in self.units]
        rounds, rests, rounded = [], [], []
        if mix.weights is not None:
            total = mix.steps if mix.steps is not None else sum(self.sizes)
            weights = [Fraction(w) for w in mix.weights]
            for g, (w, size) in enumerate(zip(weights, self.sizes, strict=True)):
                if w > 0 and size == 0:
                    raise ValueError(
                        f"group {mix.names[g]!r} has weight {float(w):g} but no steps: its "
                        f"{mix.counts[g]} streams are empty"
                    )
                k, r, at_random = self._rounds(total * w / sum(weights), size, self.units[g])
                if k + 1 > MOST_ROUNDS:
                    raise ValueError(
                        f"group {mix.names[g]!r} would be read {k} rounds an epoch (weight "
                        f"{float(w):g} of {total} steps, its streams {size} steps): more "
                        f"than {MOST_ROUNDS} rounds, the most a state counts; give the "
                        "mixture fewer steps= or this group a smaller weight"
                    )
                rounds.append(k)
                rests.append(r)
                rounded.append(at_random)
        self.rounds, self.rests = tuple(rounds), tuple(rests)
        #: groups whose share is below their longest unit: prefixes rounded at random
        self.at_random = tuple(rounded)
        #: every epoch draws the same units (no group reads part of a round)
        self.fixed = all(r == 0 for r in rests)
        self._last: tuple[int, np.ndarray | None] | None = None

    def _rounds(self, target: Fraction, size: int, units: np.ndarray) -> tuple[int, float, bool]:
        """Full rounds, the steps left of ``target`` and whether they are rounded at random.

        The steps left are 0 where every draw takes none or all of the units; a share
        below the longest unit is rounded at random (never starved).
        """
        if size == 0:
            return 0, 0.0, False
        k = math.floor(target / size)
        rest = target - k * size
        nonempty = self.length[units][self.length[units] > 0]
        if k == 0 and 0 < rest < int(nonempty.max()):  # below one of its streams
            return 0, float(rest), True
        smallest = int(nonempty.min())
        if 2 * rest <= smallest:  # the nearest prefix of any permutation is empty
            return k, 0.0, False
        if 2 * (size - rest) < smallest:  # ... or every unit
            return k + 1, 0.0, False
        return k, float(rest), False

    def of(self, epoch: int) -> np.ndarray | None:
        """The draw of ``epoch``: the unit of every occurrence, sorted; None for every unit once.

        Example:
            >>> from streamseq.plan.spec import PlanSpec
            >>> spec = PlanSpec(np.array([3, 3]), 1, 2,
            ...                 mixture=MixSpec(("a", "b"), (0, 1, 2), (2.0, 0.0)))
            >>> spec.draws.of(5).tolist()
            [0, 0]
        """
        if self.mix.weights is None:
            return None
        if self._last is not None and self._last[0] == epoch:
            return self._last[1]
        parts = []
        for g, units in enumerate(self.units):
            parts.append(np.repeat(units, self.rounds[g]))
            if self.rests[g]:
                rng = np.random.default_rng([self.seed, epoch, _DRAW, g])
                pick = self.rounded if self.at_random[g] else self.prefix
                parts.append(pick(units, self.rests[g], rng))
        draw = np.sort(np.concatenate(parts))
        counts = np.bincount(draw, minlength=len(self.length))
        if (counts[self.length > 0] == 1).all():
            draw = None  # every unit once: the plan of the streams without groups
        self._last = (epoch, draw)
        return draw

    def prefix(
        self, units: np.ndarray, steps: float, rng: np.random.Generator, first: Any = None
    ) -> np.ndarray:
        """Units of a random order whose steps come nearest ``steps`` (empty ones left out).

        ``first``: a mask of ``units`` to put before the others in the order.
        """
        units = units[self.length[units] > 0]
        order = rng.permutation(len(units))
        if first is not None:
            order = order[np.argsort(~first[units[order]], kind="stable")]
        chosen = units[order]
        return chosen[: nearest_prefix(np.cumsum(self.length[chosen]), steps)]

    def rounded(self, units: np.ndarray, steps: float, rng: np.random.Generator) -> np.ndarray:
        """Units of a random order, the prefix within ``steps`` and maybe the next one.

        The next unit is taken with the probability that makes the expected steps
        ``steps`` exactly (``steps`` less than all the units' steps).

        Example:
            >>> from streamseq.plan.spec import PlanSpec
            >>> spec = PlanSpec(np.array([10, 0]), 1, 2,
            ...                 mixture=MixSpec(("a", "b"), (0, 1, 2), (1.0, 0.0)))
            >>> rng = np.random.default_rng(0)
            >>> draws = [spec.draws.rounded(np.array([0]), 2.5, rng) for _ in range(400)]
            >>> bool(0.15 < np.mean([len(d) for d in draws]) < 0.35)  # a quarter of the draws
            True
        """
        units = units[self.length[units] > 0]
        chosen = units[rng.permutation(len(units))]
        cum = np.cumsum(self.length[chosen])
        whole = int(np.searchsorted(cum, steps, side="right"))
        left = steps - (float(cum[whole - 1]) if whole else 0.0)
        more = whole < len(chosen) and rng.random() * float(self.length[chosen[whole]]) < left
        return chosen[: whole + int(more)]

    def epoch_length(self, spec: Shape) -> int:
        """Batches of every fresh epoch when draws differ by epoch: a bound on any draw's plan.

        The rows are balanced longest first (:func:`~streamseq.plan.rows.balanced_rows`):
        a unit of cost ``c`` goes to the cheapest row, which holds at most the mean of
        the units placed before it, all of cost ``c`` or more. So no row costs more than
        ``(S(c) - c) / rows + c`` for some unit cost ``c``, where ``S(c)`` is the cost of
        the units of cost ``c`` or more; and the cheapest row falls short of the costliest
        by at most one unit. The draws' costs are bounded per group (whole rounds, then a
        prefix within half a unit of its steps, or within a unit where rounded at
        random), so every epoch fits in the same number of batches: its rows end there
        or before, and the batches after their ends are padding (``pad="drop"``: every
        row reaches it).
        """
        pack, cap, tbins = spec.pad == "pack", spec.max_streams_per_chunk, spec.tbins
        resumed = None  # packed, a segment other than a stream's first starts a chunk
        if segments_at_chunks(spec.pad, spec.segment_length, spec.version):
            resumed = self.start > 0  # (costs the padding it may add: see row_cost)
        cost = row_cost(self.length, tbins, pack, cap, resumed)
        drawn = [g for g in range(len(self.units)) if self.rounds[g] or self.rests[g]]
        levels = np.unique(
            np.concatenate([np.zeros(1, np.int64)] + [cost[self.units[g]] for g in drawn])
        )
        above = np.zeros(len(levels))  # the most cost of units of each level or more
        least = 0.0
        for g in drawn:
            c, s = cost[self.units[g]], self.length[self.units[g]]
            ordered = np.sort(c)
            below = np.concatenate([[0], np.cumsum(ordered)])[np.searchsorted(ordered, levels)]
            ge = float(ordered.sum()) - below
            above += self.rounds[g] * ge
            if self.rests[g]:  # within half a unit of the rest, or a unit if rounded
                half = float(s.max(initial=0)) / (1 if self.at_random[g] else 2)
                most = fractional_knapsack(s, c, self.rests[g] + half, True)
                above += np.minimum(ge, most)
                least += fractional_knapsack(s, c, self.rests[g] - half, False)
            least += self.rounds[g] * float(c.sum())
        rows, biggest = spec.rows, int(levels[-1])
        if spec.pad == "drop":
            return max(0, math.ceil(least / rows - 1e-6) - biggest)
        whole = np.floor(above + 1e-6)
        top = int((np.floor(np.maximum(whole - levels, 0) / rows) + levels).max())
        return chunks_of_cost(top, tbins, pack, cap)


def chunks_of_cost(cost: int, tbins: int, pack: bool, cap: int | None) -> int:
    """The most chunks a row of this :func:`~streamseq.plan.rows.row_cost` can take.

    Example:
        >>> chunks_of_cost(10, 4, False, None), chunks_of_cost(10, 4, True, None)
        (10, 3)
    """
    if not pack or cap == 1:
        return cost
    if cap is None:
        return -(-cost // tbins)
    return -(-cost // ((cap - 1) * tbins))


def encode_draw(draw: np.ndarray, units: int) -> str:
    """A draw as base64 of the compressed count of every unit (``decode_draw`` reads it).

    Example:
        >>> decode_draw(encode_draw(np.array([0, 2, 2]), 3), 3, "d").tolist()
        [0, 2, 2]
    """
    counts = np.bincount(draw, minlength=units).astype("<u4")
    return base64.b64encode(zlib.compress(counts.tobytes())).decode("ascii")


def decode_draw(value: Any, units: int, name: str) -> np.ndarray:
    """Read :func:`encode_draw`'s form back, checked: a ValueError naming ``name`` if bad."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a base64 string, got {short(value)}")
    try:
        raw = zlib.decompressobj().decompress(base64.b64decode(value, validate=True), 4 * units)
    except (ValueError, zlib.error):
        raw = b""
    if len(raw) != 4 * units:
        raise ValueError(f"{name} is not the count of each of {units} units: {short(value)}")
    counts = np.frombuffer(raw, "<u4").astype(np.int64)
    if counts.sum() > 64 * max(units, 1):
        raise ValueError(f"{name} draws {counts.sum()} units, more than 64 rounds of {units}")
    return np.repeat(np.arange(units, dtype=np.int64), counts)


def delivered_steps(progress: Progress, lengths: np.ndarray) -> np.ndarray:
    """Steps of every unit of an epoch delivered at ``progress``.

    Example:
        >>> from streamseq.plan.progress import Progress
        >>> p = Progress(np.array([True, False, False]), np.array([1]), np.array([2]),
        ...              np.array([0]))
        >>> delivered_steps(p, np.array([3, 5, 4])).tolist()
        [3, 2, 0]
    """
    out = np.where(progress.done, lengths, 0).astype(np.int64)
    out[progress.begun] = progress.next
    return out
