"""Reading through a local S3 server against reading the same files from disk.

Writes H.264 clips and ``.npy`` token files to a temporary folder, starts moto's S3
server (``ThreadedMotoServer``, in a process of its own, on a free port of 127.0.0.1),
uploads the files to a bucket, and times, for videos and tokens, from disk and from
``s3://`` URLs (``storage_options`` with the endpoint), interleaved, ``--repeat`` times:

- ``probe``: :func:`streamseq.io.probe_lengths` of the openers, 2 workers, no cache
  (a video's length is a demuxing pass over the whole file; a token file's, its header);
- ``first``: from ``iter(loader)`` to the first batch (worker start-up included; each
  run's is printed too: the first run from S3 also imports s3fs in the main process);
- ``epoch steps/s``: frames or tokens delivered per second over the whole epoch by
  ``StreamLoader(openers, B, T, num_workers=2, lengths=...)``, start-up included;
- ``steps/s after``: the same after the first batch (the steady state), and its
  S3 / disk ratio;
- ``request floor``: the first block of each file the first batch starts (one a row),
  fetched from 2 processes of 8 threads whose S3 clients exist already: what the
  requests alone cost on this server, with no loader.

The medians are printed as a table. The
planning of a 100k-document token corpus (local only: ``io.token_corpus`` takes paths) is
timed by ``bench_corpus.py``, which this script runs and quotes.

Needs the ``remote`` extra and ``moto[server]``. Run:
``python benchmarks/bench_remote.py [--quick] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import multiprocessing
import os
import socket
import statistics
import sys
import tempfile
import time
from typing import Any

import av
import numpy as np

from streamseq import StreamLoader
from streamseq.io import probe_lengths, tokens, video

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_corpus  # noqa: E402

WORKERS = 2


def serve(port: int, ready: Any, stop: Any) -> None:
    """Run moto's S3 server on ``port`` until ``stop`` is set (in a child process)."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    ready.set()
    stop.wait()
    server.stop()


@contextlib.contextmanager
def s3_server() -> Any:
    """A moto S3 server in a process of its own; yields its endpoint URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    process = ctx.Process(target=serve, args=(port, ready, stop), daemon=True)
    process.start()
    try:
        if not ready.wait(60):
            raise RuntimeError("the S3 server did not start")
        yield f"http://127.0.0.1:{port}"
    finally:
        stop.set()
        process.join(10)
        if process.is_alive():
            process.kill()


def write_files(folder: str, clips: int, frames: int, docs: int) -> dict[str, list[str]]:
    """H.264 clips of 224x224 (``frames`` to 4x as many) and int32 token files."""
    rng = np.random.default_rng(0)
    videos, token_files = [], []
    for k in range(clips):
        path = os.path.join(folder, f"clip{k:02d}.mp4")
        n = frames + (k * 3 * frames) // max(1, clips - 1)
        with av.open(path, "w") as out:
            stream = out.add_stream("libx264", rate=25)
            stream.height, stream.width, stream.pix_fmt = 224, 224, "yuv420p"
            noise = rng.integers(0, 255, (224, 224, 3), np.uint8)
            for i in range(n):
                image = np.roll(noise, 4 * i, axis=1)
                out.mux(stream.encode(av.VideoFrame.from_ndarray(image, "rgb24")))
            out.mux(stream.encode())
        videos.append(path)
    for k in range(docs):
        path = os.path.join(folder, f"doc{k:03d}.npy")
        np.save(path, rng.integers(0, 50000, int(rng.integers(20_000, 100_000)), np.int32))
        token_files.append(path)
    return {"video": videos, "tokens": token_files}


def upload(endpoint: str, paths: list[str]) -> list[str]:
    """Put the files in the bucket ``bench``; their URLs."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
    )
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket="bench")
    urls = []
    for path in paths:
        name = os.path.basename(path)
        with open(path, "rb") as f:
            client.put_object(Bucket="bench", Key=name, Body=f.read())
        urls.append(f"s3://bench/{name}")
    return urls


_FLOOR: dict[str, Any] = {}


def _floor_start(options: dict[str, Any], url: str) -> None:
    """Make this process's filesystem (its S3 client) before the clock, in a pool process."""
    from streamseq.io.remote import filesystem

    _FLOOR["fs"] = filesystem(url, options)


def _floor_get(files: list[tuple[str, int]]) -> int:
    """The first block of each ``(url, size)``, from 8 threads of this process: bytes read."""
    from concurrent.futures import ThreadPoolExecutor

    from streamseq.io.remote import BLOCK_SIZE

    fs = _FLOOR["fs"]
    with ThreadPoolExecutor(8) as pool:
        return sum(
            pool.map(lambda f: len(fs.cat_file(f[0], start=0, end=min(f[1], BLOCK_SIZE))), files)
        )


