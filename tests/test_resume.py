"""Resuming from state_dict() gives exactly the rest of the uninterrupted run."""

import copy
import json

import numpy as np
import pytest
from helpers import assume_rows_filled
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from streamseq import StreamLoader
from streamseq.testing import coded_streams, layouts

PADS = st.sampled_from(["zeros", "drop", "wrap"])


def numpy_batch(batch):
    return tuple(f.numpy().copy() for f in batch)


def assert_same(a, b):
    assert len(a) == len(b), f"{len(a)} batches != {len(b)}"
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        for f, g in zip(x, y, strict=True):
            np.testing.assert_array_equal(f, g, err_msg=f"batch {i}")


def run(loader, epochs, start=None):
    """The usual loop: (epoch, batch) pairs; ``start`` resumes from the loader's epoch."""
    out = []
    first = loader.epoch if start is not None else 0
    for epoch in range(first, epochs):
        loader.set_epoch(epoch)
        out += [(epoch, numpy_batch(b)) for b in loader]
    return out


def interrupted(loader, epochs, stop):
    """Run the usual loop until ``stop`` batches were delivered, then save the state."""
    count = 0
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        it = iter(loader)
        while count < stop:
            if next(it, None) is None:
                break
            count += 1
        else:
            return loader.state_dict()
    return loader.state_dict()


def through_json(state):
    return json.loads(json.dumps(state))


@given(layouts(), PADS, st.booleans(), st.integers(0, 3), st.data())
def test_resume_within_an_epoch(layout, pad, shuffle, epoch, data):
    assume_rows_filled(layout, pad)

    def make():
        streams = coded_streams(layout.lengths)
        kw = dict(pad=pad, shuffle=shuffle, seed=5)
        return StreamLoader(streams, layout.batch_size, layout.tbins, **kw)

    whole = make()
    whole.set_epoch(epoch)
    full = [numpy_batch(b) for b in whole]
    cut = data.draw(st.integers(0, len(full)), label="cut")
    first = make()
    first.set_epoch(epoch)
    it = iter(first)
    for _ in range(cut):
        next(it)
    state = through_json(first.state_dict())
    assert (state["epoch"], state["next_batch"], state["length"]) == (epoch, cut, len(full))
    resumed = make()
    resumed.load_state_dict(state)
    if cut == len(full):  # saved after the last batch: the next epoch, from its start
        assert (resumed.epoch, resumed.state_dict()["next_batch"]) == (epoch + 1, 0)
        whole.set_epoch(epoch + 1)
        assert_same([numpy_batch(b) for b in resumed], [numpy_batch(b) for b in whole])
        return
    assert resumed.state_dict() == state  # nothing delivered yet: the same state
    assert_same([numpy_batch(b) for b in resumed], full[cut:])


@given(layouts(max_streams=10), st.booleans(), st.integers(1, 3), st.data())
def test_resume_across_epochs(layout, shuffle, epochs, data):
    def make():
        return StreamLoader(
            coded_streams(layout.lengths), layout.batch_size, layout.tbins, shuffle=shuffle
        )

    full = run(make(), epochs)
    stop = data.draw(st.integers(0, len(full)), label="stop")
    state = through_json(interrupted(make(), epochs, stop))
    resumed = make()
    resumed.load_state_dict(state)
    rest = run(resumed, epochs, start=True)
    assert [e for e, _ in rest] == [e for e, _ in full[stop:]]
    assert_same([b for _, b in rest], [b for _, b in full[stop:]])


@settings(max_examples=6)
@given(
    layouts(max_streams=8, max_length=14, max_batch=4),
    st.booleans(),
    st.sampled_from([(0, 2), (2, 2), (2, 0)]),
    st.data(),
)
def test_resume_with_workers(layout, shuffle, workers, data):
    """The state does not depend on the workers: save with some, resume with others."""

    def make(num_workers):
        return StreamLoader(
            coded_streams(layout.lengths, (3,)),
            layout.batch_size,
            layout.tbins,
            shuffle=shuffle,
            num_workers=num_workers,
        )

    full = run(make(0), 2)
    stop = data.draw(st.integers(0, len(full)), label="stop")
    saver = make(workers[0])
    state = interrupted(saver, 2, stop)
    saver.close()
    resumed = make(workers[1])
    resumed.load_state_dict(state)
    rest = run(resumed, 2, start=True)
    assert_same([b for _, b in rest], [b for _, b in full[stop:]])


