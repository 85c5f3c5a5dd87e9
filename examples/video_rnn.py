"""Train a small video RNN: a conv encoder per frame, a GRU across frames and batches.

Writes small H.264 clips with PyAV: a bright square moving over a dark, noisy background
with a constant velocity of its own (one or two pixels a frame along each axis, wrapping
around the edges), its horizontal direction flipping from one clip to the next. The model
predicts the velocity of the square at every frame, which no single frame tells: it takes
two frames at least, and the hidden state must carry what the model has seen.

The clips are streamed as grey frames with :func:`streamseq.io.video` through
:class:`streamseq.StreamLoader` with two worker processes, and the model is trained with
truncated backpropagation through time:

- the hidden state of each row is kept from batch to batch (row r of batch i+1 continues
  row r of batch i) and detached, so gradients stop at the batch boundary;
- rows where ``batch.reset`` is set start a new clip: their hidden state is zeroed before
  it is used;
- the target of each step is the velocity of its clip (``batch.stream`` says which), and
  the loss covers the valid steps only (``batch.valid``), not the padding.

After training, the model is run on clips it has never seen: with too few training
clips it learns them by heart instead of learning to tell motion, and this tells.

Run: ``python examples/video_rnn.py [--clips 96] [--epochs 8] [--workers 2] [--out out/]``
"""

from __future__ import annotations

import argparse
import os

import av
import numpy as np
import torch
from torch import nn

import streamseq
from streamseq.io import video


def write_clips(folder: str, count: int, size: int, seed: int) -> tuple[list[str], np.ndarray]:
    """Write ``count`` clips of 30 to 90 frames; return their paths and velocities ``[N, 2]``."""
    os.makedirs(folder, exist_ok=True)
    codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
    rng = np.random.default_rng(seed)
    side = size // 4
    paths, velocities = [], []
    for k in range(count):
        frames = int(rng.integers(30, 91))
        # (vx, vy) in pixels a frame: vx changes sign from one clip to the next
        vx = (1 if k % 2 == 0 else -1) * int(rng.integers(1, 3))
        vy = int(rng.choice([-2, -1, 1, 2]))
        x0, y0 = rng.integers(0, size, 2)
        path = os.path.join(folder, f"clip{k}.mp4")
        with av.open(path, "w") as out:
            # x264's macroblock tree does not always encode such tiny frames the same way twice
            options = {"x264-params": "mbtree=0"} if codec == "libx264" else {}
            stream = out.add_stream(codec, rate=25, options=options)
            stream.height, stream.width, stream.pix_fmt = size, size, "yuv420p"
            stream.codec_context.thread_count = 1  # one thread: the same file every time
            for i in range(frames):
                image = rng.integers(0, 30, (size, size), np.uint8)  # new noise each frame
                rows = (y0 + vy * i + np.arange(side)) % size  # wraps around the edges
                cols = (x0 + vx * i + np.arange(side)) % size
                image[np.ix_(rows, cols)] = 255
                out.mux(stream.encode(av.VideoFrame.from_ndarray(image, "gray")))
            out.mux(stream.encode())
        paths.append(path)
        velocities.append((vx, vy))
    return paths, np.array(velocities, np.float32)


class VideoRNN(nn.Module):
    """A conv encoder applied to each frame, a GRU over the frames, a linear head."""

    def __init__(self, size: int, hidden: int):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.ReLU(),
            nn.Flatten(),  # keeps where things are: the GRU compares positions
            nn.Linear(16 * (size // 2) ** 2, 64),
        )
        self.gru = nn.GRU(64, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 2)

    def forward(self, frames: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Frames ``[B, T, H, W]`` (``uint8``), state ``[1, B, hidden]`` -> ``[B, T, 2]``."""
        b, t = frames.shape[:2]
        x = (frames.reshape(b * t, 1, *frames.shape[2:]).float() / 255 - 0.25) * 3
        out, h = self.gru(self.encoder(x).reshape(b, t, -1), h)
        return self.head(out), h


def run_epoch(
    model: VideoRNN,
    loader: streamseq.StreamLoader,
    targets: torch.Tensor,
    optimiser: torch.optim.Optimizer | None = None,
) -> float:
    """Go through the loader once, training if given an optimiser; return the mean loss."""
    h = torch.zeros(1, loader.batch_size, model.gru.hidden_size)
    total, count = 0.0, 0
    for batch in loader:
        h = h.detach()  # truncated BPTT: no gradient into the previous batch
        h[:, batch.reset] = 0  # rows that start a new clip forget the last one
        prediction, h = model(batch.data, h)
        target = targets[batch.stream.clamp(min=0)]  # [B, T, 2]: the velocity of each clip
        valid = batch.valid  # [B, T]: padding is left out of the loss
        loss_sum = ((prediction[valid] - target[valid]) ** 2).sum()
        n = int(valid.sum())  # > 0: some row of every batch has data
        if optimiser is not None:
            optimiser.zero_grad()
            (loss_sum / n).backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimiser.step()
        total += float(loss_sum.detach())
        count += n
    return total / count


def main(argv: list[str] | None = None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clips", type=int, default=96, help="clips to train on")
    parser.add_argument("--held-out", type=int, default=8, help="clips to test on")
    parser.add_argument("--size", type=int, default=32, help="height and width of the clips")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--tbins", type=int, default=8, help="BPTT window")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="out", help="folder for the clips")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a small model)")
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)

    def clips(name: str, count: int, seed: int) -> tuple[streamseq.StreamLoader, torch.Tensor]:
        """Write clips and stream them; return the loader and the target of each clip."""
        folder = os.path.join(args.out, "video_rnn", name)
        paths, velocities = write_clips(folder, count, args.size, seed)
        streams = [video(path, format="gray") for path in paths]  # frames [H, W], uint8
        loader = streamseq.StreamLoader(
            streams,
            args.batch_size,
            args.tbins,
            num_workers=args.workers,
            shuffle=name == "train",
            seed=args.seed,
        )
        targets = torch.from_numpy(velocities) / 2  # about [-1, 1]
        frames = torch.from_numpy(loader.lengths).float()
        still = float((targets**2).sum(1) @ frames / frames.sum())  # predicting zero
        print(
            f"{name}: {count} clips, {int(frames.sum())} frames, {len(loader)} batches;"
            f" loss {still:.3f} predicting no motion"
        )
        return loader, targets

    train, train_targets = clips("train", args.clips, args.seed)
    test, test_targets = clips("held-out", args.held_out, args.seed + 1)
    model = VideoRNN(args.size, args.hidden)
    optimiser = torch.optim.Adam(model.parameters(), lr=args.lr)
    losses = []
    for epoch in range(args.epochs):
        train.set_epoch(epoch)  # a new order of the clips
        losses.append(run_epoch(model, train, train_targets, optimiser))
        print(f"epoch {epoch}: loss {losses[-1]:.3f}")
    with torch.no_grad():
        print(f"held-out clips: loss {run_epoch(model, test, test_targets):.3f}")
    return losses


if __name__ == "__main__":
    main()
