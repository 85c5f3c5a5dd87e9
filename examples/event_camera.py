"""Stream event-camera recordings as windows of events, in temporally coherent batches.

Records a few synthetic scenes with :func:`streamseq.io.synthetic_events` (bright balls
moving over a still background, seen by an idealised event camera), saves them as ``.npy``
files, streams them with :func:`streamseq.io.events` (each step: the events of a 10 ms
window, as a histogram ``[2, H, W]`` of off and on events) through
:class:`streamseq.StreamLoader` with two worker processes, and draws the first batches:

- ``event_camera.png``, a contact sheet: each batch a block headed ``batch i``, one line
  per batch row and one column per step, captioned ``stream:step``. On events are
  orange, off events blue: a moving ball leaves an orange front and a blue trail. A red
  bar and a ``reset`` tag mark a row starting a new recording, grey ``pad`` cells are
  padding.
- ``event_camera.gif``, the batch grid as an animation, one picture per step.

Run: ``python examples/event_camera.py [--out out/] [--small]``
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import streamseq
from streamseq.io import events, synthetic_events

# pictures.py lies beside this file: found when run as a script and when loaded by path
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pictures import save_pictures  # noqa: E402

ON = np.array([255, 150, 20])
OFF = np.array([40, 130, 255])


def record(folder: str, count: int, size: tuple[int, int], duration_ms: int) -> list[str]:
    """Record ``count`` synthetic scenes of different durations as ``.npy`` files."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for k in range(count):
        duration_us = 1000 * (duration_ms + (k * 70) % 230)
        ev = synthetic_events(height=size[0], width=size[1], duration_us=duration_us, seed=k)
        path = os.path.join(folder, f"recording{k}.npy")
        np.save(path, ev)
        paths.append(path)
    return paths


def colour(histogram: np.ndarray) -> np.ndarray:
    """A ``[2, H, W]`` histogram as an RGB image: on events orange, off events blue."""
    off, on = np.minimum(histogram / 2.0, 1.0)[..., None]
    return (on * ON + off * OFF).clip(0, 255).astype(np.uint8)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out", help="folder for the pictures (and recordings)")
    parser.add_argument("--recordings", type=int, default=6)
    parser.add_argument("--duration-ms", type=int, default=150, help="shortest recording")
    parser.add_argument("--window-ms", type=int, default=10, help="duration of a step")
    parser.add_argument("--size", type=int, nargs=2, default=(36, 48), metavar=("H", "W"))
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--tbins", type=int, default=6)
    parser.add_argument("--batches", type=int, default=6, help="batches to draw")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--small", action="store_true", help="tiny recordings, for tests")
    args = parser.parse_args(argv)
    if args.small:
        args.recordings, args.duration_ms, args.size = 4, 60, (20, 28)
        args.batch_size, args.tbins, args.batches = 3, 4, 3
    h, w = args.size

    paths = record(os.path.join(args.out, "events"), args.recordings, (h, w), args.duration_ms)
    streams = [events(path, window_us=1000 * args.window_ms, height=h, width=w) for path in paths]
    loader = streamseq.StreamLoader(streams, args.batch_size, args.tbins, num_workers=args.workers)
    print(f"{len(streams)} recordings, lengths {[len(s) for s in streams]}: {len(loader)} batches")
    batches = []
    for i, batch in enumerate(loader):
        if i == args.batches:
            break
        batches.append(batch)
        counts = batch.data.sum(dim=(2, 3, 4)).int()[0].tolist()
        print(f"batch {i}: streams {batch.stream[:, 0].tolist()}, events of row 0: {counts}")

    columns = min(args.batch_size, 4)
    sheet_path, gif_path = save_pictures(batches, args.out, "event_camera", columns, rgb=colour)
    print(f"wrote {sheet_path} and {gif_path}")
    drawn = {
        "reset": [batch.reset.tolist() for batch in batches],  # [batch][row]
        "valid": [batch.valid.tolist() for batch in batches],  # [batch][row][step]
    }
    return {"sheet": sheet_path, "gif": gif_path, "batches": len(batches), **drawn, "size": (h, w)}


if __name__ == "__main__":
    main()