@given(layouts(max_streams=12), st.integers(2, 3), st.data())
def test_state_of_one_rank_resumes_every_rank(layout, world, data):
    def make(rank):
        streams = coded_streams(layout.lengths)
        return StreamLoader(
            streams, layout.batch_size, layout.tbins, rank=rank, world_size=world, shuffle=True
        )

    source = make(0)
    source.set_epoch(1)
    cut = data.draw(st.integers(0, len(source)), label="cut")
    it = iter(source)
    for _ in range(cut):
        next(it)
    state = source.state_dict()
    for rank in range(world):
        whole = make(rank)
        whole.set_epoch(1)
        resumed = make(rank)
        resumed.load_state_dict(state)
        expected = [numpy_batch(b) for b in whole][cut:]
        if cut == len(source):  # saved after the last batch: the next epoch from its start
            whole.set_epoch(2)
            expected = [numpy_batch(b) for b in whole]
        assert_same([numpy_batch(b) for b in resumed], expected)


def test_state_counts_delivered_batches_only():
    loader = StreamLoader(coded_streams([9, 7, 5, 8]), 2, 2, num_workers=2)
    it = iter(loader)
    assert loader.state_dict()["next_batch"] == 0
    next(it)
    next(it)
    assert loader.state_dict()["next_batch"] == 2  # workers read ahead; that is not counted
    loader.close()


def test_end_of_epoch_resumes_into_the_next():
    def make():
        return StreamLoader(coded_streams([5, 3, 6]), 2, 2, shuffle=True)

    loader = make()
    loader.set_epoch(0)
    list(loader)
    state = loader.state_dict()
    assert state["next_batch"] == state["length"] == len(loader)
    resumed = make()
    resumed.load_state_dict(state)
    assert resumed.epoch == 1 and len(list(resumed)) == len(loader)  # epoch 0 was over
    resumed = make()
    resumed.load_state_dict(state)
    rest = run(resumed, 2, start=True)  # the usual loop goes on with epoch 1
    assert [e for e, _ in rest] == [1] * len(resumed)


def test_set_epoch_keeps_the_loaded_position_only_for_its_epoch():
    def make():
        return StreamLoader(coded_streams([5, 3, 6, 4]), 2, 2, shuffle=True)

    loader = make()
    loader.set_epoch(1)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    resumed.set_epoch(1)  # the usual loop: keeps the position
    assert len(list(resumed)) == len(resumed) - 1
    other = make()
    other.load_state_dict(state)
    other.set_epoch(2)  # another epoch: starts at batch 0
    assert len(list(other)) == len(other)
    again = make()
    again.load_state_dict(state)
    list(again)
    again.set_epoch(1)  # the loaded position was used: epoch 1 starts over
    assert len(list(again)) == len(again)


def test_iterating_again_after_resuming_starts_at_zero():
    loader = StreamLoader(coded_streams([6, 4]), 1, 2)
    it = iter(loader)
    next(it)
    resumed = StreamLoader(coded_streams([6, 4]), 1, 2)
    resumed.load_state_dict(loader.state_dict())
    assert len(list(resumed)) == len(resumed) - 1
    assert len(list(resumed)) == len(resumed)


# -- states that must not load ------------------------------------------------------------

BASE = dict(lengths=[5, 3, 0, 8, 2], batch_size=2, tbins=3)


def make_loader(lengths=BASE["lengths"], batch_size=2, tbins=3, **kw):
    return StreamLoader(coded_streams(lengths), batch_size, tbins, **kw)


def saved_state(**kw):
    loader = make_loader(**kw)
    it = iter(loader)
    next(it)
    return loader.state_dict()


