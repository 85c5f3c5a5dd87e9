"""Stream 27 texts ("a_0;a_1;...", "b_0;b_1;...", ...) in batches of 8 rows.

Each row of a batch continues the text it was reading in the previous batch. The texts
have 2 to 10 words, so rows soon reach the end of a text: the rest of that chunk is
padding (``.``, where ``batch.valid`` is False), and in the next batch the row moves on to
a new text, marked ``*`` (its ``batch.reset`` flag). At the end of the epoch, rows that
have run out of texts are all padding until the longest row ends.

Run: ``python examples/text_streams.py [--workers 2] [--batches N] [--tbins 12]``
"""

from __future__ import annotations

import argparse

import numpy as np

import streamseq


def make_texts(count: int = 27, shortest: int = 2) -> list[np.ndarray]:
    """Texts like ``a_0;a_1;...`` of ``shortest`` to ``shortest + 8`` words, as uint8 arrays.

    One character a step; text k has ``shortest + 2 * (k % 5)`` words.
    """
    texts = []
    for k in range(count):
        letter = chr(ord("a") + k) if k < 26 else "A"
        text = "".join(f"{letter}_{i};" for i in range(shortest + 2 * (k % 5)))
        texts.append(np.frombuffer(text.encode(), dtype=np.uint8))
    return texts


def render(batch: streamseq.Batch) -> list[str]:
    """One line per row: ``*`` where the row starts a new text, its characters, ``.`` padding."""
    lines = []
    for r in range(batch.data.shape[0]):
        chars = "".join(
            chr(c) if v else "."
            for c, v in zip(batch.data[r].tolist(), batch.valid[r].tolist(), strict=True)
        )
        lines.append(("*" if batch.reset[r] else " ") + " " + chars)
    return lines


def main(argv: list[str] | None = None) -> list[list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--batches", type=int, default=None, help="batches to print (all)")
    parser.add_argument("--tbins", type=int, default=12, help="characters per row and batch")
    args = parser.parse_args(argv)

    texts = make_texts()
    loader = streamseq.StreamLoader(
        texts, batch_size=8, tbins=args.tbins, num_workers=args.workers
    )
    print(f"{len(texts)} texts, {len(loader)} batches of 8 rows x {args.tbins} characters")
    print("* = the row starts a new text (batch.reset), . = padding (batch.valid is False)")
    shown = []
    for i, batch in enumerate(loader):
        if i == args.batches:
            break
        lines = render(batch)
        print(f"\nbatch {i}")
        print("\n".join(lines))
        shown.append(lines)
    return shown


if __name__ == "__main__":
    main()
