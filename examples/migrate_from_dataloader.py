"""Migrate from a torch DataLoader over windows to streamseq, and keep the hidden state.

Before: the usual way to train a recurrent model on long recordings with a plain torch
``DataLoader`` cuts them into windows of ``T`` steps, shuffles the windows and starts every
window from a zero hidden state. Row ``r`` of the next batch is an unrelated window, so
the state cannot be carried over, nothing further back than ``T`` steps can be learnt, and
tails shorter than ``T`` are dropped.

After: :class:`streamseq.StreamLoader` delivers the same recordings in batches of ``T``
steps where row ``r`` of batch ``i+1`` continues row ``r`` of batch ``i``; the hidden state
is carried over and reset only where ``batch.reset`` says a row starts a new recording.

The task shows the difference: each recording starts with a cue (+1 or -1, its first step
only, then noise) and the model must output the cue at every step. Windows that do not
hold the first step cannot know it; a carried state can.

Run: ``python examples/migrate_from_dataloader.py [--epochs 6] [--workers 2]``
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import streamseq


def make_recordings(count: int, seed: int = 0) -> list[np.ndarray]:
    """Recordings ``[n, 2]``: channel 0 the cue at step 0 then noise, channel 1 the target."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        n = int(rng.integers(30, 90))
        cue = rng.choice([-1.0, 1.0])
        x = 0.3 * rng.normal(size=n)
        x[0] = 3 * cue
        out.append(np.stack([x, np.full(n, cue)], axis=1).astype(np.float32))
    return out


# -- before: windows, shuffled, each from a zero state (torch only) ------------------------


class Windows(Dataset):
    """Every full window of ``window`` steps of every recording (tails are dropped)."""

    def __init__(self, recordings: list[np.ndarray], window: int):
        self.recordings, self.window = recordings, window
        self.index = [
            (r, start)
            for r, rec in enumerate(recordings)
            for start in range(0, len(rec) - window + 1, window)
        ]

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int, int]:
        r, start = self.index[i]
        return torch.from_numpy(self.recordings[r][start : start + self.window]), r, start


def train_with_dataloader(
    recordings: list[np.ndarray], batch_size: int, window: int, epochs: int, workers: int
) -> dict:
    torch.manual_seed(0)
    model, optimizer = make_model()
    loader = DataLoader(
        Windows(recordings, window),
        batch_size=batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=workers,
        generator=torch.Generator().manual_seed(0),
    )
    losses, steps, continued, rows = [], 0, 0, 0
    for _ in range(epochs):
        total = count = 0.0
        previous = None
        for x, rec, start in loader:
            h = torch.zeros(1, x.shape[0], HIDDEN)  # a window starts from nothing
            out, _ = model[0](x[..., :1], h)
            loss = ((model[1](out) - x[..., 1:]) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total, count = total + loss.item() * x[..., 0].numel(), count + x[..., 0].numel()
            steps += x[..., 0].numel()
            if previous is not None:  # does row r continue what row r read just before?
                continued += int(((rec == previous[0]) & (start == previous[1] + window)).sum())
            rows += len(rec)
            previous = (rec, start)
        losses.append(total / count)
    return {"losses": losses, "steps": steps // epochs, "continued_rows": continued / rows}


# -- after: streams in coherent batches, the hidden state carried ---------------------------


def train_with_streamseq(
    recordings: list[np.ndarray], batch_size: int, tbins: int, epochs: int, workers: int
) -> dict:
    torch.manual_seed(0)
    model, optimizer = make_model()
    loader = streamseq.StreamLoader(
        recordings, batch_size, tbins, shuffle=True, seed=0, num_workers=workers
    )
    losses, steps, continued, rows = [], 0, 0, 0
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        h = torch.zeros(1, batch_size, HIDDEN)
        total = count = 0.0
        for batch in loader:
            h = h.detach()  # truncated backpropagation through time
            h[:, batch.reset] = 0  # only rows that start a new recording forget
            out, h = model[0](batch.data[..., :1], h)
            mask = batch.valid.float()
            err = (model[1](out)[..., 0] - batch.data[..., 1]) ** 2
            loss = (err * mask).sum() / mask.sum().clamp(min=1)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total, count = total + (err * mask).sum().item(), count + mask.sum().item()
            live = batch.valid[:, 0]
            continued += int((live & ~batch.reset).sum())
            rows += int(live.sum())
        losses.append(total / count)
        steps = int(count)
    return {"losses": losses, "steps": steps, "continued_rows": continued / max(rows, 1)}


HIDDEN = 16


def make_model() -> tuple[nn.ModuleList, torch.optim.Optimizer]:
    model = nn.ModuleList([nn.GRU(1, HIDDEN, batch_first=True), nn.Linear(HIDDEN, 1)])
    return model, torch.optim.Adam(model.parameters(), lr=0.01)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recordings", type=int, default=48)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--tbins", type=int, default=10, help="window / chunk length T")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    recordings = make_recordings(args.recordings)
    total = sum(len(r) for r in recordings)
    results = {}
    for name, fn in [("DataLoader", train_with_dataloader), ("streamseq", train_with_streamseq)]:
        r = fn(recordings, args.batch_size, args.tbins, args.epochs, args.workers)
        results[name] = r
        print(
            f"{name:>10}: {r['steps']}/{total} steps an epoch, "
            f"{100 * r['continued_rows']:.0f}% of rows continue the previous batch, "
            f"loss {r['losses'][0]:.3f} -> {r['losses'][-1]:.3f}"
        )
    return results


if __name__ == "__main__":
    main()
