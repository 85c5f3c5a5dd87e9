"""Pictures of an epoch's plan: which stream every row reads in every batch.

The plan comes from the stream lengths alone, so it can be drawn before anything is read:
here the streams are openers that are never called. One long stream among short ones,
four loaders over them: ``pad="zeros"`` (the long stream's row sets the length of the
epoch), ``pad="pack"`` (the short streams follow one another inside chunks: padding only
at the ends of rows), ``segment_length`` (the long stream cut into segments: rows end
together) and the same on two ranks; one panel each in one PNG, and the batches and
share of padding of each.

Run: ``python examples/plot_plan.py --out plan.png`` (needs ``pip install streamseq[plot]``)
"""

from __future__ import annotations

import argparse
import functools

import matplotlib.pyplot as plt
import numpy as np

import streamseq
from streamseq.plot import plan_cells


def make_loaders(lengths: list[int], batch_size: int, tbins: int) -> dict:
    """Loaders over streams of ``lengths`` (openers never called: the lengths are given)."""
    openers = [functools.partial(np.zeros, n) for n in lengths]

    def loader(**kw) -> streamseq.StreamLoader:
        kw = {"batch_size": batch_size, **kw}
        return streamseq.StreamLoader(openers, tbins=tbins, lengths=lengths, **kw)

    half = batch_size // 2
    return {
        "zeros": loader(),
        "pack": loader(pad="pack"),
        "segments": loader(segment_length=4 * tbins),
        "two ranks": loader(batch_size=half, rank=0, world_size=2, segment_length=4 * tbins),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="plan.png", help="the PNG to write")
    parser.add_argument("--streams", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--tbins", type=int, default=8)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    # one long recording among short ones: its row sets the length of the epoch
    lengths = [20 * args.tbins, *rng.integers(3, 5 * args.tbins, args.streams).tolist()]
    loaders = make_loaders(lengths, args.batch_size, args.tbins)
    size = (8, 3.2 * len(loaders))
    fig, axes = plt.subplots(len(loaders), 1, figsize=size, layout="constrained")
    for ax, loader in zip(axes, loaders.values(), strict=True):
        streamseq.plot_plan(loader, ax=ax)
    fig.savefig(args.out, dpi=100)
    plt.close(fig)
    padding = {name: plan_cells(loader).padding for name, loader in loaders.items()}
    for name, share in padding.items():
        print(f"{name:>9}: {len(loaders[name]):3d} batches, {100 * share:4.1f}% padding")
    print(f"wrote {args.out}")
    return {"out": args.out, "padding": padding}


if __name__ == "__main__":
    main()
