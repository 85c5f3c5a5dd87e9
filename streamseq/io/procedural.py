"""Procedural streams: a virtual camera moving over an image, and textures to film.

Every step is rendered on demand from its index alone (the camera pose is a closed-form
function of time), so a stream of any length costs no memory and reads the same in any
order and in any process.
"""

from __future__ import annotations

import math

import numpy as np

from streamseq._checks import check_int
from streamseq.io._base import Source
from streamseq.io._noise import value_noise

_TERMS = 3  # sinusoids per degree of freedom of the camera path


class _VirtualCamera(Source):
    #: its frames are drawn by this process: it waits on no network (:attr:`Source.on_network`)
    on_network = False

    def __init__(
        self,
        image: np.ndarray,
        length: int,
        size: tuple[int, int],
        seed: int,
        speed: float,
        view: float,
        zoom: float,
        rotation: float,
        tilt: float,
    ):
        super().__init__()
        image = np.asarray(image)
        if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8 or not image.size:
            raise ValueError(
                f"image must be a non-empty uint8 array [H, W, 3], got {image.dtype} {image.shape}"
            )
        self.image = image
        self.length = check_int(length, "length", 0)
        try:
            height, width = size
        except (TypeError, ValueError):  # (not a pair)
            raise ValueError(f"size must be (height, width), got {size!r}") from None
        self.size = (check_int(height, "size[0]", 1), check_int(width, "size[1]", 1))
        self.seed = seed
        self.speed, self.rotation, self.tilt = (
            _finite(speed, "speed"),
            _finite(rotation, "rotation"),
            _finite(tilt, "tilt"),
        )
        self.view, self.zoom = _finite(view, "view", 0), _finite(zoom, "zoom", 0)
        rng = np.random.default_rng(seed)
        # per degree of freedom (x, y, zoom, angle, tilt x, tilt y): frequencies in cycles
        # per step (a slow random walk look) and phases
        self._freq = (rng.uniform(0.002, 0.012, (6, _TERMS)) * self.speed).tolist()
        self._phase = rng.uniform(0, 2 * math.pi, (6, _TERMS)).tolist()
        self._weight = rng.uniform(0.5, 1.0, (6, _TERMS)).tolist()

    def __repr__(self) -> str:
        return (
            f"virtual_camera(<{self.image.shape} image>, length={self.length}, seed={self.seed})"
        )

    def __len__(self) -> int:
        return self.length

    def _open(self) -> None:
        return None

    def _empty(self) -> np.ndarray:
        return np.zeros((0, *self.size, 3), np.uint8)

    def step_spec(self) -> tuple[np.dtype, tuple[int, ...]]:
        """``uint8`` images ``[height, width, 3]``."""
        return np.dtype(np.uint8), (*self.size, 3)

    def _wave(self, dof: int, t: int) -> float:
        """A smooth function of the step with values in [-1, 1]."""
        f, ph, w = self._freq[dof], self._phase[dof], self._weight[dof]
        s = sum(w[k] * math.sin(2 * math.pi * f[k] * t + ph[k]) for k in range(_TERMS))
        return s / sum(w)

    def pose(self, t: int) -> np.ndarray:
        """The 3x3 homography from output pixel ``(x, y, 1)`` to image pixel at step ``t``."""
        ih, iw = self.image.shape[:2]
        h, w = self.size
        scale = (self.view * iw / w) * math.exp(math.log(self.zoom) * self._wave(2, t))
        half = 0.5 * scale * math.hypot(w, h)  # half diagonal of the view, in image pixels
        cx = iw / 2 + max(0.0, iw / 2 - half) * self._wave(0, t)
        cy = ih / 2 + max(0.0, ih / 2 - half) * self._wave(1, t)
        angle = self.rotation * self._wave(3, t)
        px = self.tilt * self._wave(4, t) / max(h, w)
        py = self.tilt * self._wave(5, t) / max(h, w)
        cos, sin = math.cos(angle), math.sin(angle)
        center = np.array([[1, 0, -w / 2], [0, 1, -h / 2], [0, 0, 1]])
        perspective = np.array([[1, 0, 0], [0, 1, 0], [px, py, 1]])
        similarity = np.array(
            [[scale * cos, -scale * sin, cx], [scale * sin, scale * cos, cy], [0, 0, 1]]
        )
        return similarity @ perspective @ center

    def _read(self, handle: None, a: int, b: int) -> np.ndarray:
        h, w = self.size
        ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
        ys += 0.5
        xs += 0.5
        out = np.empty((b - a, h, w, 3), np.uint8)
        for i, t in enumerate(range(a, b)):
            m = self.pose(t)
            d = m[2, 0] * xs + m[2, 1] * ys + m[2, 2]
            u = (m[0, 0] * xs + m[0, 1] * ys + m[0, 2]) / d - 0.5
            v = (m[1, 0] * xs + m[1, 1] * ys + m[1, 2]) / d - 0.5
            out[i] = _bilinear(self.image, v, u)
        return out


def _finite(value: float, name: str, above: float | None = None) -> float:
    """``value`` as a float: a finite number (``> above`` if given), else a ValueError.

    (A NaN draws black frames, an infinite one or a zoom of 0 fails the first read.)

    Example:
        >>> _finite(1, "zoom", 0)
        1.0
        >>> _finite(0.0, "zoom", 0)
        Traceback (most recent call last):
        ...
        ValueError: zoom must be a finite number > 0, got 0.0
    """
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):  # (a string, None, an int past floats)
        raise ValueError(f"{name} must be a finite number, got {value!r}") from None
    if not math.isfinite(number) or (above is not None and not number > above):
        more = "" if above is None else f" > {above}"
        raise ValueError(f"{name} must be a finite number{more}, got {value!r}")
    return number


