"""The selective state-space example: it trains, and its chunked loss is the whole-stream loss."""

import warnings

import numpy as np
import pytest
import torch
from runner import load

from streamseq import StreamLoader

LENGTHS = [23, 1, 9, 40, 0, 17, 31, 6, 12]


@pytest.fixture(scope="module")
def example():
    return load("train_ssm")


def model(module):
    torch.manual_seed(0)
    return module.SelectiveSSM(1, 1, width=4, states=3).double()


def streams():
    rng = np.random.default_rng(1)
    return [rng.normal(size=(n, 1)) for n in LENGTHS]


def whole_loss(ssm, data):
    """Next-step squared error summed over every stream, each scanned at once from step 0."""
    total = torch.zeros((), dtype=torch.float64)
    for x in data:
        if len(x) < 2:
            continue
        x = torch.as_tensor(x)[None]
        out, _ = ssm(x[:, :-1], ssm.initial_state(1))
        total = total + ((out - x[:, 1:]) ** 2).sum()
    return total


def chunked(module, ssm, batches, h):
    """The example's loss over batches, the state carried from ``h``; the last state."""
    total = torch.zeros((), dtype=torch.float64)
    for batch in batches:
        if not batch.valid.any():
            continue
        loss, _, _, h = module.chunk_loss(ssm, batch, h)
        total = total + loss
    return total, h


def close(got, want):
    return abs(got.item() - want.item()) <= 1e-10 * abs(want.item())


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("pad", ["zeros", "pack"])
def test_chunked_loss_with_carried_state_equals_the_whole_stream_loss(example, workers, pad):
    data = streams()
    ssm = model(example)
    want = whole_loss(ssm, data)
    kw = dict(lookahead=1, num_workers=workers, shuffle=True, pad=pad)
    with torch.no_grad():
        got, _ = chunked(example, ssm, StreamLoader(data, 3, 4, **kw), ssm.initial_state(3))
        assert close(got, want), (got.item(), want.item())
        # without carrying the state (zeroed every batch) the loss is another
        kept = StreamLoader(data, 3, 4, **kw)
        fresh = sum(example.chunk_loss(ssm, b, ssm.initial_state(3))[0] for b in kept)
    assert not close(fresh, want)


@pytest.mark.parametrize("pad", ["zeros", "pack"])
@pytest.mark.parametrize("cut", [1, 3])
def test_parity_holds_across_a_resume_on_another_batch_size_with_row_map(example, pad, cut):
    data = streams()
    ssm = model(example)
    want = whole_loss(ssm, data)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run = StreamLoader(data, 2, 5, lookahead=1, pad=pad)
        it = iter(run)
        before = [next(it) for _ in range(cut)]
        state = run.state_dict()
        first, h = chunked(example, ssm, before, ssm.initial_state(2))
        again = StreamLoader(data, 4, 5, lookahead=1, pad=pad, num_workers=2)
        again.load_state_dict(state)
        moved = ssm.initial_state(4)
        for r, old in enumerate(again.row_map(state)):
            if old >= 0:  # a row that goes on with a begun stream: its state
                moved[r] = h[old]
        rest, _ = chunked(example, ssm, again, moved)
    assert close(first + rest, want), ((first + rest).item(), want.item())


def test_the_example_reads_every_step_and_predicts_all_but_the_firsts(example, capsys):
    result = example.main(["--epochs", "3"])
    streams, losses = result["streams"], result["losses"]
    steps = sum(len(x) for x in streams)
    for inputs, targets, _ in result["counts"]:
        assert (inputs, targets) == (steps, steps - len(streams))
    out = capsys.readouterr().out
    assert f"{steps} steps read as inputs, {steps - len(streams)} used as targets" in out
    assert losses[-1] < 0.6 * losses[0]


def test_a_batch_of_padding_alone_is_skipped_and_counted_nowhere(example):
    rng = np.random.default_rng(0)
    data = [rng.normal(size=(n, 1)) for n in (40, 30, 6, 5)]
    # rank 1 of 2 gets the two short streams on its 2 rows: its last batches are padding
    loader = StreamLoader(data, 2, 4, lookahead=1, rank=1, world_size=2, pad="zeros")
    padding = sum(1 for b in loader if not b.valid.any())
    with_targets = sum(1 for b in loader if b.target_mask().any())
    assert padding >= 2 and with_targets + padding == len(loader)
    ssm = model(example)
    adam = torch.optim.Adam(ssm.parameters(), lr=0.01)
    total, inputs, targets, skipped = example.train_epoch(ssm, adam, loader, 2)
    assert skipped == padding
    assert (inputs, targets) == (6 + 5, 5 + 4)  # rank 1's streams: steps, and targets
    steps = {int(s["step"]) for s in adam.state.values()}
    assert steps == {with_targets}  # one optimizer step a batch with targets
