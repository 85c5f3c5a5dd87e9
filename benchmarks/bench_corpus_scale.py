"""A corpus of millions of documents: planning a loader over it, next to the numpy floor.

A language model's corpus is one token file and the start offset of every document (an
index). This script writes both for ``--docs`` documents (default 1M, 10M and 100M) on
``--data`` (default ``$TMPDIR``): the token file is sparse (``truncate``: no disk is
filled, every token reads as 0), the index a ``.npy`` of int64 offsets (documents of 1
to 600 tokens). Each is deleted once measured. Then, each in a fresh process with a
timeout (``--timeout``) and a memory cap (``--max-rss-gb``, sampled by this process),
so that a slow tree cannot hang the run:

- ``floor``: what numpy needs for the same plan: load the offsets, ``diff`` them into
  lengths, ``permutation`` of the documents, ``cumsum`` of the lengths permuted;
- ``build+len``: ``io.token_corpus(path, index=offsets)``, a shuffled
  ``StreamLoader(docs, 64, 256, shuffle=True, rank=0, world_size=8)`` and ``len()``;
- ``resume+1st``: ``load_state_dict`` of the state after the first batch, and the next
  batch;
- ``resident``: the resident memory the build added (RSS after minus before), and the
  peak of the process over the whole measurement minus its RSS before, per document;
- ``state``: the pickled ``state_dict()`` per document.

``--baseline REV`` measures the same in a git worktree of ``REV`` (made in ``--data``,
its C extension built in place, kept for the next run), right after the current tree
for every number of documents, so that the ratios come from one run. ``--ranks 8`` starts
8 processes of 10M documents each (``--rank-docs``) with ``torchrun --nproc-per-node 8``
(gloo, on this machine): each rank's build time and resident memory, and the total of
their proportional set sizes (PSS: a page shared by the ranks, the index in the page
cache, counts once in all). ``--manifest`` plans a manifest of ``--manifest-rows`` video
files (a Parquet of paths and lengths written here; the files need not exist to plan).
``--quick`` is a smoke run of 100k documents and a 100k-row manifest.

Run ``python benchmarks/bench_corpus_scale.py [--docs 1e6,1e7,1e8] [--baseline main]
[--ranks 8] [--manifest] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from worktrees import baseline_tree, git  # noqa: E402

BATCH, TBINS, WORLD = 64, 256, 8
#: documents of 1 to this many tokens (mean about 300)
MAX_TOKENS = 600
#: offsets written at a time (bounds the memory of writing the index)
CHUNK = 1 << 22


# -- data ----------------------------------------------------------------------------------


def write_corpus(folder: str, docs: int, seed: int = 0) -> tuple[str, str]:
    """A sparse uint16 token file and the ``.npy`` of its documents' start offsets."""
    index = os.path.join(folder, "offsets.npy")
    offsets = np.lib.format.open_memmap(index, "w+", np.int64, (docs,))
    rng, at = np.random.default_rng(seed), 0
    for a in range(0, docs, CHUNK):
        lengths = rng.integers(1, MAX_TOKENS + 1, min(CHUNK, docs - a))
        ends = np.cumsum(lengths) + at
        offsets[a : a + len(lengths)] = ends - lengths
        at = int(ends[-1])
    offsets.flush()
    del offsets
    tokens = os.path.join(folder, "tokens.bin")
    with open(tokens, "wb") as f:
        f.truncate(2 * at)  # sparse: no block written
    return tokens, index


def write_manifest(folder: str, rows: int, seed: int = 0) -> str:
    """A Parquet manifest of ``rows`` video files (that need not exist) and their lengths."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    numbers = pc.cast(pa.array(np.arange(rows)), pa.string())
    paths = pc.binary_join_element_wise("clips/", pc.utf8_lpad(numbers, 8, "0"), ".mp4", "")
    lengths = np.random.default_rng(seed).integers(30, 3000, rows)
    where = os.path.join(folder, "videos.parquet")
    pq.write_table(pa.table({"path": paths, "length": lengths}), where)
    return where


# -- what a child measures ---------------------------------------------------------------


def rss() -> int:
    """The resident memory of this process, in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def pss() -> int:
    """The proportional set size of this process, in bytes (shared pages divided)."""
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def imported_from(root: str) -> str:
    """Check that ``import streamseq`` found the tree ``root``; return its file."""
    import streamseq

    where = os.path.realpath(streamseq.__file__)
    if not where.startswith(os.path.realpath(root) + os.sep):
        raise RuntimeError(f"streamseq imported from {where}, expected under {root}")
    return where


