"""A state is checked field by field and its parts against each other before it is trusted."""

from __future__ import annotations

import copy
import json
import re

import numpy as np
import pytest

from streamseq.plan.planner import plan_epoch
from streamseq.plan.progress import Progress
from streamseq.plan.spec import PlanSpec
from streamseq.plan.state import legacy_fingerprint, make_state, read_state, row_map

LENGTHS = np.array([5, 3, 0, 8, 2, 7, 4])


def spec_of(batch_size: int = 2, **kw) -> PlanSpec:
    return PlanSpec(LENGTHS, batch_size=batch_size, tbins=3, sources=("ndarray",) * 7, **kw)


def state_at(batches: int, batch_size: int = 2, **kw) -> dict:
    """The state of a run of ``spec_of(batch_size)`` after ``batches`` batches of epoch 1."""
    spec = spec_of(batch_size, **kw)
    return json.loads(json.dumps(make_state(spec, plan_epoch(spec, 1), batches)))


def refused(spec: PlanSpec, state: dict, *named: str) -> str:
    """read_state raises a ValueError naming every one of ``named``; its message."""
    with pytest.raises(ValueError) as error:
        read_state(spec, state)
    message = str(error.value)
    for name in named:
        assert name in message, f"{name!r} not in {message!r}"
    assert len(message) < 1000
    return message


