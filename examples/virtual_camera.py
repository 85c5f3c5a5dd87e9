"""Stream procedural videos (virtual cameras over textures) in temporally coherent batches.

Makes a few textures with :func:`streamseq.io.texture` and films each with
:func:`streamseq.io.virtual_camera`: a camera that pans, zooms, rolls and tilts along a
smooth path drawn from its seed. Nothing is stored: every frame is rendered when a worker
reads it, and the same whatever the order of reading. The streams go through
:class:`streamseq.StreamLoader` with two worker processes; the first batches are drawn:

- ``virtual_camera.png``, a contact sheet: each batch a block headed ``batch i``, one
  line per batch row and one column per step, captioned ``stream:step``. With the
  default lengths, stream 3 ends in batch 4, whose row 3 ends with padding (grey ``pad``
  cells), and rows move on to new streams in batches 4 and 5 (a red bar and a ``reset``
  tag).
- ``virtual_camera.gif``, the batch grid as an animation, one picture per step.

Run: ``python examples/virtual_camera.py [--out out/] [--small]``
"""

from __future__ import annotations

import argparse
import os
import sys

import streamseq
from streamseq.io import texture, virtual_camera

# pictures.py lies beside this file: found when run as a script and when loaded by path
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pictures import save_pictures  # noqa: E402


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
    columns = min(args.batch_size, 4)
    sheet_path, gif_path = save_pictures(batches, args.out, "virtual_camera", columns)
    print(f"wrote {sheet_path} and {gif_path}")
    drawn = {
        "reset": [batch.reset.tolist() for batch in batches],  # [batch][row]
        "valid": [batch.valid.tolist() for batch in batches],  # [batch][row][step]
    }
    return {"sheet": sheet_path, "gif": gif_path, "batches": len(batches), **drawn, "size": size}


if __name__ == "__main__":
    main()
