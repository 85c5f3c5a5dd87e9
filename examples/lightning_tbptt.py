"""Truncated backpropagation through time with Lightning: a GRU whose state runs across batches.

A small GRU learns to predict noisy sine waves, each step from the steps before it. Row r
of every batch continues the stream row r of the previous batch was reading, so the module
keeps the GRU's hidden state from one ``training_step`` to the next:

- detached at the batch boundary (gradients stop there: truncated BPTT);
- taken after the last step of the chunk: with ``lookahead=1`` each row also holds the step
  that follows its chunk, the GRU reads the ``tbins`` steps of the chunk and predicts the
  steps one later (``batch.target_mask()``), so every step is an input once and every step
  but the first of a stream a target once;
- zeroed where a row starts a new stream: where ``batch.reset`` is set, and, with
  ``pad="pack"``, at step 0 of a stream inside a chunk (the GRU reads the pieces between);
- saved in every checkpoint (``on_save_checkpoint``) and restored from it
  (``on_load_checkpoint``), then moved to the rows that continue each stream
  (:meth:`streamseq.StreamLoader.row_map`: the run may resume with another batch size),
  so that after resuming the rows that continue a stream go on with the state they had.

The module optimises by hand (``automatic_optimization = False``): one optimizer step per
batch that has a target. A batch of padding alone (a rank whose rows have ended before
the others') returns None from ``training_step``: no step (its loss is 0, but Adam would
still move the weights), counted nowhere. A batch with inputs but no target is read for
the state, without a step.

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


def make_loader(
    batch_size: int = 4,
    tbins: int = 16,
    workers: int = 0,
    streams: list[np.ndarray] | None = None,
    **kw: Any,
) -> streamseq.StreamLoader:
    """The sine waves in rows of ``batch_size``, each row also holding the step after its chunk.

    ``streams``: others than :func:`make_streams`'; ``kw`` goes to the loader (``pad``,
    ``rank``, ``world_size``, ...).
    """
    return streamseq.StreamLoader(
        make_streams() if streams is None else streams,
        batch_size,
        tbins,
        num_workers=workers,
        shuffle=True,
        seed=7,
        lookahead=1,
        **kw,
    )


def cells(stream: torch.Tensor, step: torch.Tensor, mask: torch.Tensor) -> list[tuple[int, int]]:
    """The (stream, step) cells where ``mask`` is True."""
    return list(zip(stream[mask].tolist(), step[mask].tolist(), strict=True))


def scan(gru: nn.GRU, x: torch.Tensor, h: torch.Tensor, starts: torch.Tensor) -> tuple:
    """The GRU over ``x`` ``[B, T, F]`` from ``h``, zeroing a row's state where it starts a stream.

    ``starts`` ``[B, T]``: where a row starts a stream (``pad="pack"`` starts them inside
    a chunk too). The chunk is cut at those steps and each piece read at once.

    Returns the outputs ``[B, T, H]`` and the state after the last step.
    """
    cuts = [0, *sorted(set(torch.nonzero(starts[:, 1:])[:, 1].add(1).tolist())), x.shape[1]]
    outs = []
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        h = h * (~starts[:, a]).to(h.dtype)[None, :, None]
        out, h = gru(x[:, a:b], h)
        outs.append(out)
    return torch.cat(outs, 1), h


class TBPTT(lightning.LightningModule):
    """A GRU that carries its hidden state from batch to batch, and through checkpoints.

    Manual optimisation: one optimizer step per batch that has a target; a batch of
    padding alone returns None (no step, counted nowhere).
    """

    def __init__(
        self,
        batch_size: int,
        hidden: int = 16,
        lr: float = 0.02,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.rows = batch_size  # of every batch of this process
        self.gru = nn.GRU(1, hidden, batch_first=True, dtype=dtype)
        self.head = nn.Linear(hidden, 1, dtype=dtype)
        self.lr = lr
        self.hidden = torch.zeros(1, batch_size, hidden, dtype=dtype)  # [layers, B, H]
        # what every training step read and predicted: (epoch, (stream, step) cells)
        self.trained: list[tuple[int, list[tuple[int, int]]]] = []  # inputs
        self.targets: list[tuple[int, list[tuple[int, int]]]] = []
        self.losses: list[tuple[int, float]] = []  # (epoch, summed squared error)
        self.steps: list[int] = []  # the optimizer steps made before each of those batches
        self.skipped = 0  # batches of padding alone
        self.resumed_hidden: torch.Tensor | None = None  # the state a checkpoint gave
        self.resumed_state: dict[str, Any] | None = None  # the loader's, for row_map

    def training_step(self, batch: streamseq.Batch, index: int) -> torch.Tensor | None:
        if not batch.valid.any():  # padding alone: loss 0, but Adam would move the weights
            self.skipped += 1
            return None
        if self.resumed_state is not None:  # the first batch after resuming: move the rows
            self.hidden = self.moved(self.resumed_state)
            self.resumed_state = None
        tbins = batch.valid.shape[1] - batch.lookahead
        x, valid = batch.data.to(self.gru.weight_hh_l0.dtype), batch.valid[:, :tbins]
        starts = valid & (batch.step[:, :tbins] == 0)
        starts[:, 0] |= batch.reset  # rows that start a stream: their state zeroed
        before = self.trainer.global_step  # optimizer steps so far
        h = self.hidden.to(self.device).detach()  # gradients stop at the batch boundary
        out, h = scan(self.gru, x[:, :tbins], h, starts)  # the chunk: tbins steps
        self.hidden = h.detach()  # after the chunk's last step, for the next batch
        mask = batch.target_mask()  # [B, tbins]: step t + 1 of the same stream
        total = (((self.head(out) - x[:, 1:]) ** 2).sum(-1) * mask).sum()
        n = int(mask.sum())
        if n:  # (a batch may hold inputs but no target: read for the state, no step)
            optimiser = self.optimizers()
            optimiser.zero_grad()
            self.manual_backward(total / n)
            optimiser.step()
            self.log("loss", total.detach() / n, batch_size=batch.data.shape[0])
        epoch = self.current_epoch
        self.steps.append(before)
        self.trained.append((epoch, cells(batch.stream[:, :tbins], batch.step[:, :tbins], valid)))
        self.targets.append((epoch, cells(batch.stream[:, 1:], batch.step[:, 1:], mask)))
        self.losses.append((epoch, float(total.detach())))
        return total.detach()

    def moved(self, state: dict[str, Any]) -> torch.Tensor:
        """The saved state of every row, moved to the row that continues it (zeros: a new one).

        The loader resumed may have another batch size:
        :meth:`~streamseq.StreamLoader.row_map` tells which old row each row continues.
        """
        rows = torch.tensor(self.trainer.train_dataloader.row_map(state))
        old = self.hidden
        h = torch.zeros(old.shape[0], len(rows), old.shape[2], dtype=old.dtype)
        h[:, rows >= 0] = old[:, rows[rows >= 0]]
        return h

    def on_train_batch_start(self, batch: streamseq.Batch, index: int) -> None:
        # Lightning reads len(loader) once, at the start; after a resume on other rows the
        # loader's len is what was left of the resumed epoch, then the length of an epoch
        # of the new rows (read here, once the pass has begun)
        self.trainer.fit_loop.max_batches = len(self.trainer.train_dataloader)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["hidden"] = self.hidden.detach().cpu()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.hidden = checkpoint["hidden"].clone()
        self.resumed_hidden = checkpoint["hidden"].clone()
        loops = checkpoint["loops"]["fit_loop"]
        loaders = loops["state_dict"].get("combined_loader")
        self.resumed_state = loaders[0] if loaders else None
        state = self.resumed_state
        rows = self.rows * self.trainer.world_size  # the global rows of this run
        if state is not None and state["batch_size"] * state["world_size"] != rows:
            # other rows: the loader's len is then the batches left in the epoch, so its
            # batches are counted from 0 (Lightning would stop after len - next_batch)
            current = loops["epoch_loop.batch_progress"]["current"]
            for key in current:  # (saved before "completed" counts the last batch)
                current[key] -= state["next_batch"]


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
    lr: float = 0.02,
    dtype: torch.dtype = torch.float32,
    **loader_kw: Any,
) -> dict[str, Any]:
    """One ``trainer.fit`` with a new module and a new loader, resumed from ``ckpt_path``.

    Returns the module, the loader, the number of batches of every epoch the trainer
    started, the checkpoints written (by step) and whether the run crashed.
    """
    torch.manual_seed(0)
    loader = make_loader(batch_size, tbins, workers, **loader_kw)
    model = TBPTT(batch_size, lr=lr, dtype=dtype)
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
        # what the checkpoint holds: the batches before its optimizer step and that one (a
        # batch without a target makes no step: there are more batches than steps)
        held = sum(1 for s in first["model"].steps if s < step)
        trained = first["model"].trained[:held] + second["model"].trained
        targets = first["model"].targets[:held] + second["model"].targets
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
        for epoch, (inputs, used) in enumerate(zip(per_epoch, targets_per_epoch, strict=True)):
            print(
                f"epoch {epoch}: {sum(inputs.values())} steps read as inputs, "
                f"{sum(used.values())} used as targets"
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
