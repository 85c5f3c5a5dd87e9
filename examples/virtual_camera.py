"""Stream procedural videos (virtual cameras over textures) in temporally coherent batches.

Makes a few textures with :func:`streamseq.io.texture` and films each with
:func:`streamseq.io.virtual_camera`: a camera that pans, zooms, rolls and tilts along a
smooth path drawn from its seed. Nothing is stored: every frame is rendered when a worker
reads it, and the same whatever the order of reading. The streams go through
:class:`streamseq.StreamLoader` with two worker processes; the first batches are drawn:

- ``virtual_camera.png``, a contact sheet: one line per batch row, one column per step,
  batches side by side. A red bar marks a row starting a new stream, grey cells are
  padding.
- ``virtual_camera.gif``, the batch grid as an animation, one frame per step.

Run: ``python examples/virtual_camera.py [--out out/] [--small]``
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from PIL import Image, ImageDraw

import streamseq
from streamseq.io import texture, virtual_camera

GAP = 2  # pixels between cells of the pictures
SEP = 6  # pixels between batches on the contact sheet
RED = (230, 30, 30)
PAD = (60, 60, 60)


def cell(frame: np.ndarray, valid: bool, reset: bool) -> Image.Image:
    """One step of one row (grey if padding), with a red bar if a stream starts."""
    image = Image.fromarray(frame) if valid else Image.new("RGB", frame.shape[1::-1], PAD)
    if reset:
        ImageDraw.Draw(image).rectangle([0, 0, 3, frame.shape[0] - 1], fill=RED)
    return image


def contact_sheet(batches: list[streamseq.Batch]) -> Image.Image:
    """Rows = batch rows, columns = steps of the batches, side by side."""
    b, t, h, w = batches[0].data.shape[:4]
    width = len(batches) * (t * (w + GAP) + SEP) - SEP + GAP
    sheet = Image.new("RGB", (width, b * (h + GAP) + GAP), "white")
    for i, batch in enumerate(batches):
        data = batch.data.numpy()
        for r in range(b):
            for s in range(t):
                image = cell(data[r, s], bool(batch.valid[r, s]), s == 0 and bool(batch.reset[r]))
                x = GAP + (i * t + s) * (w + GAP) + i * SEP
                sheet.paste(image, (x, GAP + r * (h + GAP)))
    return sheet


def animation(batches: list[streamseq.Batch], columns: int) -> list[Image.Image]:
    """One picture per step: the rows of the batch in a grid of ``columns``."""
    b, t, h, w = batches[0].data.shape[:4]
    lines = -(-b // columns)
    pictures = []
    for batch in batches:
        data = batch.data.numpy()
        for s in range(t):
            picture = Image.new("RGB", (columns * (w + GAP) + GAP, lines * (h + GAP) + GAP))
            for r in range(b):
                image = cell(data[r, s], bool(batch.valid[r, s]), s == 0 and bool(batch.reset[r]))
                xy = (GAP + (r % columns) * (w + GAP), GAP + (r // columns) * (h + GAP))
                picture.paste(image, xy)
            pictures.append(picture)
    return pictures


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out", help="folder for the pictures")
    parser.add_argument("--streams", type=int, default=6)
    parser.add_argument("--length", type=int, default=24, help="steps of the shortest stream")
    parser.add_argument("--size", type=int, nargs=2, default=(36, 48), metavar=("H", "W"))
    parser.add_argument("--speed", type=float, default=3.0, help="camera speed")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--tbins", type=int, default=6)
    parser.add_argument("--batches", type=int, default=6, help="batches to draw")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--small", action="store_true", help="tiny frames, for tests")
    args = parser.parse_args(argv)
    if args.small:
        args.streams, args.length, args.size = 4, 8, (20, 28)
        args.batch_size, args.tbins, args.batches = 3, 4, 3
    size = tuple(args.size)

    images = [texture(4 * size[0], 4 * size[1], seed=k) for k in range(3)]
    streams = [
        virtual_camera(
            images[k % len(images)],
            length=args.length + (k * 7) % 19,
            size=size,
            seed=k,
            speed=args.speed,
        )
        for k in range(args.streams)
    ]
    loader = streamseq.StreamLoader(streams, args.batch_size, args.tbins, num_workers=args.workers)
    print(f"{len(streams)} cameras, lengths {[len(s) for s in streams]}: {len(loader)} batches")
    batches = []
    for i, batch in enumerate(loader):
        if i == args.batches:
            break
        batches.append(batch)
        print(
            f"batch {i}: streams {batch.stream[:, 0].tolist()}, reset {batch.reset.int().tolist()}"
        )

    os.makedirs(args.out, exist_ok=True)
    sheet_path = os.path.join(args.out, "virtual_camera.png")
    contact_sheet(batches).save(sheet_path)
    gif_path = os.path.join(args.out, "virtual_camera.gif")
    pictures = animation(batches, columns=min(args.batch_size, 4))
    pictures[0].save(gif_path, save_all=True, append_images=pictures[1:], duration=120, loop=0)
    print(f"wrote {sheet_path} and {gif_path}")
    return {"sheet": sheet_path, "gif": gif_path, "batches": len(batches), "size": size}


if __name__ == "__main__":
    main()
