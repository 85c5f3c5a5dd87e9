"""Draw the first batches of a loader: a contact sheet and an animation of the batch grid.

Shared by ``video_grid.py``, ``virtual_camera.py`` and ``event_camera.py``, and drawn for a
page about ``WIDTH`` pixels wide. Each step of each batch row is drawn as one cell: the
frame itself, captioned ``stream:step``; a padding step (``batch.valid`` False) is a grey
cell marked ``pad``; a row that starts a new stream (``batch.reset``) has a red bar and a
red ``reset`` tag on its first step.

- The contact sheet draws each batch as a block, one line per batch row and one column
  per step, headed ``batch i``; the blocks follow each other left to right, then line by
  line, so row r reads its stream on from block to block. A legend ends the sheet.
- The animation has one picture per step: the rows of the batch in a grid, each cell
  named by its row, stream and step, under a line naming the batch and the step.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw, ImageFont

import streamseq

WIDTH = 800  # pixels: the width of the page the pictures are drawn for
GAP = 2  # pixels between cells
SEP = 14  # pixels between the blocks of batches on the contact sheet
LABEL = 44  # pixels left of the blocks, for the row names
HEADER = 18  # pixels above a block, for its name
LEGEND = 26  # pixels below the sheet, for the legend
MIN_CELL = 56  # narrowest cell of the contact sheet, in pixels
RED = (230, 30, 30)
PAD = (110, 110, 110)
BACKGROUND = (255, 255, 255)

ToRGB = Callable[[np.ndarray], np.ndarray]
"""Turns one step of a stream into an RGB image ``[H, W, 3]`` (``uint8``)."""


def font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """Pillow's own font at ``size`` pixels (its bitmap font when FreeType is missing)."""
    try:
        return ImageFont.load_default(size=size)
    except (ImportError, TypeError):  # pragma: no cover - Pillow without FreeType
        return ImageFont.load_default()


def tag(pen: ImageDraw.ImageDraw, xy: tuple[int, int], text: str, fill: tuple, size: int) -> None:
    """Write ``text`` in white on a box of colour ``fill``, its top left corner at ``xy``."""
    face = font(size)
    left, top, right, bottom = pen.textbbox(xy, text, font=face)
    pen.rectangle([xy[0], xy[1], right + 2, bottom + 1], fill=fill)
    pen.text((xy[0] + 1, xy[1]), text, fill="white", font=face)