def measure_floor(job: dict) -> dict:
    """The numpy floor: offsets loaded, lengths, a permutation and its cumulative sum."""
    before = rss()
    start = time.perf_counter()
    offsets = np.load(job["index"], mmap_mode="r")
    lengths = np.diff(offsets, append=job["tokens"])
    order = np.random.default_rng(0).permutation(len(lengths))
    ends = np.cumsum(lengths[order])
    seconds = time.perf_counter() - start
    return {
        "build_s": seconds,
        "resume_s": seconds,
        "resident": rss() - before,
        "n": int(ends[-1]),
    }


def plan_loader(streams: Any, rank: int | None = 0, world: int | None = WORLD) -> Any:
    import streamseq

    loader = streamseq.StreamLoader(
        streams, BATCH, TBINS, shuffle=True, rank=rank, world_size=world
    )
    len(loader)
    return loader


def resume(loader: Any) -> tuple[float, int]:
    """Seconds of ``load_state_dict`` and the next batch; bytes of the pickled state."""
    batches = iter(loader)
    next(batches)
    state = loader.state_dict()
    del batches
    start = time.perf_counter()
    loader.load_state_dict(state)
    next(iter(loader))
    return time.perf_counter() - start, len(pickle.dumps(state, protocol=5))


def measure_corpus(job: dict) -> dict:
    """``token_corpus`` and a shuffled loader on it: build+len, resume+1st, memory, state."""
    from streamseq.io import token_corpus

    imported_from(job["root"])
    before = rss()
    start = time.perf_counter()
    docs = token_corpus(job["path"], index=job["index"])
    loader = plan_loader(docs)
    build = time.perf_counter() - start
    resident = rss() - before
    resume_s, state = resume(loader)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    return {
        "build_s": build,
        "resume_s": resume_s,
        "resident": resident,
        "peak": peak,
        "state": state,
    }


def measure_manifest(job: dict) -> dict:
    """``io.manifest`` of video files and a shuffled loader on it (no file opened)."""
    from streamseq import io

    imported_from(job["root"])
    if not hasattr(io, "manifest"):
        return {"missing": "io.manifest"}
    import pyarrow.compute
    import pyarrow.csv
    import pyarrow.parquet  # noqa: F401  (imported once: not a cost per row)

    before = rss()
    start = time.perf_counter()
    table = io.manifest(job["manifest"], "video", size=(224, 224))
    loader = plan_loader(table)
    build = time.perf_counter() - start
    resident = rss() - before
    state = len(pickle.dumps(loader.state_dict(), protocol=5))
    return {"build_s": build, "resident": resident, "state": state}


def measure_rank(job: dict) -> dict:
    """One rank of ``torchrun``: the corpus planned with the rank and world of gloo."""
    import torch.distributed as dist

    from streamseq.io import token_corpus

    dist.init_process_group("gloo")
    try:
        imported_from(job["root"])
        dist.barrier()  # every rank builds at the same time
        before = rss()
        start = time.perf_counter()
        loader = plan_loader(token_corpus(job["path"], index=job["index"]), None, None)
        build = time.perf_counter() - start
        result = {"rank": dist.get_rank(), "build_s": build, "resident": rss() - before}
        result["rss"], result["pss"] = rss(), pss()
        dist.barrier()  # every rank still holds its plan while the others measure
        del loader
        out = os.path.join(job["out"], f"rank{result['rank']}.json")
        with open(out, "w") as f:
            json.dump(result, f)
    finally:
        dist.destroy_process_group()
    return result


MEASURES = {
    "floor": measure_floor,
    "corpus": measure_corpus,
    "manifest": measure_manifest,
    "rank": measure_rank,
}


# -- children ------------------------------------------------------------------------------


