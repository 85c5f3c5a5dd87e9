"""Mix three token corpora by weight, pack documents into chunks, and print each group's share.

Three small synthetic corpora are written as ``.npy`` token files: ``web`` (many short
documents), ``code`` (fewer, longer ones) and ``books`` (a few long ones). ``mix`` gives
each a weight: a share of every epoch's steps. ``web`` asks for less than it has (a
different subset every epoch), ``code`` for more (read again). Rows are packed
(``pad="pack"``) with at most 4 documents per chunk. The summary comes from the plan,
before any token is read; the counts after it are what the batches delivered.

Then the run is saved half-way through epoch 1 and resumed with other weights
(``weights_changed=True``): what was delivered stays delivered, the rest of the epoch
follows the new weights.

Run: ``python examples/mix_corpora.py [--workers 2] [--epochs 2] [--dir DIR]``
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

import streamseq
from streamseq.io import tokens

CORPORA = {"web": (60, 20, 120), "code": (12, 150, 400), "books": (4, 600, 1200)}
WEIGHTS = {"web": 0.3, "code": 0.4, "books": 0.3}


def write_corpora(folder: Path, seed: int = 0) -> dict[str, list[Path]]:
    """Write every corpus as token files: ``(documents, shortest, longest)`` of CORPORA."""
    rng = np.random.default_rng(seed)
    paths: dict[str, list[Path]] = {}
    for g, (name, (count, low, high)) in enumerate(CORPORA.items()):
        paths[name] = []
        for k in range(count):
            doc = rng.integers(1, 1000, int(rng.integers(low, high + 1)), dtype=np.int64)
            doc = (doc + 1000 * (g + 1)).astype(np.uint16)  # a token range per corpus
            path = folder / f"{name}_{k:03d}.npy"
            np.save(path, doc)
            paths[name].append(path)
    return paths


def delivered(mixture: streamseq.Mixture, batches) -> Counter:
    """Tokens of each group in ``batches``."""
    counts: Counter = Counter()
    for batch in batches:
        for s, n in Counter(batch.stream[batch.valid].tolist()).items():
            counts[mixture.group_of(s)] += n
    return counts


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--epochs", type=int, default=2, help="epochs to read")
    parser.add_argument("--dir", default=None, help="where to write the corpora (a temp dir)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.dir or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        paths = write_corpora(folder)
        groups = {name: [tokens(p) for p in files] for name, files in paths.items()}
        mixture = streamseq.mix(groups, WEIGHTS)
        kw = dict(batch_size=8, tbins=128, shuffle=True, seed=1, pad="pack")
        kw["max_streams_per_chunk"] = 4
        loader = streamseq.StreamLoader(mixture, num_workers=args.workers, **kw)
        print(f"{mixture!r}: {len(loader)} batches of 8 rows x 128 tokens every epoch")
        out: dict = {"lengths": [], "summaries": [], "delivered": []}
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            summary = mixture.summary(loader, epoch)
            print(f"\n{summary}")
            counts = delivered(mixture, loader)
            print("delivered: " + ", ".join(f"{n} {counts[n]}" for n in mixture.names))
            out["lengths"].append(len(loader))
            out["summaries"].append(summary)
            out["delivered"].append(counts)

        # half-way through epoch 1, other weights: the rest of the epoch follows them
        loader.set_epoch(1)
        it = iter(loader)
        before = [next(it) for _ in range(len(loader) // 2)]
        state = loader.state_dict()
        loader.close()
        new = {"web": 0.1, "code": 0.1, "books": 0.8}
        resumed = streamseq.StreamLoader(streamseq.mix(groups, new), num_workers=0, **kw)
        resumed.load_state_dict(state, weights_changed=True)
        rest = delivered(mixture, resumed)
        print(f"\nresumed at batch {len(before)} of epoch 1 with weights {new}:")
        print("rest of the epoch: " + ", ".join(f"{n} {rest[n]}" for n in mixture.names))
        out["rest"] = rest
        return out


if __name__ == "__main__":
    main()