@pytest.mark.parametrize(
    "changed, named",
    [
        (dict(lengths=[5, 3, 0, 8, 3]), "the streams' lengths"),  # a stream of another length
        (dict(lengths=[5, 3, 0, 8]), r"number of streams \(the state has 5, this loader 4\)"),
        (dict(lengths=[5, 3, 0, 8, 2, 4]), "number of streams"),  # a stream more
        (dict(lengths=[3, 5, 0, 8, 2]), "the streams' lengths"),  # another order
        (dict(tbins=2), r"tbins \(the state has 3, this loader 2\)"),
        (dict(pad="drop"), "pad"),
        (dict(shuffle=True), "shuffle"),
        (dict(seed=1), "seed"),  # refused even without shuffle: the seed is part of the run
        (dict(segment_length=4), "segment_length"),
    ],
)
def test_state_of_another_run_is_an_error_naming_what_differs(changed, named):
    state = saved_state()
    loader = make_loader(**changed)
    with pytest.raises(ValueError, match=f"differing in (the )?{named}.*silently change the run"):
        loader.load_state_dict(state)
    assert len(list(loader)) == len(loader)  # unchanged: iterates from the start


def test_seed_matters_with_shuffle():
    state = saved_state(shuffle=True, seed=0)
    with pytest.raises(ValueError, match="seed.*silently change the run"):
        make_loader(shuffle=True, seed=1).load_state_dict(state)


def test_a_state_loads_on_any_rank_and_world_size():
    state = saved_state(rank=1, world_size=2)
    make_loader(rank=0, world_size=2).load_state_dict(state)  # another rank: fine
    for rank, world in [(0, 1), (0, 4), (3, 4)]:
        make_loader(rank=rank, world_size=world).load_state_dict(state)


def test_a_state_of_version_1_still_loads_on_its_own_rows():
    loader = make_loader()
    it = iter(loader)
    next(it)
    from streamseq.plan.state import legacy_fingerprint

    old = {"version": 1, "epoch": 0, "next_batch": 1, "length": len(loader)}
    old["fingerprint"] = legacy_fingerprint(loader.spec)
    again = make_loader(num_workers=2)
    again.load_state_dict(old)
    assert len(list(again)) == len(loader) - 1
    with pytest.raises(ValueError, match="version 1"):
        make_loader(batch_size=3).load_state_dict(old)


@pytest.mark.parametrize(
    "same", [dict(num_workers=2), dict(time_major=True), dict(method="thread", num_workers=1)]
)
def test_settings_that_do_not_change_the_batches_load(same):
    loader = make_loader(**same)
    loader.load_state_dict(saved_state())
    assert len(list(loader)) == len(loader) - 1


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s.pop("fingerprint"), "missing"),
        (lambda s: s.pop("next_batch"), "missing"),
        (lambda s: s.update(next_batch=10**6), "out of range"),
        (lambda s: s.update(next_batch=-1), "out of range"),
        (lambda s: s.update(length=99), "batches"),
        (lambda s: s.update(version=99), "version"),
    ],
)
def test_malformed_state_is_an_error_and_changes_nothing(edit, message):
    state = saved_state(shuffle=True)
    edit(state)
    loader = make_loader(shuffle=True)
    loader.set_epoch(2)
    with pytest.raises(ValueError, match=message):
        loader.load_state_dict(state)
    assert loader.epoch == 2
    assert loader.state_dict()["next_batch"] == 0
    assert len(list(loader)) == len(loader)


def test_an_unused_iterator_leaves_the_loaded_position():
    state = saved_state()  # one batch delivered
    loader = make_loader()
    loader.load_state_dict(state)
    unused = iter(loader)  # tqdm.auto makes one of these and never uses it
    assert len(list(loader)) == len(loader) - 1
    assert next(unused, None) is None  # closed by the pass after it: delivers nothing
    assert len(list(loader)) == len(loader)  # the position was used once


@pytest.mark.parametrize("workers", [0, 2])
def test_tqdm_auto_over_a_resumed_loader(workers):
    import io

    from tqdm.auto import tqdm

    state = saved_state()
    loader = make_loader(num_workers=workers)
    loader.load_state_dict(state)
    bar = tqdm(loader, initial=state["next_batch"], file=io.StringIO())
    count = sum(1 for _ in bar)
    assert count == len(loader) - 1
    assert bar.n == bar.total == len(loader)


