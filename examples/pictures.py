"""Draw the first batches of a loader: a contact sheet and an animation of the batch grid.

Shared by ``video_grid.py``, ``virtual_camera.py`` and ``event_camera.py``. Each step of
each batch row is drawn as one cell: the frame itself, grey if the step is padding
(``batch.valid``), with a red bar at its left if the row starts a new stream there
(``batch.reset``).

- The contact sheet has one line per batch row and one column per step, the batches side
  by side, separated by white lines: a row reads its stream on, batch after batch.
- The animation has one picture per step: the rows of the batch in a grid.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
from PIL import Image, ImageDraw

import streamseq

GAP = 2  # pixels between cells of the pictures
SEP = 6  # pixels between batches on the contact sheet
RED = (230, 30, 30)
PAD = (60, 60, 60)

ToRGB = Callable[[np.ndarray], np.ndarray]
"""Turns one step of a stream into an RGB image ``[H, W, 3]`` (``uint8``)."""


def cell(frame: np.ndarray, valid: bool, reset: bool) -> Image.Image:
    """Draw one step of one row.

    Args:
        frame: The step, an RGB image ``[H, W, 3]`` (``uint8``).
        valid: Whether the step holds data; padding is drawn grey.
        reset: Whether the row starts a new stream at this step, marked by a red bar.

    Returns:
        The cell, ``W`` by ``H`` pixels.
    """
    image = Image.fromarray(frame) if valid else Image.new("RGB", frame.shape[1::-1], PAD)
    if reset:
        ImageDraw.Draw(image).rectangle([0, 0, 3, frame.shape[0] - 1], fill=RED)
    return image


def cells(batch: streamseq.Batch, rgb: ToRGB | None = None) -> list[list[Image.Image]]:
    """Draw every step of every row of a batch.

    Args:
        batch: A batch whose ``data`` is ``[B, T, ...]``.
        rgb: Turns a step ``batch.data[r, s]`` into an RGB image; by default the steps
            are RGB images already (``[B, T, H, W, 3]``, ``uint8``).

    Returns:
        The cells, ``cells[r][s]`` for row ``r`` and step ``s``.
    """
    data = batch.data.numpy()
    b, t = data.shape[:2]
    return [
        [
            cell(
                data[r, s] if rgb is None else rgb(data[r, s]),
                bool(batch.valid[r, s]),
                s == 0 and bool(batch.reset[r]),
            )
            for s in range(t)
        ]
        for r in range(b)
    ]


def contact_sheet(batches: list[streamseq.Batch], rgb: ToRGB | None = None) -> Image.Image:
    """Draw batches side by side: one line per batch row, one column per step.

    Args:
        batches: Batches of the same shape, in the order of the loader.
        rgb: Turns a step into an RGB image, as for :func:`cells`.

    Returns:
        The sheet, white between the cells.
    """
    grids = [cells(batch, rgb) for batch in batches]
    b, t = len(grids[0]), len(grids[0][0])
    w, h = grids[0][0][0].size
    width = len(batches) * (t * (w + GAP) + SEP) - SEP + GAP
    sheet = Image.new("RGB", (width, b * (h + GAP) + GAP), "white")
    for i, grid in enumerate(grids):
        for r, line in enumerate(grid):
            for s, image in enumerate(line):
                x = GAP + (i * t + s) * (w + GAP) + i * SEP
                sheet.paste(image, (x, GAP + r * (h + GAP)))
    return sheet


def animation(
    batches: list[streamseq.Batch], columns: int, rgb: ToRGB | None = None
) -> list[Image.Image]:
    """Draw one picture per step: the rows of the batch in a grid.

    Args:
        batches: Batches of the same shape, in the order of the loader.
        columns: Rows of the batch side by side in a picture.
        rgb: Turns a step into an RGB image, as for :func:`cells`.

    Returns:
        The pictures, ``T`` per batch, black between the cells.
    """
    pictures = []
    for batch in batches:
        grid = cells(batch, rgb)
        b, t = len(grid), len(grid[0])
        w, h = grid[0][0].size
        lines = -(-b // columns)
        for s in range(t):
            picture = Image.new("RGB", (columns * (w + GAP) + GAP, lines * (h + GAP) + GAP))
            for r in range(b):
                xy = (GAP + (r % columns) * (w + GAP), GAP + (r // columns) * (h + GAP))
                picture.paste(grid[r][s], xy)
            pictures.append(picture)
    return pictures


def save_pictures(
    batches: list[streamseq.Batch],
    folder: str,
    name: str,
    columns: int,
    rgb: ToRGB | None = None,
) -> tuple[str, str]:
    """Write the contact sheet and the animation of ``batches``.

    Args:
        batches: Batches of the same shape, in the order of the loader.
        folder: Where to write; it must exist.
        name: The name of the files, without their extension.
        columns: Rows of the batch side by side in a picture of the animation.
        rgb: Turns a step into an RGB image, as for :func:`cells`.

    Returns:
        The paths of the contact sheet (``name.png``) and of the animation
        (``name.gif``, 120 ms a step, looping).
    """
    sheet_path = os.path.join(folder, f"{name}.png")
    contact_sheet(batches, rgb).save(sheet_path)
    gif_path = os.path.join(folder, f"{name}.gif")
    pictures = animation(batches, columns, rgb)
    pictures[0].save(gif_path, save_all=True, append_images=pictures[1:], duration=120, loop=0)
    return sheet_path, gif_path
