"""The data's step spec (dtype and step shape), read from one step of the first stream.

The read has a timeout. What costs no read is :func:`streamseq.read.step_spec.step_spec`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._tree import leaves, tree_map
from ..deliver.torch import torch_dtype
from ..read.ref import StreamRef
from ..read.step_spec import step_spec_of
from ..read.transform import Transform
from ..workers.inline import in_thread


def zero_steps(a: Any) -> np.ndarray:
    """No step of ``a``: its dtype (in native byte order) and step shape.

    Example:
        >>> zero_steps(np.zeros((5, 2), ">f4")).dtype, zero_steps(np.zeros((5, 2))).shape
        (dtype('float32'), (0, 2))
    """
    return step_spec_of(a, native=True)


def read_spec(ref: StreamRef, transform: Transform | None) -> Any:
    """One step of ``ref`` (transformed) as zero-step arrays, closing it after.

    Raises:
        StreamError: naming the stream, when the steps are of a dtype that tensors
            cannot hold (objects, strings, records).
    """
    try:
        data = ref.read(0, 1)
        if transform is not None:
            data = transform(ref, ref.index, data, 0, 1)
        spec = tree_map(zero_steps, data)
    finally:
        ref.close()
    for leaf in leaves(spec):
        try:
            torch_dtype(leaf.dtype)
        except TypeError:
            raise ref.error(
                f"its steps are of dtype {leaf.dtype}, which tensors cannot hold: turn them "
                "into numbers in the stream or in a transform="
            ) from None
    return spec


def call_with_timeout(fn: Callable[[], Any], timeout: float, ref: StreamRef, what: str) -> Any:
    """``fn()`` in a daemon thread; a StreamError naming ``ref`` if it takes over ``timeout``.

    Example:
        >>> call_with_timeout(lambda: 3, 1.0, None, "adding")
        3
    """
    done = in_thread(fn, timeout, "spec")
    if done is None:
        raise ref.error(f"{what} took more than timeout={timeout:g} s; it was left running")
    ok, value = done
    if not ok:
        raise value
    return value


class FirstStepSpec:
    """The data's step spec: zero-step arrays with its dtype and step shape (or a tree).

    Read on first need, from one step of the first non-empty stream (transformed, when
    there is a transform: once per epoch then); every other stream must match it. The
    dtypes are in native byte order (torch reads only that): steps of a stream in the
    other byte order are converted as they are copied into a batch, whatever the number
    of workers.

    Args:
        refs: the streams.
        lengths: their lengths (one is not zero).
        transform: the user's transform, or None.
        seed: the seed its generators derive from.
        timeout: seconds the read may take, or None.

    Example:
        >>> from streamseq.read.ref import as_refs
        >>> spec = FirstStepSpec(as_refs([np.zeros((3, 2), np.int16)]), np.array([3]))
        >>> spec.of(0).dtype, spec.of(0).shape
        (dtype('int16'), (0, 2))
    """

    def __init__(
        self,
        refs: Sequence[StreamRef],
        lengths: np.ndarray,
        transform: Callable[..., Any] | None = None,
        seed: int = 0,
        timeout: float | None = None,
    ):
        self.refs, self.lengths, self.transform = refs, lengths, transform
        self.seed, self.timeout = seed, timeout
        self._kept: tuple[int, Any] | None = None

    def of(self, epoch: int) -> Any:
        """The step spec of ``epoch`` (the same for every epoch without a transform)."""
        key = epoch if self.transform is not None else 0
        if self._kept is None or self._kept[0] != key:
            ref = self.refs[int(np.flatnonzero(self.lengths)[0])]
            transform = None
            if self.transform is not None:
                transform = Transform(self.transform, self.seed, epoch)
            read = functools.partial(read_spec, ref, transform)
            if self.timeout is None:
                spec = read()
            else:
                what = "reading its first step (the data's dtype and step shape)"
                spec = call_with_timeout(read, self.timeout, ref, what)
            self._kept = (key, spec)
        return self._kept[1]
