"""What aligning audio with video costs: a recording of both against the video alone.

Writes ``--takes`` takes of ``--seconds`` seconds to a temporary folder: an H.264 video at
224p (224 x 400, 30 fps, a keyframe every 30 frames) and a 16 kHz mono WAV beside it. Then
times, in one run, interleaved, ``--repeat`` times, a whole epoch of
``StreamLoader(streams, 4, 16, num_workers=2)`` over:

- ``video``: ``io.video(path, fps=20)``, the video at 20 steps per second alone;
- ``recording: video``: ``io.recording(0.05, video=...)``, the same frames as dict steps;
- ``recording: video + audio``: ``io.recording(0.05, video=..., audio=...)``, each step
  with its 800 samples.

Each row gives the median steps (frames) per second over the epoch (worker start-up
included), milliseconds per step and the ratio to ``video``; the last row's difference
to the second is the cost of the audio. Run: ``python benchmarks/bench_aligned.py
[--quick] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import av
import numpy as np

from streamseq import StreamLoader
from streamseq.io import audio, recording, video

HEIGHT, WIDTH, FPS, RATE, STEP = 224, 400, 30, 16000, 0.05
BATCH, TBINS, WORKERS = 4, 16, 2


def write_take(folder: str, k: int, seconds: float) -> tuple[str, str]:
    """A 224p video with a moving gradient and a tone beside it; their paths."""
    stem = os.path.join(folder, f"take_{k}")
    rng = np.random.default_rng(k)
    texture = rng.integers(0, 255, (HEIGHT, WIDTH + 400, 3), dtype=np.uint8)
    with av.open(stem + ".mp4", "w") as out:
        stream = out.add_stream("libx264", rate=FPS)
        stream.height, stream.width, stream.pix_fmt = HEIGHT, WIDTH, "yuv420p"
        stream.codec_context.gop_size = FPS
        stream.options = {"preset": "veryfast", "crf": "28"}
        for i in range(round(seconds * FPS)):
            shift = (3 * i) % 400
            image = np.ascontiguousarray(texture[:, shift : shift + WIDTH])
            out.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        out.mux(stream.encode())
    t = np.arange(round(seconds * RATE)) / RATE
    tone = (0.3 * np.sin(2 * np.pi * (200 + 50 * k) * t)).astype(np.float32)
    with av.open(stem + ".wav", "w") as out:
        stream = out.add_stream("pcm_s16le", rate=RATE, layout="mono")
        frame = av.AudioFrame.from_ndarray(tone[None], "flt", "mono")
        frame.sample_rate = RATE
        out.mux(stream.encode(frame))
        out.mux(stream.encode())
    return stem + ".mp4", stem + ".wav"


def epoch(streams: list[Any]) -> float:
    """Steps per second of a whole epoch with 2 worker processes (start-up included)."""
    loader = StreamLoader(streams, BATCH, TBINS, num_workers=WORKERS)
    start = time.perf_counter()
    steps = sum(int(batch.valid.sum()) for batch in loader)
    return steps / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> list[tuple[str, float, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--takes", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2 takes of 3 s, once")
    args = parser.parse_args(argv)
    if args.quick:
        args.takes, args.seconds, args.repeat = 2, 3.0, 1
    with tempfile.TemporaryDirectory() as folder:
        files = [write_take(folder, k, args.seconds) for k in range(args.takes)]
        kinds: dict[str, Callable[[str, str], Any]] = {
            "video": lambda v, a: video(v, fps=1 / STEP),
            "recording: video": lambda v, a: recording(STEP, video=video(v)),
            "recording: video + audio": lambda v, a: recording(
                STEP, video=video(v), audio=audio(a)
            ),
        }
        rates: dict[str, list[float]] = {name: [] for name in kinds}
        for _ in range(args.repeat):
            for name, make in kinds.items():  # interleaved: drifts touch every row alike
                streams = [make(v, a) for v, a in files]
                for s in streams:
                    len(s)  # probed before the clock starts
                rates[name].append(epoch(streams))
    steps = int(args.takes * args.seconds / STEP)
    print(
        f"{args.takes} takes of {args.seconds:g} s at {HEIGHT}p ({steps} steps of "
        f"{STEP * 1000:g} ms), batches of {BATCH} x {TBINS}, {WORKERS} workers, "
        f"median of {args.repeat}"
    )
    base = statistics.median(rates["video"])
    rows = []
    header = f"{'streams':<28}{'steps/s':>10}{'ms/step':>10}{'vs video':>10}"
    print(header)
    print("-" * len(header))
    for name, values in rates.items():
        rate = statistics.median(values)
        rows.append((name, rate, rate / base))
        print(f"{name:<28}{rate:>10.0f}{1000 / rate:>10.2f}{rate / base:>10.2f}")
    return rows


if __name__ == "__main__":
    main()