def test_swapping_files_of_equal_length_is_refused(tmp_path):
    import functools

    paths = []
    for name in ("a", "b"):
        np.save(tmp_path / f"{name}.npy", np.arange(6))
        paths.append(tmp_path / f"{name}.npy")
    openers = [functools.partial(np.load, p, mmap_mode="r") for p in paths]
    loader = StreamLoader(openers, 1, 2)
    state = loader.state_dict()
    with pytest.raises(ValueError, match="the streams. sources"):
        StreamLoader(openers[::-1], 1, 2).load_state_dict(state)
    StreamLoader(list(openers), 1, 2).load_state_dict(state)


# --- a state is never trusted: tampered, it is refused or resumes exactly ----------------

TAMPER_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 40),
    st.sampled_from([2**31, 2**63 - 1, 2**63, 10**30, -(10**30), 10**5000]),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.lists(st.integers(-2, 20), max_size=4),
    st.dictionaries(st.text(max_size=3), st.integers(-2, 5), max_size=2),
)


def field_paths(state):
    """Every field of a state: top-level keys, nested dict keys, list elements."""
    out = []
    for key, value in state.items():
        out.append((key,))
        if isinstance(value, dict):
            for k, v in value.items():
                out.append((key, k))
                if isinstance(v, list):
                    out += [(key, k, i) for i in range(len(v))]
    return out


def tamper(state, data):
    """A deep copy of ``state`` with one field deleted, replaced or nudged; the field."""
    out = copy.deepcopy(state)
    path = data.draw(st.sampled_from(field_paths(out)), label="field")
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    old = parent[path[-1]]
    how = data.draw(st.sampled_from(["delete", "replace", "nudge"]), label="how")
    if how == "delete" and isinstance(parent, dict):
        del parent[path[-1]]
    elif how == "nudge" and isinstance(old, int) and not isinstance(old, bool):
        parent[path[-1]] = old + data.draw(st.integers(-3, 3).filter(bool), label="by")
    elif how == "nudge" and isinstance(old, str) and old:
        i = data.draw(st.integers(0, len(old) - 1), label="at")
        c = data.draw(st.sampled_from("AQgw/+="), label="char")
        parent[path[-1]] = old[:i] + c + old[i + 1 :]
    else:
        parent[path[-1]] = data.draw(TAMPER_VALUES, label="value")
    return out, path


def names_the_field(message, path):
    """A message names a field by its key (a plan setting by its own name)."""
    return (path[1] if path[0] == "plan" and len(path) > 1 else path[0]) in message


def rest_of_pass(loader, state):
    """Load ``state`` and read one pass: (data, valid, stream, step) of every batch."""
    loader.load_state_dict(state)
    return [numpy_batch((b.data, b.valid, b.stream, b.step)) for b in loader]


@settings(max_examples=300, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 12), min_size=1, max_size=7).filter(any),
    batch_size=st.integers(1, 3),
    tbins=st.integers(1, 4),
    pad=st.sampled_from(["zeros", "pack"]),
    shuffle=st.booleans(),
    epoch=st.integers(0, 2),
    data=st.data(),
)
def test_a_tampered_state_is_refused_naming_the_field_or_resumes_exactly(
    lengths, batch_size, tbins, pad, shuffle, epoch, data
):
    streams = coded_streams(lengths)
    kw = dict(pad=pad, shuffle=shuffle, seed=3)
    world = data.draw(st.integers(1, 2), label="world_size")
    hops = [((batch_size, world), data.draw(st.integers(0, 30), label="batches"))]
    if data.draw(st.booleans(), label="a rest"):  # the rest of an epoch on other rows
        rows = data.draw(st.integers(1, 4).filter(lambda r: r != batch_size * world))
        hops.append(((rows, 1), data.draw(st.integers(1, 30), label="then")))
    state = made_state(streams, tbins, kw, epoch, hops)
    rows = data.draw(st.integers(1, 4), label="loaded on")
    tampered, path = tamper(state, data)
    want = rest_of_pass(StreamLoader(streams, rows, tbins, **kw), state)
    try:
        got = rest_of_pass(StreamLoader(streams, rows, tbins, **kw), tampered)
    except ValueError as error:
        assert names_the_field(str(error), path), (path, str(error))
        assert len(str(error)) < 1000
        event("refused")
        return
    if len(got) == len(want) and all(
        np.array_equal(f, g)
        for x, y in zip(got, want, strict=True)
        for f, g in zip(x, y, strict=True)
    ):
        event(f"loaded: the same batches ({path[0]})")
        return
    # loaded, other batches: only a state that a run of other settings makes
    event(f"loaded: the state of another run ({path[0]})")
    assert tampered == another_run(streams, tbins, kw, epoch, hops, tampered, path), path


