"""Padding per rank, per ``pad`` mode, with and without ``segment_length``.

Two cases: the lengths (400, 30, 20, 25, 35, 28) with ``batch_size=2``, ``tbins=16`` and
two ranks; and 2,000 streams of log-normal lengths between 10 and 10,000 steps with
``batch_size=32``, ``tbins=64`` and four ranks. For each, the share of the steps of every
rank's batches that are padding, and the batches that are all padding, for
``pad="zeros"`` (each stream's last chunk padded) and ``pad="pack"`` (streams back to back
in a row, padding only at its end), with ``segment_length`` None and a few values. The
batches' ``valid`` masks give it (streams of zeros in memory: a batch costs little).

Run: ``python benchmarks/bench_padding.py``
"""

from __future__ import annotations

import numpy as np

from streamseq import StreamLoader


def lognormal_lengths(count: int, seed: int = 0) -> list[int]:
    """``count`` lengths, log-normal, clipped to 10..10,000 steps."""
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(np.log(300), 1.2, count), 10, 10_000).astype(int).tolist()


def padding(lengths, batch_size, tbins, world, segment_length, pad="zeros"):
    """Per rank: (padding share, all-padding batches, batches)."""
    streams = [np.zeros(n, np.uint8) for n in lengths]
    out = []
    for rank in range(world):
        loader = StreamLoader(
            streams,
            batch_size,
            tbins,
            pad=pad,
            rank=rank,
            world_size=world,
            segment_length=segment_length,
        )
        valid = 0
        empty = 0
        n = len(loader)
        for b in loader:
            v = int(b.valid.sum())
            valid += v
            empty += v == 0
        out.append((1 - valid / (n * batch_size * tbins), empty, n))
    return out


def main() -> None:
    cases = [
        ("6 streams (400, 30, ...), B=2, T=16, 2 ranks", [400, 30, 20, 25, 35, 28], 2, 16, 2),
        ("2,000 log-normal streams, B=32, T=64, 4 ranks", lognormal_lengths(2000), 32, 64, 4),
    ]
    for title, lengths, b, t, w in cases:
        print(title)
        ranks = "  ".join(f"{f'rank {r} pad, empty':>18}" for r in range(w))
        print(f"{'pad':>5}  {'segment_length':>14}  {ranks}  {'all ranks':>9}")
        for pad in ("zeros", "pack"):
            for seg in (None, 4 * t, t * 16):
                rows = padding(lengths, b, t, w, seg, pad)
                cells = "  ".join(f"{p:9.1%}, {e:3d}/{n:3d}" for p, e, n in rows)
                total = sum(p * n for p, _, n in rows) / sum(n for _, _, n in rows)
                print(f"{pad:>5}  {seg!s:>14}  {cells}  {total:9.1%}")
        print()


if __name__ == "__main__":
    main()
