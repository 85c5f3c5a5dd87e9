"""Stream video clips in temporally coherent batches and draw what the model sees.

Writes a few short clips with PyAV (each its own colour, a moving square and its number),
or takes the videos of a folder, streams them with :func:`streamseq.io.video` through
:class:`streamseq.StreamLoader` with two worker processes, and draws the first batches:

- ``video_grid.png``, a contact sheet: each batch a block headed ``batch i``, one line
  per batch row and one column per step, captioned ``stream:step``; the blocks follow
  each other left to right, then line by line. A row reads its clip on, batch after
  batch; a red bar and a ``reset`` tag mark the step where the row starts a new clip
  (``batch.reset``), grey ``pad`` cells are padding (``batch.valid`` False).
- ``video_grid.gif``, the batch grid as an animation, one picture per step: the rows of
  the batch side by side, each named by its row, stream and step.

Run: ``python examples/video_grid.py [--folder videos/] [--out out/] [--small]``
"""

from __future__ import annotations

import argparse
import os
import sys

import av
import numpy as np
from PIL import Image, ImageDraw

import streamseq
from streamseq.io import video

# pictures.py lies beside this file: found when run as a script and when loaded by path
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pictures import save_pictures  # noqa: E402


def write_clips(folder: str, count: int, frames: int, size: tuple[int, int]) -> list[str]:
    """Write ``count`` clips of different lengths (H.264 when available, else MPEG-4)."""
    os.makedirs(folder, exist_ok=True)
    codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
    h, w = size
    paths = []
    for k in range(count):
        path = os.path.join(folder, f"clip{k}.mp4")
        hue = np.array([(k * 97) % 256, (k * 53 + 80) % 256, (k * 151 + 40) % 256])
        with av.open(path, "w") as out:
            stream = out.add_stream(codec, rate=25)
            stream.height, stream.width, stream.pix_fmt = h, w, "yuv420p"
            stream.codec_context.thread_count = 1  # one thread: the same file every time
            for i in range(frames + (k * 7) % 23):
                image = Image.new("RGB", (w, h), tuple(int(c) for c in hue // 2))
                draw = ImageDraw.Draw(image)
                x = (3 * i) % max(1, w - h // 3)
                draw.rectangle(
                    [x, h // 3, x + h // 3, 2 * h // 3], fill=tuple(int(c) for c in hue)
                )
                draw.text((3, 2), f"{k}:{i}", fill=(255, 255, 255))
                out.mux(stream.encode(av.VideoFrame.from_ndarray(np.asarray(image), "rgb24")))
            out.mux(stream.encode())
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", help="stream the videos of this folder instead")
    parser.add_argument("--out", default="out", help="folder for the pictures (and clips)")
    parser.add_argument("--clips", type=int, default=7, help="clips to write")
    parser.add_argument("--frames", type=int, default=24, help="frames of the shortest clip")
    parser.add_argument("--size", type=int, nargs=2, default=(36, 48), metavar=("H", "W"))
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--tbins", type=int, default=6)
    parser.add_argument("--batches", type=int, default=6, help="batches to draw")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--small", action="store_true", help="tiny clips, for tests")
    args = parser.parse_args(argv)
    if args.small:
        args.clips, args.frames, args.size = 5, 10, (24, 32)
        args.batch_size, args.tbins, args.batches = 3, 4, 4
    size = tuple(args.size)

    os.makedirs(args.out, exist_ok=True)
    if args.folder:
        names = sorted(os.listdir(args.folder))
        paths = [
            os.path.join(args.folder, n)
            for n in names
            if n.lower().endswith((".mp4", ".mkv", ".avi", ".mov", ".webm"))
        ]
    else:
        paths = write_clips(os.path.join(args.out, "clips"), args.clips, args.frames, size)
    streams = [video(path, size=size) for path in paths]  # resized to one size by PyAV
    loader = streamseq.StreamLoader(streams, args.batch_size, args.tbins, num_workers=args.workers)
    print(f"{len(streams)} videos, lengths {[len(s) for s in streams]}: {len(loader)} batches")
    batches = []
    for i, batch in enumerate(loader):
        if i == args.batches:
            break
        batches.append(batch)
        print(
            f"batch {i}: streams {batch.stream[:, 0].tolist()}, reset {batch.reset.int().tolist()}"
        )

    columns = min(args.batch_size, 4)
    sheet_path, gif_path = save_pictures(batches, args.out, "video_grid", columns)
    print(f"wrote {sheet_path} and {gif_path}")
    drawn = {
        "reset": [batch.reset.tolist() for batch in batches],  # [batch][row]
        "valid": [batch.valid.tolist() for batch in batches],  # [batch][row][step]
    }
    return {"sheet": sheet_path, "gif": gif_path, "batches": len(batches), **drawn, "size": size}


if __name__ == "__main__":
    main()
