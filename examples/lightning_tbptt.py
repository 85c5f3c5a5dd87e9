"""Truncated backpropagation through time with Lightning: a GRU whose state runs across batches.

A small GRU learns to predict noisy sine waves, each step from the steps before it. Row r
of every batch continues the stream row r of the previous batch was reading, so the module
keeps the GRU's hidden state from one ``training_step`` to the next:

- detached at the batch boundary (gradients stop there: truncated BPTT);
- taken after the last step of the chunk: with ``lookahead=1`` each row also holds the step
  that follows its chunk, the GRU reads the ``tbins`` steps of the chunk and predicts the
  steps one later (``batch.target_mask()``), so every step is an input once and every step
  but the first of a stream a target once;
- zeroed in the rows where ``batch.reset`` is set (they start a new stream);
- saved in every checkpoint (``on_save_checkpoint``) and restored from it
  (``on_load_checkpoint``), so that after resuming the rows that continue a stream go on
  with the state they had.

The :class:`streamseq.StreamLoader` is passed to ``trainer.fit`` as it is: every epoch has
the same number of batches, every pass over the loader reads the next epoch (a new
shuffle), and Lightning saves the loader's ``state_dict`` in its checkpoints and loads it
when resuming, so a run resumed in the middle of an epoch trains on exactly the batches it
had not trained on.

The example trains over ``--epochs`` epochs with a checkpoint every ``--save-every``
steps, "crashes" at step ``--crash-at``, then builds a new module and a new loader and
resumes from the last checkpoint. It checks that every step of every stream was an input
exactly once per epoch, and every step but the first of every stream a target exactly
once, counting what the first run trained before its checkpoint.

Run: ``python examples/lightning_tbptt.py [--epochs 3] [--save-every 25] [--crash-at 29]``
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile
from collections import Counter
from typing import Any

import lightning
import numpy as np
import torch
from torch import nn

import streamseq

# resume_run.py lies beside this file: the same sine waves (found as a script and by path)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from resume_run import make_streams  # noqa: E402


def make_loader(batch_size: int = 4, tbins: int = 16, workers: int = 0) -> streamseq.StreamLoader:
    return streamseq.StreamLoader(
        make_streams(), batch_size, tbins, num_workers=workers, shuffle=True, seed=7, lookahead=1
    )


def cells(stream: torch.Tensor, step: torch.Tensor, mask: torch.Tensor) -> list[tuple[int, int]]:
    """The (stream, step) cells where ``mask`` is True."""
    return list(zip(stream[mask].tolist(), step[mask].tolist(), strict=True))


class TBPTT(lightning.LightningModule):
    """A GRU that carries its hidden state from batch to batch, and through checkpoints."""

    def __init__(self, batch_size: int, hidden: int = 16, lr: float = 0.02) -> None:
        super().__init__()
        self.gru = nn.GRU(1, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 1)
        self.lr = lr
        self.hidden = torch.zeros(1, batch_size, hidden)  # [layers, B, H], one row a row
        # what every training step read and predicted: (epoch, (stream, step) cells)
        self.trained: list[tuple[int, list[tuple[int, int]]]] = []  # inputs
        self.targets: list[tuple[int, list[tuple[int, int]]]] = []
        self.resumed_hidden: torch.Tensor | None = None  # the state a checkpoint gave

    def training_step(self, batch: streamseq.Batch, index: int) -> torch.Tensor:
        h = self.hidden.to(self.device).detach()  # gradients stop at the batch boundary
        h[:, batch.reset] = 0  # rows that start a new stream
        out, h = self.gru(batch.data[:, :-1], h)  # the chunk: tbins steps (then look-ahead)
        self.hidden = h.detach()  # after the chunk's last step, for the next batch
        mask = batch.target_mask()  # [B, tbins]: step t + 1 of the same stream
        err = ((self.head(out) - batch.data[:, 1:]) ** 2).mean(-1)
        loss = (err * mask).sum() / mask.sum().clamp(min=1)  # 0 if no target
        self.log("loss", loss, batch_size=batch.data.shape[0])
        epoch, inputs = self.current_epoch, batch.valid[:, :-1]
        self.trained.append((epoch, cells(batch.stream[:, :-1], batch.step[:, :-1], inputs)))
        self.targets.append((epoch, cells(batch.stream[:, 1:], batch.step[:, 1:], mask)))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["hidden"] = self.hidden.detach().cpu()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.hidden = checkpoint["hidden"].clone()
        self.resumed_hidden = checkpoint["hidden"].clone()


class Crash(Exception):
    """Stands for the job being killed."""


class CrashAt(lightning.Callback):
    """Raises before the training step that follows ``step`` optimizer steps."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer: lightning.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            raise Crash(f"killed after step {self.step}")


