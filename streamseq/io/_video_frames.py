"""Copy a decoded (and converted) video frame into an array, once.

``frame.to_ndarray()`` returns a view of the frame's plane for the packed formats (one
plane, rows padded to the plane's line size) and a new array for the planar ``yuv420p``
(its three planes stacked); the read path then copied that array into the rows of a
batch. :func:`copy_frame` writes the same bytes straight from the planes into the
destination: one copy a frame whatever the format, and none of the per-call work of
``to_ndarray`` (its format look-ups, a dtype, a shape check). Anything else (another
format, rows stored bottom-up, a destination that is not contiguous for a planar frame)
goes through ``to_ndarray``, as before.
"""

from __future__ import annotations

import functools
from typing import Any

import av
import numpy as np

#: channels of the pixel formats a video stream can deliver (``None``: no channel axis)
CHANNELS = {
    "rgb24": 3,
    "bgr24": 3,
    "rgba": 4,
    "bgra": 4,
    "argb": 4,
    "abgr": 4,
    "gray": None,
    "gray8": None,
    "yuv420p": None,  # planar: the Y plane, then U and V side by side ([H * 3 / 2, W])
}

#: bytes a pixel of the packed 8-bit formats streamseq delivers (one plane each)
PACKED = {f: c or 1 for f, c in CHANNELS.items() if f != "yuv420p"}


def plane_view(plane: Any, height: int, width: int, pixel: int) -> np.ndarray | None:
    """The pixels of a plane as a ``uint8`` array without its row padding (no copy).

    ``[height, width]`` for one byte a pixel, else ``[height, width, pixel]``; ``None``
    when the rows are stored bottom-up (a negative line size).

    Example:
        >>> import av
        >>> frame = av.VideoFrame(5, 3, "rgb24")  # rows padded past 15 bytes
        >>> frame.planes[0].line_size > 15, plane_view(frame.planes[0], 3, 5, 3).shape
        (True, (3, 5, 3))
    """
    line = plane.line_size
    if line < 0:
        return None
    if pixel == 1:
        return np.ndarray((height, width), np.uint8, plane, 0, (line, 1))
    return np.ndarray((height, width, pixel), np.uint8, plane, 0, (line, pixel, 1))


