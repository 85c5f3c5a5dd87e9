"""Scale: what planning and the loader state cost per rank, up to 1M streams on 64 ranks.

Every rank plans the same global epoch from the lengths alone, so what one rank pays is
what every rank pays, whatever the number of ranks. For 10k, 100k and 1M streams (declared
lengths, 1,000 to 10,000 steps; openers named by object-store paths, never opened except
those read) on 1, 8 and 64 ranks of ``--batch-size`` rows, this measures on rank 0:

- ``loader``: building the loader (``lengths=``: nothing is probed);
- ``len``: the first ``len(loader)``, which plans the shuffled epoch;
- ``state``: ``state_dict()`` after ``--stop`` batches (the first one hashes the streams'
  names once), and its size pickled;
- ``load+map``: ``load_state_dict`` of that state into rank 0 of another world size with
  other global rows (3/4 of the ranks) and ``row_map``; ``1st batch``: the first batch
  after it (planning the rest of the epoch from where every stream stands, then reading);
- ``same``: the same into half the ranks of twice the rows (the same global rows: the
  batches of the uninterrupted run).

Run ``python benchmarks/bench_scale.py`` (about 2 min) or ``--quick`` (up to 100k streams).
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import pickle
import time

import numpy as np

from streamseq import StreamLoader

TBINS = 256


def open_clip(path: str, n: int) -> np.ndarray:
    """A stand-in for decoding ``path``: ``n`` steps of one float."""
    return np.zeros((n, 1), np.float32)


def timed(fn):
    """What ``fn()`` returns and the seconds it took."""
    gc.collect()
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def measure(count: int, ranks: int, batch_size: int, stop: int) -> dict:
    rng = np.random.default_rng(0)
    lengths = rng.integers(1000, 10_001, count)
    openers = [
        functools.partial(open_clip, f"s3://bucket/clips/{k:07d}.mp4", int(n))
        for k, n in enumerate(lengths)
    ]
    kw = dict(lengths=lengths, shuffle=True, seed=1)

    def make(world: int, b: int) -> StreamLoader:
        return StreamLoader(openers, b, TBINS, rank=0, world_size=world, **kw)

    loader, build_s = timed(lambda: make(ranks, batch_size))
    length, len_s = timed(lambda: len(loader))
    it = iter(loader)
    for _ in range(stop):
        next(it)
    state, state_s = timed(loader.state_dict)
    _, again_s = timed(loader.state_dict)
    del it
    loader.close()

    def resume(world: int, b: int) -> tuple[int, float, float]:
        other = make(world, b)
        _, load_s = timed(lambda: other.load_state_dict(state))
        rows, map_s = timed(lambda: other.row_map(state))
        assert len(rows) == b
        _, first_s = timed(lambda: next(iter(other)))
        other.close()
        return load_s + map_s, first_s

    fewer = max(1, ranks * 3 // 4)
    other_s, other_first_s = resume(fewer, batch_size)
    same = (max(1, ranks // 2), batch_size * (2 if ranks > 1 else 1))
    same_s, same_first_s = resume(*same)
    return {
        "streams": count,
        "ranks": ranks,
        "rows": ranks * batch_size,
        "batches": length,
        "build_s": build_s,
        "len_s": len_s,
        "state_s": state_s,
        "state_again_s": again_s,
        "state_pickled_B": len(pickle.dumps(state)),
        "state_json_B": len(json.dumps(state)),
        "fewer_ranks": fewer,
        "load_other_s": other_s,
        "other_first_s": other_first_s,
        "load_same_s": same_s,
        "same_first_s": same_first_s,
    }


def kb(n: int) -> str:
    return f"{n / 1000:.0f} kB" if n < 1e6 else f"{n / 1e6:.1f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="up to 100k streams")
    parser.add_argument("--batch-size", type=int, default=16, help="rows per rank")
    parser.add_argument("--stop", type=int, default=20, help="batches before the state")
    parser.add_argument("--json", default=None, help="also write the raw numbers here")
    args = parser.parse_args()
    counts = [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000]
    print(
        f"rank 0 of R ranks, {args.batch_size} rows per rank, {TBINS} steps per batch, "
        f"shuffled, state after {args.stop} batches; seconds"
    )
    head = (
        f"{'streams':>9s} {'ranks':>5s} {'batches':>8s} {'loader':>7s} {'len':>7s} "
        f"{'state':>7s} {'pickled':>8s} {'load+map':>8s} {'1st batch':>9s} "
        f"{'same':>7s} {'1st batch':>9s}"
    )
    print(head)
    results = []
    for count in counts:
        for ranks in (1, 8, 64):
            r = measure(count, ranks, args.batch_size, args.stop)
            results.append(r)
            print(
                f"{r['streams']:9d} {r['ranks']:5d} {r['batches']:8d} {r['build_s']:7.2f} "
                f"{r['len_s']:7.2f} {r['state_s']:7.2f} {kb(r['state_pickled_B']):>8s} "
                f"{r['load_other_s']:8.2f} {r['other_first_s']:9.2f} "
                f"{r['load_same_s']:7.2f} {r['same_first_s']:9.2f}",
                flush=True,
            )
    print(
        "state: the first state_dict() of the loader (later ones: "
        + ", ".join(f"{r['state_again_s']:.2f}" for r in results if r["ranks"] == 64)
        + " s at 64 ranks); load+map: into 3/4 of the ranks (other global rows);\n"
        "same: into half the ranks of twice the rows (the same global rows)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
