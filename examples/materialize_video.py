"""Decode video once: resized frames in a memory-mapped store, the same batches every epoch.

A model trained on small frames (64x64 here) re-decodes the full-size clips every epoch
when it reads them from the video files. ``streamseq.materialize`` decodes and resizes
every clip once, in worker processes, into a store (one data file, an index, a
manifest), and returns streams that read it with memory maps: a loader given them
delivers exactly the batches it delivers from the clips, at the cost of a copy.

The second call finds the store complete and matching the clips (same files, same
sizes, times and inodes) and reads nothing; a clip changed on disk would be written
again (or refused with ``on_change="error"``).

Run: ``python examples/materialize_video.py [--small] [--workers 2] [--dir DIR]``
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import av
import numpy as np

import streamseq
from streamseq.io import video


def write_clips(folder: str, count: int, frames: int, size: tuple[int, int]) -> list[str]:
    """Write ``count`` clips of different lengths, a moving square on noise."""
    os.makedirs(folder, exist_ok=True)
    codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
    h, w = size
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 64, (h, w, 3), dtype=np.uint8)
    paths = []
    for k in range(count):
        path = os.path.join(folder, f"clip{k}.mp4")
        with av.open(path, "w") as out:
            stream = out.add_stream(codec, rate=25)
            stream.height, stream.width, stream.pix_fmt = h, w, "yuv420p"
            stream.codec_context.thread_count = 1
            for i in range(frames + (k * 7) % 23):
                image = noise.copy()
                x, y = (5 * i + 11 * k) % (w - h // 4), (3 * i) % (h - h // 4)
                image[y : y + h // 4, x : x + h // 4] = (255, 40 * k % 256, 0)
                out.mux(stream.encode(av.VideoFrame.from_ndarray(image, "rgb24")))
            out.mux(stream.encode())
        paths.append(path)
    return paths


def epoch(streams: list, workers: int) -> tuple[list, float]:
    """The batches of one epoch (as numpy arrays) and the seconds it took."""
    loader = streamseq.StreamLoader(streams, 4, 8, num_workers=workers, shuffle=True)
    start = time.perf_counter()
    batches = [(b.data.numpy().copy(), b.stream.numpy().copy()) for b in loader]
    return batches, time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a few small clips, quickly")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--dir", default=None, help="where to write clips and store")
    args = parser.parse_args(argv)
    count, frames, size, out_size = (4, 20, (96, 128), (32, 32))
    if not args.small:
        count, frames, size, out_size = (12, 60, (224, 224), (64, 64))

    with tempfile.TemporaryDirectory() as tmp:
        folder = args.dir or tmp
        paths = write_clips(os.path.join(folder, "clips"), count, frames, size)
        clips = [video(p, size=out_size) for p in paths]

        start = time.perf_counter()
        stored = streamseq.materialize(
            clips, os.path.join(folder, "store"), num_workers=args.workers, key="64x64"
        )
        built = time.perf_counter() - start
        disk = sum(
            os.stat(os.path.join(folder, "store", f)).st_blocks * 512
            for f in os.listdir(os.path.join(folder, "store"))
        )
        print(f"store of {count} clips built in {built:.2f} s, {disk / 2**20:.1f} MiB on disk")

        decoded, t_decode = epoch(clips, args.workers)
        read, t_store = epoch(stored, args.workers)
        same = len(decoded) == len(read) and all(
            np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
            for a, b in zip(decoded, read, strict=True)
        )
        print(f"decoded every epoch: {t_decode:.3f} s; read from the store: {t_store:.3f} s")
        print(f"same batches: {same}")

        again = streamseq.materialize(clips, os.path.join(folder, "store"), key="64x64")
        return {
            "same": same,
            "batches": len(read),
            "shape": tuple(read[0][0].shape),
            "again": [len(s) for s in again] == [len(s) for s in stored],
            "seconds": {"build": built, "decode": t_decode, "store": t_store},
        }


if __name__ == "__main__":
    main()
