"""How long leaving a pass early takes while every worker is in the middle of a read.

A pass left before its end (``break``, Ctrl-C, an error, ``close()``) stops the workers it
started. Here every read is slow (``--read-ms``, 1500 ms by default: a stream on a slow
disk, a video decoded from far away), so every worker is mid-read when the loop breaks
after its first batch; the time measured is that of the ``break``: from the loop's last
``next()`` to the end of the loop statement (the pass closed, its workers stopped). The
workers are stopped together, with one deadline (``streamseq.workers.processes.GRACE``)
for all of them; a worker still reading then is killed.

Run ``python benchmarks/bench_stop.py`` (1, 2 and 4 workers, 3 repeats, about 30 s);
``--workers 1,2,4,8``, ``--repeats``, ``--read-ms``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO]  # this tree's streamseq, not another

import numpy as np  # noqa: E402

import streamseq  # noqa: E402


class SlowStream:
    """A stream of ``n`` steps whose reads after the first ``fast`` steps take ``delay`` s."""

    def __init__(self, n: int, delay: float, fast: int, value: int):
        self.n, self.delay, self.fast, self.value = n, delay, fast, value

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key: slice) -> np.ndarray:
        start = key.start or 0
        if start >= self.fast:
            time.sleep(self.delay)
        return np.full(len(range(*key.indices(self.n))), self.value, np.int64)


def leave_early(workers: int, delay: float) -> float:
    """Seconds the ``break`` of a pass takes with ``workers`` workers mid-read."""
    tbins = 4
    streams = [SlowStream(64, delay, tbins, k) for k in range(workers)]
    loader = streamseq.StreamLoader(streams, workers, tbins, num_workers=workers, max_buffered=4)
    try:
        t0 = None
        for _batch in loader:
            time.sleep(0.3)  # every worker is now in the middle of its next (slow) read
            t0 = time.perf_counter()
            break
        return time.perf_counter() - t0
    finally:
        loader.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2,4", help="comma-separated worker counts")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--read-ms", type=float, default=1500.0, help="time of a slow read")
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    print(f"streamseq {streamseq.__file__}; {os.cpu_count()} cores; read {args.read_ms:g} ms")
    print(f"{'workers':>8} {'median s':>9} {'max s':>7}")
    for w in counts:
        times = [leave_early(w, args.read_ms / 1e3) for _ in range(args.repeats)]
        print(f"{w:>8} {statistics.median(times):>9.3f} {max(times):>7.3f}")


if __name__ == "__main__":
    main()
