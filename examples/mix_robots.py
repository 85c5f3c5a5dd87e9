"""Mix two robot datasets by weight and draw each one's share of every batch over an epoch.

Two small LeRobot v3.0 datasets are written (tables of several episodes each, one video
per camera holding several episodes one after the other, as ``robot_episodes.py``
writes them): ``reach``, many short episodes, and ``sweep``, a few long ones. Read as
they are, ``sweep`` would give most of the steps; ``streamseq.mix`` gives it a weight of
0.3 instead: ``reach`` is read again, round after round, to make up the other 0.7. The
summary comes from the plan, before any frame is decoded; the loader then reads the
epoch (camera frames, states and actions as dict steps) and the picture shows, batch by
batch, which dataset every valid step came from.

Run: ``python examples/mix_robots.py [--workers 2] [--out out/] [--dir DIR]``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter

import numpy as np

import streamseq
from streamseq.io import lerobot

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from robot_episodes import write_dataset  # noqa: E402

DATASETS = {
    "reach": [12 + k % 5 for k in range(40)],  # 40 short episodes
    "sweep": [50 + (13 * k) % 31 for k in range(8)],  # 8 long ones
}
WEIGHTS = {"reach": 0.7, "sweep": 0.3}


def shares(mixture: streamseq.Mixture, batch: streamseq.Batch) -> list[float]:
    """The share of each group among the valid steps of ``batch`` (in ``mixture.names``)."""
    counts = Counter(mixture.group_of(s) for s in batch.stream[batch.valid].tolist())
    total = max(1, sum(counts.values()))
    return [counts[name] / total for name in mixture.names]


def draw(per_batch: np.ndarray, names: list[str], weights: dict[str, float], path: str) -> None:
    """Stacked bars of each group's share per batch, the weights as dashed lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3), dpi=100)
    x = np.arange(len(per_batch))
    bottom = np.zeros(len(per_batch))
    for k, name in enumerate(names):
        ax.bar(x, per_batch[:, k], bottom=bottom, width=0.9, label=name)
        bottom += per_batch[:, k]
    level = 0.0
    for name in names[:-1]:
        level += weights[name]
        ax.axhline(level, color="black", linestyle="--", linewidth=1)
    ax.set_xlim(-0.6, len(per_batch) - 0.4)
    ax.set_ylim(0, 1)
    ax.set_xticks(x[:: max(1, len(x) // 10)])
    ax.set_xlabel("batch")
    ax.set_ylabel("share of valid steps")
    ax.set_title("Steps of each dataset in every batch of an epoch (dashed: the weight)")
    ax.legend(loc="lower right", ncol=len(names), framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--out", default=None, help="folder for the picture")
    parser.add_argument("--dir", default=None, help="where to write the datasets (a temp dir)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        root = args.dir or tmp
        groups = {}
        for name, lengths in DATASETS.items():
            write_dataset(os.path.join(root, name), lengths)
            groups[name] = lerobot(os.path.join(root, name))
        mixture = streamseq.mix(groups, WEIGHTS)
        loader = streamseq.StreamLoader(
            mixture, batch_size=8, tbins=10, num_workers=args.workers, shuffle=True, seed=3
        )
        summary = mixture.summary(loader, 0)
        print(f"{mixture!r}: {len(loader)} batches of 8 rows x 10 steps")
        print(summary)
        per_batch, steps = [], Counter()
        for batch in loader:
            per_batch.append(shares(mixture, batch))
            for s in batch.stream[batch.valid].tolist():
                steps[mixture.group_of(s)] += 1
            frames = batch.data["observation.images.front"]
            assert tuple(frames.shape[:2]) == (8, 10) and frames.dtype.is_floating_point is False
        print("delivered: " + ", ".join(f"{n} {steps[n]} steps" for n in mixture.names))
        table = np.asarray(per_batch)
        out = {"summary": summary, "delivered": steps, "per_batch": table}
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            out["picture"] = os.path.join(args.out, "mix_robots.png")
            draw(table, list(mixture.names), WEIGHTS, out["picture"])
            print(f"wrote {out['picture']}")
        return out


if __name__ == "__main__":
    main()
