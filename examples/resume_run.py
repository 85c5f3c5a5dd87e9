"""Resume a training run exactly: checkpoint, crash, resume, and get the same batches.

A small GRU learns to predict noisy sine waves, carrying its hidden state across batches.
Every ``--save-every`` batches the run writes a checkpoint: the model, the optimizer, the
hidden state and ``loader.state_dict()`` (epoch, next batch, fingerprint of the plan). At
batch ``--crash-at`` it "crashes". A new run, built from scratch, loads the checkpoint and
goes on. The batches it gets are exactly those the uninterrupted run got from that point,
and it ends with exactly the same parameters.

Run: ``python examples/resume_run.py [--crash-at 25] [--save-every 10] [--workers 2]``
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

import streamseq

# models.py lies beside this file: found when run as a script and when loaded by path
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import Predictor  # noqa: E402


def make_streams(count: int = 12, seed: int = 0) -> list[np.ndarray]:
    """Noisy sine waves ``[n, 1]`` (float32) of 30 to 150 steps."""
    rng = np.random.default_rng(seed)
    streams = []
    for _ in range(count):
        n = int(rng.integers(30, 151))
        freq, phase = rng.uniform(0.02, 0.12), rng.uniform(0, 2 * np.pi)
        wave = np.sin(2 * np.pi * freq * np.arange(n) + phase) + 0.05 * rng.normal(size=n)
        streams.append(wave.astype(np.float32)[:, None])
    return streams


@dataclass
class Run:
    """Everything a checkpoint must hold to continue exactly."""

    loader: streamseq.StreamLoader
    model: Predictor
    optimizer: torch.optim.Optimizer
    hidden: torch.Tensor
    step: int = 0  # batches trained on, over all epochs


def new_run(batch_size: int, tbins: int, workers: int) -> Run:
    torch.manual_seed(0)
    loader = streamseq.StreamLoader(
        make_streams(), batch_size, tbins, num_workers=workers, shuffle=True, seed=7, lookahead=1
    )
    model = Predictor()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    return Run(loader, model, optimizer, torch.zeros(1, batch_size, 16))


def save_checkpoint(path: str, run: Run) -> None:
    """Write the checkpoint atomically: a crash while writing keeps the previous one."""
    state = {
        "model": run.model.state_dict(),
        "optimizer": run.optimizer.state_dict(),
        "hidden": run.hidden,
        "step": run.step,
        "loader": run.loader.state_dict(),
    }
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)


def load_checkpoint(path: str, run: Run) -> None:
    state = torch.load(path)
    run.loader.load_state_dict(state["loader"])  # an error if the data or plan changed
    run.model.load_state_dict(state["model"])
    run.optimizer.load_state_dict(state["optimizer"])
    run.hidden = state["hidden"]
    run.step = state["step"]


class Crash(Exception):
    """Stands for the job being killed."""


def digest(batch: streamseq.Batch) -> str:
    """A fingerprint of one batch: its data and where every step comes from."""
    h = hashlib.sha1()
    for field in (batch.data, batch.stream, batch.step, batch.reset):
        h.update(field.numpy().tobytes())
    return h.hexdigest()[:12]


def train(
    run: Run,
    epochs: int,
    checkpoint: str | None = None,
    save_every: int = 0,
    crash_at: int | None = None,
) -> list[str]:
    """The usual loop, from wherever the loader stands; returns the digests of its batches."""
    seen: list[str] = []
    loader = run.loader
    for epoch in range(loader.epoch, epochs):
        loader.set_epoch(epoch)  # keeps a position loaded from a checkpoint
        for batch in loader:
            h = run.hidden.detach()
            h[:, batch.reset] = 0
            pred, run.hidden = run.model(batch.data[:, :-1], h)  # the chunk's tbins steps
            mask = batch.target_mask().unsqueeze(-1).float()  # step t + 1 of the same stream
            loss = ((pred - batch.data[:, 1:]) ** 2 * mask).sum() / mask.sum().clamp(min=1)
            run.optimizer.zero_grad()
            loss.backward()
            run.optimizer.step()
            run.hidden = run.hidden.detach()
            run.step += 1
            seen.append(digest(batch))
            if checkpoint is not None and save_every and run.step % save_every == 0:
                save_checkpoint(checkpoint, run)
            if crash_at is not None and run.step == crash_at:
                raise Crash(f"killed after batch {crash_at}")
    return seen


def parameters(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=3)
    parser.add_argument("--tbins", type=int, default=16)
    parser.add_argument("--workers", type=int, default=0, help="loader worker processes")
    parser.add_argument("--save-every", type=int, default=10, help="batches per checkpoint")
    parser.add_argument("--crash-at", type=int, default=25, help="batch the run dies at")
    parser.add_argument("--checkpoint", default=None, help="checkpoint file (default: temp)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    folder = None
    if args.checkpoint is None:
        folder = tempfile.TemporaryDirectory()
        args.checkpoint = os.path.join(folder.name, "checkpoint.pt")

    # the reference: one uninterrupted run
    reference = new_run(args.batch_size, args.tbins, args.workers)
    expected = train(reference, args.epochs)
    print(f"uninterrupted run: {len(expected)} batches over {args.epochs} epochs")

    # a run that checkpoints, then dies
    first = new_run(args.batch_size, args.tbins, args.workers)
    try:
        train(first, args.epochs, args.checkpoint, args.save_every, args.crash_at)
    except Crash as e:
        print(f"first run: {e}")
    first.loader.close()

    # a new process would start here: build everything again, then load the checkpoint
    second = new_run(args.batch_size, args.tbins, args.workers)
    load_checkpoint(args.checkpoint, second)
    state, start = second.loader.state_dict(), second.step
    resumed = train(second, args.epochs)
    same_batches = resumed == expected[start:]
    same_params = torch.equal(parameters(second.model), parameters(reference.model))
    print(
        f"resumed at epoch {state['epoch']}, batch {state['next_batch']} "
        f"(batch {start} of the run): {len(resumed)} batches"
    )
    print(f"  identical to the uninterrupted run's batches {start}..: {same_batches}")
    print(f"  identical final parameters: {same_params}")

    # a checkpoint does not load into a run with another plan (here: other tbins)
    other = streamseq.StreamLoader(make_streams(), args.batch_size, args.tbins + 1, lookahead=1)
    try:
        other.load_state_dict(state)
        refused = ""
    except ValueError as e:
        refused = str(e)
        print(f"loading it with tbins={args.tbins + 1}: ValueError: {refused[:60]}...")
    if folder is not None:
        folder.cleanup()
    return {
        "expected": expected,
        "resumed": resumed,
        "start": start,
        "same_batches": same_batches,
        "same_params": same_params,
        "refused": refused,
    }


if __name__ == "__main__":
    main()
