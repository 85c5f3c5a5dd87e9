"""Train a selective state-space model by truncated BPTT, its state carried from batch to batch.

A small selective state-space layer (:class:`models.SelectiveSSM`: diagonal, its step size
and input and output maps chosen by the input, in plain PyTorch) learns to predict noisy
sine waves, each step from the steps before it. The streams are packed (``pad="pack"``):
a row reads one stream after another with no padding between them, so a stream may start
in the middle of a chunk. The layer's scan takes the state before a chunk and returns the
state after it:

- the state of each row is kept from batch to batch and detached (truncated BPTT);
- it is zeroed where a row starts a stream, at the start of a chunk (``batch.reset``) or
  inside one (step 0 of a packed stream): each stream is read as if alone;
- with ``lookahead=1`` each row also holds the step that follows its chunk: the layer reads
  the ``tbins`` steps of the chunk, each output predicts the step one later, and
  ``batch.target_mask()`` keeps the targets of the same stream (never the first step of
  the next packed stream). Every step is an input once an epoch, every step but the first
  of every stream a target once;
- a batch of padding alone is skipped (``continue``): no optimizer step, counted nowhere
  (its loss would be 0, but Adam would still move the weights); a batch with inputs but no
  target is read, for the state, without an optimizer step.

The loss an epoch computed this way equals the loss of the same model run over every
whole stream at once (``tests/test_lookahead_parity.py`` checks it in float64).

Run: ``python examples/train_ssm.py [--epochs 8] [--workers 2]``
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from typing import Any

import torch

import streamseq

# models.py and resume_run.py lie beside this file (found as a script and by path)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import SelectiveSSM, stream_starts  # noqa: E402
from resume_run import make_streams  # noqa: E402


def chunk_loss(
    model: SelectiveSSM, batch: streamseq.Batch, h: torch.Tensor
) -> tuple[torch.Tensor, int, int, torch.Tensor]:
    """The squared next-step error of a batch read from state ``h``, summed over its targets.

    Returns the sum, the number of steps read as inputs, the number of targets and the
    state after the chunk's last step (for the next batch, not detached).
    """
    tbins = batch.valid.shape[1] - batch.lookahead
    x, valid = batch.data.to(h.dtype), batch.valid[:, :tbins]
    starts = stream_starts(batch.reset, valid, batch.step[:, :tbins])
    out, h = model(x[:, :tbins], h, starts)
    mask = batch.target_mask()  # [B, tbins]: step t + 1 of the same stream
    err = ((out - x[:, 1:]) ** 2).sum(-1)
    return (err * mask).sum(), int(valid.sum()), int(mask.sum()), h


def train_epoch(
    model: SelectiveSSM, optimiser: torch.optim.Optimizer, loader: Iterable, rows: int
) -> tuple[float, int, int, int]:
    """One pass of truncated BPTT over ``loader``, the state carried from batch to batch.

    Returns the summed loss, the steps read as inputs, the targets, and the batches of
    padding alone skipped.
    """
    h = model.initial_state(rows)
    total, inputs, targets, skipped = 0.0, 0, 0, 0
    for batch in loader:
        if not batch.valid.any():  # all padding: no step, counted nowhere
            skipped += 1
            continue
        loss, read, n, h = chunk_loss(model, batch, h.detach())
        if n:  # (a chunk may hold only the last step of a stream: read, not a target)
            optimiser.zero_grad()
            (loss / n).backward()
            optimiser.step()
        total, inputs, targets = total + float(loss.detach()), inputs + read, targets + n
    return total, inputs, targets, skipped


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--tbins", type=int, default=16, help="BPTT window")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    streams = make_streams()
    loader = streamseq.StreamLoader(
        streams,
        args.batch_size,
        args.tbins,
        num_workers=args.workers,
        shuffle=True,
        seed=0,
        pad="pack",
        lookahead=1,  # the step after each chunk: the first step of the next chunk a target
    )
    model = SelectiveSSM(1, 1)
    optimiser = torch.optim.Adam(model.parameters(), lr=args.lr)
    steps = sum(len(x) for x in streams)
    print(f"{len(streams)} streams, {steps} steps, {len(loader)} batches an epoch")
    losses, counts = [], []
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        total, inputs, targets, skipped = train_epoch(model, optimiser, loader, args.batch_size)
        losses.append(total / targets)
        counts.append((inputs, targets, skipped))
        print(
            f"epoch {epoch}: loss {losses[-1]:.4f}; {inputs} steps read as inputs, "
            f"{targets} used as targets"
        )
    print(f"expected: {steps} inputs and {steps - len(streams)} targets an epoch")
    return {"losses": losses, "counts": counts, "streams": streams, "model": model}


if __name__ == "__main__":
    main()
