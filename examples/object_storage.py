"""Read videos and token files from an S3-compatible bucket (AWS S3, MinIO, Ceph, R2, ...).

Writes a few short videos and token files, uploads them under a prefix of a bucket, then
reads them back by URL only:

1. the URLs are listed with the fsspec filesystem of the bucket;
2. :func:`streamseq.io.probe_lengths` measures the streams in two worker processes and
   keeps their lengths in a cache file keyed by URL and ETag: the second call asks the
   server for the ETags only and measures nothing;
3. :class:`streamseq.StreamLoader` reads batches of frames and of tokens with two worker
   processes, each with its own connection, fetching 4 MiB ranges ahead.

The endpoint and the credentials reach every source as ``storage_options``, the keyword
arguments of ``s3fs.S3FileSystem``.

Run: ``python examples/object_storage.py --endpoint http://127.0.0.1:9000 --key minioadmin
--secret minioadmin --bucket data`` (needs ``pip install 'streamseq[remote]'``). Without
``--endpoint`` it starts a local S3 server for the run (``pip install 'moto[server]'``).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import av
import fsspec
import numpy as np

import streamseq
from streamseq.io import probe_lengths, tokens, video


def s3_options(endpoint: str, key: str, secret: str) -> dict[str, Any]:
    """The ``storage_options`` of an S3-compatible server: endpoint and credentials."""
    return {"key": key, "secret": secret, "client_kwargs": {"endpoint_url": endpoint}}


@contextlib.contextmanager
def local_server() -> Iterator[str]:
    """A local S3 server (moto) for the length of the block; yields its endpoint."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def write_files(folder: str, clips: int, documents: int) -> None:
    """Short videos (a square moving over a tinted background) and token files."""
    codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
    rng = np.random.default_rng(0)
    for k in range(clips):
        with av.open(os.path.join(folder, f"clip{k}.mp4"), "w") as out:
            stream = out.add_stream(codec, rate=25)
            stream.height, stream.width, stream.pix_fmt = 48, 64, "yuv420p"
            stream.codec_context.thread_count = 1  # one thread: the same file every time
            for i in range(20 + 9 * k):
                image = np.full((48, 64, 3), (40 * k) % 256, np.uint8)
                x = (3 * i) % 48
                image[16:32, x : x + 16] = 255
                out.mux(stream.encode(av.VideoFrame.from_ndarray(image, "rgb24")))
            out.mux(stream.encode())
    for k in range(documents):
        n = int(rng.integers(100, 600))
        np.save(os.path.join(folder, f"doc{k}.npy"), rng.integers(0, 50000, n, np.int32))


def upload(folder: str, prefix: str, options: dict[str, Any]) -> None:
    """Copy the files of ``folder`` to ``s3://<prefix>/``, making the bucket if needed."""
    fs = fsspec.filesystem("s3", skip_instance_cache=True, **options)
    bucket = prefix.split("/")[0]
    if not fs.exists(bucket):
        fs.mkdir(bucket)
    for name in sorted(os.listdir(folder)):
        fs.put_file(os.path.join(folder, name), f"{prefix}/{name}")


def list_urls(prefix: str, pattern: str, options: dict[str, Any]) -> list[str]:
    """The ``s3://`` URLs of the files of ``prefix`` that match ``pattern``."""
    fs = fsspec.filesystem("s3", skip_instance_cache=True, **options)
    return [f"s3://{path}" for path in sorted(fs.glob(f"{prefix}/{pattern}"))]


def read(loader: streamseq.StreamLoader, names: list[str], show: int) -> tuple[list, float]:
    """Iterate ``loader``, printing the first ``show`` batches; the batches and seconds."""
    batches, start = [], time.perf_counter()
    for i, batch in enumerate(loader):
        batches.append(batch)
        if i < show:
            rows = []
            for r in range(len(batch.reset)):
                if not batch.valid[r, 0]:
                    rows.append("padding")
                    continue
                name, step = names[batch.stream[r, 0]], int(batch.step[r, 0])
                rows.append(f"{name}@{step}{'*' if batch.reset[r] else ''}")
            print(f"  batch {i}: {', '.join(rows)}")
    return batches, time.perf_counter() - start


