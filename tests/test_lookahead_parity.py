"""Truncated BPTT with lookahead=1 and carried state gives the loss of whole streams."""

import warnings

import numpy as np
import pytest
import torch

from streamseq import StreamLoader

LENGTHS = [23, 1, 9, 40, 0, 17, 31, 6, 12]


def model():
    torch.manual_seed(0)
    gru = torch.nn.GRU(3, 5, batch_first=True).double()
    head = torch.nn.Linear(5, 3).double()
    return gru, head


def streams():
    rng = np.random.default_rng(1)
    return [rng.normal(size=(n, 3)) for n in LENGTHS]


def whole_loss(gru, head, data):
    """Next-step squared error summed over every stream, each read at once from step 0."""
    total = torch.zeros((), dtype=torch.float64)
    for x in data:
        if len(x) < 2:
            continue
        x = torch.as_tensor(x)
        out, _ = gru(x[None, :-1])
        total = total + ((head(out[0]) - x[1:]) ** 2).sum()
    return total


def chunk_loss(gru, head, batches, h):
    """The same, batch by batch: state carried, reset per row, targets from target_mask."""
    total = torch.zeros((), dtype=torch.float64)
    for batch in batches:
        h = h.clone()
        h[:, batch.reset] = 0
        out, h = gru(batch.data[:, :-1], h)
        err = ((head(out) - batch.data[:, 1:]) ** 2).sum(-1)
        total = total + (err * batch.target_mask()).sum()
    return total, h


@pytest.mark.parametrize("workers", [0, 2])
def test_chunked_loss_with_carried_state_equals_the_whole_stream_loss(workers):
    data = streams()
    gru, head = model()
    want = whole_loss(gru, head, data)
    with torch.no_grad():
        loader = StreamLoader(data, 3, 4, lookahead=1, num_workers=workers, shuffle=True)
        got, _ = chunk_loss(gru, head, loader, torch.zeros(1, 3, 5, dtype=torch.float64))
    assert abs(got.item() - want.item()) <= 1e-10 * abs(want.item())
    with torch.no_grad():  # without look-ahead the first step of every chunk is lost
        plain = StreamLoader(data, 3, 4, num_workers=workers, shuffle=True)
        total = torch.zeros((), dtype=torch.float64)
        h = torch.zeros(1, 3, 5, dtype=torch.float64)
        for batch in plain:
            h[:, batch.reset] = 0
            out, h = gru(batch.data, h)
            err = ((head(out[:, :-1]) - batch.data[:, 1:]) ** 2).sum(-1)
            total = total + (err * batch.valid[:, 1:]).sum()
    assert total.item() < want.item() * (1 - 1e-6)


@pytest.mark.parametrize("cut", [1, 3])
def test_parity_holds_across_a_resume_on_another_batch_size_with_row_map(cut):
    data = streams()
    gru, head = model()
    want = whole_loss(gru, head, data)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run = StreamLoader(data, 2, 5, lookahead=1)
        it = iter(run)
        before = [next(it) for _ in range(cut)]
        state = run.state_dict()
        first, h = chunk_loss(gru, head, before, torch.zeros(1, 2, 5, dtype=torch.float64))
        again = StreamLoader(data, 4, 5, lookahead=1, num_workers=2)  # every begun row goes on
        again.load_state_dict(state)
        rows = again.row_map(state)
        moved = torch.zeros(1, 4, 5, dtype=torch.float64)
        for r, old in enumerate(rows):
            if old >= 0:
                moved[:, r] = h[:, old]
        rest, _ = chunk_loss(gru, head, again, moved)
    got = first + rest
    assert abs(got.item() - want.item()) <= 1e-10 * abs(want.item())
