"""A state of a mixture loaded with other weights, or with groups added: the rest of its epoch.

A state names its mixture: every group's streams (count, lengths, sources) and weight.
Loaded into a loader whose mixture differs, the error names the groups that differ. With
``weights_changed=True`` the weights may differ and groups may be added (a group of the
state must still be there, with the same streams): the steps already delivered stay
delivered, begun streams go on, and the steps left of the epoch are shared out by the
new weights (:func:`reweigh`), preferring units the epoch has not read yet.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from .draws import _REWEIGH, MixSpec, delivered_steps
from .fields import short
from .identities import Identities
from .progress import Progress
from .spec import PlanSpec

#: how to resume with other weights, named in errors
HOW = "pass weights_changed=True to load_state_dict to resume with this loader's weights"


def _groups(key: Any) -> dict[str, dict[str, Any]] | None:
    """The groups of a mixture's key by name (None: no mixture, or a malformed one)."""
    if not isinstance(key, dict) or not isinstance(key.get("groups"), list):
        return None
    out = {}
    for g in key["groups"]:
        if not isinstance(g, dict) or not isinstance(g.get("name"), str):
            return None
        out[g["name"]] = g
    return out


def mixture_differences(saved: Any, mine: Any) -> tuple[list[str], bool]:
    """What differs between the mixtures of a state and of a loader, naming the groups.

    Returns:
        The differences in words, and whether ``weights_changed`` allows them (only
        weights differ, or groups were added).

    Example:
        >>> a = MixSpec(("web", "code"), (0, 2, 3), (1.0, 1.0)).key(np.ones(3, int), ())
        >>> b = MixSpec(("web", "code"), (0, 2, 3), (1.0, 2.0)).key(np.ones(3, int), ())
        >>> mixture_differences(a, b)
        (["group 'code': weight (the state has 1.0, this loader 2.0)"], True)
    """
    if mine is None or saved is None:
        has = "none" if saved is None else f"groups {sorted(_groups(saved) or ())}"
        theirs = "none" if mine is None else f"groups {sorted(_groups(mine) or ())}"
        return [f"the mixture (the state has {has}, this loader {theirs})"], False
    old, new = _groups(saved), _groups(mine)
    if old is None:
        return [f"the mixture (state['plan']['mixture'] is malformed: {short(saved)})"], False
    assert new is not None
    out, allowed = [], True
    for name, g in old.items():
        if name not in new:
            out.append(f"group {name!r} of the state is not in this loader's mixture")
            allowed = False
            continue
        for field in ("streams", "lengths", "sources"):
            if g.get(field) != new[name][field]:
                out.append(f"group {name!r}: its streams ({field} differ)")
                allowed = False
                break
        if g.get("weight") != new[name]["weight"]:
            out.append(
                f"group {name!r}: weight (the state has {short(g.get('weight'))}, "
                f"this loader {new[name]['weight']!r})"
            )
    for name in new:
        if name not in old:
            out.append(f"group {name!r} is not in the state's mixture")
    if saved.get("steps") != mine.get("steps"):
        out.append(
            f"the mixture's steps (the state has {short(saved.get('steps'))}, "
            f"this loader {mine.get('steps')!r})"
        )
    if list(old) != [n for n in new if n in old]:
        out.append(f"the order of the groups (the state has {list(old)})")
        allowed = False
    return out, allowed


def spec_of_state(spec: PlanSpec, saved: dict[str, Any]) -> PlanSpec:
    """``spec`` as the state's mixture had it: its groups (a subset) and weights.

    Call after :func:`mixture_differences` allowed the change.
    """
    mix = spec.mixture
    assert mix is not None
    groups = _groups(saved)
    assert groups is not None
    names = list(groups)
    lengths, sources, bounds = [], [], [0]  # (a list per group)
    for name in names:
        g = mix.names.index(name)
        a, b = mix.bounds[g], mix.bounds[g + 1]
        lengths.append(spec.lengths[a:b])
        sources.append(spec.sources[a:b])
        bounds.append(bounds[-1] + b - a)
    weights = [groups[n]["weight"] for n in names]
    old = MixSpec(
        tuple(names),
        tuple(bounds),
        None if any(w is None for w in weights) else tuple(float(w) for w in weights),
        saved.get("steps"),
    )
    return spec.replace(
        lengths=np.concatenate(lengths).astype(np.int64),
        sources=Identities.concat(sources),
        mixture=old,
    )


