"""Train a GRU on token files with truncated backpropagation through time.

Writes token files (``uint16``, one token a step) where each file counts modulo the
vocabulary with its own stride: ``x[t + 1] = (x[t] + stride) % vocab``. Predicting the next
token requires knowing the stride, which only the tokens already seen tell: the hidden
state must carry it from one batch to the next. The files are streamed with
:func:`streamseq.io.tokens` through :class:`streamseq.StreamLoader`, and the GRU is trained
with truncated BPTT:

- the hidden state of each row is kept from batch to batch (row r of batch i+1 continues
  row r of batch i) and detached, so gradients stop at the batch boundary;
- rows where ``batch.reset`` is set start a new file: their hidden state is zeroed;
- the loss covers the valid steps whose next token is in the batch too.

The loss of every batch is drawn in ``train_gru.png`` (one tick per epoch).

Run: ``python examples/train_gru.py [--epochs 6] [--workers 2] [--out out/] [--small]``
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile

import numpy as np
import torch
from PIL import Image, ImageDraw
from torch import nn

import streamseq
from streamseq.io import tokens


def write_token_files(folder: str, count: int, length: int, vocab: int, seed: int) -> list[str]:
    """Files of ``uint16`` tokens counting modulo ``vocab``, each with its own stride."""
    rng = np.random.default_rng(seed)
    paths = []
    for k in range(count):
        n = length + int(rng.integers(0, length))
        stride = int(rng.choice([1, 3, 5]))
        start = int(rng.integers(0, vocab))
        path = os.path.join(folder, f"tokens{k}.bin")
        ((start + stride * np.arange(n)) % vocab).astype(np.uint16).tofile(path)
        paths.append(path)
    return paths


class Model(nn.Module):
    def __init__(self, vocab: int, hidden: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, 32)
        self.gru = nn.GRU(32, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, h = self.gru(self.embed(x), h)
        return self.head(out), h


def plot(losses: list[float], epochs: int, chance: float, path: str) -> None:
    """Loss of every batch, from chance (top) to zero (bottom); ticks between epochs."""
    width, height, margin = 480, 200, 10
    image = Image.new("RGB", (width, height), "white")
    pen = ImageDraw.Draw(image)
    for k in range(1, epochs):
        x = margin + k * (width - 2 * margin) / epochs
        pen.line([x, margin, x, height - margin], fill=(210, 210, 210))
    step = (width - 2 * margin) / max(1, len(losses) - 1)
    scale = (height - 2 * margin) / chance
    points = [(margin + i * step, height - margin - v * scale) for i, v in enumerate(losses)]
    pen.line(points, fill=(30, 90, 200), width=2)
    pen.text((width // 3, margin), f"loss per batch (chance: {chance:.2f})", fill="black")
    image.save(path)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=24)
    parser.add_argument("--length", type=int, default=300, help="tokens of the shortest file")
    parser.add_argument("--vocab", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--tbins", type=int, default=25, help="BPTT window")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="out", help="folder for the loss plot")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a small model)")
    parser.add_argument("--small", action="store_true", help="fewer files and epochs")
    args = parser.parse_args(argv)
    if args.small:
        args.files, args.length, args.epochs = 12, 120, 6
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as folder:
        paths = write_token_files(folder, args.files, args.length, args.vocab, args.seed)
        streams = [tokens(path, np.uint16) for path in paths]
        loader = streamseq.StreamLoader(
            streams,
            args.batch_size,
            args.tbins,
            num_workers=args.workers,
            shuffle=True,
            seed=args.seed,
        )
        model = Model(args.vocab, args.hidden)
        optimiser = torch.optim.Adam(model.parameters(), lr=args.lr)
        chance = math.log(args.vocab)
        print(f"{len(streams)} files, {len(loader)} batches an epoch, chance loss {chance:.3f}")
        losses, batch_losses = [], []
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)  # a new order of the files
            h = torch.zeros(1, args.batch_size, args.hidden)
            total, count = 0.0, 0
            for batch in loader:
                x = batch.data.long()  # [B, T]
                h = h.detach()  # truncated BPTT: no gradient into the previous batch
                h[:, batch.reset] = 0  # rows that start a new file forget the last one
                logits, h = model(x, h)
                # predict step t + 1 from steps <= t, where both are real tokens
                target_valid = batch.valid[:, 1:]
                loss_sum = nn.functional.cross_entropy(
                    logits[:, :-1][target_valid], x[:, 1:][target_valid], reduction="sum"
                )
                n = int(target_valid.sum())
                if n:
                    optimiser.zero_grad()
                    (loss_sum / n).backward()
                    optimiser.step()
                total += float(loss_sum.detach())
                count += n
                if n:
                    batch_losses.append(float(loss_sum.detach()) / n)
            losses.append(total / count)
            print(f"epoch {epoch}: loss {losses[-1]:.3f}")
    os.makedirs(args.out, exist_ok=True)
    picture = os.path.join(args.out, "train_gru.png")
    plot(batch_losses, args.epochs, chance, picture)
    print(f"wrote {picture}")
    return {"losses": losses, "batch_losses": batch_losses, "picture": picture}


if __name__ == "__main__":
    main()