def run(
    endpoint: str,
    key: str,
    secret: str,
    bucket: str = "streamseq-demo",
    workers: int = 2,
    cache: str | None = None,
) -> dict[str, Any]:
    """Upload the demo files to ``bucket`` at ``endpoint``, then read them by URL.

    Args:
        endpoint: the URL of the S3-compatible server, e.g. ``http://127.0.0.1:9000``.
        key: the access key.
        secret: the secret key.
        bucket: the bucket (made if missing); the files go under ``<bucket>/demo/``.
        workers: worker processes of ``probe_lengths`` and of the loaders.
        cache: the lengths cache file (a temporary one when ``None``).

    Returns:
        The URLs, their lengths, and the batches of frames and of tokens.
    """
    options = s3_options(endpoint, key, secret)
    prefix = f"{bucket}/demo"
    with tempfile.TemporaryDirectory() as folder:
        write_files(folder, clips=5, documents=8)
        upload(folder, prefix, options)
        cache = cache or os.path.join(folder, "lengths.json")

        videos, docs = list_urls(prefix, "*.mp4", options), list_urls(prefix, "*.npy", options)
        print(f"{endpoint}: {len(videos)} videos and {len(docs)} token files in s3://{prefix}/")
        # openers: nothing is opened here; each worker opens what it reads
        video_openers = [functools.partial(video, url, storage_options=options) for url in videos]
        doc_openers = [functools.partial(tokens, url, storage_options=options) for url in docs]

        start = time.perf_counter()
        lengths = probe_lengths(video_openers + doc_openers, num_workers=workers, cache=cache)
        probed = time.perf_counter() - start
        start = time.perf_counter()  # only the ETags are asked for: nothing is measured
        again = probe_lengths(video_openers + doc_openers, cache=cache, progress=False)
        cached = time.perf_counter() - start
        assert again == lengths
        frames, counts = lengths[: len(videos)], lengths[len(videos) :]
        print(f"probe_lengths: {probed:.2f} s; again, read back from the cache: {cached:.2f} s")
        print(f"  frames {frames}, tokens {counts}")

        names = [url.rsplit("/", 1)[1] for url in videos]
        loader = streamseq.StreamLoader(video_openers, 3, 8, num_workers=workers, lengths=frames)
        print(f"frames: {len(loader)} batches of 3 rows x 8 frames (* = reset)")
        frame_batches, seconds = read(loader, names, show=4)
        print(f"  {sum(frames)} frames in {seconds:.2f} s ({sum(frames) / seconds:.0f} frames/s)")

        names = [url.rsplit("/", 1)[1] for url in docs]
        loader = streamseq.StreamLoader(doc_openers, 4, 128, num_workers=workers, lengths=counts)
        print(f"tokens: {len(loader)} batches of 4 rows x 128 tokens (* = reset)")
        token_batches, seconds = read(loader, names, show=2)
        print(f"  {sum(counts)} tokens in {seconds:.2f} s ({sum(counts) / seconds:.0f} tokens/s)")
    return {
        "videos": videos,
        "docs": docs,
        "frames": frames,
        "tokens": counts,
        "frame_batches": frame_batches,
        "token_batches": token_batches,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse the command line and run the example (against a local server by default)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", help="S3-compatible server (default: a local one)")
    parser.add_argument("--key", default=os.environ.get("AWS_ACCESS_KEY_ID", "testing"))
    parser.add_argument("--secret", default=os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"))
    parser.add_argument("--bucket", default="streamseq-demo")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        endpoint = args.endpoint or stack.enter_context(local_server())
        return run(endpoint, args.key, args.secret, args.bucket, args.workers)


if __name__ == "__main__":
    main()
