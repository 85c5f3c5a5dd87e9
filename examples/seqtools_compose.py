"""streamseq and seqtools, composed both ways.

streamseq's pieces are lazy sequences (``len`` and indexing), and so are seqtools'. So:

(a) seqtools on streamseq's sequences: ``seqtools.smap`` over the batches of
    ``zip_batch`` (a function of whole batches, run when a batch is read),
    ``seqtools.gather`` to take some of them, and ``seqtools.prefetch`` of one group of rows
    per worker process, the groups zipped back into batches by ``zip_batch``.
(b) streamseq on seqtools' sequences: streams made with ``seqtools.smap`` (a function of
    every step, run where the step is read) and ``seqtools.concatenate`` (recordings
    joined into one stream), given to ``interleave_streams`` or ``StreamLoader``.

Every batch stays temporally coherent: row r of batch i+1 continues row r of batch i.
Run: ``python examples/seqtools_compose.py [--workers 2]``
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import seqtools

import streamseq
from streamseq import Batch


def recordings(count: int, seed: int = 0) -> list[np.ndarray]:
    """``count`` recordings of 5 to 20 steps of 2 float32 features: (recording, step)."""
    rng = np.random.default_rng(seed)
    out = []
    for s, n in enumerate(rng.integers(5, 21, count).tolist()):
        out.append(np.stack([np.full(n, s), np.arange(n)], axis=1).astype(np.float32))
    return out


def halve(batch: Batch) -> Batch:
    """A function of a whole batch (module-level: it may run in a worker process)."""
    return batch._replace(data=batch.data * 0.5)


def standardize(step: np.ndarray) -> np.ndarray:
    """A function of one step: features centred and scaled."""
    return (step - np.float32(5)) / np.float32(10)


def batches_of(rows: list[Any], tbins: int, length: int | None = None) -> Any:
    """The batches of some rows: chunks of ``tbins`` steps, zipped row by row."""
    return streamseq.zip_batch([streamseq.tbin(r, tbins) for r in rows], length=length)


def seqtools_on_streamseq(streams: list[Any], batch_size: int, tbins: int, workers: int) -> dict:
    """(a) seqtools operations over the rows and batches that streamseq plans."""
    rows = streamseq.interleave_streams(streams, batch_size, tbins=tbins)  # the loader's plan
    batches = batches_of(rows, tbins)  # a lazy sequence of Batch (numpy arrays)

    halved = seqtools.smap(halve, batches)  # lazy: halve runs when a batch is read
    head = seqtools.gather(batches, range(len(batches) // 2))  # the first half, lazily

    # one worker process per group of rows, each reading its rows in order (0: none)
    groups = streamseq.split_by_worker(rows, max(1, workers))
    ahead = [
        seqtools.prefetch(batches_of(g, tbins, len(batches)), min(1, workers), "process")
        for g in groups
    ]
    prefetched = streamseq.zip_batch(ahead)  # micro-batches back into whole batches
    return {
        "batches": list(batches),
        "halved": list(halved),
        "head": list(head),
        "prefetched": list(prefetched),
    }


def streamseq_on_seqtools(streams: list[Any], batch_size: int, tbins: int, workers: int) -> dict:
    """(b) streamseq reading streams made with seqtools."""
    standardized = [seqtools.smap(standardize, s) for s in streams]  # per step, lazily
    joined = seqtools.concatenate([streams[0], streams[1]])  # two recordings, one stream
    sources = [*standardized, joined]
    loader = streamseq.StreamLoader(sources, batch_size, tbins, num_workers=workers)
    rows = streamseq.interleave_streams(sources, batch_size, tbins=tbins)  # the same, by hand
    return {
        "sources": sources,
        "loader": list(loader),
        "by_hand": list(batches_of(rows, tbins)),
    }


def run(
    count: int = 7, batch_size: int = 3, tbins: int = 4, workers: int = 2, seed: int = 0
) -> dict:
    """Both compositions over ``count`` recordings; the batches of each."""
    streams = recordings(count, seed)
    out = {"streams": streams}
    out.update(seqtools_on_streamseq(streams, batch_size, tbins, workers))
    out.update(streamseq_on_seqtools(streams, batch_size, tbins, workers))
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--count", type=int, default=7, help="number of recordings")
    args = parser.parse_args(argv)
    result = run(count=args.count, workers=args.workers)
    batches, prefetched = result["batches"], result["prefetched"]
    same = all((a.data == b.data).all() for a, b in zip(batches, prefetched, strict=True))
    print(
        f"(a) {len(batches)} batches of {batches[0].data.shape}; halved, first half: "
        f"{len(result['head'])}; prefetched per group, same batches: {same}"
    )
    loader = result["loader"]
    print(
        f"(b) {len(result['sources'])} seqtools streams -> {len(loader)} batches of "
        f"{tuple(loader[0].data.shape)}; row 0 starts with {loader[0].data[0, 0].tolist()}"
    )
    return result


if __name__ == "__main__":
    main()