def edited(state: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(state)
    where = out
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    return out


# --- a state of this streamseq loads, on its rows and on others ---------------------------


@pytest.mark.parametrize("rows", [1, 2, 3, 5])
@pytest.mark.parametrize("batches", [0, 1, 2, 4])
def test_an_untouched_state_loads_on_any_rows(rows, batches):
    state = state_at(batches)
    resumed = read_state(spec_of(rows), state)
    assert resumed.epoch == 1
    if rows == 2:
        assert (resumed.next_batch, resumed.rest) == (batches, None)
    else:
        assert resumed.next_batch == 0
        assert resumed.rest.to_state() == state["progress"]


def test_a_state_of_a_resumed_rest_loads_with_its_parts_checked():
    state = state_at(2)
    wide = spec_of(3)
    rest = read_state(wide, state).rest
    plan = plan_epoch(wide, 1, rest)
    again = json.loads(json.dumps(make_state(wide, plan, 1, before=2)))
    assert read_state(wide, again).before == 2
    assert read_state(spec_of(2), again).before == 3
    refused(wide, edited(again, ("resumed", "next"), [1] * len(rest.next)), "state['")
    refused(wide, edited(again, ("epoch_done",), 99), "state['epoch_done']=99")
    refused(wide, edited(again, ("epoch_done",), 0), "state['epoch_done']=0")
    assert again["resumed"]["epoch"] == 1
    refused(wide, edited(again, ("epoch",), 2), "state['resumed']['epoch']=1", "state['epoch']=2")
    refused(wide, edited(again, ("resumed", "epoch"), 0), "state['resumed']['epoch']=0")
    older = copy.deepcopy(again)
    del older["resumed"]["epoch"]  # as older states of version 3
    assert read_state(wide, older).before == 2


# --- the same rows: the progress was not looked at ----------------------------------------


def test_same_rows_a_progress_that_is_not_base64_is_refused():
    state = edited(state_at(2), ("progress", "done"), "!!!")
    refused(spec_of(2), state, "state['progress']['done']", "base64")


def test_same_rows_a_progress_of_another_position_is_refused():
    state = edited(state_at(2), ("progress",), state_at(3)["progress"])
    refused(spec_of(2), state, "state['progress']", "state['next_batch']=2", "state['epoch']=1")


def test_same_rows_a_next_batch_that_does_not_match_the_progress_is_refused():
    state = state_at(2)
    state["next_batch"], state["epoch_done"] = 3, 3
    refused(spec_of(2), state, "state['progress']", "state['next_batch']=3")


# --- other rows: next_batch was ignored and the progress trusted --------------------------


def test_other_rows_a_next_batch_that_does_not_match_the_progress_is_refused():
    state = state_at(2)
    state["next_batch"], state["epoch_done"] = 0, 0
    refused(spec_of(3), state, "state['progress']", "state['next_batch']=0")


def test_other_rows_a_progress_saying_all_done_is_refused():
    n = len(LENGTHS)
    done = Progress(np.ones(n, bool), np.zeros(0, int), np.zeros(0, int), np.zeros(0, int))
    state = edited(state_at(2), ("progress",), done.to_state())
    message = refused(spec_of(3), state, "state['progress']['done']", "state['next_batch']=2")
    assert re.search(r"units \[.*\] differ", message)


def test_other_rows_a_progress_saying_nothing_done_is_refused():
    n = len(LENGTHS)
    fresh = Progress(np.zeros(n, bool), np.zeros(0, int), np.zeros(0, int), np.zeros(0, int))
    state = edited(state_at(2), ("progress",), fresh.to_state())
    refused(spec_of(3), state, "state['progress']['done']", "state['next_batch']=2")


def test_other_rows_float_positions_are_refused():
    state = state_at(2)
    state["progress"]["next"] = [k + 0.5 for k in state["progress"]["next"]]
    refused(spec_of(3), state, "state['progress']['next'][0] must be an integer", "float")
    state["progress"]["next"] = [float(k) for k in state_at(2)["progress"]["next"]]
    refused(spec_of(3), state, "state['progress']['next'][0] must be an integer", "float")


def test_other_rows_a_shifted_position_is_refused():
    state = state_at(2)
    state["progress"]["next"] = [k + 1 for k in state["progress"]["next"]]
    refused(spec_of(3), state, "state['progress']['next']", "expected")


# --- fields of the wrong type or range: a ValueError naming the field ---------------------


@pytest.mark.parametrize(
    "path, value, named",
    [
        (("plan",), "x", "state['plan'] must be a dict"),
        (("plan",), None, "state['plan'] must be a dict"),
        (("fingerprint",), 7, "state['fingerprint'] must be a string"),
        (("fingerprint",), "0" * 16, "state['fingerprint']"),
        (("epoch",), True, "state['epoch'] must be an integer"),
        (("epoch",), 1.0, "state['epoch'] must be an integer"),
        (("epoch",), "1", "state['epoch'] must be an integer"),
        (("epoch",), -1, "state['epoch']=-1 is out of range"),
        (("epoch",), 2**64, "state['epoch']=18446744073709551616 is out of range"),
        (("next_batch",), [2], "state['next_batch'] must be an integer"),
        (("next_batch",), 10**6, "state['next_batch']=1000000 is out of range"),
        (("length",), None, "state['length'] must be an integer"),
        (("length",), 99, "state['length']=99"),
        (("batch_size",), 0, "state['batch_size']=0 is out of range"),
        (("batch_size",), 10**9, "state['batch_size']=1000000000 x"),
        (("world_size",), 2.0, "state['world_size'] must be an integer"),
        (("plan_version",), 7, "state['plan_version']=7 is unknown"),
        (("version",), True, "state['version'] must be an integer"),
        (("version",), 4, "state of version 4"),
        (("epoch_done",), "2", "state['epoch_done'] must be an integer"),
        (("epoch_done",), 3, "state['epoch_done']=3"),
        (("resumed",), 5, "state['resumed'] must be a dict"),
        (("progress",), [], "state['progress'] must be a dict"),
        (("progress", "units"), 8, "state['progress']['units']"),
        (("progress", "done"), 12, "state['progress']['done'] must be a base64 string"),
        (("progress", "done"), "AAAA", "state['progress']['done'] is not one bit per unit"),
        (("progress", "begun"), [10**30], "state['progress']['begun'][0]=<an integer of"),
        (("progress", "begun"), ["1"], "state['progress']['begun'][0] must be an integer"),
        (("progress", "begun"), "1", "state['progress']['begun'] must be a list"),
        (("progress", "begun"), [3, 3], "state['progress']['begun'] repeats"),
        (("progress", "next"), [0], "state['progress']['next'][0]=0 is out of range"),
        (("progress", "row"), [2], "state['progress']['row']"),
        (("progress", "row"), [-2], "state['progress']['row'][0]=-2 is out of range"),
        (("progress", "row"), [], "state['progress']['row'] has 0 entries"),
    ],
)
def test_a_field_of_the_wrong_type_or_range_is_named(path, value, named):
    spec = spec_of(2)
    message = refused(spec, edited(state_at(2), path, value), named)
    assert "10000000000000000000000000000" not in message  # huge values are cut short
    refused(spec_of(3), edited(state_at(2), path, value), named)


@pytest.mark.parametrize("key", sorted(state_at(0)))
def test_a_missing_field_is_named(key):
    state = state_at(2)
    del state[key]
    message = refused(spec_of(2), state)
    assert key in message


def test_a_huge_value_is_never_shown_whole():
    state = edited(state_at(2), ("epoch",), 10**5000)
    message = refused(spec_of(2), state, "state['epoch']=<an integer of 16610 bits>")
    state = edited(state_at(2), ("plan", "tbins"), 10**5000)
    message = refused(spec_of(2), state, "tbins (the state has <an integer of 16610 bits>")
    state = edited(state_at(2), ("progress", "done"), "A" * 10**6)
    message = refused(spec_of(2), state, "state['progress']['done']")
    assert len(message) < 300


def test_a_plan_that_does_not_match_its_fingerprint_is_refused():
    refused(spec_of(2), edited(state_at(2), ("plan", "extra"), 1), "state['plan']")
    state = edited(state_at(2), ("plan", "shuffle"), 0)  # not a bool
    refused(spec_of(2), state, "another plan", "shuffle (the state has 0")


def test_not_a_dict_is_refused():
    for state in (None, [1], "state", 3):
        refused(spec_of(2), state, "not a StreamLoader state")


# --- older versions ----------------------------------------------------------------------


def test_a_state_of_version_1_is_checked_against_its_plan():
    spec = spec_of(2)
    old = {"version": 1, "epoch": 1, "next_batch": 2, "fingerprint": legacy_fingerprint(spec)}
    resumed = read_state(spec, old)
    assert resumed.replan and resumed.before == 2
    assert (
        resumed.rest.to_state()
        == make_state(spec.replace(version=1), plan_epoch(spec.replace(version=1), 1), 2)[
            "progress"
        ]
    )
    refused(spec, edited(old, ("next_batch",), 99), "state['next_batch']=99 is out of range")
    refused(spec, edited(old, ("length",), 99), "state['length']=99")
    refused(spec, edited(old, ("epoch",), "1"), "state['epoch'] must be an integer")
    refused(spec_of(3), old, "version 1")


def as_version_2(state: dict) -> dict:
    """A state as streamseq wrote it before plans of version 2 (no plan_version, epoch_done)."""
    out = {k: v for k, v in state.items() if k not in ("plan_version", "epoch_done")}
    out["version"] = 2
    return out


@pytest.mark.parametrize("rows", [2, 3])
def test_a_state_of_version_2_loads_and_is_checked(rows):
    old = spec_of(2, version=1)
    state = as_version_2(state_at(2, version=1))
    resumed = read_state(spec_of(rows), state)
    assert resumed.replan and resumed.next_batch == 0 and resumed.before == 2
    assert resumed.rest.to_state() == state["progress"]
    assert read_state(old, state).next_batch == 2  # a loader planning as then
    bad = edited(state, ("progress", "next"), [k + 1 for k in state["progress"]["next"]])
    refused(spec_of(rows), bad, "state['progress']['next']", "plan version 1")


def test_a_state_of_plan_version_1_loads_on_the_same_rows_replanned():
    state = state_at(2, version=1)
    resumed = read_state(spec_of(2), state)
    assert resumed.replan and resumed.rest.to_state() == state["progress"]
    state["plan_version"] = 2
    refused(spec_of(2), state, "state['progress']", "state['plan_version']")


# --- row_map ------------------------------------------------------------------------------


def test_row_map_refuses_what_loading_refuses():
    state = edited(state_at(2), ("progress", "row"), [0])
    spec = spec_of(3)
    refused(spec, state, "state['progress']['row']")
    assert row_map(spec, read_state(spec, state_at(2))) == [1, -1, -1]


def test_a_state_of_other_sources_is_refused_naming_this_loaders_files_without_secrets():
    from streamseq.plan.identities import Identities

    lengths = np.array([6, 6])
    saving = PlanSpec(lengths, batch_size=1, tbins=2, sources=Identities.repeat("a.bin", 2))
    state = make_state(saving, plan_epoch(saving, 0), 1)
    url = "https://user:hunter2@data.example/b.bin?X-Amz-Signature=s3cr3t"
    other = PlanSpec(lengths, batch_size=1, tbins=2, sources=Identities.of([url, "c.bin"]))
    with pytest.raises(ValueError, match="this state was made by another plan") as e:
        read_state(other, state)
    text = str(e.value)
    assert "c.bin" in text and "data.example/b.bin" in text
    assert "hunter2" not in text and "s3cr3t" not in text