def tree_rss(pid: int) -> int:
    """Resident memory of a process and its descendants (0 once gone)."""
    import psutil

    try:
        process = psutil.Process(pid)
        family = [process, *process.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in family:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def run_child(job: dict, timeout: float, max_rss: float, cmd: list[str] | None = None) -> dict:
    """Run ``job`` in a fresh process group; stop it past ``timeout`` s or ``max_rss`` bytes.

    Returns the child's result, or ``{"error": ...}`` saying why there is none.
    """
    cmd = cmd or [sys.executable, os.path.abspath(__file__), "--child", json.dumps(job)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [job["root"], env.get("PYTHONPATH")]))
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(
            cmd, stdout=out, stderr=err, text=True, env=env, start_new_session=True
        )
        deadline, peak, why = time.monotonic() + timeout, 0, None
        while child.poll() is None:
            peak = max(peak, tree_rss(child.pid))
            if time.monotonic() > deadline:
                why = f"timeout after {timeout:.0f} s"
            elif peak > max_rss:
                why = f"over {max_rss / 1e9:.1f} GB resident"
            if why:
                os.killpg(child.pid, 9)
                child.wait()
                break
            time.sleep(0.05)
        out.seek(0)
        err.seek(0)
        if why:
            return {"error": why, "sampled_peak": peak}
        if child.returncode != 0:
            return {"error": f"exit {child.returncode}: {err.read()[-2000:]}"}
        lines = out.read().strip().splitlines()
        result = json.loads(lines[-1]) if lines else {}
    result["sampled_peak"] = peak
    return result


# -- the run ---------------------------------------------------------------------------------


def per_doc(result: dict, key: str, n: int) -> float | None:
    value = result.get(key)
    return None if value is None else value / n


def measure_docs(n: int, trees: dict[str, str], args: argparse.Namespace) -> dict:
    """Every measurement of ``n`` documents, on every tree, on one corpus written here."""
    folder = tempfile.mkdtemp(prefix="corpus-scale-", dir=args.data)
    try:
        path, index = write_corpus(folder, n)
        tokens = os.path.getsize(path) // 2
        job = {"path": path, "index": index, "tokens": tokens, "root": REPO}
        rows = {"floor": run_child({**job, "what": "floor"}, args.timeout, args.max_rss)}
        for name, root in trees.items():
            rows[name] = run_child(
                {**job, "what": "corpus", "root": root}, args.timeout, args.max_rss
            )
            if args.manifest and n == min(args.docs):
                where = write_manifest(folder, args.manifest_rows)
                mjob = {"manifest": where, "root": root, "what": "manifest"}
                rows[f"{name} manifest"] = run_child(mjob, args.timeout, args.max_rss)
        return {"docs": n, "tokens": tokens, "rows": rows}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def measure_ranks(ranks: int, n: int, args: argparse.Namespace) -> dict:
    """``ranks`` processes of ``n`` documents each, through torchrun and gloo."""
    folder = tempfile.mkdtemp(prefix="corpus-ranks-", dir=args.data)
    try:
        path, index = write_corpus(folder, n)
        job = {"what": "rank", "path": path, "index": index, "root": REPO, "out": folder}
        torchrun = shutil.which("torchrun") or os.path.join(
            os.path.dirname(sys.executable), "torchrun"
        )
        cmd = [
            torchrun,
            "--standalone",
            f"--nproc-per-node={ranks}",
            os.path.abspath(__file__),
            "--child",
            json.dumps(job),
        ]
        result = run_child(job, args.timeout, args.max_rss * ranks, cmd)
        found = []
        for r in range(ranks):
            try:
                with open(os.path.join(folder, f"rank{r}.json")) as f:
                    found.append(json.load(f))
            except OSError:
                pass
        return {"ranks": ranks, "docs": n, "run": result, "each": found}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value:.3f}" if value < 10 else f"{value:.1f}"
    return f"{value:.2f}" if value < 10 else f"{value:.0f}"