def made_state(streams, tbins, kw, epoch, hops):
    """The state after ``hops``: ``((batch_size, world_size), batches)`` each, the first
    from the start of ``epoch``, each next one resuming the last one's state."""
    state = None
    for (b, world), batches in hops:
        loader = StreamLoader(streams, b, tbins, rank=0, world_size=world, **kw)
        if state is None:
            loader.set_epoch(epoch)
        else:
            loader.load_state_dict(state)
        state = state_after(loader, min(batches, loader.progress.total - loader.progress.done))
    return state


def another_run(streams, tbins, kw, epoch, hops, tampered, path):
    """The state a run makes with the tampered epoch, batch size or world size."""
    assert path in [("epoch",), ("batch_size",), ("world_size",)], path
    value = tampered[path[0]]
    assert type(value) is int and 0 <= value <= (2**63 if path == ("epoch",) else 100)
    (b, world), _ = hops[-1]
    rows = {"batch_size": (value, world), "world_size": (b, value)}.get(path[0], (b, world))
    last = (rows, tampered["next_batch"])  # (batches of the last hop's own plan)
    if path == ("epoch",):  # (an epoch resumed on other rows names its epoch twice)
        assert tampered["resumed"] is None
        return made_state(streams, tbins, kw, value, [last])
    return made_state(streams, tbins, kw, epoch, hops[:-1] + [last])


def state_after(loader, batches):
    it = iter(loader)
    for _ in range(batches):
        next(it)
    return loader.state_dict()


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 12), min_size=1, max_size=7).filter(any),
    batch_size=st.integers(1, 3),
    tbins=st.integers(1, 4),
    pad=st.sampled_from(["zeros", "pack"]),
    shuffle=st.booleans(),
    data=st.data(),
)
def test_an_untouched_state_resumes_every_step_once_on_any_rows(
    lengths, batch_size, tbins, pad, shuffle, data
):
    streams = coded_streams(lengths)
    kw = dict(pad=pad, shuffle=shuffle, seed=5)
    run = StreamLoader(streams, batch_size, tbins, **kw)
    whole = [numpy_batch((b.data, b.valid, b.stream, b.step)) for b in run]
    stop = data.draw(st.integers(0, len(whole) - 1), label="batches")
    run.set_epoch(0)
    state = state_after(run, stop)
    same = rest_of_pass(StreamLoader(streams, batch_size, tbins, **kw), through_json(state))
    assert all(
        np.array_equal(f, g)
        for x, y in zip(same, whole[stop:], strict=True)
        for f, g in zip(x, y, strict=True)
    )
    rows = data.draw(st.integers(1, 5), label="rows")
    other = rest_of_pass(StreamLoader(streams, rows, tbins, **kw), through_json(state))
    seen = sorted(steps(whole[:stop]) + steps(other))
    assert seen == [(s, k) for s, n in enumerate(lengths) for k in range(n)]


def steps(batches):
    """(stream, step) of every valid step of ``batches``."""
    out = []
    for _, valid, stream, step in batches:
        out += zip(stream[valid].tolist(), step[valid].tolist(), strict=True)
    return out


