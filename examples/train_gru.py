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
- the loss covers every token but the first of every file, once an epoch (``lookahead=1``).

The loss of every batch and the mean loss of every epoch are drawn in ``train_gru.png``,
over the loss of a uniform guess (chance).

Run: ``python examples/train_gru.py [--epochs 6] [--workers 2] [--out out/] [--small]``
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont
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


PLOT = (800, 380)  # pixels: width and height of the loss plot
FRAME = (70, 40, 20, 50)  # pixels around the axes: left, top, right, bottom
BATCH_COLOUR, EPOCH_COLOUR, CHANCE_COLOUR = (140, 180, 235), (20, 60, 160), (210, 40, 40)


def axes_box(size: tuple[int, int] = PLOT) -> tuple[int, int, int, int]:
    """The pixels ``(left, top, right, bottom)`` of the plotting area inside the axes."""
    left, top, right, bottom = FRAME
    return left, top, size[0] - right, size[1] - bottom


def plot(
    losses: list[float], starts: list[int], epoch_losses: list[float], chance: float, path: str
) -> None:
    """Loss of every batch and mean loss of every epoch, over the loss of guessing.

    ``starts`` holds the index in ``losses`` of the first batch of every epoch. The x axis
    counts batches, with a tick and a grid line at the start of every epoch;
    the y axis is the cross-entropy loss from 0 to a little over ``chance`` (the loss of a
    uniform guess, drawn as a dashed baseline). A legend names the three lines.
    """
    image = Image.new("RGB", PLOT, "white")
    pen = ImageDraw.Draw(image)
    face, small = ImageFont.load_default(size=14), ImageFont.load_default(size=12)
    x0, y0, x1, y1 = axes_box()
    top = max([chance, *losses]) * 1.1
    ends = [*starts[1:], len(losses)]

    def xy(batch: float, loss: float) -> tuple[float, float]:
        return x0 + batch * (x1 - x0) / len(losses), y1 - loss * (y1 - y0) / top

    for k, start in enumerate([*starts, len(losses)]):  # x ticks: where each epoch starts
        x = xy(start, 0)[0]
        pen.line([x, y0, x, y1], fill=(225, 225, 225))
        pen.line([x, y1, x, y1 + 5], fill="black")
        pen.text((x, y1 + 7), str(start), fill="black", font=small, anchor="mt")
        if k < len(starts):
            middle = xy((start + ends[k]) / 2, 0)[0]
            pen.text((middle, y0 + 4), f"epoch {k}", fill=(120, 120, 120), font=small, anchor="mt")
    step = 0.5 if top <= 4 else 1.0
    for k in range(int(top / step) + 1):  # y ticks
        y = xy(0, k * step)[1]
        pen.line([x0 - 5, y, x0, y], fill="black")
        pen.text((x0 - 8, y), f"{k * step:.1f}", fill="black", font=small, anchor="rm")
    pen.line([x0, y0, x0, y1, x1, y1], fill="black", width=1)  # the axes
    baseline = xy(0, chance)[1]
    for x in range(x0, x1, 12):  # dashed: the loss of a uniform guess
        pen.line([x, baseline, min(x + 7, x1), baseline], fill=CHANCE_COLOUR, width=2)
    pen.line([xy(i, v) for i, v in enumerate(losses)], fill=BATCH_COLOUR, width=2)
    means = [xy((a + b) / 2, v) for a, b, v in zip(starts, ends, epoch_losses, strict=True)]
    pen.line(means, fill=EPOCH_COLOUR, width=3)
    for x, y in means:
        pen.ellipse([x - 4, y - 4, x + 4, y + 4], fill=EPOCH_COLOUR)
    pen.text((x0 + (x1 - x0) // 2, PLOT[1] - 18), "batch", fill="black", font=face, anchor="mm")
    pen.text((8, 12), "cross-entropy loss", fill="black", font=face, anchor="lm")
    entries = [
        (BATCH_COLOUR, "loss of each batch"),
        (EPOCH_COLOUR, "mean loss of each epoch"),
        (CHANCE_COLOUR, f"chance: log(vocab) = {chance:.2f}"),
    ]
    x, y = x1 - 230, y0 + 30
    pen.rectangle([x - 8, y - 8, x1 - 8, y + 3 * 20], fill="white", outline=(180, 180, 180))
    for k, (colour, text) in enumerate(entries):
        pen.line([x, y + 20 * k + 7, x + 24, y + 20 * k + 7], fill=colour, width=3)
        pen.text((x + 32, y + 20 * k), text, fill="black", font=small)
    image.save(path, optimize=True)


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
            lookahead=1,  # the token after each chunk: every token but a file's first a target
        )
        model = Model(args.vocab, args.hidden)
        optimiser = torch.optim.Adam(model.parameters(), lr=args.lr)
        chance = math.log(args.vocab)
        print(f"{len(streams)} files, {len(loader)} batches an epoch, chance loss {chance:.3f}")
        losses, batch_losses, starts, counts = [], [], [], []
        lengths = [len(s) for s in streams]
        for epoch in range(args.epochs):
            starts.append(len(batch_losses))  # where each epoch starts (every one is as long)
            loader.set_epoch(epoch)  # a new order of the files
            h = torch.zeros(1, args.batch_size, args.hidden)
            total, count, inputs = 0.0, 0, 0
            for batch in loader:
                x = batch.data.long()  # [B, T + 1]: the chunk and the token after it
                h = h.detach()  # truncated BPTT: no gradient into the previous batch
                h[:, batch.reset] = 0  # rows that start a new file forget the last one
                logits, h = model(x[:, :-1], h)  # the T tokens of the chunk
                # predict step t + 1 from steps <= t, where t + 1 goes on the same file
                target_valid = batch.target_mask()
                loss_sum = nn.functional.cross_entropy(
                    logits[target_valid], x[:, 1:][target_valid], reduction="sum"
                )
                n = int(target_valid.sum())
                if n:
                    optimiser.zero_grad()
                    (loss_sum / n).backward()
                    optimiser.step()
                total += float(loss_sum.detach())
                count += n
                inputs += int(batch.valid[:, :-1].sum())  # the chunk's tokens, read
                if n:
                    batch_losses.append(float(loss_sum.detach()) / n)
            losses.append(total / count)
            counts.append((inputs, count))
            print(
                f"epoch {epoch}: loss {losses[-1]:.3f}; {inputs} tokens read as inputs, "
                f"{count} used as targets"
            )
    os.makedirs(args.out, exist_ok=True)
    picture = os.path.join(args.out, "train_gru.png")
    plot(batch_losses, starts, losses, chance, picture)
    print(f"wrote {picture}")
    return {
        "losses": losses,
        "batch_losses": batch_losses,
        "starts": starts,
        "picture": picture,
        "counts": counts,
        "lengths": lengths,
    }


if __name__ == "__main__":
    main()
