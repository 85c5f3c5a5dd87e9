"""The draws of a mixture's epochs: shares of the steps, whole units, one length for all epochs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from streamseq.plan.draws import MixSpec, decode_draw, encode_draw, nearest_prefix
from streamseq.plan.epoch import row_chunks
from streamseq.plan.planner import plan_epoch
from streamseq.plan.spec import PlanSpec

GROUP = st.lists(st.integers(0, 30), min_size=0, max_size=8)


@st.composite
def mixtures(draw, max_groups: int = 3, pads=("zeros", "pack", "drop", "wrap")):
    """A spec of a mixture: groups of lengths, weights (a group with weight has steps)."""
    groups = draw(st.lists(GROUP, min_size=1, max_size=max_groups))
    weights = []
    for g in groups:
        w = draw(st.sampled_from([0, 0.5, 1, 2, 3.7]))
        weights.append(float(w) if sum(g) else 0.0)
    assume(any(weights))
    lengths = np.array([n for g in groups for n in g], dtype=np.int64)
    bounds = tuple(np.cumsum([0] + [len(g) for g in groups]).tolist())
    names = tuple(f"g{i}" for i in range(len(groups)))
    pad = draw(st.sampled_from(pads))
    cap = draw(st.sampled_from([None, 1, 2, 3])) if pad == "pack" else None
    spec = PlanSpec(
        lengths,
        batch_size=draw(st.integers(1, 4)),
        tbins=draw(st.integers(1, 5)),
        pad=pad,
        shuffle=draw(st.booleans()),
        seed=draw(st.integers(0, 3)),
        segment_length=draw(st.sampled_from([None, 7])),
        mixture=MixSpec(names, bounds, tuple(weights)),
        max_streams_per_chunk=cap,
    )
    return spec


def group_steps(spec: PlanSpec, draw: np.ndarray | None) -> np.ndarray:
    """Steps each group gets from a draw."""
    source, _, length = spec.units
    units = np.arange(len(length)) if draw is None else draw
    group = spec.mixture.group_of(source[units])
    return np.bincount(group, weights=length[units], minlength=len(spec.mixture.names))


@settings(max_examples=300, deadline=None)
@given(mixtures(), st.integers(0, 50))
def test_every_group_gets_its_share_of_the_steps(spec, epoch):
    steps = group_steps(spec, spec.draws.of(epoch))
    total = steps.sum()
    w = np.array(spec.mixture.weights) / sum(spec.mixture.weights)
    longest = spec.units[2].max()
    assert (np.abs(steps - w * total) <= max(0.01 * total, longest)).all()


@settings(max_examples=300, deadline=None)
@given(mixtures(), st.integers(0, 50))
def test_a_group_is_read_in_whole_rounds_then_a_subset(spec, epoch):
    draws = spec.draws
    counts = np.bincount(
        draws.of(epoch) if draws.of(epoch) is not None else np.arange(len(spec.units[2])),
        minlength=len(spec.units[2]),
    )
    length = spec.units[2]
    for g, units in enumerate(draws.units):
        k = draws.rounds[g]
        c = counts[units][length[units] > 0]
        assert ((c == k) | (c == k + 1)).all()  # k or k+1 reads of every unit
        if draws.rests[g] == 0:
            assert (c == k).all()


@settings(max_examples=100, deadline=None)
@given(mixtures())
def test_weights_proportional_to_the_sizes_read_every_step_once(spec):
    source, _, length = spec.units
    sizes = np.bincount(spec.mixture.group_of(source), weights=length, minlength=3)
    mix = spec.mixture
    assume(sizes.sum() > 0)
    spec = spec.replace(mixture=MixSpec(mix.names, mix.bounds, tuple(sizes[: len(mix.names)])))
    assert spec.draws.fixed
    for epoch in range(3):
        assert spec.draws.of(epoch) is None  # every unit once: the plain plan


@settings(max_examples=150, deadline=None)
@given(mixtures())
def test_every_epoch_has_the_same_length_and_its_rows_fit_in_it(spec):
    lengths = {plan_epoch(spec, e).length for e in range(6)}
    assert len(lengths) == 1
    n = lengths.pop()
    cap = spec.max_streams_per_chunk if spec.pad == "pack" else None
    for e in range(6):
        plan = plan_epoch(spec, e)
        chunks = row_chunks(plan.pieces[2], plan.assignment, spec.tbins, spec.pad == "pack", cap)
        if spec.pad == "drop":
            assert chunks.min() >= n
        else:
            assert chunks.max(initial=0) <= n


@settings(max_examples=100, deadline=None)
@given(mixtures(), st.integers(0, 20))
def test_the_draw_is_a_function_of_seed_epoch_and_weights(spec, epoch):
    again = spec.replace(batch_size=spec.batch_size + 1)  # a fresh spec: nothing kept
    a, b = spec.draws.of(epoch), again.draws.of(epoch)
    assert (a is None and b is None) or (a == b).all()


def test_a_subsampled_group_gives_different_subsets_without_repeats():
    lengths = np.full(40, 5)
    spec = PlanSpec(lengths, 2, 4, mixture=MixSpec(("a", "b"), (0, 20, 40), (1.0, 3.0)))
    subsets = set()
    for epoch in range(5):
        draw = spec.draws.of(epoch)
        a = draw[draw < 20]
        assert len(a) == len(set(a.tolist())) == 10  # half of group a, no repeats
        subsets.add(tuple(a.tolist()))
        b = np.bincount(draw[draw >= 20] - 20, minlength=20)
        assert set(b.tolist()) == {1, 2}
    assert len(subsets) == 5


def test_a_group_with_weight_and_no_steps_is_refused():
    mix = MixSpec(("a", "b"), (0, 1, 3), (1.0, 1.0))
    with pytest.raises(ValueError, match="group 'b' has weight 1 but no steps"):
        _ = PlanSpec(np.array([4, 0, 0]), 1, 2, mixture=mix).draws


def test_nearest_prefix():
    assert nearest_prefix(np.array([2, 4, 9]), 0.4) == 0
    assert nearest_prefix(np.array([2, 4, 9]), 3.0) == 1  # a tie: fewer
    assert nearest_prefix(np.array([2, 4, 9]), 100) == 3


@given(st.lists(st.integers(0, 6), max_size=20))
def test_a_draw_survives_its_state_form(counts):
    draw = np.repeat(np.arange(len(counts)), counts)
    assert decode_draw(encode_draw(draw, len(counts)), len(counts), "d").tolist() == draw.tolist()


@pytest.mark.parametrize("value", [3, "not base64!", "AAAA", encode_draw(np.array([0]), 1)])
def test_a_bad_draw_is_refused_naming_the_field(value):
    with pytest.raises(ValueError, match="state\\['resumed'\\]\\['draw'\\]"):
        decode_draw(value, 4, "state['resumed']['draw']")


def shares(spec: PlanSpec) -> np.ndarray:
    """The steps every group asks for in an epoch: ``steps * w / sum(w)``."""
    mix = spec.mixture
    total = mix.steps if mix.steps is not None else int(spec.units[2].sum())
    return total * np.array(mix.weights) / sum(mix.weights)


@settings(max_examples=60, deadline=None)
@given(mixtures(), st.sampled_from([0.001, 0.01, 0.04, 0.2]))
def test_a_small_share_is_read_on_average_over_epochs(spec, small):
    """A positive weight is never starved: over epochs, a group's mean steps is its share.

    Every epoch is within a unit of the share; a group whose share is below its longest
    unit is read in some epochs only, so that the mean over epochs is the share.
    """
    mix = spec.mixture
    assume(len(mix.names) > 1 and spec.draws.sizes[0] > 0)
    rest = np.array(mix.weights[1:])
    assume(rest.sum() > 0)
    weights = (small * rest.sum() / (1 - small), *rest.tolist())  # group 0: ``small``
    spec = spec.replace(mixture=MixSpec(mix.names, mix.bounds, weights))
    want = shares(spec)
    epochs = 400
    got = np.array([group_steps(spec, spec.draws.of(e)) for e in range(epochs)])
    _, _, length = spec.units
    for g, units in enumerate(spec.draws.units):
        if not weights[g]:
            continue
        longest = int(length[units].max())
        assert (np.abs(got[:, g] - want[g]) < longest + 1e-9).all()
        if want[g] < longest:  # rounded at random: the mean is the share
            if want[g] * epochs >= 20 * longest:  # read in about 20 epochs or more
                assert (got[:, g] > 0).any()
            assert abs(got[:, g].mean() - want[g]) <= 5 * longest / np.sqrt(epochs) + 1e-9
        else:  # whole rounds, then the nearest prefix: within half a unit
            assert (np.abs(got[:, g] - want[g]) <= longest / 2 + 1e-9).all()
    n = plan_epoch(spec, 0).length  # every epoch's rows fit in one length
    cap = spec.max_streams_per_chunk if spec.pad == "pack" else None
    for e in range(8):
        plan = plan_epoch(spec, e)
        chunks = row_chunks(plan.pieces[2], plan.assignment, spec.tbins, spec.pad == "pack", cap)
        assert plan.length == n
        assert chunks.min() >= n if spec.pad == "drop" else chunks.max(initial=0) <= n


def test_a_group_below_half_its_shortest_stream_is_read_in_some_epochs():
    web, books = np.full(50, 100), np.full(4, 300)
    lengths = np.concatenate([web, books])
    mix = MixSpec(("web", "books"), (0, 50, 54), (0.98, 0.02))
    spec = PlanSpec(lengths, 4, 16, shuffle=True, mixture=mix)
    read = np.array([group_steps(spec, spec.draws.of(e))[1] for e in range(200)])
    assert (read > 0).any() and (read == 0).any()  # some epochs read a book, others not
    assert abs(read.mean() - shares(spec)[1]) < 0.35 * shares(spec)[1]  # 0.02 of 6200 steps: 124
    assert not spec.draws.fixed


def test_a_group_read_more_rounds_than_a_state_can_count_is_refused_by_name():
    """A state counts a unit's occurrences in 32 bits: an epoch reading one more often is
    an error naming the group, not a numpy error (or a count that wraps)."""
    mix = MixSpec(("huge", "tiny"), (0, 2, 3), (1.0, 1.0))
    spec = PlanSpec(np.array([2**61, 2**61, 5]), 1, 8, mixture=mix)
    with pytest.raises(ValueError, match=r"group 'tiny' .* rounds"):
        spec.draws.of(0)
    fits = PlanSpec(np.array([2**20, 5]), 1, 8, mixture=MixSpec(("a", "b"), (0, 1, 2), (1, 1)))
    assert fits.draws.rounds[1] > 10**5  # (many rounds are fine)
