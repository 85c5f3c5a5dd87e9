"""A batch the user holds never changes (design invariant 8), whatever the loader does next.

Slots of shared memory are handed back to the workers only once nothing holds them: no
tensor, array or view of a delivered batch, in this process or in a forked child.
"""

import os

import numpy as np
import pytest
import torch

from streamseq import StreamLoader

pytestmark = pytest.mark.timeout(120)


def token_streams(count=12, low=300, high=600, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 1000, n, dtype=np.int64) for n in rng.integers(low, high, count)]


def dict_streams(count=12, seed=0):
    return [
        {"x": s, "y": (s * 2).astype(np.float32)[:, None].repeat(3, 1)}
        for s in token_streams(count, seed=seed)
    ]


def snapshot(batch):
    """A deep copy of ``batch`` (tensors cloned, dicts copied)."""
    return [
        {k: v.clone() for k, v in f.items()} if isinstance(f, dict) else f.clone() for f in batch
    ]


def same(batch, copy):
    for f, g in zip(batch, copy, strict=True):
        if isinstance(f, dict):
            if f.keys() != g.keys() or not all(torch.equal(f[k], g[k]) for k in f):
                return False
        elif not torch.equal(f, g):
            return False
    return True


@pytest.mark.parametrize("data", [token_streams, dict_streams])
def test_batches_of_a_pass_held_through_the_next_passes_never_change(data):
    loader = StreamLoader(data(), 4, 8, num_workers=2, shuffle=True)
    e0 = list(loader)
    copies = [snapshot(b) for b in e0]
    views = [np.asarray(b.data if not isinstance(b.data, dict) else b.data["x"]) for b in e0]
    view_copies = [v.copy() for v in views]
    e1 = list(loader)
    list(loader)
    changed = [i for i, (b, c) in enumerate(zip(e0, copies, strict=True)) if not same(b, c)]
    assert changed == [], f"{len(changed)} of {len(e0)} batches held changed"
    assert all(np.array_equal(v, c) for v, c in zip(views, view_copies, strict=True))
    assert len(e1) == len(e0)
    loader.close()


def test_a_first_batch_kept_aside_never_changes():
    loader = StreamLoader(token_streams(), 4, 8, num_workers=2, shuffle=True)
    sample = next(iter(loader))
    kept = sample.data[1:3].numpy()  # a slice, as an array
    copy = snapshot(sample), kept.copy()
    for _ in range(3):
        for _ in loader:
            pass
    assert same(sample, copy[0]) and np.array_equal(kept, copy[1])
    loader.close()


@pytest.mark.parametrize("other_batch_size", [4, 2])
def test_batches_held_across_a_resume_of_persistent_workers_never_change(other_batch_size):
    loader = StreamLoader(
        token_streams(), 4, 8, num_workers=2, shuffle=True, persistent_workers=True
    )
    other = StreamLoader(token_streams(), other_batch_size, 8, shuffle=True)
    it = iter(other)
    for _ in range(5):
        next(it)
    state = other.state_dict()  # the epoch planned again from there: same blocks, new rows
    it = iter(loader)
    held = [next(it) for _ in range(5)]
    copies = [snapshot(b) for b in held]
    loader.load_state_dict(state)
    again = list(loader)
    assert [same(b, c) for b, c in zip(held, copies, strict=True)] == [True] * 5
    resumed = StreamLoader(token_streams(), 4, 8, shuffle=True)
    resumed.load_state_dict(state)
    assert all(same(a, snapshot(b)) for a, b in zip(again, resumed, strict=True))
    loader.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_batch_held_by_a_forked_child_never_changes_when_the_parent_drops_it():
    loader = StreamLoader(token_streams(), 4, 8, num_workers=2, shuffle=True)
    it = iter(loader)
    batch = next(it)
    expected = batch.data.clone().numpy().tobytes()
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: holds batch, waits until the parent has reused its memory
        code = 1
        try:
            os.close(ready_r)
            os.close(go_w)
            os.write(ready_w, b"x")
            os.read(go_r, 1)
            code = 0 if batch.data.numpy().tobytes() == expected else 3
        finally:
            os._exit(code)
    os.close(ready_w)
    os.close(go_r)
    os.read(ready_r, 1)
    del batch
    for _ in it:  # the parent reads on, then reads two more passes
        pass
    for _ in range(2):
        for _ in loader:
            pass
    os.write(go_w, b"x")
    _, status = os.waitpid(pid, 0)
    os.close(ready_r)
    os.close(go_w)
    loader.close()
    assert os.waitstatus_to_exitcode(status) == 0, "the child's batch changed"


def test_batches_held_while_the_next_epoch_splits_the_rows_otherwise_never_change():
    """Epoch 0 gives the workers 3 + 2 rows, epoch 1 2 + 3: a slot of epoch 0 still held is
    never joined by the workers of epoch 1 (their parties are new)."""
    lengths = [183, 120, 192, 148, 119, 102, 44, 139, 159, 140]
    streams = [
        np.arange(n * 2, dtype=np.int32).reshape(n, 2) + 1000 * i for i, n in enumerate(lengths)
    ]
    loader = StreamLoader(streams, 5, 4, num_workers=2, shuffle=True, seed=24)
    try:
        e0 = list(loader)
        copies = [snapshot(b) for b in e0]
        list(loader)  # epoch 1, its rows split otherwise
        changed = [i for i, (b, c) in enumerate(zip(e0, copies, strict=True)) if not same(b, c)]
        assert changed == [], f"{len(changed)} of {len(e0)} batches held changed"
    finally:
        loader.close()


def wide_streams(count=12, seed=0):
    """Streams of 16 KiB a step: a batch of them read here is over memory kept between
    batches (:func:`streamseq.gather.writer.new_array`)."""
    return [s[:, None] + np.arange(2048) for s in token_streams(count, 20, 60, seed)]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("source", ["arrays", "store"])
def test_batches_read_here_over_kept_memory_held_through_passes_and_a_fork_never_change(
    source, tmp_path
):
    """Batches written in this process (``num_workers=0``, or a store's whatever the
    workers), each of its own memory, kept for the next batch only once nothing holds it:
    batches, tensors, numpy views, storages, held here and by a forked child, never change
    while the loader reads on."""
    from streamseq import materialize

    streams = wide_streams()
    if source == "store":
        streams = materialize(streams, tmp_path / "s")
    workers = 0 if source == "arrays" else 2
    loader = StreamLoader(streams, 4, 4, num_workers=workers, shuffle=True)
    held, copies = [], []
    for batch in loader:  # (each copied as it comes)
        held.append(batch)
        copies.append(snapshot(batch))
    assert np.asarray(held[0].data).nbytes >= 64 << 10
    views = [held[0].data.numpy()[1:], held[1].data[2].numpy(), held[2].data.untyped_storage()]
    copies = copies, [bytes(memoryview(np.asarray(v))) for v in views[:2]]
    storage = bytes(views[2])
    pid = os.fork()
    if pid == 0:  # the child: its own batches, then the parent's held ones
        code = 1
        try:
            for _ in range(2):
                for _ in loader:
                    pass
            code = 0 if all(same(b, c) for b, c in zip(held, copies[0], strict=True)) else 3
        finally:
            os._exit(code)
    del held[3:]  # (their memory kept: the next batches take it)
    for _ in range(3):
        for _ in loader:
            pass
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "a batch held by the child changed"
    assert all(same(b, c) for b, c in zip(held, copies[0][:3], strict=True))
    assert [bytes(memoryview(np.asarray(v))) for v in views[:2]] == copies[1]
    assert bytes(views[2]) == storage
    loader.close()