def _base64_bits(state, fill):
    import base64

    n = state["progress"]["units"]
    bits = base64.b64encode(bytes([fill]) * -(-n // 8)).decode()
    state["progress"].update(done=bits, begun=[], next=[], row=[])


@pytest.mark.parametrize("batch_size", [2, 3])  # the same rows, other rows
@pytest.mark.parametrize(
    "edit, named",
    [
        (lambda s: s["progress"].update(done="!!!"), r"state\['progress'\]\['done'\]"),
        (lambda s: _base64_bits(s, 0xFF), r"state\['progress'\]\['done'\] does not match"),
        (lambda s: _base64_bits(s, 0), r"state\['progress'\]\['begun'\] does not match"),
        (lambda s: s.update(next_batch=0, epoch_done=0), r"state\['next_batch'\]=0"),
        (
            lambda s: s["progress"].update(next=[k + 0.5 for k in s["progress"]["next"]]),
            r"state\['progress'\]\['next'\]\[0\] must be an integer",
        ),
        (lambda s: s.update(plan="x"), r"state\['plan'\] must be a dict"),
        (lambda s: s["progress"].update(begun=[10**30]), r"begun'\]\[0\]=<an integer of 100"),
        (lambda s: s["progress"].update(begun=["1"]), r"begun'\]\[0\] must be an integer"),
        (lambda s: s.update(epoch="1"), r"state\['epoch'\] must be an integer"),
        (lambda s: s.update(batch_size=2**70), r"state\['batch_size'\]=\d{22} is out of range"),
    ],
)
def test_a_tampered_state_is_refused_by_the_loader_and_changes_nothing(batch_size, edit, named):
    state = saved_state(lengths=[9, 3, 0, 8, 2, 7], batch_size=2, tbins=2)
    next_state = copy.deepcopy(state)
    edit(next_state)
    assert next_state != state
    loader = make_loader(lengths=[9, 3, 0, 8, 2, 7], batch_size=batch_size, tbins=2)
    with pytest.raises(ValueError, match=named):
        loader.load_state_dict(next_state)
    with pytest.raises(ValueError, match=named):
        loader.row_map(next_state)
    assert loader.state_dict()["next_batch"] == 0
    assert len(list(loader)) == len(loader)


def test_row_map_and_load_read_one_state_once(monkeypatch):
    import streamseq.loader.stream_loader as facade

    calls = []
    real = facade.read_state
    monkeypatch.setattr(facade, "read_state", lambda *a: calls.append(1) or real(*a))
    streams = [np.arange(n) for n in (9, 7, 5, 3, 8)]
    run = StreamLoader(streams, batch_size=4, tbins=2, pin_memory=False)
    it = iter(run)
    next(it)
    state = run.state_dict()
    other = StreamLoader(streams, batch_size=2, tbins=2, pin_memory=False)
    rows = other.row_map(state)
    other.load_state_dict(state)
    assert other.row_map(state) == rows and len(calls) == 1
    state["next_batch"] = 2  # a state changed since is read (and checked) again
    with pytest.raises(ValueError):
        other.row_map(state)
    assert len(calls) == 2


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 30), min_size=1, max_size=7),
    rows=st.integers(1, 3),
    other=st.integers(0, 3),
    tbins=st.integers(1, 4),
    stops=st.tuples(st.integers(1, 5), st.integers(0, 5)),
    pad=st.sampled_from(["zeros", "pack"]),
)
def test_a_state_of_plan_version_2_goes_on_as_the_run_did_where_version_3_plans_alike(
    lengths, rows, other, tbins, stops, pad
):
    # a state of streamseq 0.3 names plan version 2; where version 3 plans its epoch alike
    # (a fresh epoch, or a rest that is not packed) it goes on with exactly the batches
    # the run would have read
    streams = coded_streams(lengths)
    kw = dict(pad=pad, shuffle=True, seed=4)
    run = StreamLoader(streams, rows, tbins, **kw)
    if other and other != rows:  # the run reads the rest of an epoch resumed on other rows
        first = StreamLoader(streams, other, tbins, **kw)
        it = iter(first)
        for _ in range(min(stops[0], len(first) - 1)):
            next(it)
        run.load_state_dict(first.state_dict())
    it = iter(run)
    for _ in range(min(stops[1], len(run) - 1)):
        next(it)
    state = run.state_dict()
    rest = [numpy_batch(b) for b in it]
    assume(state["resumed"] is None or pad != "pack")  # (else version 2 plans otherwise)
    old = {**copy.deepcopy(state), "plan_version": 2}
    loader = StreamLoader(streams, rows, tbins, **kw)
    loader.load_state_dict(old)
    assert_same([numpy_batch(b) for b in loader], rest)


