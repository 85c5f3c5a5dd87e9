"""How long a training loop waits for data: ``loader.stats.wait_fraction`` by workers.

The workloads of ``bench_throughput.py`` (its data functions are imported from it):
``tokens`` (512 in-memory token streams, batches of 64 x 256) and ``video`` (24 H.264
clips of 224x224, batches of 8 x 8 RGB frames). The model is simulated: a step of fixed
duration per batch, a ``time.sleep`` (the CPU is free meanwhile, as while a GPU
computes). For every workload, model step and number of workers, the loader runs two
passes (the first warms up: pages, caches) and the second pass's
:attr:`~streamseq.StreamLoader.stats` are kept: the share of the pass the loop spent
waiting in ``next()``, the steps per second, and the workers' reading and idle seconds.
Medians of ``--repeats`` runs, interleaved.

Run ``python benchmarks/bench_wait.py`` (both workloads, 0, 1 and 2 workers, about 4
minutes on 2 cores); ``--workload tokens``, ``--workers 0,2``, ``--persistent-workers``
(also 2 workers with ``persistent_workers=True``), ``--steps-ms`` to choose the model
steps of the workloads run (comma-separated, in milliseconds), ``--quick`` (smaller
data, one repeat).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(REPO, "benchmarks"), REPO]  # this tree's streamseq, not another
from bench_throughput import (  # noqa: E402
    check_import,
    load,
    machine,
    make_clips,
    streamseq_loader,
    token_streams,
)

#: model steps (ms) of each workload by default: fast and slow next to its reading
STEPS_MS = {"tokens": [0.2, 2.0], "video": [10.0, 50.0]}


def measure(sources: list[Any], video: bool, workers: int, persistent: bool, step: float):
    """The stats of the second of two passes with a model step of ``step`` seconds."""
    loader = streamseq_loader(sources, workers, video, persistent=persistent)
    try:
        for _ in range(2):
            for _batch in loader:
                time.sleep(step)
        return loader.stats
    finally:
        loader.close()


def columns(counts: list[int], persistent: bool) -> list[tuple[int, bool]]:
    """The configurations measured: each number of workers, then the persistent ones."""
    return [(w, False) for w in counts] + [(w, True) for w in counts if w and persistent]


def name(workers: int, persistent: bool) -> str:
    """The column of a configuration."""
    if persistent:
        return f"{workers} persistent"
    return "in-process" if workers == 0 else f"{workers} worker" + "s" * (workers > 1)


def table(results: dict, cols: list[tuple[int, bool]], head: str) -> str:
    """Wait fraction, steps/s and the workers' idle share, medians, one row a model step."""
    width = max(14, *(len(name(*c)) + 2 for c in cols))
    lines = [head, f"{'workload':<10}{'model step':>11}  {'':<13}"]
    lines[-1] += "".join(f"{name(*c):>{width}}" for c in cols)
    lines.append("-" * len(lines[-1]))
    for (workload, step), runs in results.items():
        rows = {
            "wait_fraction": lambda s: f"{s.wait_fraction:.2f}",
            "steps/s": lambda s: (
                f"{s.steps_per_second / 1e6:.2f}M"
                if s.steps_per_second >= 1e5
                else f"{s.steps_per_second:.0f}"
            ),
            "worker idle": idle_share,
        }
        for k, (label, show) in enumerate(rows.items()):
            first = f"{workload:<10}{step * 1e3:>8g} ms" if k == 0 else " " * 21
            cells = [show(median(runs[c])) for c in cols]
            lines.append(f"{first}  {label:<13}" + "".join(f"{c:>{width}}" for c in cells))
    lines.append(
        "worker idle: the share of the workers' time (reading + idle) spent idle, the "
        "hand-over full"
    )
    return "\n".join(lines)


def idle_share(stats: Any) -> str:
    """Of the workers' time, the share spent idle (the hand-over full); '-' without workers."""
    read = sum(w.read_seconds for w in stats.workers)
    idle = sum(w.idle_seconds for w in stats.workers)
    return "-" if read + idle == 0 else f"{idle / (read + idle):.2f}"


def median(runs: list[Any]) -> Any:
    """The run of median wait fraction."""
    ordered = sorted(runs, key=lambda s: s.wait_fraction)
    return ordered[len(ordered) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=["tokens", "video", "all"], default="all")
    parser.add_argument("--workers", default="0,1,2", help="comma-separated (default 0,1,2)")
    parser.add_argument(
        "--persistent-workers", action="store_true", help="also persistent_workers=True"
    )
    parser.add_argument("--steps-ms", help="model steps in ms, comma-separated")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="smaller data, one repeat")
    parser.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "streamseq-bench"))
    args = parser.parse_args()
    check_import(REPO)
    counts = [int(w) for w in args.workers.split(",")]
    cols = columns(counts, args.persistent_workers)
    repeats = args.repeats or (1 if args.quick else 3)
    workloads = ["tokens", "video"] if args.workload == "all" else [args.workload]
    results: dict[tuple[str, float], dict[tuple[int, bool], list[Any]]] = {}
    start = load()
    for workload in workloads:
        video = workload == "video"
        if video:
            data = os.path.join(args.data, "quick" if args.quick else "full")
            sources: list[Any] = make_clips(data, 8 if args.quick else 24)
        else:
            sources = token_streams(128 if args.quick else 512)
        given = [float(s) for s in args.steps_ms.split(",")] if args.steps_ms else None
        for step in [s / 1e3 for s in (given or STEPS_MS[workload])]:
            runs: dict[tuple[int, bool], list[Any]] = {c: [] for c in cols}
            for r in range(repeats):
                for workers, persistent in cols:
                    print(
                        f"[{workload} {step * 1e3:g} ms {r + 1}/{repeats}] "
                        f"{name(workers, persistent)} ...",
                        file=sys.stderr,
                    )
                    stats = measure(sources, video, workers, persistent, step)
                    runs[(workers, persistent)].append(stats)
            results[(workload, step)] = runs
    head = (
        f"wait_fraction by workers, medians of {repeats} ({machine()}; {start} at start, "
        f"{load()} at end)"
    )
    print(table(results, cols, head))


if __name__ == "__main__":
    main()
