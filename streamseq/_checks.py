"""Argument checks, one home: integers, pad modes, worker settings and timeouts."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

PAD_MODES = ("zeros", "drop", "wrap", "pack")
METHODS = ("process", "thread")


def check_int(value: Any, name: str, minimum: int | None = None) -> int:
    """``value`` as an int: an integer (or an integral float; not a bool or a string).

    Raises:
        TypeError: ``value`` is not an integer.
        ValueError: it is below ``minimum``.

    Example:
        >>> check_int(np.int64(3), "tbins", 1)
        3
        >>> check_int(2.5, "tbins", 1)
        Traceback (most recent call last):
        ...
        TypeError: tbins must be an integer, got 2.5 (float)
    """
    whole = None
    if isinstance(value, (bool, np.bool_)):
        pass
    elif isinstance(value, numbers.Integral):
        whole = int(value)
    elif isinstance(value, numbers.Real):
        # the number itself compared with its int (exact: a fraction or a long double
        # past 2**53 whose float is whole is not), never its float
        try:
            whole = int(value)
        except (ValueError, OverflowError):  # (NaN, infinities)
            pass
        else:
            whole = whole if whole == value else None
    if whole is None:
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    value = whole
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_pad(pad: str) -> str:
    """Return ``pad`` if it is a known pad mode, else raise ValueError.

    Example:
        >>> check_pad("wrap")
        'wrap'
    """
    if pad not in PAD_MODES:
        raise ValueError(f"unknown pad mode {pad!r}: expected one of {PAD_MODES}")
    return pad


def check_workers(
    num_workers: int, method: str, max_buffered: int, *, name: str = "prefetch method"
) -> None:
    """Raise ValueError unless workers can run with these settings.

    Args:
        num_workers: worker processes or threads (0: none).
        method: ``"process"`` or ``"thread"``.
        max_buffered: items in flight (at least 4 with processes, 1 with threads).
        name: what the caller calls ``method``, for the message.

    Example:
        >>> check_workers(2, "fork", 6, name="method")
        Traceback (most recent call last):
        ...
        ValueError: unknown method 'fork': expected one of ('process', 'thread')
    """
    if num_workers < 0:
        raise ValueError(f"num_workers must be >= 0, got {num_workers}")
    if method not in METHODS:
        raise ValueError(f"unknown {name} {method!r}: expected one of {METHODS}")
    if max_buffered < (4 if method == "process" else 1):
        raise ValueError(f"max_buffered too small for the {method} backend: {max_buffered}")


def check_timeout(timeout: Any) -> float | None:
    """``timeout`` in seconds as a float, or None for no timeout (None or infinity).

    Raises:
        TypeError: ``timeout`` is not a number.
        ValueError: it is NaN, zero or negative.

    Example:
        >>> check_timeout(2), check_timeout(None), check_timeout(float("inf"))
        (2.0, None, None)
        >>> check_timeout(float("nan"))
        Traceback (most recent call last):
        ...
        ValueError: timeout must be > 0 seconds (None or inf: no timeout), got nan
    """
    if timeout is None:
        return None
    if isinstance(timeout, (bool, np.bool_)) or not isinstance(timeout, numbers.Real):
        raise TypeError(
            f"timeout must be a number of seconds (or None), got {timeout!r} "
            f"({type(timeout).__name__})"
        )
    seconds = float(timeout)
    if not seconds > 0:  # (NaN too)
        raise ValueError(f"timeout must be > 0 seconds (None or inf: no timeout), got {timeout}")
    return None if math.isinf(seconds) else seconds


def check_cap(cap: Any, pad: str) -> int | None:
    """``max_streams_per_chunk`` checked: None, or an integer >= 1 with ``pad="pack"``.

    Example:
        >>> check_cap(2, "pack"), check_cap(None, "zeros")
        (2, None)
        >>> check_cap(2, "zeros")
        Traceback (most recent call last):
        ...
        ValueError: max_streams_per_chunk=2 caps packed chunks: it needs pad="pack", not 'zeros'
    """
    if cap is None:
        return None
    cap = int(check_int(cap, "max_streams_per_chunk", 1))
    if pad != "pack":
        raise ValueError(
            f'max_streams_per_chunk={cap} caps packed chunks: it needs pad="pack", not {pad!r}'
        )
    return cap
