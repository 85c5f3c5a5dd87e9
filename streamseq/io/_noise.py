"""Smooth 2-D noise: a coarse grid of random values, interpolated to every pixel.

The one noise of the synthetic sources: the still background of
:func:`~streamseq.io.events.synthetic_events` and the octaves of
:func:`~streamseq.io.procedural.texture`.
"""

from __future__ import annotations

import numpy as np


def value_noise(
    rng: np.random.Generator,
    height: int,
    width: int,
    cells: int,
    *,
    wrap: bool = False,
    smoothstep: bool = False,
) -> np.ndarray:
    """A smooth random field in ``[0, 1]``: ``cells`` random values across each axis, interpolated.

    The values are drawn from ``rng`` (one call), on a grid whose cells span the image,
    and interpolated bilinearly between the four corners of the cell of every pixel. The
    pixels sit at ``i * cells / height`` (and ``j * cells / width``) on the grid; the two
    forms below compute these positions with their own float rounding, which they keep so
    that a seed gives the same field, bit for bit, as it always has.

    Args:
        rng: where the values are drawn from.
        height: rows of the field.
        width: columns of the field.
        cells: cells of the grid along each axis.
        wrap: a tileable field: a grid of ``cells x cells`` values whose last cells
            interpolate towards the first values (positions ``arange(n) * cells / n``);
            else a grid of ``(cells + 1) x (cells + 1)`` values, the last row and column
            reached by the last cells only (positions ``linspace(0, cells, n,
            endpoint=False)``).
        smoothstep: ease the interpolation within a cell with ``3t^2 - 2t^3`` (no visible
            grid lines); else linear.

    Returns:
        A float64 array ``[height, width]``.

    Example:
        >>> field = value_noise(np.random.default_rng(0), 32, 48, 4)
        >>> field.shape, bool(0 <= field.min() and field.max() <= 1)
        ((32, 48), True)
        >>> tile = value_noise(np.random.default_rng(0), 32, 48, 4, wrap=True, smoothstep=True)
        >>> bool(np.abs(np.diff(np.tile(tile, 2), axis=1)).max() < 0.2)  # no seam
        True
    """
    if wrap:
        grid = rng.random((cells, cells))
        ys = np.arange(height) * cells / height
        xs = np.arange(width) * cells / width
    else:
        grid = rng.random((cells + 1, cells + 1))
        ys = np.linspace(0, cells, height, endpoint=False)
        xs = np.linspace(0, cells, width, endpoint=False)
    y0, x0 = ys.astype(int), xs.astype(int)
    fy, fx = ys - y0, xs - x0
    if smoothstep:
        fy, fx = fy * fy * (3 - 2 * fy), fx * fx * (3 - 2 * fx)
    fy, fx = fy[:, None], fx[None, :]
    y1, x1 = y0 + 1, x0 + 1
    if wrap:
        y1, x1 = y1 % cells, x1 % cells
    top = grid[y0][:, x0] * (1 - fx) + grid[y0][:, x1] * fx
    bottom = grid[y1][:, x0] * (1 - fx) + grid[y1][:, x1] * fx
    return top * (1 - fy) + bottom * fy
