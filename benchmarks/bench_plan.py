"""Cost growth: planning an epoch over up to 1,000,000 streams, and open files per rank.

Planning (``StreamLoader.plan()``: the assignment of streams to rows, the rows, and the
data spec) needs the stream lengths only. This measures, for 10k, 100k and 1M streams
with declared lengths, the time to build the loader, to plan an epoch (shuffled), and to
build the chunk tables of the rows (what ``iter()`` adds), and the memory each keeps
per stream (``tracemalloc``, in separate untimed runs), to show it is O(streams).

Open files: streams opened by openers that each hold a real file open are read through
whole epochs with 0 and 2 workers while the files open in the main process and its
workers are counted every 5 ms; the most seen at once must not exceed ``batch_size``.

Run ``python benchmarks/bench_plan.py`` (about 30 s) or ``--quick`` (up to 100k streams).
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import tempfile
import threading
import time
import tracemalloc

import numpy as np
import psutil

from streamseq import StreamLoader

ROWS, TBINS = 64, 256


def timed(fn):
    """What ``fn()`` returns and the seconds it took."""
    gc.collect()
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def kept(fn) -> int:
    """Bytes that what ``fn()`` returns keeps allocated (tracemalloc: slow, not timed)."""
    gc.collect()
    tracemalloc.start()
    out = fn()
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del out
    return size


def planning(count: int) -> dict:
    rng = np.random.default_rng(0)
    lengths = rng.integers(1000, 10_001, count)
    openers = [functools.partial(np.zeros, int(lengths[0]), np.int64)] * count

    def build() -> StreamLoader:
        return StreamLoader(openers, ROWS, TBINS, lengths=lengths, shuffle=True, seed=1)

    loader, build_s = timed(build)
    loader.set_epoch(1)
    plan, plan_s = timed(loader.plan)
    _, tables_s = timed(lambda: plan.group(plan.rows, loader))
    build_b = kept(build)

    def replan():
        loader.set_epoch(2)
        return loader.plan()

    plan_b = kept(replan)
    tables_b = kept(lambda: plan.group(plan.rows, loader))
    return {
        "streams": count,
        "build_s": build_s,
        "plan_s": plan_s,
        "tables_s": tables_s,
        "build_B": build_b / count,
        "plan_B": plan_b / count,
        "tables_B": tables_b / count,
    }


class FileStream:
    """A stream read from a raw int64 file through an open file object (one fd)."""

    def __init__(self, path: str):
        self.file = open(path, "rb")  # noqa: SIM115 -- kept open until close()
        self.n = os.fstat(self.file.fileno()).st_size // 8

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key: slice) -> np.ndarray:
        a, b, _ = key.indices(self.n)
        self.file.seek(8 * a)
        return np.frombuffer(self.file.read(8 * (b - a)), np.int64)

    def close(self) -> None:
        self.file.close()


def open_file_stream(path: str) -> FileStream:
    return FileStream(path)


class OpenFiles:
    """Most files under ``folder`` open at once in this process and its children."""

    def __init__(self, folder: str):
        self.folder, self.most = folder, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def count(self) -> int:
        me = psutil.Process()
        n = 0
        for p in [me, *me.children(recursive=True)]:
            try:
                n += sum(f.path.startswith(self.folder) for f in p.open_files())
            except psutil.Error:
                pass
        return n

    def run(self) -> None:
        while not self.stop.is_set():
            self.most = max(self.most, self.count())
            time.sleep(0.005)

    def close(self) -> int:
        self.stop.set()
        self.thread.join()
        return self.most


def open_files(count: int, batch: int, workers: int) -> dict:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for k, n in enumerate(rng.integers(20, 200, count).tolist()):
            path = os.path.join(folder, f"s{k}.bin")
            np.arange(n, dtype=np.int64).tofile(path)
            paths.append(path)
        openers = [functools.partial(open_file_stream, p) for p in paths]
        lengths = [os.path.getsize(p) // 8 for p in paths]
        loader = StreamLoader(openers, batch, 4, lengths=lengths, num_workers=workers)
        watch = OpenFiles(folder)
        batches = sum(1 for _ in loader)
        time.sleep(0.05)
        return {
            "streams": count,
            "batch_size": batch,
            "workers": workers,
            "batches": batches,
            "most_open": watch.close(),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="up to 100k streams")
    args = parser.parse_args()
    counts = [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000]
    print(f"planning ({ROWS} rows x {TBINS} steps, shuffled epoch, declared lengths)")
    print(
        f"{'streams':>9s} {'loader':>9s} {'plan':>9s} {'tables':>9s}   "
        f"{'loader':>8s} {'plan':>8s} {'tables':>8s}  (bytes kept per stream)"
    )
    results = [planning(n) for n in counts]
    for r in results:
        print(
            f"{r['streams']:9d} {r['build_s']:8.3f}s {r['plan_s']:8.3f}s {r['tables_s']:8.3f}s   "
            f"{r['build_B']:8.0f} {r['plan_B']:8.0f} {r['tables_B']:8.0f}"
        )
    big = results[-1]
    ok = big["plan_s"] + big["tables_s"] < 2
    print(
        f"planning {big['streams']} streams: {big['plan_s'] + big['tables_s']:.2f} s "
        f"(target < 2 s) {'met' if ok else 'MISSED'}"
    )
    print("\nopen files (streams opened by openers, each holding one file open)")
    for workers in (0, 2):
        r = open_files(300, 16, workers)
        ok = r["most_open"] <= r["batch_size"]
        print(
            f"{r['streams']} streams, batch_size {r['batch_size']}, {workers} workers: "
            f"at most {r['most_open']} files open at once over {r['batches']} batches "
            f"(bound {r['batch_size']}) {'met' if ok else 'MISSED'}"
        )


if __name__ == "__main__":
    main()
