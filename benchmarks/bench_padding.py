"""Padding per rank, per ``pad`` mode, with and without ``segment_length``.

Two cases: the lengths (400, 30, 20, 25, 35, 28) with ``batch_size=2``, ``tbins=16`` and
two ranks; and 2,000 streams of log-normal lengths between 10 and 10,000 steps with
``batch_size=32``, ``tbins=64`` and four ranks. For each, the share of the steps of every
rank's batches that are padding, and the batches that are all padding, for
``pad="zeros"`` (each stream's last chunk padded) and ``pad="pack"`` (streams back to back
in a row, padding only at its end), with ``segment_length`` None and a few values. The
batches' ``valid`` masks give it (streams of zeros in memory: a batch costs little).

Then, from the plans alone (:func:`streamseq.plan.epoch.epoch_rows`), the rows of today's
plans (``version=1``: a new stream order every epoch, dealt out to the emptiest row)
against rows balanced once and shuffled per epoch (``version=2``), on 400 log-normal
streams with ``batch_size=32`` and ``tbins=64``: batches per epoch (version 1 over 100
shuffled epochs: min/median/max; version 2: the same every epoch), the share of padding
in the batches and of steps never delivered (``pad="drop"``), per ``pad`` mode, with and
without ``segment_length``. ``bound`` is the fewest batches any plan can have,
``max(ceil(chunks / B), longest unit)`` (for ``"drop"``, the most: ``floor(chunks / B)``);
``chunks / B`` its first term (steps / (B * T) for ``"pack"``).

Run: ``python benchmarks/bench_padding.py``
"""

from __future__ import annotations

import numpy as np

from streamseq import StreamLoader
from streamseq.plan.epoch import epoch_rows
from streamseq.plan.rows import row_cost
from streamseq.plan.segments import segments


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


def row_fill(units, row, tbins, pack):
    """Valid steps in each chunk of a row whose units have lengths ``units[row]``."""
    if pack:
        total = int(units[row].sum())
        full, rest = divmod(total, tbins)
        return np.array([tbins] * full + ([rest] if rest else []), np.int64)
    fill = [np.minimum(tbins, n - tbins * np.arange(-(-n // tbins))) for n in units[row].tolist()]
    return np.concatenate(fill) if fill else np.zeros(0, np.int64)


def plan_padding(units, rows, batches, tbins, pad):
    """(padding share of the batches, share of the steps not delivered) of one plan."""
    valid = 0
    delivered = 0
    for row in rows:
        fill = row_fill(units, row, tbins, pad == "pack")
        if pad == "wrap" and len(fill):
            repeats, rest = divmod(batches, len(fill))
            valid += repeats * int(fill.sum()) + int(fill[:rest].sum())
            delivered += int(fill.sum()) if repeats else int(fill[:rest].sum())
        else:
            valid += int(fill[:batches].sum())
            delivered += int(fill[:batches].sum())
    return 1 - valid / (batches * len(rows) * tbins), 1 - delivered / int(units.sum())


def compare_plans(lengths, num_rows, tbins, epochs=100):
    """Print version 1 (over ``epochs`` shuffled epochs) against version 2, per pad mode."""
    print(f"{'':23}{'today (version 1)':^33}  {'balanced (version 2)':^21}")
    print(
        f"{'pad':>5}  {'segment_length':>14}  {'batches min/med/max':>19}  {'pad':>5}  "
        f"{'lost':>5}  {'batches':>7}  {'pad':>5}  {'lost':>5}  {'bound':>5}  {'chunks / B':>10}"
    )
    for pad in ("zeros", "drop", "wrap", "pack"):
        for seg in (None, 4 * tbins, 16 * tbins):
            units = segments(np.asarray(lengths), seg)[2]
            cost = row_cost(units, tbins, pad == "pack")
            scale = tbins if pad == "pack" else 1
            if pad == "drop":
                bound = int(cost.sum()) // num_rows
                even = bound
            else:
                even = -(-int(cost.sum()) // (num_rows * scale))
                bound = max(even, -(-int(cost.max()) // scale))
            today = []
            for epoch in range(epochs):
                rows, n = epoch_rows(units, num_rows, tbins, pad, shuffle=True, epoch=epoch)
                today.append((n, *plan_padding(units, rows, n, tbins, pad)))
            n1, p1, l1 = (np.median([t[k] for t in today]) for k in range(3))
            lo, hi = min(t[0] for t in today), max(t[0] for t in today)
            rows, n2 = epoch_rows(units, num_rows, tbins, pad, shuffle=True, version=2)
            p2, l2 = plan_padding(units, rows, n2, tbins, pad)
            print(
                f"{pad:>5}  {seg!s:>14}  {f'{lo}/{n1:g}/{hi}':>19}  {p1:5.1%}  {l1:5.1%}  "
                f"{n2:7d}  {p2:5.1%}  {l2:5.1%}  {bound:5d}  {even:10d}"
            )


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
    print("Rows per epoch: 400 log-normal streams, B=32, T=64 (plans only, 100 epochs)")
    compare_plans(lognormal_lengths(400), 32, 64)


if __name__ == "__main__":
    main()
