"""Warnings attributed to the user's code: the first caller outside this package."""

from __future__ import annotations

import os
import sys
import warnings

from streamseq._redact import redact_urls

#: the folder of the package, with a trailing separator (frames whose file is in it are ours)
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_stacklevel() -> int:
    """The ``stacklevel`` that points at the first frame outside streamseq.

    Counted from the function that calls this one (``stacklevel=1`` is its own frame),
    so ``warnings.warn(message, stacklevel=user_stacklevel())`` in a streamseq function
    names the line of the user's code that led to it, however deep inside streamseq it
    is raised. With no frame outside streamseq (a thread streamseq started), the
    outermost frame.

    Example:
        >>> user_stacklevel()  # called from outside streamseq: its own caller
        1
    """
    frame = sys._getframe(1)  # the caller's frame: stacklevel 1
    level = 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """Issue a warning that names the line of the user's code that led to it.

    The credentials of URLs in ``message`` are hidden (see :mod:`streamseq._redact`).

    Args:
        message: the warning.
        category: its class.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     warn("careful")
        >>> caught[0].filename.startswith("<doctest"), str(caught[0].message)
        (True, 'careful')
    """
    warnings.warn(redact_urls(message), category, stacklevel=user_stacklevel())