def request_floor(
    urls: list[str], sizes: list[int], options: dict[str, Any], repeat: int
) -> float:
    """Seconds to GET the first block of ``urls`` from 2 processes of 8 threads (median).

    The floor of a first batch whose rows start these files: one request a file, the
    requests of each worker overlapping, the clients made before the clock (a worker of
    the loader makes its own in the pass). What is left between it and the first batch
    from disk is the request path's: the client's Python and the server's.
    """
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(WORKERS, _floor_start, (options, urls[0])) as pool:
        pool.map(time.sleep, [0.0] * WORKERS)  # (started)
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            files = list(zip(urls, sizes, strict=True))
            pool.map(_floor_get, [files[k::WORKERS] for k in range(WORKERS)])
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_once(kind: str, openers: list[Any], shape: tuple[int, int]) -> dict[str, float]:
    """Probe the lengths, then read one epoch with two workers."""
    start = time.perf_counter()
    lengths = probe_lengths(openers, num_workers=WORKERS, progress=False)
    probe_s = time.perf_counter() - start
    loader = StreamLoader(openers, *shape, num_workers=WORKERS, lengths=lengths)
    steps, first, first_steps = 0, 0.0, 0
    start = time.perf_counter()
    for batch in loader:
        steps += int(batch.valid.sum())
        if not first:
            first, first_steps = time.perf_counter() - start, steps
    seconds = time.perf_counter() - start
    assert steps == sum(lengths), (kind, steps, sum(lengths))
    return {
        "probe": probe_s,
        "first": first,
        "rate": steps / seconds,
        "after": (steps - first_steps) / max(seconds - first, 1e-9),
        "steps": steps,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter files")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--documents", type=int, default=100_000, help="of the corpus plan")
    args = parser.parse_args(argv)
    clips, frames, docs = (6, 30, 16) if args.quick else (16, 60, 64)
    shapes = {"video": (8, 8), "tokens": (64, 256)}
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as folder, s3_server() as endpoint:
        files = write_files(folder, clips, frames, docs)
        options = {
            "key": "bench",
            "secret": "bench",
            "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        }
        sources = {"video": video, "tokens": tokens}
        openers, floors = {}, {}
        for kind, paths in files.items():
            urls = upload(endpoint, paths)
            # the files of a first batch: one per row (as many rows as files, or fewer)
            rows = shapes[kind][0]
            sizes = [os.path.getsize(p) for p in paths[:rows]]
            floors[kind] = request_floor(urls[:rows], sizes, options, args.repeat)
            openers[kind, "disk"] = [functools.partial(sources[kind], p) for p in paths]
            openers[kind, "s3"] = [
                functools.partial(sources[kind], u, storage_options=options) for u in urls
            ]
        sizes = {k: sum(os.path.getsize(p) for p in v) / 1e6 for k, v in files.items()}
        for _ in range(args.repeat):
            for (kind, where), ops in openers.items():
                results.setdefault((kind, where), []).append(run_once(kind, ops, shapes[kind]))
    with contextlib.redirect_stdout(io.StringIO()):
        corpus = bench_corpus.main(["--documents", str(args.documents), "--repeat", "1"])

    def median(kind: str, where: str, field: str) -> float:
        return statistics.median(r[field] for r in results[kind, where])

    print(
        f"{clips} clips of 224x224 ({sizes['video']:.1f} MB), {docs} token files "
        f"({sizes['tokens']:.1f} MB); {WORKERS} workers; median of {args.repeat}"
    )
    print()
    print(
        "| source | read from | steps | probe (s) | first batch (s) | request floor (s) "
        "| epoch steps/s | steps/s after | S3 / disk |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    table = {}
    for kind, unit in (("video", "frames"), ("tokens", "tokens")):
        disk = median(kind, "disk", "after")
        for where in ("disk", "s3"):
            after = median(kind, where, "after")
            table[kind, where] = after
            steps = int(results[kind, where][0]["steps"])
            print(
                f"| {kind} | {'local S3' if where == 's3' else 'disk'} | {steps:,} {unit} "
                f"| {median(kind, where, 'probe'):.2f} | {median(kind, where, 'first'):.2f} "
                f"| {floors[kind] if where == 's3' else 0:.2f} "
                f"| {median(kind, where, 'rate'):,.0f} | {after:,.0f} | {after / disk:.2f} |"
            )
    print()
    print("First batch of each run (s; the first S3 run of the process also imports s3fs):")
    for (kind, where), runs in results.items():
        print(f"  {kind} {where}: " + " ".join(f"{r['first']:.3f}" for r in runs))
    plan = corpus["split_s"] + corpus["loader_s"]
    print()
    print(
        f"Planning {corpus['documents']:,} token-corpus documents (bench_corpus.py, disk): "
        f"{plan * 1e3:.0f} ms (token_corpus {corpus['split_s'] * 1e3:.0f} ms + "
        f"StreamLoader and len {corpus['loader_s'] * 1e3:.0f} ms)"
    )
    print(
        "Request floor: the first block of each file of the first batch (one per row), "
        f"GET from {WORKERS} processes of 8 threads whose clients were made before the clock."
    )
    return {"rates": table, "results": results, "corpus_plan_s": plan, "floors": floors}


if __name__ == "__main__":
    main()