def cell(
    frame: np.ndarray,
    valid: bool,
    reset: bool,
    size: tuple[int, int],
    caption: str,
    text: int = 10,
) -> Image.Image:
    """Draw one step of one row.

    Args:
        frame: The step, an RGB image ``[H, W, 3]`` (``uint8``).
        valid: Whether the step holds data; padding is drawn grey and marked ``pad`` (or
            ``padding`` in a cell 100 pixels wide or more).
        reset: Whether the row starts a new stream at this step: a red bar at the left and
            a red ``reset`` tag.
        size: The size of the cell ``(width, height)``; the frame is scaled to it.
        caption: Written at the bottom left of a valid step (its stream and step).
        text: The height of the text, in pixels.

    Returns:
        The cell, ``size`` pixels.
    """
    if valid:
        image = Image.fromarray(frame).resize(size, Image.Resampling.BILINEAR)
    else:
        image = Image.new("RGB", size, PAD)
    pen = ImageDraw.Draw(image)
    bar = max(3, size[0] // 16) if reset else 0
    if valid:
        tag(pen, (bar, size[1] - text - 3), caption, (0, 0, 0), text)
    else:
        face = font(text + 1)
        word = "pad" if size[0] < 100 else "padding"
        pen.text((size[0] // 2, size[1] // 2), word, fill="white", font=face, anchor="mm")
    if reset:
        pen.rectangle([0, 0, bar - 1, size[1] - 1], fill=RED)
        tag(pen, (bar, 0), "reset", RED, text)
    return image


def cells(
    batch: streamseq.Batch,
    size: tuple[int, int],
    rgb: ToRGB | None = None,
    text: int = 10,
    caption: str = "{stream}:{step}",
) -> list[list[Image.Image]]:
    """Draw every step of every row of a batch.

    Args:
        batch: A batch whose ``data`` is ``[B, T, ...]``.
        size: The size of a cell ``(width, height)``.
        rgb: Turns a step ``batch.data[r, s]`` into an RGB image; by default the steps
            are RGB images already (``[B, T, H, W, 3]``, ``uint8``).
        text: The height of the captions, in pixels.
        caption: The caption of a valid step, formatted with its ``stream`` and ``step``.

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
                size,
                caption.format(stream=int(batch.stream[r, s]), step=int(batch.step[r, s])),
                text,
            )
            for s in range(t)
        ]
        for r in range(b)
    ]


@dataclass(frozen=True)
class Sheet:
    """Where the contact sheet puts each cell: ``batches`` blocks of ``rows`` x ``steps``.

    Attributes:
        batches: The number of batches drawn.
        rows: The rows of a batch.
        steps: The steps of a row in a batch (``tbins``).
        frame: The size of a step ``(width, height)``, as read.
    """

    batches: int
    rows: int
    steps: int
    frame: tuple[int, int]

    @property
    def per_line(self) -> int:
        """Blocks side by side: as many as fit in ``WIDTH`` with cells of ``MIN_CELL``."""
        fit = (WIDTH - LABEL + SEP) // (self.steps * (MIN_CELL + GAP) + SEP)
        return max(1, min(self.batches, fit))

    @property
    def cell(self) -> tuple[int, int]:
        """The size of a cell: as wide as the blocks of a line allow, the frame's shape."""
        room = WIDTH - LABEL - (self.per_line - 1) * SEP
        width = room // (self.per_line * self.steps) - GAP
        return width, round(width * self.frame[1] / self.frame[0])

    def origin(self, i: int) -> tuple[int, int]:
        """The top left corner of the cells of batch ``i``."""
        w, h = self.cell
        line, place = divmod(i, self.per_line)
        x = LABEL + place * (self.steps * (w + GAP) + SEP)
        y = line * (HEADER + self.rows * (h + GAP) + SEP) + HEADER
        return x, y

    def box(self, i: int, r: int, s: int) -> tuple[int, int, int, int]:
        """The pixels ``(left, top, right, bottom)`` of step ``s`` of row ``r`` of batch ``i``."""
        w, h = self.cell
        x, y = self.origin(i)
        left, top = x + s * (w + GAP), y + r * (h + GAP)
        return left, top, left + w - 1, top + h - 1

    @property
    def size(self) -> tuple[int, int]:
        """The size of the sheet, legend included."""
        w, h = self.cell
        lines = -(-self.batches // self.per_line)
        width = LABEL + self.per_line * self.steps * (w + GAP) + (self.per_line - 1) * SEP
        return width, lines * (HEADER + self.rows * (h + GAP) + SEP) + LEGEND


def legend(pen: ImageDraw.ImageDraw, top: int) -> None:
    """The key to the cells, one line from the left at height ``top``."""
    face, x = font(12), 4
    for swatch, text in (
        (RED, "reset: the row starts a new stream"),
        (PAD, "pad: padding (batch.valid is False)"),
        (None, "s:k = stream s, step k"),
    ):
        if swatch is not None:
            pen.rectangle([x, top + 3, x + 11, top + 14], fill=swatch)
            x += 16
        pen.text((x, top + 2), text, fill="black", font=face)
        x = int(pen.textbbox((x, top + 2), text, font=face)[2]) + 18


def contact_sheet(batches: list[streamseq.Batch], rgb: ToRGB | None = None) -> Image.Image:
    """Draw the batches as blocks, left to right then line by line, and a legend.

    Args:
        batches: Batches of the same shape, in the order of the loader.
        rgb: Turns a step into an RGB image, as for :func:`cells`.

    Returns:
        The sheet, :class:`Sheet` gives where each cell is.
    """
    first = batches[0].data[0, 0].numpy()
    frame = (first if rgb is None else rgb(first)).shape[1::-1]
    layout = Sheet(len(batches), batches[0].data.shape[0], batches[0].data.shape[1], frame)
    sheet = Image.new("RGB", layout.size, BACKGROUND)
    pen = ImageDraw.Draw(sheet)
    face = font(12)
    for i, batch in enumerate(batches):
        x, y = layout.origin(i)
        pen.text((x, y - HEADER + 2), f"batch {i}", fill="black", font=face)
        for r, line in enumerate(cells(batch, layout.cell, rgb)):
            if x == LABEL:  # the first block of a line names the rows
                top = layout.box(i, r, 0)[1]
                pen.text((4, top + layout.cell[1] // 2 - 7), f"row {r}", fill="black", font=face)
            for s, image in enumerate(line):
                sheet.paste(image, layout.box(i, r, s)[:2])
    legend(pen, layout.size[1] - LEGEND)
    return sheet


def animation(
    batches: list[streamseq.Batch], columns: int, rgb: ToRGB | None = None
) -> list[Image.Image]:
    """Draw one picture per step: the rows of the batch in a grid, about ``WIDTH`` wide.

    Args:
        batches: Batches of the same shape, in the order of the loader.
        columns: Rows of the batch side by side in a picture.
        rgb: Turns a step into an RGB image, as for :func:`cells`.

    Returns:
        The pictures, ``T`` per batch, white between the cells.
    """
    first = batches[0].data[0, 0].numpy()
    frame_w, frame_h = (first if rgb is None else rgb(first)).shape[1::-1]
    w = (WIDTH - GAP) // columns - GAP
    size = (w, round(w * frame_h / frame_w))
    pictures = []
    for i, batch in enumerate(batches):
        grid = cells(batch, size, rgb, text=14, caption="stream {stream}, step {step}")
        b, t = len(grid), len(grid[0])
        lines = -(-b // columns)
        for s in range(t):
            picture = Image.new(
                "RGB",
                (columns * (w + GAP) + GAP, HEADER + 4 + lines * (size[1] + GAP) + GAP),
                BACKGROUND,
            )
            pen = ImageDraw.Draw(picture)
            title = f"batch {i}, step {s + 1} of {t}: each cell is one row of the batch"
            pen.text((GAP + 2, 3), title, fill="black", font=font(14))
            for r in range(b):
                x = GAP + (r % columns) * (w + GAP)
                y = HEADER + 4 + GAP + (r // columns) * (size[1] + GAP)
                picture.paste(grid[r][s], (x, y))
                name = f"row {r}"
                right = int(pen.textbbox((0, 0), name, font=font(14))[2])
                tag(pen, (x + size[0] - right - 4, y), name, (0, 0, 0), 14)
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
        (``name.gif``, 400 ms a step, looping, 64 colours a picture).
    """
    sheet_path = os.path.join(folder, f"{name}.png")
    contact_sheet(batches, rgb).save(sheet_path, optimize=True)
    gif_path = os.path.join(folder, f"{name}.gif")
    pictures = [  # 64 colours a picture: a third of the size, still faithful
        picture.quantize(64, method=Image.Quantize.MEDIANCUT)
        for picture in animation(batches, columns, rgb)
    ]
    pictures[0].save(
        gif_path, save_all=True, append_images=pictures[1:], duration=400, loop=0, optimize=True
    )
    return sheet_path, gif_path
