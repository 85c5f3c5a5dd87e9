"""What differs between the PyAV releases streamseq supports, written once.

streamseq reads media with PyAV 17 and later. Where a release changed what streamseq
calls, the difference is bridged here and nowhere else:

- :func:`av.open` took ``metadata_errors`` up to PyAV 18; PyAV 19 removed it and always
  reads tags as UTF-8 with ``surrogateescape``, which never fails. Before 19, a tag that is
  not UTF-8 fails the whole open unless ``metadata_errors="ignore"`` is given.
- PyAV's objects that own threads (decoders, scalers, filter graphs) must never be freed
  in a forked child: freeing them there waits forever for threads that exist only in the
  parent. A child frees what it inherits when its cycle collector finds it in garbage
  (a traceback kept by a cycle, say) and, from PyAV 19 on, every ``av.AudioResampler``'s
  filter graph is such garbage once dropped: it is in a reference cycle with its links.
  So every child forked from a process that imported streamseq's media sources leaves the
  objects it inherited out of its collections (:func:`gc.freeze`, as streamseq's own
  workers do), with any PyAV release; the collector is off across the fork itself
  (:func:`streamseq._collector.across_forks`: one count with its pauses), so that the
  interpreter's own after-fork work in the child (threading's) cannot start a
  collection before that.

PyAV 19's other breaking changes need no bridge here: its rational attributes
(``time_base``, ``average_rate``) are ``av.AVRational`` instead of ``Fraction``, but they
multiply into a ``Fraction``, convert with ``float``, compare equal, pickle and are falsy
when unset, which is all streamseq does with them; ``stream_options``, ``hwaccel``, and
closed output containers are not used.
"""

from __future__ import annotations

from typing import Any

import av

from .. import _collector

#: the first PyAV release without ``metadata_errors`` (and its matching attribute)
NO_METADATA_ERRORS = 19


def major(version: str) -> int:
    """The major number of a PyAV version string.

    Example:
        >>> major("19.0.2"), major("12.3.0"), major("20.0.0rc1")
        (19, 12, 20)
    """
    return int(version.split(".", 1)[0])


def open_arguments(version: str) -> dict[str, str]:
    """The keyword arguments of :func:`av.open` that let a file with odd tags be read.

    Args:
        version: PyAV's version (``av.__version__``).

    Returns:
        ``{"metadata_errors": "ignore"}`` up to PyAV 18, nothing from 19 on (where reading
        tags cannot fail, and the argument is refused).

    Example:
        >>> open_arguments("18.1.0")
        {'metadata_errors': 'ignore'}
        >>> open_arguments("19.0.2")
        {}
    """
    return {} if major(version) >= NO_METADATA_ERRORS else {"metadata_errors": "ignore"}


def open_input(file: Any) -> Any:
    """Open ``file`` (a path or a binary file object) for reading with the installed PyAV.

    Tags that are not UTF-8 never fail the open, with any PyAV release.

    Raises:
        av.error.FFmpegError: If FFmpeg cannot open it.
    """
    return av.open(file, "r", **open_arguments(av.__version__))


#: the collector is off while forks (or pauses) are under way (from the first one's start
#: to the last one's end), as it was before once they are done; a child leaves what it
#: inherits out of its collections (``gc.freeze``) before collecting again
_collector.across_forks()