def copy_frame(frame: Any, out: np.ndarray, format: str) -> None:
    """Write ``frame.to_ndarray()`` into ``out``, copying the frame's pixels once.

    Args:
        frame: a decoded video frame, converted to ``format`` (by the reformatter).
        out: where its array goes: assigned as ``out[...] = frame.to_ndarray()`` would
            be (the same shapes accepted, the same error otherwise).
        format: the pixel format the frame was converted to (``frame.format.name``,
            or an alias of it).

    Example:
        >>> import av
        >>> frame = av.VideoFrame.from_ndarray(np.arange(45, dtype=np.uint8).reshape(3, 5, 3))
        >>> out = np.zeros((3, 5, 3), np.uint8)
        >>> copy_frame(frame, out, "rgb24")
        >>> bool((out == frame.to_ndarray()).all())
        True
        >>> yuv = av.VideoFrame(4, 2, "yuv420p")
        >>> for plane in yuv.planes:
        ...     plane.update(bytes(range(plane.buffer_size)))
        >>> out = np.zeros((3, 4), np.uint8)
        >>> copy_frame(yuv, out, "yuv420p")
        >>> bool((out == yuv.to_ndarray()).all())
        True
    """
    pixel = PACKED.get(format)
    if pixel is not None:
        planes = frame.planes
        if len(planes) == 1:
            view = plane_view(planes[0], frame.height, frame.width, pixel)
            if view is not None:
                np.copyto(out, view)
                return
    elif format == "yuv420p" and out.flags.c_contiguous:
        h, w = frame.height, frame.width
        planes = frame.planes
        if out.shape == (h + h // 2, w) and not (h % 2 or w % 2) and len(planes) == 3:
            views = [plane_view(planes[0], h, w, 1)]
            views += [plane_view(p, h // 2, w // 2, 1) for p in planes[1:]]
            if all(v is not None for v in views):
                flat = out.reshape(-1)  # (a view: out is contiguous)
                luma, chroma = h * w, (h // 2) * (w // 2)
                np.copyto(flat[:luma].reshape(h, w), views[0])
                np.copyto(flat[luma : luma + chroma].reshape(h // 2, w // 2), views[1])
                np.copyto(flat[luma + chroma :].reshape(h // 2, w // 2), views[2])
                return
    out[...] = frame.to_ndarray()


#: formats with alpha: the format of their colour alone, where it goes, where alpha goes.
#: A frame without alpha is converted to the colour, its alpha written opaque (that of a
#: yuva420p frame copied from its plane): FFmpeg's
#: unscaled conversion of yuv to these formats leaves the last columns of some widths
#: unwritten on x86 (the memory's bytes, different from read to read)
OPAQUE = {
    "rgba": ("rgb24", slice(0, 3), 3),
    "bgra": ("bgr24", slice(0, 3), 3),
    "argb": ("rgb24", slice(1, 4), 0),
    "abgr": ("bgr24", slice(1, 4), 0),
}


@functools.lru_cache(maxsize=64)
def has_alpha(name: str) -> bool:
    """Whether frames of the pixel format ``name`` carry alpha (a palette may: it counts).

    Example:
        >>> has_alpha("yuv420p"), has_alpha("yuva420p"), has_alpha("pal8"), has_alpha("rgba")
        (False, True, True, True)
    """
    fmt = av.VideoFormat(name)
    return fmt.has_palette or any(c.is_alpha for c in fmt.components)


def opaque_colour(frame: Any, width: int | None, height: int | None, format: str) -> str | None:
    """The colour format to convert ``frame`` to for ``format``, its alpha then made opaque.

    ``None``: convert to ``format`` itself (a format without alpha, a frame with alpha
    other than ``yuva420p``, a frame resized: FFmpeg writes every column then). A
    ``yuva420p`` frame's alpha is its alpha plane, copied.

    Example:
        >>> yuv = av.VideoFrame(34, 4, "yuv420p")
        >>> opaque_colour(yuv, None, None, "rgba"), opaque_colour(yuv, 34, 4, "bgra")
        ('rgb24', 'bgr24')
        >>> opaque_colour(yuv, 32, 4, "rgba"), opaque_colour(yuv, None, None, "rgb24")
        (None, None)
    """
    layout = OPAQUE.get(format)
    if layout is None or width not in (None, frame.width) or height not in (None, frame.height):
        return None
    name = frame.format.name
    if name == "yuva420p":  # (its alpha plane is the alpha: copied as it is)
        return layout[0] if frame.planes[3].line_size > 0 else None
    return None if has_alpha(name) else layout[0]


def convert_into(
    reformat: Any, frame: Any, width: int | None, height: int | None, format: str, out: np.ndarray
) -> None:
    """Write ``reformat(frame, width, height, format)`` as an array into ``out``.

    As :func:`copy_frame` of the converted frame, but a frame without alpha converted
    unresized to ``rgba`` or ``argb`` (``bgra``, ``abgr``) is its ``rgb24`` (``bgr24``)
    colour and alpha 255 (:data:`OPAQUE`); a ``yuva420p`` frame, that colour and its
    alpha plane.

    Example:
        >>> from av.video.reformatter import VideoReformatter
        >>> img = np.random.default_rng(0).integers(0, 256, (4, 34, 3), dtype=np.uint8)
        >>> yuv = av.VideoFrame.from_ndarray(img, format="rgb24").reformat(format="yuv420p")
        >>> out = np.zeros((4, 34, 4), np.uint8)
        >>> convert_into(VideoReformatter().reformat, yuv, None, None, "rgba", out)
        >>> bool((out[..., :3] == yuv.to_ndarray(format="rgb24")).all()), int(out[..., 3].min())
        (True, 255)
    """
    colour = opaque_colour(frame, width, height, format)
    if colour is None:
        copy_frame(reformat(frame, width, height, format, threads=1), out, format)
        return
    _, where, alpha = OPAQUE[format]
    copy_frame(reformat(frame, width, height, colour, threads=1), out[..., where], colour)
    if frame.format.name == "yuva420p":
        np.copyto(out[..., alpha], plane_view(frame.planes[3], frame.height, frame.width, 1))
    else:
        out[..., alpha] = 255
