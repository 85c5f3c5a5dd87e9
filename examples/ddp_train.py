"""Train a small GRU with DistributedDataParallel, every rank reading its rows of one plan.

Each stream is a noisy sine wave with its own frequency; the GRU predicts the next value,
carrying its hidden state from batch to batch (truncated backpropagation through time) and
resetting it in the rows that start a new stream. The loader takes rank and world size from
torch.distributed: every rank computes the same global plan, keeps its own rows and gets the
same number of batches (padding, never stopping early), so every rank takes part in every
gradient all-reduce.

Run on 2 CPU processes (gloo)::

    torchrun --nproc_per_node=2 examples/ddp_train.py --out /tmp/ddp

Without torchrun it trains in one process. With ``--out``, each rank writes what it saw
(streams, batches, losses, final parameters) to ``rank<r>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import streamseq

# models.py lies beside this file: found when run as a script and when loaded by path
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import Predictor, process_group  # noqa: E402


def make_streams(count: int, min_len: int, max_len: int, seed: int = 0) -> list[np.ndarray]:
    """Noisy sine waves ``[n, 1]`` (float32), each with its own frequency and phase."""
    rng = np.random.default_rng(seed)
    streams = []
    for _ in range(count):
        n = int(rng.integers(min_len, max_len + 1))
        freq, phase = rng.uniform(0.02, 0.12), rng.uniform(0, 2 * np.pi)
        wave = np.sin(2 * np.pi * freq * np.arange(n) + phase) + 0.05 * rng.normal(size=n)
        streams.append(wave.astype(np.float32)[:, None])
    return streams


def masked_mse(pred: torch.Tensor, target: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean squared error over the valid steps (0 when there is none, e.g. all padding)."""
    mask = valid.unsqueeze(-1).to(pred.dtype)
    return ((pred - target) ** 2 * mask).sum() / mask.sum().clamp(min=1)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=16, help="number of sine waves")
    parser.add_argument("--min-len", type=int, default=40, help="shortest stream")
    parser.add_argument("--max-len", type=int, default=160, help="longest stream")
    parser.add_argument("--batch-size", type=int, default=2, help="rows per rank")
    parser.add_argument("--tbins", type=int, default=20, help="steps per batch")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=16, help="GRU units")
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--workers", type=int, default=0, help="loader workers per rank")
    parser.add_argument("--out", default=None, help="folder for rank<r>.json")
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    with process_group():
        record = train(args)
    return record


def train(args: argparse.Namespace) -> dict:
    streams = make_streams(args.streams, args.min_len, args.max_len)  # the same on every rank
    # rank and world_size come from torch.distributed when it is initialised
    loader = streamseq.StreamLoader(
        streams,
        args.batch_size,
        args.tbins,
        num_workers=args.workers,
        shuffle=True,
        seed=1,
        lookahead=1,  # the step after each chunk: the chunk's last step predicts it
    )
    rank, world = loader.rank, loader.world_size
    torch.manual_seed(0)
    model: nn.Module = Predictor(args.hidden)
    if world > 1:
        model = DistributedDataParallel(model)  # averages the gradients over the ranks
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    record: dict = {"rank": rank, "world_size": world, "lengths": [], "batches": []}
    record.update(streams=[], losses=[], valid=[])
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)  # a new shuffle, the same on every rank
        record["lengths"].append(len(loader))
        h = torch.zeros(1, args.batch_size, args.hidden)
        count, seen = 0, set()
        for batch in loader:
            h = h.detach()  # truncated backpropagation through time
            h[:, batch.reset] = 0  # rows that start a new stream forget the last one
            pred, h = model(batch.data[:, :-1], h)  # the chunk's tbins steps: h after the last
            mask = batch.target_mask()  # step t + 1 of the same stream
            loss = masked_mse(pred, batch.data[:, 1:], mask)
            optimizer.zero_grad()
            loss.backward()  # an all-reduce: every rank must get here as often
            optimizer.step()
            seen.update(batch.stream[batch.valid].unique().tolist())
            record["losses"].append(loss.item())
            record["valid"].append(int(mask.sum()))  # the targets
            count += 1
        record["batches"].append(count)
        record["streams"].append(sorted(seen))  # this rank's streams in this epoch
        first, last = epoch_loss(record, 0), epoch_loss(record, epoch)
        if rank == 0:
            print(f"epoch {epoch}: {count} batches, loss {last:.4f} (first epoch {first:.4f})")
    params = [p.detach().flatten() for p in model.parameters()]
    record["params"] = torch.cat(params).tolist()
    if args.out is not None:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
            json.dump(record, f)
    return record


def epoch_loss(record: dict, epoch: int) -> float:
    """Mean loss of one epoch, weighted by the number of targets."""
    start = sum(record["batches"][:epoch])
    stop = start + record["batches"][epoch]
    losses = np.array(record["losses"][start:stop])
    weights = np.array(record["valid"][start:stop])
    return float((losses * weights).sum() / max(weights.sum(), 1))


if __name__ == "__main__":
    main()
