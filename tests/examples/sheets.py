"""Checks of the pictures ``examples/pictures.py`` draws, shared by the tests of its users.

Imported by the tests of this folder as ``sheets``, like ``runner``.
"""

import numpy as np
from PIL import Image
from runner import load


def check_pictures(result: dict, frame: tuple[int, int], columns: int) -> None:
    """Check the contact sheet and the animation that an example returned in ``result``.

    ``frame`` is the size ``(height, width)`` of a step, ``columns`` the rows of a batch
    side by side in the animation. The sheet must fit the page, hold a red bar on every
    step that starts a stream, a grey cell on every padding step and the frame elsewhere;
    the animation must have a picture per step, as wide as the page.
    """
    pictures = load("pictures")
    reset, valid = result["reset"], result["valid"]
    batches, rows, steps = len(valid), len(valid[0]), len(valid[0][0])
    layout = pictures.Sheet(batches, rows, steps, frame[::-1])
    sheet = Image.open(result["sheet"]).convert("RGB")
    assert sheet.size == layout.size and sheet.size[0] <= pictures.WIDTH
    assert layout.cell[0] >= pictures.MIN_CELL or layout.per_line == 1
    pixels = np.asarray(sheet)
    for i in range(batches):
        for r in range(rows):
            for s in range(steps):
                left, top, right, bottom = layout.box(i, r, s)
                middle = (top + bottom) // 2
                is_red = tuple(pixels[middle, left + 1]) == pictures.RED
                assert is_red == (s == 0 and reset[i][r]), (i, r, s)
                inside = pixels[middle - 2 : middle + 3, left + 4 : left + 12]
                is_grey = (inside == pictures.PAD).all()
                assert is_grey == (not valid[i][r][s]), (i, r, s)
    gif = Image.open(result["gif"])
    assert gif.n_frames == batches * steps
    width = gif.size[0]
    assert pictures.WIDTH - columns * (pictures.GAP + 1) <= width <= pictures.WIDTH
