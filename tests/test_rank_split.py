"""Ranks take disjoint rows of one global plan and the same number of batches."""

import numpy as np
import pytest
import torch
import torch.distributed as dist
from helpers import assume_rows_filled
from hypothesis import given, settings
from hypothesis import strategies as st

from streamseq import StreamLoader
from streamseq.loader import resolve_rank
from streamseq.testing import check_continuity, coded_streams, layouts

PADS = st.sampled_from(["zeros", "drop", "wrap"])


def numpy_batches(loader):
    return [tuple(f.numpy() for f in b) for b in loader]


def rank_loaders(layout, world, **kw):
    streams = coded_streams(layout.lengths)
    return streams, [
        StreamLoader(streams, layout.batch_size, layout.tbins, rank=r, world_size=world, **kw)
        for r in range(world)
    ]


@given(layouts(max_streams=14), st.integers(1, 4), PADS, st.booleans(), st.integers(0, 3))
def test_ranks_are_slices_of_the_global_plan(layout, world, pad, shuffle, epoch):
    assume_rows_filled(layout, pad, world)
    kw = dict(pad=pad, shuffle=shuffle, seed=3)
    streams, loaders = rank_loaders(layout, world, **kw)
    whole = StreamLoader(streams, layout.batch_size * world, layout.tbins, **kw)
    for loader in [whole, *loaders]:
        loader.set_epoch(epoch)
    lengths = {len(loader) for loader in loaders}
    assert lengths == {len(whole)}, "every rank gets as many batches as the global plan"
    per_rank = [numpy_batches(loader) for loader in loaders]
    for i, batch in enumerate(numpy_batches(whole)):
        for field, parts in zip(batch, zip(*(b[i] for b in per_rank), strict=True), strict=True):
            np.testing.assert_array_equal(field, np.concatenate(parts))


@given(layouts(max_streams=14), st.integers(1, 4), st.booleans())
def test_disjoint_streams_whole_on_their_rank(layout, world, shuffle):
    streams, loaders = rank_loaders(layout, world, shuffle=shuffle)
    seen = []
    for loader in loaders:
        n = len(loader)  # (after the pass: the next epoch's)
        batches = list(loader)
        assert len(batches) == n
        mine = {int(s) for b in batches for s in b.stream[b.valid].unique()}
        seen.append(mine)
        # each rank delivers its own streams whole, in order, within one row
        own = [n if s in mine else 0 for s, n in enumerate(layout.lengths)]
        if any(own):
            check_continuity(batches, own, sources=streams)
    for a in range(world):
        for b in range(a + 1, world):
            assert not seen[a] & seen[b], f"ranks {a} and {b} share streams"
    assert set().union(*seen) == {s for s, n in enumerate(layout.lengths) if n > 0}


@settings(max_examples=5)
@given(layouts(max_streams=8, max_length=12, max_batch=4), st.integers(2, 3))
def test_rank_batches_do_not_depend_on_workers(layout, world):
    _, loaders = rank_loaders(layout, world)
    _, with_workers = rank_loaders(layout, world, num_workers=2)
    for a, b in zip(loaders, with_workers, strict=True):
        x, y = numpy_batches(a), numpy_batches(b)
        assert len(x) == len(y)
        for p, q in zip(x, y, strict=True):
            for f, g in zip(p, q, strict=True):
                np.testing.assert_array_equal(f, g)


def test_more_ranks_than_streams_pad_to_the_same_length():
    streams = [np.arange(1, 8)]
    loaders = [StreamLoader(streams, 1, 3, rank=r, world_size=4) for r in range(4)]
    assert [len(loader) for loader in loaders] == [3, 3, 3, 3]
    batches = [list(loader) for loader in loaders]
    assert [int(b[0].valid.sum()) for b in batches] == [3, 0, 0, 0]
    assert all(not b.valid.any() for bs in batches[1:] for b in bs)


def test_same_fingerprint_on_every_rank():
    streams = coded_streams([4, 7, 2])
    prints = {StreamLoader(streams, 1, 2, rank=r, world_size=3).fingerprint for r in range(3)}
    assert len(prints) == 1
    # the rows are not in it: a state loads on another world size (elastic resume)
    assert StreamLoader(streams, 1, 2, rank=0, world_size=2).fingerprint in prints
    assert StreamLoader(streams, 1, 3, rank=0, world_size=2).fingerprint not in prints


def test_resolve_rank_from_torch_distributed(monkeypatch):
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda: 2)
    monkeypatch.setattr(dist, "get_world_size", lambda: 3)
    assert resolve_rank(None, None) == (2, 3)
    assert resolve_rank(0, 1) == (0, 1)  # given explicitly: torch.distributed is not asked
    loader = StreamLoader(coded_streams([3, 4, 5, 6]), 1, 2)
    assert (loader.rank, loader.world_size) == (2, 3)


def test_resolve_rank_from_a_real_process_group(tmp_path):
    if not dist.is_gloo_available():
        pytest.skip("needs gloo")
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        loader = StreamLoader([np.arange(4)], 1, 2)
        assert (loader.rank, loader.world_size) == (0, 1)
        assert isinstance(next(iter(loader)).data, torch.Tensor)
    finally:
        dist.destroy_process_group()
    assert resolve_rank(None, None) == (0, 1)


@pytest.mark.parametrize(
    "rank, world, message",
    [(None, 2, "both"), (1, None, "both"), (2, 2, "rank"), (-1, 2, "rank"), (0, 0, "rank")],
)
def test_bad_ranks(rank, world, message):
    with pytest.raises(ValueError, match=message):
        resolve_rank(rank, world)