class EpochLengths(lightning.Callback):
    """The trainer's number of batches at the start of every epoch."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def on_train_epoch_start(self, trainer: lightning.Trainer, *args: Any) -> None:
        self.seen.append(int(trainer.num_training_batches))


def run(
    out: str,
    epochs: int = 3,
    save_every: int = 0,
    crash_at: int | None = None,
    ckpt_path: str | None = None,
    batch_size: int = 4,
    tbins: int = 16,
    workers: int = 0,
    accelerator: str = "auto",
) -> dict[str, Any]:
    """One ``trainer.fit`` with a new module and a new loader, resumed from ``ckpt_path``.

    Returns the module, the loader, the number of batches of every epoch the trainer
    started, the checkpoints written (by step) and whether the run crashed.
    """
    torch.manual_seed(0)
    loader = make_loader(batch_size, tbins, workers)
    model = TBPTT(batch_size)
    callbacks: list[lightning.Callback] = []
    if save_every:
        callbacks.append(
            lightning.pytorch.callbacks.ModelCheckpoint(
                dirpath=out, filename="{step}", every_n_train_steps=save_every, save_top_k=-1
            )
        )
    if crash_at is not None:
        callbacks.append(CrashAt(crash_at))
    lengths = EpochLengths()
    trainer = lightning.Trainer(
        max_epochs=epochs,
        accelerator=accelerator,
        callbacks=[*callbacks, lengths],
        enable_checkpointing=bool(save_every),
        default_root_dir=out,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
    )
    crashed = None
    try:
        trainer.fit(model, loader, ckpt_path=ckpt_path)
    except Crash as e:
        crashed = str(e)
    checkpoints = {
        int(os.path.basename(p)[len("step=") : -len(".ckpt")]): p
        for p in glob.glob(os.path.join(out, "step=*.ckpt"))
    }
    return {
        "model": model,
        "loader": loader,
        "lengths": lengths.seen,
        "checkpoints": checkpoints,
        "crashed": crashed,
    }


def every_step(streams: list[np.ndarray]) -> Counter:
    """Each (stream, step) of an epoch, once: the inputs."""
    return Counter((s, t) for s, x in enumerate(streams) for t in range(len(x)))


def every_target(streams: list[np.ndarray]) -> Counter:
    """Each (stream, step) of an epoch but the first of each stream, once: the targets."""
    return Counter((s, t) for s, x in enumerate(streams) for t in range(1, len(x)))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--save-every", type=int, default=25, help="steps per checkpoint")
    parser.add_argument("--crash-at", type=int, default=29, help="step the first run dies at")
    parser.add_argument("--workers", type=int, default=0, help="loader worker processes")
    parser.add_argument("--out", default=None, help="folder for checkpoints (default: temp)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        out = args.out or folder
        first = run(out, args.epochs, args.save_every, args.crash_at, workers=args.workers)
        print(f"{len(first['loader'])} batches an epoch; first run: {first['crashed']}")
        step = max(first["checkpoints"])
        # a new process would start here: a new module, a new loader, the last checkpoint
        path = first["checkpoints"][step]
        second = run(out, args.epochs, args.save_every, ckpt_path=path, workers=args.workers)
        saved = torch.load(path, weights_only=False)
        trained = first["model"].trained[:step] + second["model"].trained
        targets = first["model"].targets[:step] + second["model"].targets
        expected, wanted = every_step(make_streams()), every_target(make_streams())
        per_epoch, targets_per_epoch = (
            [
                Counter(c for e, seen in got for c in seen if e == epoch)
                for epoch in range(args.epochs)
            ]
            for got in (trained, targets)
        )
        once = all(c == expected for c in per_epoch)
        targets_once = all(c == wanted for c in targets_per_epoch)
        state = saved["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
        same_hidden = torch.equal(second["model"].resumed_hidden, saved["hidden"])
        print(
            f"resumed from step {step}: epoch {state['epoch']}, batch {state['next_batch']}; "
            f"{len(second['model'].trained)} steps"
        )
        print(f"every step of every stream an input once per epoch: {once}")
        print(f"every step but the first of every stream a target once per epoch: {targets_once}")
        print(f"hidden state restored from the checkpoint: {same_hidden}")
    return {
        "first": first,
        "second": second,
        "step": step,
        "per_epoch": per_epoch,
        "expected": expected,
        "once": once,
        "targets_once": targets_once,
        "same_hidden": same_hidden,
    }


if __name__ == "__main__":
    main()
