"""seqtools' ``prefetch`` against streamseq's worker pool, on the same lazy sequences.

The workloads of ``bench_throughput.py`` (its data functions are imported from it):
``tokens`` (in-memory int64 token streams, batches of 64 x 256) and ``video`` (H.264
clips of 224x224, batches of 8 x 8 RGB frames), each read by four pipelines with 2
worker processes, side by side in one run:

- ``streamseq``: ``StreamLoader(streams, B, T, num_workers=2)``: one worker per group of
  rows, each reading its rows in order and writing micro-batches into shared memory; the
  main process assembles each batch with one copy into torch tensors. Its workers start
  at every pass; a second row keeps them (``persistent_workers=True``).
- ``seqtools``: ``seqtools.prefetch(batches, nworkers=2, method="process", shm_size=...)``
  over ``zip_batch([tbin(row, T) for row in interleave_streams(streams, B, tbins=T)])``: whole
  batches are jobs on one queue, taken by whichever worker is free; a worker pickles the
  batch into a slot of shared memory and the main process gets numpy views of that slot
  (no copy; a slot is free again once the batch is dropped).
- ``seqtools, per group``: one ``seqtools.prefetch(group, nworkers=1, ...)`` per group of
  rows (``split_by_worker``), the micro-batches concatenated in the main process: what it
  takes to keep every worker on its own rows with seqtools.

Every pipeline delivers the same batches (a checksum of the first epoch of each). Columns:
steps per second after the first batch, the time to the first batch from a new pipeline
(seqtools starts its workers when ``prefetch`` is called, streamseq at ``iter``) and in
a later pass, CPU seconds per step of the process and its workers (psutil over the
process tree, worker starts included), each in a fresh process whose ``streamseq`` is
this tree's, medians of ``--repeats``.

Then what each does when a worker is killed (``SIGKILL`` after 5 batches) or a stream
never returns (a read that sleeps forever), each in a fresh process group killed after
``--hang-after`` seconds: the exception and its message, after how long, or a hang. And
who reads what: the worker that built every batch (seqtools) against the fixed groups of
rows (streamseq), and how many of a worker's chunks of a row do not follow the chunk it
read before from that row (for video: frames decoded and skipped, or a seek).

Run ``python benchmarks/bench_seqtools.py`` (about 3 minutes on 2 cores) or ``--quick``
(smaller data, one repeat, under 2 minutes). Needs the ``bench`` extra and seqtools.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from typing import Any

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(REPO, "benchmarks"), REPO]  # this tree's streamseq, not another
from bench_throughput import (  # noqa: E402
    B_TOKENS,
    B_VIDEO,
    SIZE,
    T_TOKENS,
    T_VIDEO,
    check_import,
    frames_in,
    load,
    machine,
    make_clips,
    per_step,
    token_streams,
)

WORKERS = 2
PIPELINES = ("streamseq", "streamseq-persistent", "seqtools", "seqtools-groups")
LABELS = {
    "streamseq": "streamseq StreamLoader, 2 workers",
    "streamseq-persistent": "streamseq StreamLoader, 2 persistent workers",
    "seqtools": "seqtools.prefetch(zip_batch), 2 proc.",
    "seqtools-groups": "seqtools.prefetch per group, 1 proc. each",
}


# -- the sequences -------------------------------------------------------------------------


def sources(workload: str, count: int, data: str) -> tuple[list[Any], int, int, Any]:
    """(streams, batch size, tbins, spec) of a workload."""
    import streamseq.io

    if workload == "video":
        streams = [streamseq.io.video(p) for p in make_clips(data, count)]
        return streams, B_VIDEO, T_VIDEO, np.zeros((0, SIZE, SIZE, 3), np.uint8)
    return token_streams(count), B_TOKENS, T_TOKENS, np.zeros(0, np.int64)


def zipped(rows: list[Any], tbins: int, spec: Any, length: int | None = None) -> Any:
    """The batches of ``rows``: ``zip_batch`` of their chunks."""
    import streamseq

    return streamseq.zip_batch([streamseq.tbin(r, tbins) for r in rows], length=length, spec=spec)


def batch_bytes(batch_size: int, tbins: int, spec: Any) -> int:
    """Bytes of one batch (data, reset, valid, stream, step)."""
    step = int(np.prod(spec.shape[1:], dtype=np.int64)) * spec.dtype.itemsize
    return batch_size * tbins * (step + 1 + 8 + 8) + batch_size


def shm_for(batch_size: int, tbins: int, spec: Any, buffered: int = 10) -> int:
    """``shm_size`` for seqtools: ``buffered`` slots (its default), each fits a batch."""
    return buffered * (batch_bytes(batch_size, tbins, spec) + 5 * 4096)


class Assembled:
    """One ``seqtools.prefetch`` per group of rows, micro-batches concatenated here."""

    def __init__(self, groups: list[Any]):
        self.groups = groups

    def __len__(self) -> int:
        return len(self.groups[0])

    def __iter__(self) -> Any:
        from streamseq import Batch

        for parts in zip(*self.groups, strict=True):
            yield Batch(*(np.concatenate(f) for f in zip(*parts, strict=True)))


def pipeline(kind: str, streams: list[Any], b: int, t: int, spec: Any, **extra: Any) -> Any:
    """An iterable of batches: one of :data:`PIPELINES` over ``streams``."""
    import seqtools

    import streamseq

    if kind == "streamseq":
        return streamseq.StreamLoader(streams, b, t, num_workers=WORKERS, **extra)
    if kind == "streamseq-persistent":
        return streamseq.StreamLoader(
            streams, b, t, num_workers=WORKERS, persistent_workers=True, **extra
        )
    rows = streamseq.interleave_streams(streams, b, tbins=t)  # the loader's plan
    if kind == "seqtools":
        shm = shm_for(b, t, spec)
        return seqtools.prefetch(zipped(rows, t, spec), WORKERS, "process", shm_size=shm)
    length = len(zipped(rows, t, spec))  # every group runs until the longest row ends
    groups = streamseq.split_by_worker(rows, WORKERS)
    shm = [shm_for(len(g), t, spec) for g in groups]
    return Assembled(
        [
            seqtools.prefetch(zipped(g, t, spec, length), 1, "process", shm_size=s)
            for g, s in zip(groups, shm, strict=True)
        ]
    )


def tree_cpu() -> float:
    """CPU seconds (user + system) of this process, its live descendants and joined children."""
    import psutil

    me = psutil.Process()
    t = me.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in me.children(recursive=True):
        try:
            c = child.cpu_times()
            total += c.user + c.system
        except psutil.Error:
            pass
    return total


# -- child: throughput ---------------------------------------------------------------------


def measure(job: dict) -> dict:
    """One pipeline on one workload in this process: rate, first batch, CPU per step."""
    streams, b, t, spec = sources(job["workload"], job["count"], job["data"])
    total = sum(len(s) for s in streams)
    cpu0 = tree_cpu()
    made = time.perf_counter()  # seqtools starts its workers here, streamseq at iter()
    loader = pipeline(job["kind"], streams, b, t, spec)
    steps = seconds = 0.0
    firsts, epochs, checked = [], 0, None
    while epochs < job["min_epochs"] or seconds < job["min_seconds"]:
        start = made if epochs == 0 else time.perf_counter()
        it = iter(loader)
        first_batch = next(it)
        first = time.perf_counter()
        digest = fold(0, first_batch) if epochs == 0 else 0
        del first_batch
        for batch in it:
            if epochs == 0:
                digest = fold(digest, batch)
            del batch
        end = time.perf_counter()
        if epochs == 0:
            checked = digest
        firsts.append(first - start)
        steps += total - b * t
        seconds += end - first
        epochs += 1
        del it
    cpu = tree_cpu() - cpu0  # (workers joined, or still live: seqtools', persistent ones)
    return {
        "steps_per_s": steps / seconds,
        "first_s": firsts[0],  # from a new pipeline
        "later_first_s": statistics.median(firsts[1:] or firsts),
        "cpu_per_step": cpu / (epochs * total),
        "epochs": epochs,
        "digest": checked,
    }


def fold(h: int, batch: Any) -> int:
    """A running checksum of the valid data and positions (same batches, same value)."""
    valid = np.asarray(batch.valid)
    data = np.asarray(batch.data)[valid].astype(np.int64)
    step = np.asarray(batch.step)[valid]
    stream = np.asarray(batch.stream)[valid]
    x = int(data.sum() % 1_000_003) * 7 + int((step * (stream + 3)).sum() % 1_000_003)
    return (h * 31 + x) % (1 << 61)


# -- child: faults -------------------------------------------------------------------------


class Stuck:
    """A token stream whose read of step ``at`` never returns."""

    def __init__(self, n: int, at: int):
        self.n, self.at = n, at
        self.data = np.arange(n, dtype=np.int64)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key: slice) -> np.ndarray:
        if key.start <= self.at < key.stop:
            time.sleep(3600)
        return self.data[key]


def worker_pids() -> list[int]:
    """Live worker processes of this process (multiprocessing's helpers left out)."""
    import psutil

    out = []
    for c in psutil.Process().children(recursive=True):
        try:
            if "resource_tracker" not in " ".join(c.cmdline()):
                out.append(c.pid)
        except psutil.Error:
            pass
    return out


def fault(job: dict) -> dict:
    """Kill a worker after 5 batches, or read a stream that hangs; what the consumer sees."""
    streams, b, t, spec = sources("tokens", job["count"], job["data"])
    extra = {"timeout": job["timeout"]} if job.get("timeout") else {}
    if job["fault"] == "hang":
        streams = list(streams)
        streams[3] = Stuck(len(streams[3]), 2 * t)  # row 3, its third chunk
    loader = pipeline(job["kind"], streams, b, t, spec, **extra)
    expected = len(loader)
    it, got = iter(loader), 0
    start = time.monotonic()
    try:
        for _ in it:
            got += 1
            if job["fault"] == "kill" and got == 5:
                pids = worker_pids()
                os.kill(pids[-1], signal.SIGKILL)
                start = time.monotonic()
    except BaseException as e:  # noqa: BLE001 (what is raised is the result)
        message = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return {
            "outcome": f"raises {type(e).__name__}: {message}",
            "seconds": time.monotonic() - start,
            "batches": got,
            "of": expected,
        }
    return {
        "outcome": "no error",
        "seconds": time.monotonic() - start,
        "batches": got,
        "of": expected,
    }


# -- child: who reads what ----------------------------------------------------------------


def owners(job: dict) -> dict:
    """The worker that built each batch, and the chunks that do not follow the last one read.

    For seqtools, the worker of batch ``i`` (``os.getpid()`` in the worker, through
    ``seqtools.smap``); for streamseq, the fixed groups of rows (``split_by_worker``).
    A jump: a worker reads chunk ``i`` of a row after reading another chunk of that row
    than ``i - 1`` (frames decoded and skipped, or a seek, for video).
    """
    import seqtools

    import streamseq

    streams, b, t, spec = sources(job["workload"], job["count"], job["data"])
    rows = streamseq.interleave_streams(streams, b, tbins=t)  # the loader's plan
    batches = zipped(rows, t, spec)
    pids = list(
        seqtools.prefetch(
            seqtools.smap(lambda _batch: os.getpid(), batches), WORKERS, "process", shm_size=0
        )
    )
    last: dict[tuple[int, int], int] = {}
    readers: dict[int, set[int]] = {}
    reads = jumps = 0
    for i, pid in enumerate(pids):
        for r in range(b):
            if i < len(batches.parts[r]):
                reads += 1
                jumps += last.get((pid, r), -1) != i - 1
                last[pid, r] = i
                readers.setdefault(r, set()).add(pid)
    workers_per_row = min(len(p) for p in readers.values())
    same = sum(p == q for p, q in zip(pids, pids[1:], strict=False)) / max(1, len(pids) - 1)
    return {
        "batches": len(pids),
        "workers": len(set(pids)),
        "workers_per_row": workers_per_row,
        "reads": reads,
        "jumps": jumps,
        "same_as_previous": same,
    }


# -- parent --------------------------------------------------------------------------------


def child(job: dict, timeout: float | None = None) -> dict:
    """Run ``job`` in a fresh process group; ``{"hang": seconds}`` if killed at ``timeout``."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(job)]
    env = dict(os.environ)  # the tree to time comes first on the path
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
    )
    start = time.monotonic()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the child and its workers
        proc.communicate()
        return {"hang": time.monotonic() - start}
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # workers left behind by a child that ended
        except ProcessLookupError:
            pass
    if proc.returncode != 0:
        raise RuntimeError(f"{job} failed:\n{err[-4000:]}")
    return json.loads(out.strip().splitlines()[-1])


def throughput_table(args: argparse.Namespace, counts: dict[str, int]) -> str:
    workloads = ["tokens", "video"] if args.workload == "both" else [args.workload]
    results: dict[tuple[str, str], list[dict]] = {}
    for _ in range(args.repeats):
        for w in workloads:
            for kind in PIPELINES:
                job = {"mode": "measure", "workload": w, "kind": kind, "count": counts[w]}
                job.update(data=args.data, min_epochs=args.min_epochs, min_seconds=args.seconds)
                results.setdefault((w, kind), []).append(child(job))
    lines = [
        "| workload | pipeline | steps/s | x streamseq | 1st batch, new | 1st batch, later "
        "| CPU/step | same batches |",
        "|---|---|---:|---:|---:|---:|---:|:---:|",
    ]
    for w in workloads:
        ref = statistics.median(r["steps_per_s"] for r in results[w, "streamseq"])
        digest = results[w, "streamseq"][0]["digest"]
        for kind in PIPELINES:
            rs = results[w, kind]
            rate = statistics.median(r["steps_per_s"] for r in rs)
            first = statistics.median(r["first_s"] for r in rs)
            later = statistics.median(r["later_first_s"] for r in rs)
            cpu = statistics.median(r["cpu_per_step"] for r in rs)
            same = "yes" if all(r["digest"] == digest for r in rs) else "NO"
            unit = "tokens" if w == "tokens" else "frames"
            lines.append(
                f"| {w} | {LABELS[kind]} | {rate:,.0f} {unit} | {rate / ref:.2f} "
                f"| {1e3 * first:.0f} ms | {1e3 * later:.0f} ms | {per_step(cpu)} | {same} |"
            )
    return "\n".join(lines)


def fault_table(args: argparse.Namespace) -> str:
    cases = [
        ("kill", "streamseq", None),
        ("kill", "seqtools", None),
        ("hang", "streamseq", None),
        ("hang", "streamseq", args.stuck_timeout),
        ("hang", "seqtools", None),
    ]
    lines = [
        "| fault | pipeline | outcome | after | batches delivered |",
        "|---|---|---|---:|---:|",
    ]
    for what, kind, timeout in cases:
        job = {"mode": "fault", "fault": what, "kind": kind, "timeout": timeout}
        job.update(count=args.fault_streams, data=args.data)
        r = child(job, timeout=args.hang_after)
        name = LABELS[kind] + (f", timeout={timeout:g}" if timeout else "")
        if "hang" in r:
            lines.append(f"| {what} | {name} | hangs (killed) | > {r['hang']:.0f} s | ? |")
        else:
            outcome = r["outcome"].replace("|", "/")
            if len(outcome) > 150:
                outcome = outcome[:147] + "..."
            lines.append(
                f"| {what} | {name} | {outcome} | {r['seconds']:.1f} s "
                f"| {r['batches']} of {r['of']} |"
            )
    return "\n".join(lines)


def owners_table(args: argparse.Namespace, counts: dict[str, int]) -> str:
    lines = [
        "| workload | pipeline | workers per row (fewest) | chunks that do not follow "
        "the worker's last chunk of the row | batches by the worker of the batch before |",
        "|---|---|---:|---:|---:|",
    ]
    workloads = ["tokens", "video"] if args.workload == "both" else [args.workload]
    for w in workloads:
        job = {"mode": "owners", "workload": w, "count": counts[w], "data": args.data}
        r = child(job)
        lines.append(f"| {w} | {LABELS['streamseq']} | 1 | 0 | (fixed groups of rows) |")
        lines.append(
            f"| {w} | {LABELS['seqtools']} | {r['workers_per_row']} | "
            f"{r['jumps']} of {r['reads']} ({r['jumps'] / r['reads']:.0%}) "
            f"| {r['same_as_previous']:.0%} of {r['batches']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="smaller data, one repeat")
    parser.add_argument("--workload", choices=["tokens", "video", "both"], default="both")
    parser.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "streamseq-bench"))
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--hang-after", type=float, default=None, help="seconds (a hang)")
    parser.add_argument("--stuck-timeout", type=float, default=3.0)
    args = parser.parse_args(argv)
    if args.child:
        check_import(REPO)  # raises unless streamseq is this tree's, built
        job = json.loads(args.child)
        run = {"measure": measure, "fault": fault, "owners": owners}[job["mode"]]
        print(json.dumps(run(job)))
        return
    counts = {"tokens": 128, "video": 8} if args.quick else {"tokens": 512, "video": 24}
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.hang_after = args.hang_after or (10.0 if args.quick else 15.0)
    args.min_epochs, args.seconds = (1, 1.0) if args.quick else (2, 2.0)
    args.fault_streams = 512  # workers are busy when one is killed
    import streamseq

    where = os.path.dirname(check_import(REPO))
    print(f"streamseq {streamseq.__version__} ({where}), seqtools {version('seqtools')}")
    print(f"{machine()}; {load()} (at the start)")
    started = time.monotonic()
    if args.workload in ("video", "both"):
        make_clips(args.data, counts["video"])  # made before the timings
        frames = sum(frames_in(p) for p in make_clips(args.data, counts["video"]))
        print(f"video: {counts['video']} clips, {frames} frames")
    print("\nThroughput (medians of", args.repeats, "fresh processes each)\n")
    print(throughput_table(args, counts))
    print("\nWho reads what\n")
    print(owners_table(args, counts))
    print(
        f"\nFaults (tokens, {args.fault_streams} streams; a hang is killed after "
        f"{args.hang_after:g} s)\n"
    )
    print(fault_table(args))
    print(f"\n{load()} (at the end); {time.monotonic() - started:.0f} s in all")


if __name__ == "__main__":
    main()
