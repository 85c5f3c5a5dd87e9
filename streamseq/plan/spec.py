"""The frozen settings a plan is a pure function of: :class:`PlanSpec`."""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from .draws import Draws, MixSpec
from .identities import Identities, as_identities
from .segments import segments


def key_fingerprint(key: dict[str, Any]) -> str:
    """A short hash of a plan key (:attr:`PlanSpec.key`).

    Example:
        >>> key_fingerprint({"tbins": 4}) == key_fingerprint({"tbins": 4})
        True
    """
    return hashlib.sha256(repr(sorted(key.items())).encode()).hexdigest()[:16]


@dataclass(frozen=True, eq=False)
class PlanSpec:
    """Everything that decides what goes where, and nothing that reads data.

    The plan of every epoch (:func:`~streamseq.plan.planner.plan_epoch`), the state of a
    run (:mod:`streamseq.plan.state`) and the rows a rank reads are pure functions of
    it and of the epoch.

    Attributes:
        lengths: steps of every stream, in the order the user gave them.
        batch_size: rows per batch on each rank.
        tbins: steps per chunk (per row and batch).
        pad: ``"zeros"``, ``"drop"``, ``"wrap"`` or ``"pack"``.
        shuffle: a new order of the streams every epoch.
        seed: seed of the shuffle.
        segment_length: streams longer than this are planned as segments of it.
        rank: this process' rank.
        world_size: ranks sharing one global plan.
        sources: what names each stream across runs (file paths, or types), as
            :class:`~streamseq.plan.identities.Identities` (a tuple of strings is
            taken as well).
        version: the planning algorithm (:func:`~streamseq.plan.epoch.epoch_rows`): 4,
            rows balanced once and shuffled every epoch, so that every epoch has the same
            number of batches, and packed, every piece that goes on with a stream from a
            step other than 0 at a chunk; 3, the same but for packed segments (see
            :func:`~streamseq.plan.epoch.same_plans`); 2, the same but for a packed rest
            of an epoch too, that of states saved by streamseq 0.3; 1, the plan of
            states saved by streamseq 0.2.
        mixture: the groups of a mixture and their weights (:mod:`~streamseq.plan.draws`),
            or None.
        max_streams_per_chunk: with ``pad="pack"``, the most streams one chunk may pack
            (:mod:`~streamseq.plan.packing`), or None.

    Example:
        >>> spec = PlanSpec(np.array([5, 0, 3]), batch_size=2, tbins=2, segment_length=2)
        >>> spec.rows, spec.units[2].tolist()
        (2, [2, 2, 1, 2, 1])
        >>> spec.replace(world_size=2).rows
        4
    """

    lengths: np.ndarray
    batch_size: int
    tbins: int
    pad: str = "zeros"
    shuffle: bool = False
    seed: int = 0
    segment_length: int | None = None
    rank: int = 0
    world_size: int = 1
    sources: Identities = dataclasses.field(default_factory=Identities.empty)
    version: int = 4
    mixture: MixSpec | None = None
    max_streams_per_chunk: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.sources, Identities):
            object.__setattr__(self, "sources", as_identities(self.sources))

    @property
    def rows(self) -> int:
        """Global rows: ``batch_size * world_size``."""
        return self.batch_size * self.world_size

    @cached_property
    def units(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What the rows read: ``(source, start, length)`` of every stream or segment."""
        return segments(self.lengths, self.segment_length)

    @cached_property
    def draws(self) -> Draws | None:
        """The units every epoch of a mixture draws (None without a mixture)."""
        return None if self.mixture is None else Draws(self.mixture, self.seed, self.units)

    @cached_property
    def key(self) -> dict[str, Any]:
        """What decides the plan, except the rows and the epoch (states keep it).

        Example:
            >>> key = PlanSpec(np.array([4]), 1, 2, sources=("ndarray",)).key
            >>> {k: key[k] for k in ("streams", "tbins", "pad", "shuffle", "seed")}
            {'streams': 1, 'tbins': 2, 'pad': 'zeros', 'shuffle': False, 'seed': 0}
        """
        sources = self.sources.sha256()
        key = {
            "streams": len(self.lengths),
            "lengths": hashlib.sha256(self.lengths.tobytes()).hexdigest()[:16],
            "sources": sources.hexdigest()[:16],
            "tbins": self.tbins,
            "pad": self.pad,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "segment_length": self.segment_length,
        }
        if self.mixture is not None:
            key["mixture"] = self.mixture.key(self.lengths, self.sources)
        if self.max_streams_per_chunk is not None:
            key["max_streams_per_chunk"] = self.max_streams_per_chunk
        offsets = self.sources.offsets_digest()
        if offsets is not None:  # streams that are ranges of files: where each starts
            key["offsets"] = offsets[:16]
        readers = self.sources.readers_digest()
        if readers is not None:  # streams read by readers that name their options
            key["readers"] = readers[:16]
        return key

    @cached_property
    def fingerprint(self) -> str:
        """A short hash of :attr:`key`."""
        return key_fingerprint(self.key)

    @cached_property
    def names_only_key(self) -> dict[str, Any]:
        """:attr:`key` as states without ``offsets`` have it: streams named by files only.

        Those states name the documents of a corpus by their file, not by where
        they start in it (no ``offsets``): two selections of one file's documents of the
        same lengths have the same key of this kind. It is :attr:`key` without
        ``offsets``, for reading those states.

        Example:
            >>> from streamseq.plan.identities import Identities
            >>> ids = Identities.repeat("c.bin", 2, np.array([0, 4]))
            >>> spec = PlanSpec(np.array([4, 4]), 1, 2, sources=ids)
            >>> sorted(set(spec.key) - set(spec.names_only_key))
            ['offsets']
        """
        return self.key_without(("offsets",))

    def key_without(self, fields: tuple[str, ...]) -> dict[str, Any]:
        """:attr:`key` without ``fields``: the key of states saved before they were kept.

        States saved before streams were named by where they start in their file
        (``offsets``) or by how they are read (``readers``) are checked by the key they
        have.

        Example:
            >>> from streamseq.plan.identities import Identities
            >>> ids = Identities.repeat("c.bin", 2, np.array([0, 4]), reader="tokens()")
            >>> spec = PlanSpec(np.array([4, 4]), 1, 2, sources=ids)
            >>> sorted(set(spec.key) - set(spec.key_without(("readers",))))
            ['readers']
        """
        return {k: v for k, v in self.key.items() if k not in fields}

    def replace(self, **changes: Any) -> PlanSpec:
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)

    def __getstate__(self) -> dict[str, Any]:
        """The fields only (the cached properties are computed again)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
