"""How a reader reads, as text: its kind and the options of it that change the steps.

A stream is named across runs by its file and where it starts in it
(:mod:`streamseq.plan.identities`); the same file read with other options (a token
file's dtype, a video's frame size, pixel format or rate, an audio file's sample rate or
layout) has other steps, often of the same lengths. Every reader of :mod:`streamseq.io`
says how it reads with a ``read_options`` attribute made here, which a plan key hashes
(``readers``), so that a state of streams read one way is refused by the same streams
read another. Only options that change the steps are named: never ``storage_options``
(credentials), decoding threads or a declared length.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np

_F = TypeVar("_F", bound=Callable[..., Any])

#: the options of each kind's reader that change what its steps hold (and their defaults)
STEP_OPTIONS: dict[str, dict[str, Any]] = {
    "tokens": {"dtype": None},
    "video": {"size": None, "format": "rgb24", "fps": None, "stream_index": 0},
    "audio": {"sample_rate": None, "frame": 1024, "layout": None, "stream_index": 0},
    "events": {"window_us": None, "height": None, "width": None, "t0": None},
    "token_corpus": {"dtype": None},
}


#: options that their readers take as whole numbers (``int(value)``): 1000.0 is 1000
WHOLE = frozenset({"window_us", "height", "width", "t0", "sample_rate", "frame"})


def _plain(name: str, value: Any) -> str:
    """One option's value in one spelling (a dtype's, a layout's name, numbers).

    Example:
        >>> _plain("window_us", 1000.0), _plain("window_us", 1000.5), _plain("height", True)
        ('1000', '1000.5', 'True')
    """
    if value is None:
        return "None"
    if (
        name in WHOLE
        and isinstance(value, (int, float, np.integer, np.floating))
        and not isinstance(value, (bool, np.bool_))
        and float(value).is_integer()
    ):
        return repr(int(value))
    if name == "dtype":
        return np.dtype(value).str
    if name == "layout":
        import av

        return av.AudioLayout(f"{value}c" if isinstance(value, int) else value).name
    if name == "size":
        return repr(tuple(int(x) for x in value))
    if name == "fps":
        return repr(float(value))
    if isinstance(value, (bool, np.bool_)):
        return repr(bool(value))
    if isinstance(value, (int, np.integer)):
        return repr(int(value))
    return repr(value)


def read_options(kind: str, options: Mapping[str, Any]) -> str:
    """How a reader of ``kind`` given ``options`` reads: the options that change steps.

    Options it does not name take their defaults; others (``storage_options``,
    ``threads``, ``length``, ...) are left out.

    Example:
        >>> read_options("tokens", {"dtype": "uint16", "storage_options": {"key": "k"}})
        'tokens(dtype=<u2)'
        >>> read_options("video", {"size": [48, 64], "threads": 2})
        "video(size=(48, 64), format='rgb24', fps=None, stream_index=0)"
        >>> read_options("video", {"size": (48, 64), "format": "rgb24"}) == read_options(
        ...     "video", {"size": [48, 64]})
        True
    """
    named = STEP_OPTIONS[kind]
    shown = ", ".join(f"{k}={_plain(k, options.get(k, d))}" for k, d in named.items())
    return f"{kind}({shown})"


def reads(kind: str) -> Callable[[_F], _F]:
    """Mark a reader function of ``kind``: how a call of it reads, without calling it.

    The function gets a ``read_options_of(*args, **kwargs)`` attribute that says what
    the reader made by ``fn(*args, **kwargs)`` says of itself (:func:`read_options`), so
    that an opener, ``functools.partial(fn, ...)``, names how its stream is read before it
    is opened (:func:`streamseq.read.ref.reader_of`); ``""`` for a call that binds no
    arguments of ``fn`` or has an option that is not one (opening it tells).

    Example:
        >>> @reads("tokens")
        ... def flat(path, dtype=None, *, storage_options=None):
        ...     pass
        >>> flat.read_options_of("t.bin", dtype="uint16", storage_options={"key": "k"})
        'tokens(dtype=<u2)'
        >>> flat.read_options_of("t.bin", nonsense=1)
        ''
    """

    def mark(fn: _F) -> _F:
        fn.read_options_of = functools.partial(_options_of_call, kind, inspect.signature(fn))  # type: ignore[attr-defined]
        return fn

    return mark


def _options_of_call(kind: str, signature: inspect.Signature, *args: Any, **kwargs: Any) -> str:
    """What :func:`read_options` says of the reader a call with these arguments makes."""
    try:
        bound = signature.bind(*args, **kwargs)
        return read_options(kind, bound.arguments)
    except Exception:  # (a call that fails: opening it says why)
        return ""
