"""Pinned delivery and the move to a CUDA device, on a machine that has one.

Without CUDA these are skipped (the paths that degrade are tested in ``test_pin.py``); on a
machine with a GPU they check what a training loop relies on: every field page-locked, the
batch on the device equal to the one read without pinning, and held batches kept.
"""

import hashlib

import numpy as np
import pytest
import torch

import streamseq
from streamseq._tree import leaves
from streamseq.testing import check_continuity, coded_streams
from tests.helpers import as_numpy, assert_same
from tests.io.media import write_video

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

LENGTHS = [37, 5, 64, 12, 90, 3, 41]


def _digest(batch):
    return [
        hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest() for x in as_numpy([batch])[0]
    ]


def _pinned(batch):
    return all(x.is_pinned() for x in leaves(tuple(batch)) if isinstance(x, torch.Tensor))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("lookahead", [0, 1])
def test_pinned_batches_equal_unpinned_ones_and_reach_the_device_whole(workers, lookahead):
    streams = coded_streams(LENGTHS, shape=(3,))
    plain = list(streamseq.StreamLoader(streams, 4, 8, lookahead=lookahead))
    loader = streamseq.StreamLoader(
        streams, 4, 8, num_workers=workers, pin_memory=True, lookahead=lookahead, timeout=60
    )
    pinned = list(loader)
    assert all(_pinned(b) for b in pinned)
    assert_same(plain, pinned)
    on_device = [b.to("cuda", non_blocking=True) for b in pinned]
    torch.cuda.synchronize()
    assert all(b.data.is_cuda and b.reset.is_cuda for b in on_device)
    assert_same(plain, [b.to("cpu") for b in on_device])
    check_continuity(pinned, LENGTHS, sources=streams, lookahead=lookahead)


@pytest.mark.parametrize("workers", [0, 2])
def test_held_pinned_batches_keep_their_bytes_across_passes(workers):
    streams = coded_streams(LENGTHS, shape=(2,))
    loader = streamseq.StreamLoader(
        streams, 3, 5, num_workers=workers, pin_memory=True, timeout=60, persistent_workers=True
    )
    held = list(loader)
    before = [_digest(b) for b in held]
    on_device = [b.to("cuda", non_blocking=True) for b in held]
    for _ in range(2):
        for b in loader:  # later passes must not write into the batches held
            b.to("cuda", non_blocking=True)
    torch.cuda.synchronize()
    assert [_digest(b) for b in held] == before
    assert_same(held, [b.to("cpu") for b in on_device])
    loader.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_video_and_a_store_are_delivered_pinned_and_equal(tmp_path, workers):
    paths = [str(write_video(tmp_path / f"{i}.mp4", n=n)) for i, n in enumerate([30, 17, 44])]
    clips = [streamseq.io.video(p) for p in paths]
    plain = list(streamseq.StreamLoader(clips, 2, 6))
    stored = streamseq.materialize(clips, str(tmp_path / "store"))
    for streams in (clips, stored):
        loader = streamseq.StreamLoader(
            streams, 2, 6, num_workers=workers, pin_memory=True, timeout=60
        )
        got = list(loader)
        assert all(_pinned(b) for b in got)
        assert_same(plain, got)
        frames = torch.cat([b.data.to("cuda", non_blocking=True).flatten() for b in got])
        torch.cuda.synchronize()
        assert (
            frames.cpu().numpy().tobytes()
            == np.concatenate([b.data.numpy().ravel() for b in plain]).tobytes()
        )