def report(results: list[dict], trees: list[str], ranks: dict | None) -> str:
    """The table of the run."""
    lines = []
    head = f"{'docs':>6} {'measure':<22} {'numpy':>9}"
    for t in trees:
        head += f" {t:>12} {'x numpy':>8}"
    if len(trees) == 2:
        head += f" {'ratio':>7}"
    lines.append(head)
    measures = [
        ("build+len (s)", "build_s", "s", False),
        ("resume+1st batch (s)", "resume_s", "s", False),
        ("resident (B/doc)", "resident", "B", True),
        ("peak (B/doc)", "peak", "B", True),
        ("state (B/doc)", "state", "B", True),
    ]
    for res in results:
        n, rows = res["docs"], res["rows"]
        label = f"{n / 1e6:g}M" if n >= 1e6 else f"{n / 1e3:g}k"
        for title, key, unit, divide in measures:
            floor = rows["floor"].get(key if key != "peak" else "resident")
            floor_v = None if floor is None or key in ("state", "peak") else floor
            if divide and floor_v is not None:
                floor_v /= n
            line = f"{label:>6} {title:<22} {fmt(floor_v, unit):>9}"
            values = []
            for t in trees:
                row = rows.get(t, {})
                if "error" in row:
                    line += f" {row['error'][:12]:>12} {'':>8}"
                    values.append(None)
                    continue
                v = row.get(key)
                v = v / n if (divide and v is not None) else v
                values.append(v)
                ratio = v / floor_v if v is not None and floor_v and unit == "s" else None
                line += f" {fmt(v, unit):>12} {fmt(ratio, 'x'):>8}"
            if len(values) == 2 and values[0] is not None and values[1]:
                line += f" {values[0] / values[1]:>7.3f}"
            lines.append(line)
            label = ""
        for t in trees:
            m = rows.get(f"{t} manifest")
            if m is None:
                continue
            if "error" in m or "missing" in m:
                lines.append(f"{'':>6} manifest ({t}): {m.get('error') or 'no ' + m['missing']}")
            else:
                lines.append(
                    f"{'':>6} manifest of video files ({t}): "
                    f"build+len {fmt(m['build_s'], 's')} s, "
                    f"resident {m['resident'] / m.get('rows', 1):.0f} B, state {m['state']} B"
                )
    if ranks is not None:
        each = ranks["each"]
        lines.append(
            f"{ranks['ranks']} ranks x {ranks['docs'] / 1e6:g}M documents (torchrun, gloo):"
        )
        if "error" in ranks["run"]:
            lines.append(f"  {ranks['run']['error']}")
        for r in sorted(each, key=lambda r: r["rank"]):
            lines.append(
                f"  rank {r['rank']}: build+len {fmt(r['build_s'], 's')} s, resident "
                f"+{r['resident'] / 1e6:.0f} MB, RSS {r['rss'] / 1e9:.2f} GB, "
                f"PSS {r['pss'] / 1e9:.2f} GB"
            )
        if each:
            total = sum(r["pss"] for r in each)
            lines.append(
                f"  total PSS {total / 1e9:.2f} GB (target < 8 GB), sum of RSS "
                f"{sum(r['rss'] for r in each) / 1e9:.2f} GB, sampled peak of all "
                f"{ranks['run'].get('sampled_peak', 0) / 1e9:.2f} GB"
            )
    return "\n".join(lines)


def parse_docs(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=parse_docs, default=[10**6, 10**7, 10**8])
    parser.add_argument("--baseline", default=None, help="a git revision measured beside")
    parser.add_argument("--ranks", type=int, default=0)
    parser.add_argument("--rank-docs", type=float, default=1e7)
    parser.add_argument("--manifest", action="store_true")
    parser.add_argument("--manifest-rows", type=float, default=1e6)
    parser.add_argument("--data", default=tempfile.gettempdir())
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--max-rss-gb", type=float, default=14)
    parser.add_argument("--quick", action="store_true", help="100k documents, a 100k manifest")
    parser.add_argument("--json", default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        job = json.loads(args.child)
        print(json.dumps(MEASURES[job["what"]](job)))
        return {}
    if args.quick:
        args.docs, args.manifest, args.manifest_rows = [10**5], True, 1e5
    args.manifest_rows = int(args.manifest_rows)
    args.max_rss = args.max_rss_gb * 1e9
    trees = {"current": REPO}
    if args.baseline:
        trees["baseline"] = baseline_tree(args.baseline, args.data)
    head = git("rev-parse", "--short", "HEAD")
    base = (
        f", baseline {args.baseline} = {git('rev-parse', '--short', args.baseline)}"
        if args.baseline
        else ""
    )
    title = (
        f"corpus scale: StreamLoader(docs, {BATCH}, {TBINS}, shuffle=True), rank 0 of {WORLD}; "
        f"current {head}{base}; {os.cpu_count()} cores"
    )
    results = [measure_docs(n, trees, args) for n in args.docs]
    for res in results:  # the manifest's resident memory per row
        for key, row in res["rows"].items():
            if key.endswith("manifest"):
                row["rows"] = args.manifest_rows
    ranks = measure_ranks(args.ranks, int(args.rank_docs), args) if args.ranks else None
    text = report(results, list(trees), ranks)
    print(title)
    print(text)
    out = {"title": title, "results": results, "ranks": ranks, "table": text}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
