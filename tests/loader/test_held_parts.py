"""No part of a batch a user holds is ever written again (design invariant 8).

Each kind of holder a user has (the batch, a tensor, a torch view, ``.numpy()``, a numpy
view or slice, a dict of the fields) is held across the next batches and passes of a
store read in the calling process and by workers, and its bytes checked.
"""

import gc

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from streamseq import StreamLoader
from streamseq.store import materialize

pytestmark = pytest.mark.timeout(120)

ROWS, TBINS = 3, 4


def frames(count=7, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 255, (n, 4, 3), dtype=np.uint8) for n in rng.integers(5, 30, count)]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return materialize(frames(), str(tmp_path_factory.mktemp("store")))


def hold(batch, kind):
    """What a user keeps of ``batch``: the batch itself, or one part of it."""
    if kind == "batch":
        return batch
    if kind == "tensor":
        return batch.data
    if kind == "torch view":
        return batch.data[1:, 2:]
    if kind == "numpy":
        return batch.data.numpy()
    if kind == "numpy slice":
        return batch.data.numpy()[:, 1]
    if kind == "asarray":
        return np.asarray(batch.step)
    if kind == "fields":
        return batch._asdict()
    if kind == "reset":
        return batch.reset
    if kind == "valid view":
        return batch.valid.view(torch.uint8)
    raise AssertionError(kind)


KINDS = [
    "batch",
    "tensor",
    "torch view",
    "numpy",
    "numpy slice",
    "asarray",
    "fields",
    "reset",
    "valid view",
]


def leaves(held):
    if isinstance(held, dict):
        return list(held.values())
    if isinstance(held, tuple):
        return list(held)
    return [held]


def copy_of(held):
    return [x.clone() if isinstance(x, torch.Tensor) else np.array(x) for x in leaves(held)]


def unchanged(held, copy):
    return all(
        torch.equal(x, c) if isinstance(x, torch.Tensor) else np.array_equal(x, c)
        for x, c in zip(leaves(held), copy, strict=True)
    )


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", KINDS)
def test_a_part_of_a_batch_held_never_changes(store, workers, kind):
    loader = StreamLoader(store, ROWS, TBINS, num_workers=workers, shuffle=True)
    held = []
    for batch in loader:  # every third batch held, the others dropped at once
        if len(held) < 3 and batch.step[0, 0] % 3 == 0:
            part = hold(batch, kind)
            held.append((part, copy_of(part)))
    assert held
    for _ in range(2):  # more passes, after the batches dropped
        for _ in loader:
            pass
    gc.collect()
    assert all(unchanged(h, c) for h, c in held)


def test_batches_all_held_are_all_distinct(store):
    loader = StreamLoader(store, ROWS, TBINS)
    batches = list(loader)
    copies = [copy_of(b) for b in batches]
    list(loader)
    assert len({b.data.data_ptr() for b in batches}) == len(batches)
    assert all(unchanged(b, c) for b, c in zip(batches, copies, strict=True))


@settings(max_examples=20, deadline=None)
@given(
    plan=st.lists(st.tuples(st.booleans(), st.sampled_from(KINDS), st.integers(0, 3)), min_size=1),
    workers=st.sampled_from([0, 2]),
)
def test_whatever_is_held_and_dropped_what_is_held_never_changes(store, plan, workers):
    """Batches held or dropped in any order, across passes: what is held stays as it was."""
    loader = StreamLoader(store, ROWS, TBINS, num_workers=workers, shuffle=True, seed=1)
    held = []
    it = iter(loader)
    for keep, kind, drop in plan:
        batch = next(it, None)
        if batch is None:
            it = iter(loader)
            continue
        if keep:
            part = hold(batch, kind)
            held.append((part, copy_of(part)))
        del held[: drop if len(held) > drop + 1 else 0]  # the oldest let go
        del batch
        assert all(unchanged(h, c) for h, c in held)
    for _ in it:
        pass
    assert all(unchanged(h, c) for h, c in held)


@pytest.mark.filterwarnings("ignore:CUDA is not available")
@pytest.mark.parametrize("option", ["pin_memory", "time_major"])
def test_pinned_or_time_major_batches_held_equal_the_plain_ones(store, option):
    """Pinned (unpinned without CUDA) or time-major batches held across passes."""
    plain = [copy_of(b) for b in StreamLoader(store, ROWS, TBINS, shuffle=True)]
    loader = StreamLoader(store, ROWS, TBINS, shuffle=True, **{option: True})
    held = list(loader)
    for _ in range(2):
        for _ in loader:
            pass
    for b, want in zip(held, plain, strict=True):
        got = copy_of(b)
        if option == "time_major":  # [T, B, ...] back to [B, T, ...]
            got = [got[0].transpose(0, 1), got[1], *(g.transpose(0, 1) for g in got[2:])]
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
