"""Augment in the workers: a random crop per video, a jitter per frame, tokens made on the fly.

Two transforms, each ``fn(steps, info)`` run where the steps are read (the worker
processes), before the copy into shared memory:

- ``crop_and_jitter`` takes each video's frames (``uint8 [n, H, W, 3]``), cuts one random
  crop per video (``info.rng("crop")``: the same for all the frames of a stream), scales
  the brightness of each frame by its own random factor (``info.rng("jitter", step)``) and
  returns ``float32 [n, 3, h, w]``: the batch takes the transformed dtype and shape.
- ``tokenize`` maps the bytes of text files to the ids of a small vocabulary.

The randomness is part of the plan: the batches are the same with 0 or 2 workers, and
after resuming. Run: ``python examples/augment.py [--out out/] [--small]``
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import streamseq
from streamseq.io import video

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from video_grid import write_clips  # noqa: E402

CROP = (24, 32)  # height and width of the crops


def crop_and_jitter(frames: np.ndarray, info: streamseq.StepInfo) -> np.ndarray:
    """One random crop per video, one brightness factor per frame; uint8 HWC -> float32 CHW."""
    h, w = CROP
    top = info.rng("crop").integers(0, frames.shape[1] - h + 1)
    left = info.rng("crop").integers(0, frames.shape[2] - w + 1)
    crop = frames[:, top : top + h, left : left + w].astype(np.float32) / 255
    gain = [info.rng("jitter", k).uniform(0.8, 1.2) for k in range(info.start, info.stop)]
    crop *= np.asarray(gain, np.float32)[:, None, None, None]
    return np.ascontiguousarray(crop.transpose(0, 3, 1, 2))


VOCAB = " abcdefghijklmnopqrstuvwxyz.,"
TABLE = np.zeros(256, np.int64)  # byte -> token id; 0: unknown
for _i, _c in enumerate(VOCAB, start=1):
    TABLE[ord(_c)] = TABLE[ord(_c.upper())] = _i


def tokenize(text: np.ndarray, info: streamseq.StepInfo) -> np.ndarray:
    """Bytes of a text (uint8) to token ids (int64), one token per byte."""
    return TABLE[text]


def decode(ids: np.ndarray) -> str:
    """Token ids back to characters ('?' for unknown bytes, '_' for padding)."""
    return "".join(VOCAB[i - 1] if i > 0 else "?" for i in ids)


TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Streams of text, read in order, row after row.",
    "Short one.",
    "Every row continues the text it was reading, and resets when it moves on.",
    "Tokens are made in the workers, where the bytes are read.",
]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out", help="folder for the clips")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--small", action="store_true", help="fewer, shorter clips")
    args = parser.parse_args(argv)
    clips, frames = (4, 8) if args.small else (6, 20)
    paths = write_clips(os.path.join(args.out, "clips"), clips, frames, (36, 48))

    # video: a crop per stream, a jitter per frame, in the worker processes
    streams = [video(p) for p in paths]
    kwargs = dict(batch_size=3, tbins=4, transform=crop_and_jitter, seed=7)
    loader = streamseq.StreamLoader(streams, num_workers=args.workers, **kwargs)
    batches = list(loader)
    print(f"{len(streams)} videos -> {len(batches)} batches of {tuple(batches[0].data.shape)}")
    same = all(
        (a.data == b.data).all()
        for a, b in zip(batches, streamseq.StreamLoader(streams, **kwargs), strict=True)
    )
    print(f"identical with {args.workers} workers and with none: {same}")

    # text: bytes in the files, token ids in the batches
    texts = [np.frombuffer(t.encode(), np.uint8) for t in TEXTS]
    words = streamseq.StreamLoader(texts, 2, 16, transform=tokenize, num_workers=args.workers)
    lines = []
    for batch in words:
        for r in range(2):
            ids = batch.data[r][batch.valid[r]].numpy()
            mark = "*" if batch.reset[r] else " "
            lines.append(f"row {r}{mark} {decode(ids)!r}")
    print("\n".join(lines[:6]))
    return {"video": batches, "same": same, "text": lines}


if __name__ == "__main__":
    main()
