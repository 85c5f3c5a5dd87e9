"""A state is read once, up front, into a checked immutable record; then only the record."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamseq.plan.draws import MixSpec
from streamseq.plan.fields import read_draw, read_progress
from streamseq.plan.planner import plan_epoch
from streamseq.plan.progress import Progress
from streamseq.plan.saved import FIELDS, SavedState
from streamseq.plan.spec import PlanSpec
from streamseq.plan.state import make_state, read_state


class Reads(dict):
    """A dict that counts the reads of every key (nested ones are Reads too).

    Not the plan's settings: they are compared whole with the loader's (as plain dicts).
    """

    def __init__(self, value: dict[str, Any], log: dict[str, int], path: str = "state"):
        nest = (dict, Reads)
        super().__init__(
            (k, Reads(v, log, f"{path}[{k!r}]") if type(v) in nest and k != "plan" else v)
            for k, v in value.items()
        )
        self._log, self._path = log, path

    def __getitem__(self, key: str) -> Any:
        where = f"{self._path}[{key!r}]"
        self._log[where] = self._log.get(where, 0) + 1
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default


def state_of(spec: PlanSpec, epoch: int, batches: int) -> dict[str, Any]:
    return json.loads(json.dumps(make_state(spec, plan_epoch(spec, epoch), batches)))


specs = st.builds(
    lambda lengths, b, t, pad, shuffle: PlanSpec(
        np.array(lengths), batch_size=b, tbins=t, pad=pad, shuffle=shuffle
    ),
    st.lists(st.integers(0, 12), min_size=1, max_size=8),
    st.integers(1, 4),
    st.integers(1, 4),
    st.sampled_from(["zeros", "pack"]),
    st.booleans(),
)


@settings(max_examples=25, deadline=None)
@given(spec=specs, epoch=st.integers(0, 3), data=st.data())
def test_a_state_is_read_into_the_record_it_holds(spec, epoch, data):
    n = plan_epoch(spec, epoch).length
    batches = data.draw(st.integers(0, n))
    state = state_of(spec, epoch, batches)
    saved = SavedState.parse(state)
    assert (saved.version, saved.epoch, saved.next_batch) == (3, epoch, batches)
    assert (saved.length, saved.epoch_done, saved.fingerprint) == (n, batches, spec.fingerprint)
    assert (saved.batch_size, saved.world_size, saved.plan_version) == (
        spec.batch_size,
        spec.world_size,
        spec.version,
    )
    progress = state["progress"]
    assert saved.progress.units == progress["units"]
    assert saved.progress.begun.tolist() == progress["begun"]
    assert saved.progress.next.tolist() == progress["next"]
    assert saved.progress.row.tolist() == progress["row"]
    assert saved.resumed is None and saved.draw is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        saved.epoch = 0  # type: ignore[misc]


@settings(max_examples=20, deadline=None)
@given(spec=specs, rows=st.integers(1, 5), data=st.data())
def test_loading_reads_every_field_of_a_state_once(spec, rows, data):
    n = plan_epoch(spec, 1).length
    state = state_of(spec, 1, data.draw(st.integers(0, n)))
    for other in (spec, spec.replace(batch_size=rows)):
        log: dict[str, int] = {}
        read_state(other, Reads(state, log))
        twice = {k: v for k, v in log.items() if v > 1}
        assert not twice, f"read more than once: {twice}"
        assert {f"state[{k!r}]" for k in FIELDS[3]} <= set(log)


def test_a_resumed_rest_of_a_mixture_is_read_once_and_reweighed():
    mix = MixSpec(("a", "b"), (0, 3, 5), (1.0, 1.0))
    spec = PlanSpec(np.array([5, 3, 4, 6, 2]), batch_size=2, tbins=2, mixture=mix)
    wide = spec.replace(batch_size=3)
    rest = read_state(wide, state_of(spec, 0, 2)).rest
    again = json.loads(json.dumps(make_state(wide, plan_epoch(wide, 0, rest), 1, before=2)))
    heavier = spec.replace(mixture=MixSpec(("a", "b"), (0, 3, 5), (1.0, 3.0)))
    for loader, weights_changed in ((wide, False), (spec, False), (heavier, True)):
        log: dict[str, int] = {}
        read_state(loader, Reads(again, log), weights_changed=weights_changed)
        twice = {k: v for k, v in log.items() if v > 1}
        assert not twice, f"read more than once: {twice}"
    saved = SavedState.parse(again, units=len(spec.units[2]))
    assert saved.resumed is not None and saved.resumed.name == "state['resumed']"


def test_a_state_of_version_1_is_read_into_the_record():
    saved = SavedState.parse({"epoch": 2, "next_batch": 5, "fingerprint": 7, "length": 9})
    assert (saved.version, saved.named_version, saved.length) == (1, False, 9)
    assert saved.fingerprint is None  # no plan's: refused when checked against one
    assert saved.progress is None and saved.batch_size is None


@pytest.mark.parametrize(
    "edit, named",
    [
        (dict(epoch=1.5), "state['epoch'] must be an integer"),
        (dict(plan=[]), "state['plan'] must be a dict"),
        (dict(batch_size=2**40), "state['batch_size']=1099511627776 x"),
        (dict(plan_version=99), "state['plan_version']=99 is unknown"),
        (dict(resumed=[1]), "state['resumed'] must be a dict"),
        (dict(progress={"units": 1}), "state['progress'] is missing"),
    ],
)
def test_a_malformed_field_is_refused_before_any_plan(edit, named):
    spec = PlanSpec(np.array([4, 3]), batch_size=1, tbins=2)
    state = {**state_of(spec, 0, 1), **edit}
    with pytest.raises(ValueError, match=named.replace("[", r"\[").replace("]", r"\]")):
        SavedState.parse(state)  # no spec, no plan: the record alone


def test_a_draw_counting_more_units_than_the_loader_has_is_refused_unread():
    from streamseq.plan.draws import encode_draw

    value = encode_draw(np.arange(1000) % 10, 1000)
    with pytest.raises(ValueError, match="at most 10 units"):
        read_draw(value, "state['resumed']['draw']", 10)
    draw, units = read_draw(value, "d", 1000)
    assert units == 1000 and draw.tolist() == sorted((np.arange(1000) % 10).tolist())


def test_progress_from_state_takes_the_progress_as_read():
    saved = read_progress({"units": 2, "done": "gA==", "begun": [1], "next": [4], "row": [0]})
    assert Progress.from_state(saved, np.array([3, 5])).begun.tolist() == [1]
    with pytest.raises(ValueError, match=r"state\['progress'\]\['units'\]"):
        Progress.from_state(saved, np.array([3, 5, 1]))


def test_a_draw_counts_as_many_occurrences_as_its_progress_has_units():
    from streamseq.plan.draws import encode_draw

    value = encode_draw(np.repeat([0, 1], [1, 500]), 2)  # 250 rounds of 2 units
    draw, units = read_draw(value, "d", 2, 501)
    assert units == 2 and len(draw) == 501
    with pytest.raises(ValueError, match="draws 501 units, its progress has 500"):
        read_draw(value, "d", 2, 500)
    with pytest.raises(ValueError, match="more than 64 rounds"):
        read_draw(value, "d", 2)  # (nothing to count it against)