def unit_map(old: PlanSpec, new: PlanSpec) -> np.ndarray:
    """For every unit of ``old``, the same unit (group, stream, segment) in ``new``.

    Example:
        >>> new = PlanSpec(np.array([2, 3, 4]), 1, 2,
        ...                mixture=MixSpec(("x", "a"), (0, 1, 3)))
        >>> old = PlanSpec(np.array([3, 4]), 1, 2, mixture=MixSpec(("a",), (0, 2)))
        >>> unit_map(old, new).tolist()
        [1, 2]
    """
    assert old.mixture is not None and new.mixture is not None
    src_old, _, _ = old.units
    src_new, _, _ = new.units
    shift = np.zeros(len(old.lengths), np.int64)
    for g, name in enumerate(old.mixture.names):
        h = new.mixture.names.index(name)
        a, b = old.mixture.bounds[g], old.mixture.bounds[g + 1]
        shift[a:b] = new.mixture.bounds[h] - a
    first_old = np.searchsorted(src_old, np.arange(len(old.lengths)))
    first_new = np.searchsorted(src_new, np.arange(len(new.lengths)))
    stream = src_old
    return first_new[stream + shift[stream]] + (np.arange(len(src_old)) - first_old[stream])


def reweigh(
    old: PlanSpec, new: PlanSpec, epoch: int, progress: Progress, old_draw: np.ndarray
) -> Progress:
    """The rest of ``epoch`` under ``new``'s weights, from where ``old``'s run stands.

    The epoch's units become those delivered (done), those begun (they go on), and a new
    draw per group: the steps not yet delivered of the epoch (``new``'s epoch steps less
    those delivered) shared out by the new weights, less what the group's begun units
    still hold; whole rounds of the group, then a prefix of a random order of its units
    (from ``(seed, epoch, steps delivered)``) that puts the units the epoch has not read
    first.

    Args:
        old: the spec of the state's run.
        new: the spec of the loader resuming.
        epoch: the epoch.
        progress: where the units of the epoch (occurrences of ``old_draw``) stand.
        old_draw: the unit of ``old`` of every occurrence of the epoch.

    Returns:
        The progress of the rest, over the units it draws (``draw``).
    """
    mix, draws = new.mixture, new.draws
    assert mix is not None and draws is not None
    length = new.units[2]
    units = unit_map(old, new)[old_draw]
    got = delivered_steps(progress, length[units])
    begun = np.zeros(len(units), bool)
    begun[progress.begun] = True
    keep = begun | (progress.done & (got > 0))
    read = np.zeros(len(length), bool)
    read[units[keep]] = True
    weights = [Fraction(w) for w in (mix.weights or draws.sizes)]
    total = mix.steps if mix.steps is not None else int(length.sum())
    left = max(0, total - int(got.sum()))
    group = draws.group[units]
    parts = []
    for g, members in enumerate(draws.units):
        holds = int((length[units] - got)[begun & (group == g)].sum())
        share = float(left * weights[g] / sum(weights)) - holds if weights[g] else 0.0
        size = draws.sizes[g]
        if share <= 0 or size == 0:
            continue
        k, extra = divmod(share, size)
        rng = np.random.default_rng([new.seed, epoch, _REWEIGH, g, int(got.sum())])
        parts += [np.repeat(members, int(k)), draws.prefix(members, extra, rng, ~read)]
    fresh = np.concatenate([np.zeros(0, np.int64), *parts])
    # occurrences: kept ones (done, then begun), then the new ones; sorted by unit
    kept = np.flatnonzero(keep)
    unit = np.concatenate([units[kept], fresh])
    status = np.concatenate([np.where(begun[kept], 1, 0), np.full(len(fresh), 2)])
    order = np.lexsort((status, unit))
    at = np.empty(len(order), np.int64)
    at[order] = np.arange(len(order))
    where = dict(zip(kept.tolist(), at[: len(kept)].tolist(), strict=True))
    by_begun = np.array([where[int(i)] for i in progress.begun], np.int64)
    return Progress(
        status[order] == 0,
        by_begun,
        progress.next.copy(),
        progress.row.copy(),
        unit[order],
    )
