"""After a resume on other rows, ``reset`` agrees with ``row_map``: rows that go on keep state."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamseq import StreamLoader


def _last_steps(batches: list) -> dict[int, tuple[int, int]]:
    """For each global row of a one-rank run, (stream, step) of its last valid step."""
    last = {}
    for b in batches:
        for r in range(b.valid.shape[0]):
            v = b.valid[r].numpy()
            if v.any():
                t = int(np.flatnonzero(v)[-1])
                last[r] = (int(b.stream[r, t]), int(b.step[r, t]))
    return last


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lengths=st.lists(st.integers(1, 40), min_size=1, max_size=9),
    old_rows=st.integers(1, 4),
    new_rows=st.integers(1, 5),
    tbins=st.integers(1, 6),
    stop=st.integers(1, 6),
    pad=st.sampled_from(["zeros", "pack"]),
    shuffle=st.booleans(),
)
def test_first_batch_resets_exactly_the_rows_that_start_afresh(
    lengths, old_rows, new_rows, tbins, stop, pad, shuffle
):
    streams = [np.arange(n) + 1000 * i for i, n in enumerate(lengths)]
    kw = dict(pad=pad, shuffle=shuffle, seed=2)
    run = StreamLoader(streams, old_rows, tbins, **kw)
    it, seen = iter(run), []
    for _ in range(min(stop, len(run) - 1)):
        seen.append(next(it))
    state = run.state_dict()
    last = _last_steps(seen)
    loader = StreamLoader(streams, new_rows, tbins, **kw)
    rows = loader.row_map(state)
    loader.load_state_dict(state)
    batches = list(loader)
    if not batches:
        return
    first = batches[0]
    for r, old in enumerate(rows):
        if not first.valid[r, 0]:
            continue
        at = (int(first.stream[r, 0]), int(first.step[r, 0]))
        goes_on = old in last and at == (last[old][0], last[old][1] + 1)
        # a row goes on with the stream its old row was reading, at its next step, and
        # keeps its state; any other row starts afresh (a stream from its first step, or
        # a begun one whose state has no row to move to)
        assert bool(first.reset[r]) != goes_on, (rows, r, at, last)
        if old >= 0 and old_rows != new_rows:
            assert goes_on
    for b in batches[1:]:  # later batches reset where a row starts a piece, as ever
        starts = b.valid[:, 0] & ((b.step[:, 0] == 0) | ~_same(batches, b))
        assert (b.reset == starts).all() or pad == "pack"


def _same(batches: list, b) -> np.ndarray:
    """Rows of ``b`` that go on with the stream the row read at the end of the batch before."""
    k = next(i for i, x in enumerate(batches) if x is b)
    prev = batches[k - 1]
    t = prev.valid.shape[1] - 1
    return (prev.stream[:, t] == b.stream[:, 0]) & prev.valid[:, t]


def test_rows_that_go_on_have_no_reset_with_workers():
    streams = [np.arange(n) for n in (30, 50, 70, 40, 60, 20, 90)]
    run = StreamLoader(streams, 3, 10, shuffle=True, seed=1)
    it = iter(run)
    for _ in range(3):
        next(it)
    state = run.state_dict()
    loader = StreamLoader(streams, 2, 10, shuffle=True, seed=1, num_workers=2)
    rows = loader.row_map(state)
    loader.load_state_dict(state)
    first = next(iter(loader))
    assert rows == [1, 2]
    assert first.reset.tolist() == [False, False]
    assert first.step[:, 0].tolist() == [30, 30]


def _hidden_per_step(batches, h, cell, at):
    """Run ``cell`` over the batches, as a model does with ``h[reset] = 0``: record the
    hidden state after every valid (stream, step) in ``at``; returns the last ``h``."""
    for b in batches:
        h = h.clone()
        h[b.reset] = 0
        for t in range(b.valid.shape[1]):
            x = b.data[:, t, None].to(torch.float64)
            v = b.valid[:, t, None]
            h = torch.where(v, cell(x, h), h)  # padding leaves the state as it is
            for r in torch.nonzero(b.valid[:, t]).flatten().tolist():
                at[(int(b.stream[r, t]), int(b.step[r, t]))] = h[r].clone()
    return h


def test_a_moved_hidden_state_goes_on_as_if_the_run_had_not_stopped():
    torch.manual_seed(0)
    cell = torch.nn.GRUCell(1, 5).double()
    streams = [np.sin(np.arange(n) / (3 + i)) for i, n in enumerate((30, 50, 70, 40, 60, 20))]
    kw = dict(shuffle=True, seed=1)
    whole, stopped = {}, {}
    with torch.no_grad():
        _hidden_per_step(
            StreamLoader(streams, 3, 10, **kw), torch.zeros(3, 5, dtype=torch.float64), cell, whole
        )
        run = StreamLoader(streams, 3, 10, **kw)
        it = iter(run)
        h = _hidden_per_step(
            [next(it) for _ in range(3)], torch.zeros(3, 5, dtype=torch.float64), cell, stopped
        )
        state = run.state_dict()
        loader = StreamLoader(streams, 2, 10, **kw)
        rows = torch.tensor(loader.row_map(state))
        loader.load_state_dict(state)
        moved = torch.where((rows >= 0)[:, None], h[rows.clamp(min=0)], 0.0)
        resumed = {}
        _hidden_per_step(loader, moved, cell, resumed)
    assert (rows >= 0).sum() == 2
    assert set(stopped) | set(resumed) == set(whole)
    goes_on = {s for s, k in resumed if k > 0 and (s, k - 1) in stopped}
    assert goes_on  # streams cut by the stop, carried over on new rows
    for (s, k), h in resumed.items():
        if s in goes_on:  # the state is that of the uninterrupted run, step by step
            torch.testing.assert_close(h, whole[(s, k)], rtol=0, atol=1e-12)
