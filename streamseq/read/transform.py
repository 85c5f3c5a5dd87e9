"""Transforms of the steps a worker reads, with randomness that is part of the plan."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from .._checks import check_int
from .._tree import leaves, num_steps, tree_map
from ..errors import StreamError
from .ref import StreamRef


def _key(k: Any) -> int:
    """An entropy word for ``numpy.random.SeedSequence``: ints as they are, strings hashed."""
    if isinstance(k, str):
        return int.from_bytes(hashlib.sha256(k.encode()).digest()[:8], "little")
    return check_int(k, "an rng key", 0)


def read_only(tree: Any) -> Any:
    """Read-only views of the arrays of a tree (no copy); other leaves as they are.

    Example:
        >>> a = np.arange(3)
        >>> v = read_only({"x": a})["x"]
        >>> v.flags.writeable, a.flags.writeable, np.shares_memory(a, v)
        (False, True, True)
    """
    return tree_map(_read_only_view, tree)


def _read_only_view(a: Any) -> Any:
    """A read-only view of an array (a memmap stays a memmap); anything else as it is."""
    if not isinstance(a, np.ndarray):
        return a
    view = a.view()
    view.flags.writeable = False
    return view


def _is_write_to_read_only(e: Exception) -> bool:
    """Whether ``e`` is numpy refusing to write into a read-only array."""
    return isinstance(e, ValueError) and "read-only" in str(e)


class StepInfo(NamedTuple):
    """Where a slice of steps comes from, given to a transform with the steps.

    Attributes:
        stream: index of the stream in the list the user gave.
        start: first step of the slice within the stream.
        stop: step after the last one of the slice.
        epoch: the epoch being read.
        seed: the loader's seed.

    Example:
        >>> info = StepInfo(stream=3, start=8, stop=16, epoch=1, seed=0)
        >>> a, b = info.rng().integers(100, size=2), info.rng().integers(100, size=2)
        >>> bool((a == b).all()), bool((info.rng(8).random() != info.rng(9).random()))
        (True, True)
    """

    stream: int
    start: int
    stop: int
    epoch: int
    seed: int = 0

    def rng(self, *keys: int | str) -> np.random.Generator:
        """A generator seeded from (seed, epoch, stream, ``*keys``).

        The same arguments give the same generator in any process and after resuming:
        ``rng()`` draws once per stream (a crop for the whole stream), ``rng(step)`` once
        per step, whatever slices the steps are read in.

        Args:
            keys: non-negative integers or strings that select another generator.
        """
        words = [self.seed, self.epoch, self.stream, *map(_key, keys)]
        return np.random.default_rng(np.random.SeedSequence(words))


class Transform:
    """``fn(steps, info)`` applied to every slice read, with the seed and epoch of the plan.

    ``fn`` receives read-only views of the steps (every array of a dict or tuple step
    too), without a copy: the arrays are the stream's own (the user's arrays, a memory
    map), which a transform must never change. A transform returns new arrays
    (``x = x * 2``, not ``x *= 2``); one that writes into its input raises a
    :class:`~streamseq.StreamError` naming the transform, the stream and the steps.

    Args:
        fn: a picklable function of (steps, :class:`StepInfo`) returning the steps to
            batch, with as many steps as it was given.
        seed: the seed given to :meth:`StepInfo.rng`.
        epoch: the epoch given to it.
        inner: a transform applied before this one.

    Example:
        >>> t = Transform(lambda x, info: x * 10, seed=0, epoch=0)
        >>> t(StreamRef(0, np.arange(5)), 0, np.arange(2), 0, 2).tolist()
        [0, 10]
        >>> def double(x, info):
        ...     x *= 2
        ...     return x
        >>> Transform(double)(StreamRef(0, np.arange(5)), 0, np.arange(2), 0, 2)
        Traceback (most recent call last):
        ...
        streamseq.errors.StreamError: stream 0 (...): transform double wrote into its input...
    """

    def __init__(
        self,
        fn: Callable[[Any, StepInfo], Any],
        seed: int = 0,
        epoch: int = 0,
        inner: Transform | None = None,
    ):
        if not callable(fn):
            raise TypeError(f"transform must be callable, got {type(fn).__name__}")
        self.fn, self.inner = fn, inner
        self.seed, self.epoch = check_int(seed, "seed", 0), check_int(epoch, "epoch", 0)

    @property
    def name(self) -> str:
        """The function's qualified name (its ``repr`` when it has none)."""
        fn = self.fn.func if isinstance(self.fn, functools.partial) else self.fn
        return getattr(fn, "__qualname__", repr(fn))

    def __repr__(self) -> str:
        return f"Transform({self.name}, seed={self.seed}, epoch={self.epoch})"

    def __call__(self, ref: StreamRef, stream: int, data: Any, start: int, stop: int) -> Any:
        """Transform ``data``, steps ``start:stop`` of stream ``stream`` read through ``ref``.

        Raises:
            StreamError: the function raised (wrote into its read-only input among
                others), or returned another number of steps; it names the stream and
                the step range.
        """
        if self.inner is not None:
            data = self.inner(ref, stream, data, start, stop)
        info = StepInfo(stream, start, stop, self.epoch, self.seed)
        try:
            out = self.fn(read_only(data), info)
        except StreamError as e:  # a stream's own error (a SourceError): raised as it is
            ref.locate(e, (start, stop))
            raise
        except Exception as e:
            if _is_write_to_read_only(e):
                raise ref.error(
                    f"transform {self.name} wrote into its input on steps {start}:{stop} "
                    f"({e}): the steps given to a transform are read-only views of the "
                    "stream; return new arrays (x = x * 2, not x *= 2)"
                ) from e
            raise ref.error(
                f"transform {self!r} failed on steps {start}:{stop}: {type(e).__name__}: {e}"
            ) from e
        except BaseException as e:  # an exit (sys.exit, Ctrl-C): raised as it is, noting where
            ref.mark(e, (start, stop))
            raise
        if isinstance(out, list):
            out = np.asarray(out)
        try:
            got = num_steps(out) if leaves(out) else 0
        except (TypeError, ValueError) as e:
            raise ref.error(
                f"transform {self!r} returned something other than arrays with a step axis "
                f"for steps {start}:{stop}: {e}"
            ) from e
        if got != stop - start:
            raise ref.error(
                f"transform {self!r} returned {got} steps for steps {start}:{stop} "
                f"({stop - start} steps): a transform keeps the number of steps"
            )
        return out
