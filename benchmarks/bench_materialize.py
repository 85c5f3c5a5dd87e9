"""Video decoded every epoch against video read from a materialised store, at 64x64.

The clips of ``bench_throughput.py`` (24 H.264 clips of 224x224, 60 to 240 frames) are
read at 64x64 (``io.video(path, size=(64, 64))``) into batches of 8 rows x 8 frames:
decoded every epoch, or read from a store that ``streamseq.materialize`` built once
(the build's time with 2 workers and its size on disk are shown). The copy limit is one
process copying the store's bytes into batch-sized arrays with nothing to decide. Each
reading configuration runs in a fresh process, ``--repeats`` times, interleaved; the
table shows medians of frames delivered per second (after the first batch).

    python benchmarks/bench_materialize.py            # ~1 min
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

OUT = 64


def run(job: dict) -> dict:
    """Time one configuration (in this process)."""
    import torch

    import streamseq
    from streamseq.io import video

    torch.set_num_threads(1)
    if job["kind"] == "copy":
        streams = streamseq.store.open_store(job["store"])
        whole = streams[0]._files.maps()
        batch = np.empty((8 * 8, OUT, OUT, 3), np.uint8)
        start = time.perf_counter()
        for a in range(0, len(whole) - len(batch) + 1, len(batch)):
            batch[:] = whole[a : a + len(batch)]
        return {"fps": (len(whole) // len(batch) * len(batch)) / (time.perf_counter() - start)}
    if job["kind"] == "store":
        streams = streamseq.store.open_store(job["store"])
    else:
        streams = [video(p, size=(OUT, OUT)) for p in job["paths"]]
    loader = streamseq.StreamLoader(streams, 8, 8, num_workers=job["workers"])
    steps, start = 0, None
    for batch in loader:
        if start is None:
            start = time.perf_counter()
            continue
        steps += int(batch.valid.sum())
    return {"fps": steps / (time.perf_counter() - start)}


def build(paths: list[str], store: str, workers: int) -> tuple[float, int, int]:
    """Build the store afresh: seconds, bytes on disk, frames."""
    import streamseq
    from streamseq.io import video

    shutil.rmtree(store, ignore_errors=True)
    clips = [video(p, size=(OUT, OUT)) for p in paths]
    start = time.perf_counter()
    stored = streamseq.materialize(clips, store, num_workers=workers)
    seconds = time.perf_counter() - start
    disk = sum(os.stat(os.path.join(store, f)).st_blocks * 512 for f in os.listdir(store))
    return seconds, disk, sum(len(s) for s in stored)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clips", type=int, default=24)
    parser.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "streamseq-bench"))
    parser.add_argument("--job", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job:
        print(json.dumps(run(json.loads(args.job))))
        return
    sys.path.insert(0, os.path.dirname(__file__))
    from bench_throughput import make_clips

    paths = make_clips(os.path.join(args.data, "video"), args.clips)
    store = os.path.join(args.data, f"store{OUT}")
    seconds, disk, frames = build(paths, store, 2)
    configs = [("decode", 0), ("decode", 2), ("store", 0), ("store", 2), ("copy", 0)]
    results: dict[tuple[str, int], list[float]] = {c: [] for c in configs}
    for _ in range(args.repeats):
        for kind, workers in configs:
            job = json.dumps({"paths": paths, "store": store, "kind": kind, "workers": workers})
            out = subprocess.run(
                [sys.executable, __file__, "--job", job],
                capture_output=True,
                text=True,
                check=True,
                timeout=600,
            )
            results[(kind, workers)].append(json.loads(out.stdout)["fps"])
    fps = {c: statistics.median(v) for c, v in results.items()}
    print(f"224x224 H.264 -> {OUT}x{OUT}, {len(paths)} clips ({frames} frames), batches of 8 x 8")
    print(f"{os.cpu_count()} cores, medians of {args.repeats}\n")
    print(f"build (2 workers): {seconds:.2f} s, {disk / 2**20:.1f} MiB on disk\n")
    print(f"{'read':>22}  {'workers':>7}  {'frames/s':>10}  {'x decode':>8}  {'of copy':>7}")
    for kind, workers in configs:
        f = fps[(kind, workers)]
        x = f / fps[("decode", workers)]
        print(f"{kind:>22}  {workers:>7}  {f:>10.0f}  {x:>8.1f}  {f / fps[('copy', 0)]:>7.2f}")


if __name__ == "__main__":
    main()
