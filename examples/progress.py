"""Progress bars: measuring lengths, every epoch, a whole run, and a resumed epoch.

``len(loader)`` is the exact number of batches of the epoch (it comes from the plan, before
anything is read), so ``tqdm(loader)`` is a true progress bar with a true ETA, and so is
a bar over a whole run (the lengths of all epochs are known up front). A resumed epoch
starts its bar at the batch it resumes from. :func:`streamseq.io.probe_lengths` shows
its own bar while it measures the files. The epoch bars show the steps per second and
the share of the time the loop waited for data (``loader.stats``), and every pass ends
with a line of figures on the ``streamseq`` logger (INFO, shown when run as a script).

Run: ``python examples/progress.py [--files 40] [--epochs 2] [--workers 2]``
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import tempfile

import numpy as np
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

import streamseq
from streamseq.io import probe_lengths


def write_token_files(folder: str, count: int) -> list[str]:
    """``count`` token files (int32 ``.npy``) of 50 to 400 tokens."""
    rng = np.random.default_rng(0)
    paths = []
    for k in range(count):
        path = os.path.join(folder, f"doc{k:04d}.npy")
        np.save(path, rng.integers(0, 256, size=int(rng.integers(50, 401)), dtype=np.int32))
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--tbins", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    bars = {}

    with tempfile.TemporaryDirectory() as folder:
        paths = write_token_files(folder, args.files)
        openers = [functools.partial(np.load, p, mmap_mode="r") for p in paths]
        # 1. measuring the lengths: a bar over the files (read back from the cache next time)
        cache = os.path.join(folder, "lengths.json")
        lengths = probe_lengths(openers, num_workers=args.workers, cache=cache)

        def make_loader(batch_size: int = args.batch_size) -> streamseq.StreamLoader:
            return streamseq.StreamLoader(
                openers,
                batch_size,
                args.tbins,
                num_workers=args.workers,
                lengths=lengths,
                shuffle=True,
            )

        loader = make_loader()

        # 2. one bar per epoch: tqdm takes len(loader), exact; the postfix shows the
        # steps per second and the share of the time spent waiting for data so far
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            bar = tqdm(loader, desc=f"epoch {epoch}", unit="batch")
            for batch in bar:
                bar.set_postfix(loader.stats.postfix(), tokens=int(batch.valid.sum()))
            bars[f"epoch {epoch}"] = (bar.n, bar.total)

        # 3. one bar over the whole run
        total = sum(loader.epoch_length(e) for e in range(args.epochs))
        with tqdm(total=total, desc="run", unit="batch") as bar:
            for epoch in range(args.epochs):
                loader.set_epoch(epoch)
                for _ in loader:
                    bar.update(1)
            bars["run"] = (bar.n, bar.total)

        # 4. a resumed epoch: the bar starts where the run stopped, on the same rows or
        # on others (then the rest of the epoch is planned anew: loader.progress counts it)
        it = iter(loader)
        for _ in range(len(loader) // 2):
            next(it)
        state = loader.state_dict()
        for name, rows in (("resumed", args.batch_size), ("resumed wider", args.batch_size + 2)):
            resumed = make_loader(rows)  # as after a restart
            resumed.load_state_dict(state)
            where = resumed.progress  # batches of the epoch done, and in all
            bar = tqdm(resumed, initial=where.done, total=where.total, desc=name, unit="batch")
            for _ in bar:
                pass
            bars[name] = (bar.n, bar.total)
        loader.close()
    return bars


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    with logging_redirect_tqdm():  # log lines above the bars, not inside them
        main()