@settings(max_examples=20, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 30), min_size=1, max_size=7),
    rows=st.integers(1, 3),
    tbins=st.integers(1, 4),
    stop=st.integers(1, 5),
    pad=st.sampled_from(["zeros", "pack"]),
    segment_length=st.sampled_from([None, 5]),
)
def test_a_state_of_plan_version_3_goes_on_as_the_run_did_where_version_4_plans_alike(
    lengths, rows, tbins, stop, pad, segment_length
):
    # version 4 plans as 3 but for packed segments: a state of version 3 elsewhere goes
    # on with exactly the batches the run would have read
    assume(pad != "pack" or segment_length is None)
    streams = coded_streams(lengths)
    kw = dict(pad=pad, shuffle=True, seed=4, segment_length=segment_length)
    run = StreamLoader(streams, rows, tbins, **kw)
    it = iter(run)
    for _ in range(min(stop, len(run) - 1)):
        next(it)
    state = run.state_dict()
    rest = [numpy_batch(b) for b in it]
    old = {**copy.deepcopy(state), "plan_version": 3}
    loader = StreamLoader(streams, rows, tbins, **kw)
    loader.load_state_dict(old)
    assert_same([numpy_batch(b) for b in loader], rest)


@pytest.mark.parametrize("rows", [1, 2])
@pytest.mark.parametrize("stop", [1, 2, 3])
def test_a_state_of_plan_version_3_with_packed_segments_loads_and_delivers_the_rest_once(
    rows, stop
):
    # a state that streamseq planned with version 3 (segments packed as any stream) loads:
    # its position is checked against its own plan, and the rest is planned again from
    # where every segment stands: every step once, each segment marked where it starts
    from streamseq.plan.planner import plan_epoch
    from streamseq.plan.state import make_state
    from streamseq.testing import check_continuity

    lengths = [5, 10, 3]
    streams = coded_streams(lengths)
    kw = dict(pad="pack", segment_length=4, shuffle=True, seed=3)
    spec = StreamLoader(streams, 1, 4, **kw).spec.replace(version=3)
    plan = plan_epoch(spec, 0)
    assert plan.length != plan_epoch(spec.replace(version=4), 0).length  # (plans differ)
    state = make_state(spec, plan, stop)
    assert state["plan_version"] == 3
    loader = StreamLoader(streams, rows, 4, **kw)
    loader.row_map(state)
    loader.load_state_dict(state)
    rest = list(loader)
    check = dict(sources=streams, pack=True, segment_length=4)
    assert check_continuity(rest, lengths, state=state, **check) == len(rest)
    assert loader.state_dict()["plan_version"] == 4
    same = StreamLoader(streams, 1, 4, **kw)  # (a version 3 state on its own rows too)
    same.load_state_dict(state)
    assert check_continuity(list(same), lengths, state=state, **check) >= 1


@pytest.mark.parametrize("pad, segment_length", [("zeros", None), ("pack", 3)])
def test_a_position_loaded_then_another_epoch_set_reads_that_epoch_whole(pad, segment_length):
    # a state of another batch size loaded, then set_epoch of another epoch: the position
    # is left and the pass reads the epoch set from its start (set_epoch of the state's
    # own epoch keeps it)
    from streamseq.testing import check_continuity

    lengths = [7, 3, 9, 4, 6]
    streams = coded_streams(lengths)
    kw = dict(pad=pad, shuffle=True, seed=3, segment_length=segment_length)
    other = StreamLoader(streams, 3, 2, **kw)
    it = iter(other)
    for _ in range(3):
        next(it)
    state = other.state_dict()
    check = dict(sources=streams, pack=pad == "pack", segment_length=segment_length)
    loader = StreamLoader(streams, 4, 2, **kw)
    loader.load_state_dict(state)
    loader.set_epoch(1)
    assert check_continuity(list(loader), lengths, **check) == len(loader)
    again = StreamLoader(streams, 4, 2, **kw)
    again.load_state_dict(state)
    again.set_epoch(0)  # (the state's epoch: its position is kept)
    assert check_continuity(list(again), lengths, state=state, **check) == len(again)
