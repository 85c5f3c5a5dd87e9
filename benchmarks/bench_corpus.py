"""Planning a token corpus of 100,000 documents: finding them, and a loader over them.

Writes a nanoGPT-style corpus (flat ``uint16`` tokens, each document followed by an
end-of-document token) of 100k documents of 10 to 400 tokens (about 20M tokens, 40 MB),
then times, best of ``--repeat`` runs:

- ``split``: :func:`streamseq.io.token_corpus` (the ``eod`` pass over the memory map and
  the 100k document streams),
- ``index``: the same documents from an array of their offsets (no pass over the tokens),
- ``loader``: ``StreamLoader(docs, 64, 256)`` and ``len(loader)`` (the lengths of the
  documents and the epoch plan), and the same with ``lengths=[len(d) for d in docs]``
  (the lengths declared: no document is opened to measure it),
- ``pickle``: the size of one pickled document and of all of them.

Run ``python benchmarks/bench_corpus.py [--documents 100000] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import tempfile
import time

import numpy as np

from streamseq import StreamLoader
from streamseq.io import token_corpus

EOD = 50256


def best(fn, repeat: int):
    """What ``fn()`` returns and its best time over ``repeat`` runs, in seconds."""
    times, outs = [], []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        outs.append(fn())  # kept: freeing the last one is not part of the time
        times.append(time.perf_counter() - start)
    return outs[-1], min(times)


def write_corpus(path: str, documents: int) -> np.ndarray:
    """The corpus file; returns the start offset of every document."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(10, 401, documents)
    tokens = rng.integers(0, EOD, int(lengths.sum()) + documents, dtype=np.uint16)
    stops = np.cumsum(lengths + 1)
    tokens[stops - 1] = EOD
    tokens.tofile(path)
    return np.concatenate([[0], stops[:-1]])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "train.bin")
        starts = write_corpus(path, args.documents)
        size = os.path.getsize(path)
        docs, split_s = best(lambda: token_corpus(path, eod=EOD), args.repeat)
        by_index, index_s = best(lambda: token_corpus(path, index=starts), args.repeat)
        assert len(docs) == len(by_index) == args.documents

        def plan(lengths: list[int] | None) -> StreamLoader:
            loader = StreamLoader(docs, 64, 256, lengths=lengths)
            len(loader)
            return loader

        loader, loader_s = best(lambda: plan(None), args.repeat)
        batches = len(loader)
        _, declared_s = best(lambda: plan([len(d) for d in docs]), args.repeat)
        one, every = len(pickle.dumps(docs[0])), len(pickle.dumps(docs))
    figures = {
        "documents": args.documents,
        "tokens": size // 2,
        "split_s": split_s,
        "index_s": index_s,
        "loader_s": loader_s,
        "declared_s": declared_s,
        "batches": batches,
        "pickle_one_B": one,
        "pickle_all_B": every,
    }
    mb = size / 1e6
    print(f"{args.documents} documents, {size // 2} tokens ({mb:.0f} MB), best of {args.repeat}")
    print(f"  token_corpus(eod=...):          {split_s * 1e3:7.1f} ms")
    print(f"  token_corpus(index=offsets):    {index_s * 1e3:7.1f} ms")
    print(f"  StreamLoader(docs) + len():     {loader_s * 1e3:7.1f} ms  ({batches} batches)")
    print(f"  the same, lengths=[len(d)...]:  {declared_s * 1e3:7.1f} ms")
    print(f"  planned in all (eod + loader):  {(split_s + loader_s) * 1e3:7.1f} ms")
    print(f"  pickle: one document {one} B, all {every / 1e6:.1f} MB")
    return figures


if __name__ == "__main__":
    main()
