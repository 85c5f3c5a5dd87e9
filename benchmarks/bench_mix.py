"""Planning a mixture: 3 groups and up to 1,000,000 streams, time and memory per epoch.

A :func:`streamseq.mix` of three groups (a large one read in part, a middle one read
whole, a small one read again) with declared lengths, shuffled, batches of 64 rows x 256
steps. For each size this times, against the same streams as a plain list:

- ``draw``: the epoch's units drawn from the groups (:mod:`streamseq.plan.draws`);
- ``plan``: the whole plan of a fresh epoch (draw, balanced rows, length);
- ``length``: ``epoch_length`` of a fresh epoch (a bound: no plan needed);
- ``state``: ``state_dict()`` after one batch (progress over the occurrences).

and the memory the plan keeps (tracemalloc, in separate untimed runs), and the padding
after the rows' ends that the one length of every epoch costs (``(row ends)`` of the
summary, in percent of the epoch's steps).

Run ``python benchmarks/bench_mix.py`` (about 30 s) or ``--quick`` (up to 100k streams).
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import sys
import time

import numpy as np

from streamseq import StreamLoader, mix
from streamseq.plan.planner import plan_epoch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_plan import kept  # noqa: E402

ROWS, TBINS = 64, 256
SHARES = (0.6, 0.3, 0.1)  # of the streams: groups web, code, books
WEIGHTS = {"web": 0.3, "code": 0.3, "books": 0.4}


def timed(fn):
    """What ``fn()`` returns and the seconds it took (best of 3)."""
    best, out = float("inf"), None
    for _ in range(3):
        gc.collect()
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return out, best


def loaders(count: int) -> tuple[StreamLoader, StreamLoader]:
    """A loader of the mixture of ``count`` streams, and one of the same streams as a list."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(100, 5_001, count)
    opener = functools.partial(np.zeros, 1, np.int64)
    sizes = [int(count * s) for s in SHARES[:-1]]
    sizes.append(count - sum(sizes))
    groups = {name: [opener] * n for name, n in zip(WEIGHTS, sizes, strict=True)}
    m = mix(groups, WEIGHTS)
    kw = dict(lengths=lengths, shuffle=True, seed=1)
    return StreamLoader(m, ROWS, TBINS, **kw), StreamLoader(list(m), ROWS, TBINS, **kw)


def measure(count: int) -> dict:
    mixed, plain = loaders(count)
    spec = mixed.spec
    out = {"streams": count}
    _, out["draw"] = timed(lambda: spec.replace().draws.of(3))
    plan, out["plan"] = timed(lambda: plan_epoch(spec.replace(), 3))
    _, out["plain plan"] = timed(lambda: plan_epoch(plain.spec.replace(), 3))
    _, out["length"] = timed(lambda: mixed.epoch_length(7))
    mixed.set_epoch(3)
    mixed.plan()  # (kept: state_dict plans nothing more)
    _, out["state"] = timed(mixed.state_dict)
    out["bytes/stream"] = kept(lambda: plan_epoch(spec.replace(), 3)) / count
    out["plain bytes/stream"] = kept(lambda: plan_epoch(plain.spec.replace(), 3)) / count
    out["row ends %"] = row_ends(plan)
    out["occurrences"] = len(plan.pieces[0])
    return out


def row_ends(plan) -> float:
    """Padding after the rows' ends, in percent of the epoch's cells."""
    steps = int(plan.pieces[2].sum())
    pad = int((-(-plan.pieces[2] // TBINS) * TBINS - plan.pieces[2]).sum())
    cells = ROWS * plan.length * TBINS
    return 100 * (cells - steps - pad) / cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="up to 100k streams")
    args = parser.parse_args()
    sizes = [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000]
    cols = ["streams", "occurrences", "draw", "plan", "plain plan", "length", "state"]
    cols += ["bytes/stream", "plain bytes/stream", "row ends %"]
    print(" | ".join(cols))
    for n in sizes:
        r = measure(n)
        cells = []
        for c in cols:
            v = r[c]
            if c in ("streams", "occurrences"):
                cells.append(f"{v:,}")
            elif c in ("draw", "plan", "plain plan", "length", "state"):
                cells.append(f"{v * 1000:.0f} ms")
            else:
                cells.append(f"{v:.1f}")
        print(" | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
