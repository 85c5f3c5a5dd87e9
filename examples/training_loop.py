"""A training loop over several epochs: reshuffled passes, a one-cycle schedule, workers kept.

Each pass over the loader reads a new epoch (a new shuffle), as a ``DataLoader`` does.
Every epoch has the same number of batches, shuffled or not; a schedule over the whole
run takes its number of steps from :meth:`~streamseq.StreamLoader.epoch_length` (computed
from the plan, nothing read): ``OneCycleLR`` then ends exactly on the last batch. The
workers are started once for the whole run (``persistent_workers=True``). The hidden state
of a row is reset where the row starts a new stream, and the loss covers every step but
the first of every stream once an epoch (``lookahead=1``: the step after each chunk is in
the batch; ``batch.target_mask()``), ignoring padding (a batch of padding only gives 0,
not NaN).

Run: ``python examples/training_loop.py [--epochs 3] [--workers 2]``
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

import streamseq

VOCAB = 32


def sequences(count: int, seed: int = 0) -> list[np.ndarray]:
    """Token streams that count modulo the vocabulary, each with its own stride."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        n, stride = int(rng.integers(20, 200)), int(rng.integers(1, 4))
        out.append((np.arange(n) * stride + int(rng.integers(VOCAB))) % VOCAB)
    return out


class Model(torch.nn.Module):
    def __init__(self, hidden: int = 48):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, hidden)
        self.gru = torch.nn.GRU(hidden, hidden, batch_first=True)
        self.out = torch.nn.Linear(hidden, VOCAB)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y, h = self.gru(self.embed(x), h)
        return self.out(y), h


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--streams", type=int, default=60)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    torch.manual_seed(0)

    loader = streamseq.StreamLoader(
        sequences(args.streams),
        batch_size=8,
        tbins=16,
        shuffle=True,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
        lookahead=1,  # the step after each chunk: every step but a stream's first a target
    )
    lengths = [loader.epoch_length(e) for e in range(args.epochs)]
    model = Model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, 1e-2, total_steps=sum(lengths))
    h = torch.zeros(1, 8, 48)
    losses, steps = [], 0
    for epoch in range(args.epochs):  # each pass reads the next epoch: no set_epoch needed
        total = count = 0.0
        for batch in loader:
            h = h.detach()
            h[:, batch.reset] = 0  # rows that start a new stream forget the previous one
            logits, h = model(batch.data[:, :-1], h)  # the 16 steps of the chunk
            mask = batch.target_mask()  # next tokens of the same stream
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, VOCAB), batch.data[:, 1:].reshape(-1), reduction="none"
            )
            loss = (loss * mask.reshape(-1)).sum() / mask.sum().clamp(min=1)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            steps += 1
            total, count = total + loss.item(), count + 1
        losses.append(total / count)
        planned = lengths[epoch]
        print(f"epoch {epoch}: {int(count)} batches (planned {planned}), loss {losses[-1]:.3f}")
    loader.close()  # stops the workers
    print(f"{steps} steps, the schedule planned {sum(lengths)}")
    return {"lengths": lengths, "steps": steps, "losses": losses}


if __name__ == "__main__":
    main()
