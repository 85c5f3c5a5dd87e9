"""A corpus of a million documents, and a manifest of token files, planned as tables.

Two ways to hand a loader many streams without an object per stream:

- one token file and the start offset of every document (an index, as a tokenizer
  writes it): :func:`streamseq.io.token_corpus` returns a :class:`~streamseq.StreamTable`
  whose lengths are one array, computed from the offsets;
- many files, with their lengths measured once when they were written: a manifest (a
  Parquet or CSV table of paths and lengths), read by :func:`streamseq.io.manifest`, opens
  no file to plan.

The corpus written here is sparse (its tokens read as 0: nothing is written but the
index), so a million documents cost a few megabytes of disk. Everything lives in a
temporary folder, deleted at the end.

Run: ``python examples/corpus_at_scale.py [--docs 1000000] [--files 40]``
"""

from __future__ import annotations

import argparse
import os
import pickle
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

import streamseq
from streamseq import io


def write_corpus(folder: str, docs: int) -> tuple[str, str]:
    """A sparse uint16 token file of ``docs`` documents of 1 to 600 tokens, and its index."""
    lengths = np.random.default_rng(0).integers(1, 601, docs)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    index = os.path.join(folder, "offsets.npy")
    np.save(index, offsets)
    path = os.path.join(folder, "corpus.bin")
    with open(path, "wb") as f:
        f.truncate(2 * int(lengths.sum()))  # uint16 tokens, none written
    return path, index


def write_files(folder: str, files: int) -> str:
    """``files`` token files of 50 to 500 tokens and a CSV manifest of them."""
    os.makedirs(os.path.join(folder, "docs"), exist_ok=True)
    lengths = np.random.default_rng(1).integers(50, 501, files)
    paths = []
    for i, n in enumerate(lengths.tolist()):
        paths.append(f"docs/{i:04d}.bin")
        (np.arange(n, dtype=np.uint16) % 997).tofile(os.path.join(folder, paths[-1]))
    where = os.path.join(folder, "manifest.csv")
    pacsv.write_csv(pa.table({"path": paths, "length": lengths}), where)  # measured once
    return where


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=40)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        path, index = write_corpus(folder, args.docs)

        # one token file and its index: a table of documents, lengths from the offsets
        docs = io.token_corpus(path, index=index)
        loader = streamseq.StreamLoader(docs, 64, 256, shuffle=True, rank=0, world_size=8)
        batch = next(iter(loader))
        state = pickle.dumps(loader.state_dict())
        print(f"{len(docs)} documents, {int(docs.lengths.sum())} tokens")
        print(f"rank 0 of 8: {len(loader)} batches of {tuple(batch.data.shape)}")
        print(f"state: {len(state)} bytes ({len(state) / len(docs):.3f} a document)")

        # a manifest of files: lengths from its column, every file opened when read
        files = io.manifest(write_files(folder, args.files), "tokens", dtype=np.uint16)
        same = [io.tokens(p, np.uint16) for p in files.identities]  # the same files, listed
        by_table = list(streamseq.StreamLoader(files, 8, 64, shuffle=True))
        by_list = list(streamseq.StreamLoader(same, 8, 64, shuffle=True))
        equal = all(
            (a.data == b.data).all() and (a.stream == b.stream).all()
            for a, b in zip(by_table, by_list, strict=True)
        )
        print(f"manifest: {len(files)} files, {len(by_table)} batches, same as the list: {equal}")
        return {
            "documents": len(docs),
            "batches": len(loader),
            "state_bytes": len(state),
            "files": len(files),
            "manifest_equals_list": equal and len(by_table) == len(by_list),
        }


if __name__ == "__main__":
    main()
