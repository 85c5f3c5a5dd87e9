"""Resizing at decode against resizing in a transform: 224x224 clips delivered at 112x112.

``io.video(path, size=(112, 112))`` scales every frame in the reformatter's pass that
converts it to RGB; the alternative is decoding at full size and resizing in
``transform=`` (here ``torch.nn.functional.interpolate``, bilinear with antialiasing, on
the frames of the slice). Both loaders read the same clips (those of
``bench_throughput.py``) into batches of 8 x 8, in-process and with 2 workers; each
configuration runs in a fresh process, ``--repeats`` times, interleaved, and the table
shows medians of frames delivered per second (after the first batch) and their ratio.

    python benchmarks/bench_resize.py            # ~1 min
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

OUT = 112


def resize(frames: np.ndarray, info: object) -> np.ndarray:
    """Bilinear, antialiased resize of ``[n, H, W, 3]`` uint8 frames to ``OUT`` x ``OUT``."""
    import torch

    x = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float()
    y = torch.nn.functional.interpolate(x, (OUT, OUT), mode="bilinear", antialias=True)
    return y.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()


def run(job: dict) -> dict:
    """Time one configuration (in this process)."""
    import torch

    import streamseq
    from streamseq.io import video

    torch.set_num_threads(1)
    if job["at_decode"]:
        streams, transform = [video(p, size=(OUT, OUT)) for p in job["paths"]], None
    else:
        streams, transform = [video(p) for p in job["paths"]], resize
    loader = streamseq.StreamLoader(
        streams, 8, 8, num_workers=job["workers"], transform=transform, pin_memory=False
    )
    steps, start = 0, None
    for batch in loader:
        assert batch.data.shape[-3:] == (OUT, OUT, 3)
        if start is None:
            start = time.perf_counter()
            continue
        steps += int(batch.valid.sum())
    return {"fps": steps / (time.perf_counter() - start)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clips", type=int, default=12)
    parser.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "streamseq-bench"))
    parser.add_argument("--job", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job:
        print(json.dumps(run(json.loads(args.job))))
        return
    sys.path.insert(0, os.path.dirname(__file__))
    from bench_throughput import make_clips

    paths = make_clips(os.path.join(args.data, "video"), args.clips)
    configs = [(w, d) for w in (0, 2) for d in (True, False)]
    results: dict[tuple[int, bool], list[float]] = {c: [] for c in configs}
    for _ in range(args.repeats):
        for workers, at_decode in configs:
            job = json.dumps({"paths": paths, "workers": workers, "at_decode": at_decode})
            out = subprocess.run(
                [sys.executable, __file__, "--job", job],
                capture_output=True,
                text=True,
                check=True,
                timeout=600,
            )
            results[(workers, at_decode)].append(json.loads(out.stdout)["fps"])
    print(f"224x224 H.264 -> {OUT}x{OUT}, {len(paths)} clips, batches of 8 x 8, ")
    print(f"{os.cpu_count()} cores, medians of {args.repeats}\n")
    print(f"{'workers':>7}  {'size= (frames/s)':>17}  {'transform (frames/s)':>21}  ratio")
    for workers in (0, 2):
        a = statistics.median(results[(workers, True)])
        b = statistics.median(results[(workers, False)])
        print(f"{workers:>7}  {a:>17.0f}  {b:>21.0f}  {a / b:5.2f}")


if __name__ == "__main__":
    main()