def _reflect(x: np.ndarray, n: int) -> np.ndarray:
    """Integer coordinates mirrored into ``[0, n)`` (edge pixels not repeated twice)."""
    if n == 1:
        return np.zeros_like(x)
    period = 2 * n - 2
    x = np.mod(x, period)
    return np.where(x >= n, period - x, x)


def _bilinear(image: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Sample ``image`` at real coordinates with bilinear interpolation, mirrored edges."""
    ih, iw = image.shape[:2]
    y0, x0 = np.floor(y), np.floor(x)
    fy, fx = (y - y0)[..., None], (x - x0)[..., None]
    y0, x0 = y0.astype(np.int64), x0.astype(np.int64)
    ya, yb = _reflect(y0, ih), _reflect(y0 + 1, ih)
    xa, xb = _reflect(x0, iw), _reflect(x0 + 1, iw)
    img = image.astype(np.float64) if image.dtype != np.float64 else image
    top = img[ya, xa] * (1 - fx) + img[ya, xb] * fx
    bottom = img[yb, xa] * (1 - fx) + img[yb, xb] * fx
    return np.clip(np.rint(top * (1 - fy) + bottom * fy), 0, 255).astype(np.uint8)


def virtual_camera(
    image: np.ndarray,
    *,
    length: int,
    size: tuple[int, int] = (64, 64),
    seed: int = 0,
    speed: float = 1.0,
    view: float = 0.5,
    zoom: float = 1.5,
    rotation: float = 0.4,
    tilt: float = 0.3,
) -> _VirtualCamera:
    """Stream what a virtual camera sees while wandering over a planar image.

    The camera pans, zooms, rolls and tilts along a smooth pseudo-random path (sums of
    sinusoids with frequencies and phases drawn from ``seed``). Each step is rendered on
    demand by warping the image with the homography of the camera pose at that step
    (bilinear sampling, mirrored edges), so ``s[a:b]`` depends only on ``a``, ``b`` and the
    arguments, never on what was read before.

    Args:
        image: the scene, a uint8 array ``[H, W, 3]`` (see :func:`texture`).
        length: number of steps.
        size: ``(height, width)`` of the rendered frames.
        seed: seed of the camera path.
        speed: multiplies the frequencies of the path.
        view: fraction of the image width that the frame covers at the median zoom.
        zoom: the zoom factor varies between ``1 / zoom`` and ``zoom``.
        rotation: largest roll angle, in radians.
        tilt: strength of the perspective (0: an affine camera).

    Returns:
        A stream: ``s[a:b]`` is a uint8 array ``[b - a, height, width, 3]``.

    Raises:
        TypeError: ``length`` or a side of ``size`` is not a whole number.
        ValueError: ``image`` is not a non-empty uint8 array ``[H, W, 3]``, ``length`` is
            negative, ``size`` is not a pair or a side of it below 1, ``speed``,
            ``rotation`` or ``tilt`` is not a finite number, ``view`` or ``zoom`` not a
            finite positive number (each named).

    Example:
        >>> cam = virtual_camera(texture(128, 128, seed=0), length=100, size=(24, 32), seed=3)
        >>> frames = cam[10:14]
        >>> len(cam), frames.shape, frames.dtype
        (100, (4, 24, 32, 3), dtype('uint8'))
        >>> bool(np.array_equal(frames[2], cam[12]))  # the same whatever the reading order
        True
    """
    return _VirtualCamera(image, length, size, seed, speed, view, zoom, rotation, tilt)


def texture(height: int, width: int, *, seed: int = 0, octaves: int = 5) -> np.ndarray:
    """Make a colourful, richly detailed image to film with :func:`virtual_camera`.

    Fractal value noise (``octaves`` scales of smooth noise) is coloured by a random
    palette, and overlaid with random discs and stripes so that motion is easy to see at
    every scale.

    Args:
        height: image height.
        width: image width.
        seed: seed of the noise, palette and shapes.
        octaves: number of noise scales.

    Returns:
        A uint8 array ``[height, width, 3]``.

    Example:
        >>> img = texture(48, 64, seed=1)
        >>> img.shape, img.dtype, bool(img.std() > 20)
        ((48, 64, 3), dtype('uint8'), True)
    """
    rng = np.random.default_rng(seed)
    field = np.zeros((height, width))
    total = 0.0
    for octave in range(octaves):
        amplitude = 0.55**octave
        field += amplitude * value_noise(
            rng, height, width, 3 * 2**octave, wrap=True, smoothstep=True
        )
        total += amplitude
    field /= total
    field = (field - field.min()) / max(field.max() - field.min(), 1e-9)
    palette = rng.uniform(0, 255, (4, 3))
    position = field * (len(palette) - 1)
    i = np.minimum(position.astype(int), len(palette) - 2)
    f = (position - i)[..., None]
    image = palette[i] * (1 - f) + palette[i + 1] * f
    yy, xx = np.mgrid[0:height, 0:width]
    for _ in range(12):
        cy, cx = rng.uniform(0, height), rng.uniform(0, width)
        r = rng.uniform(0.03, 0.12) * min(height, width)
        disc = (yy - cy) ** 2 + (xx - cx) ** 2 < r * r
        image[disc] = 0.4 * image[disc] + 0.6 * rng.uniform(0, 255, 3)
    angle = rng.uniform(0, math.pi)
    period = rng.uniform(0.05, 0.15) * min(height, width)
    stripes = np.sin((xx * math.cos(angle) + yy * math.sin(angle)) * 2 * math.pi / period) > 0.7
    image[stripes] *= 0.6
    return np.clip(image, 0, 255).astype(np.uint8)
