"""Hashes of the batches of representative pipelines: a refactor must keep them equal.

Run before and after a change that should not change any batch, and compare::

    python benchmarks/batch_hashes.py > before.json
    ...change...
    python benchmarks/batch_hashes.py --compare before.json

Every pipeline is read over two passes (epochs 0 and 1), with 0 and 2 process workers
where it matters, and each batch (data, reset, valid, stream, step) is hashed in order.
The resumed pipelines hash what a loader delivers after ``load_state_dict``, on the same
rows and on other rows (elastic), together with the state itself.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from typing import Any

import numpy as np

# the streamseq of the checkout this file is in, whatever the environment has installed
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import streamseq  # noqa: E402
from streamseq import StreamLoader  # noqa: E402


def _update(h: Any, x: Any) -> None:
    if isinstance(x, dict):
        for k in sorted(x):
            h.update(str(k).encode())
            _update(h, x[k])
    elif isinstance(x, (tuple, list)):
        for v in x:
            _update(h, v)
    else:
        a = x.numpy() if hasattr(x, "numpy") else np.asarray(x)
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(np.ascontiguousarray(a).tobytes())


def hash_batches(batches: Any) -> str:
    """One hash of every field of every batch, in order."""
    h = hashlib.sha256()
    n = 0
    for b in batches:
        for field in (b.data, b.reset, b.valid, b.stream, b.step):
            _update(h, field)
        n += 1
    return f"{n}:{h.hexdigest()[:20]}"


def hash_loader(make: Any, epochs: int = 2) -> str:
    """The batches of ``epochs`` passes over ``make()``."""
    loader = make()
    try:
        return " ".join(hash_batches(loader) for _ in range(epochs))
    finally:
        loader.close()


def add(x: np.ndarray, info: Any) -> np.ndarray:
    """A transform that uses the per-stream generator."""
    return x + info.rng().integers(0, 100, size=x.shape)


def as_dict(x: np.ndarray, info: Any) -> dict:
    """A transform to dict steps."""
    return {"x": x, "sq": (x.astype(np.float32) ** 2)[:, None]}


def arrays(seed: int, count: int = 23, dim: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 60, count)
    return [
        (rng.standard_normal((n, dim)) * 100).astype(np.float32) + i for i, n in enumerate(lengths)
    ]


IMAGE = (np.random.default_rng(7).random((32, 32, 3)) * 255).astype(np.uint8)


def pipelines(folder: str) -> dict[str, Any]:
    """Name -> zero-argument factory of a loader."""
    streams = arrays(0)
    ints = [np.arange(n, dtype=np.int64) + 1000 * i for i, n in enumerate([7, 0, 3, 12, 5, 9, 1])]
    dicts = [{"a": s, "b": s[:, :1].astype(np.int16)} for s in streams]
    tuples = [(s, s[:, 0].astype(np.float64)) for s in streams]
    tokens_path = os.path.join(folder, "tokens")
    os.makedirs(tokens_path, exist_ok=True)
    token_files = []
    rng = np.random.default_rng(5)
    for i in range(9):
        p = os.path.join(tokens_path, f"{i}.npy")
        np.save(p, rng.integers(0, 50000, int(rng.integers(10, 300))).astype(np.uint16))
        token_files.append(p)
    out: dict[str, Any] = {}
    for w in (0, 2):
        for pad in ("zeros", "drop", "wrap", "pack"):
            for shuffle in (False, True):
                out[f"arrays pad={pad} shuffle={shuffle} w={w}"] = (
                    lambda pad=pad, shuffle=shuffle, w=w: StreamLoader(
                        streams, 4, 5, pad=pad, shuffle=shuffle, seed=3, num_workers=w
                    )
                )
        out[f"ints segment_length w={w}"] = lambda w=w: StreamLoader(
            ints, 3, 2, segment_length=4, shuffle=True, num_workers=w
        )
        out[f"ints pack segment_length w={w}"] = lambda w=w: StreamLoader(
            ints, 2, 3, segment_length=5, pad="pack", num_workers=w
        )
        out[f"dicts w={w}"] = lambda w=w: StreamLoader(dicts, 3, 4, num_workers=w, shuffle=True)
        out[f"tuples time_major w={w}"] = lambda w=w: StreamLoader(
            tuples, 3, 4, num_workers=w, time_major=True
        )
        out[f"transform rng w={w}"] = lambda w=w: StreamLoader(
            ints, 2, 3, transform=add, shuffle=True, seed=9, num_workers=w
        )
        out[f"transform dict w={w}"] = lambda w=w: StreamLoader(
            ints, 2, 3, transform=as_dict, num_workers=w
        )
        out[f"persistent w={w}"] = lambda w=w: StreamLoader(
            streams, 4, 5, shuffle=True, num_workers=w, persistent_workers=True
        )
        for rank in (0, 1):
            out[f"rank {rank}/2 w={w}"] = lambda rank=rank, w=w: StreamLoader(
                streams, 3, 4, rank=rank, world_size=2, shuffle=True, num_workers=w
            )
        out[f"io.tokens w={w}"] = lambda w=w: StreamLoader(
            [streamseq.io.tokens(p) for p in token_files], 3, 16, num_workers=w, shuffle=True
        )
        out[f"io.virtual_camera w={w}"] = lambda w=w: StreamLoader(
            [
                streamseq.io.virtual_camera(IMAGE, length=n, size=(8, 8), seed=i)
                for i, n in enumerate([9, 4, 13])
            ],
            2,
            3,
            num_workers=w,
        )
    # the benchmark workloads (bench_throughput.py), smaller: tokens, and video with a crop
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_throughput as bench

    tokens = bench.token_streams(80)
    # encoded once and kept: encoding the same frames twice need not give the same bytes
    clips = bench.make_clips(os.path.join(tempfile.gettempdir(), "streamseq-hash-clips"), 6)
    for w in (0, 2):
        out[f"bench tokens w={w}"] = lambda w=w: bench.streamseq_loader(tokens, w, False)
        out[f"bench video crop w={w}"] = lambda w=w: bench.streamseq_loader(
            clips, w, True, transform=bench.crop
        )
    return out


def resumed(make: Any, k: int, other: Any) -> str:
    """What a loader delivers after the state at batch ``k``, on the same and other rows."""
    run = make()
    it = iter(run)
    for _ in range(k):
        next(it)
    state = run.state_dict()
    run.close()
    same = make()
    same.load_state_dict(state)
    elastic = other()
    elastic.load_state_dict(state)
    text = json.dumps(state, sort_keys=True, default=str)
    out = [
        hashlib.sha256(text.encode()).hexdigest()[:20],
        hash_batches(same),
        hash_batches(elastic),
        str(elastic.row_map(state)) if hasattr(elastic, "row_map") else "",
    ]
    same.close()
    elastic.close()
    return " ".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", help="a JSON file of hashes to compare with")
    args = parser.parse_args()
    results: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, make in pipelines(folder).items():
            results[name] = hash_loader(make)
        streams = arrays(1, 31)
        for pad in ("zeros", "pack"):
            for seg in (None, 7):

                def make(pad=pad, seg=seg, b=4):
                    return StreamLoader(
                        streams, b, 4, pad=pad, segment_length=seg, shuffle=True, seed=2
                    )

                results[f"resume pad={pad} segment_length={seg}"] = resumed(
                    make, 5, lambda make=make: make(b=3)
                )
    if args.compare:
        with open(args.compare) as f:
            before = json.load(f)
        bad = [k for k in sorted(set(before) | set(results)) if before.get(k) != results.get(k)]
        for k in bad:
            print(f"DIFFERS {k}: {before.get(k)} -> {results.get(k)}")
        print(f"{len(results) - len(bad)} of {len(results)} pipelines identical")
        sys.exit(1 if bad else 0)
    json.dump(results, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
