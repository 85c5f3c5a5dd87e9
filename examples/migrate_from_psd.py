"""Migrate from pytorch-stream-dataloader: from per-file iterators to streams with a length.

Before, with pytorch-stream-dataloader, you wrote an iterator over one file that yields
chunks of ``tbins`` steps (and a flag for the first chunk), and gave it with the list of
files to its ``StreamDataset`` and ``StreamDataLoader``. In outline::

    class TextIterator:                          # one file, as chunks of tbins steps
        def __init__(self, text, tbins): ...
        def __iter__(self):
            for start in range(0, len(self.text), self.tbins):
                yield chunk_at(start), start == 0

    def iterator_fun(text):                      # opens ONE file
        return TextIterator(text, tbins)

    dataset = StreamDataset(texts, iterator_fun, batch_size, "zeros", fill_value)
    loader = StreamDataLoader(dataset, num_workers, collate_fn)
    for batch in loader:                         # no len(); the rows a worker fills and
        ...                                      # the order of files depend on timing

After, with streamseq, a stream is anything with ``len`` and slicing (``s[a:b]``); the
loader does the chunking, the padding, the reset flags and the split over workers::

    loader = streamseq.StreamLoader(texts, batch_size, tbins, num_workers=2)
    for batch in loader:                         # len(loader) is exact
        h[:, batch.reset] = 0                    # replaces the "first chunk" flag

The quickest migration keeps your iterator: an opener that runs it once and concatenates
its chunks is a stream (fine for files that fit in memory; for large files, give the
stream a length and slicing instead, see the custom source recipe). This script does both
and checks that every text arrives whole, in order, within one row.

Run: ``python examples/migrate_from_psd.py [--workers 2] [--pad zeros]``
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import streamseq
from streamseq.testing import check_continuity


def make_texts(count: int = 11) -> list[np.ndarray]:
    """Texts ``a0 a1 a2 ...``, ``b0 b1 ...`` of different lengths, one byte a step."""
    texts = []
    for k in range(count):
        letter = chr(ord("a") + k)
        words = " ".join(f"{letter}{i}" for i in range(8 + 5 * (k % 4)))
        texts.append(np.frombuffer((words + " ").encode(), dtype=np.uint8))
    return texts


def text_chunks(text: np.ndarray, tbins: int) -> Iterator[tuple[np.ndarray, bool]]:
    """Your old per-file iterator: chunks of ``tbins`` steps and a first-chunk flag."""
    for start in range(0, len(text), tbins):
        yield text[start : start + tbins], start == 0


def from_chunks(iterator_fun: Callable[..., Any], *args: Any) -> np.ndarray:
    """An opener around an old iterator: read all its chunks, concatenate them."""
    return np.concatenate([chunk for chunk, _ in iterator_fun(*args)])


def render(batch: streamseq.Batch) -> list[str]:
    rows = []
    for data, valid, reset in zip(batch.data, batch.valid, batch.reset, strict=True):
        steps = zip(data.tolist(), valid.tolist(), strict=True)
        chars = "".join(chr(c) if v else "." for c, v in steps)
        rows.append(("*" if reset else " ") + chars)
    return rows


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=11)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--tbins", type=int, default=9)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--pad",
        default="zeros",
        choices=["zeros", "wrap", "drop"],
        help='"zeros" was padding_mode="zeros"; "wrap" was padding_mode="data"',
    )
    parser.add_argument("--show", type=int, default=3, help="batches to print")
    args = parser.parse_args(argv)
    texts = make_texts(args.texts)

    # step 1: keep the old iterator, wrapped in picklable openers (run in the workers)
    openers = [functools.partial(from_chunks, text_chunks, t, 64) for t in texts]
    wrapped = streamseq.StreamLoader(
        openers, args.batch_size, args.tbins, num_workers=args.workers, pad=args.pad
    )
    # step 2: arrays (or any stream with len and slicing) need no iterator at all
    loader = streamseq.StreamLoader(
        texts, args.batch_size, args.tbins, num_workers=args.workers, pad=args.pad
    )
    print(f"{len(texts)} texts -> {len(loader)} batches of {args.batch_size} x {args.tbins}")
    shown = []
    for i, (a, b) in enumerate(zip(wrapped, loader, strict=True)):
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
        if i < args.show:
            shown.append(render(b))
            print(f"batch {i}\n  " + "\n  ".join(shown[-1]))
    lengths = [len(t) for t in texts]
    complete, repeats = args.pad != "drop", args.pad == "wrap"
    count = check_continuity(
        loader, lengths, sources=texts, complete=complete, allow_repeats=repeats
    )
    what = "every text whole, in order" if complete else "texts in order, cut at the end"
    print(f"both loaders agree; {count} batches checked: {what}")
    return {"batches": count, "shown": shown}


if __name__ == "__main__":
    main()
