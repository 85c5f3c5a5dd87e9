"""Measure the lengths of many streams in parallel, remembering them in a cache file.

:class:`~streamseq.StreamLoader` plans from the stream lengths alone, so for a large
collection of recordings the only cost at start-up is measuring them. :func:`probe_lengths`
does it once, in worker processes, with a progress bar, and stores the lengths in a JSON
file keyed by each file's path, size and modification time (a URL: its ETag, else its size
and modification time): the next run reads them back and measures only the files that are
new or changed since.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import functools
import hashlib
import json
import os
import re
import secrets
import signal
import stat
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from streamseq._redact import OPTIONS_NAMES, is_sensitive, redact_text, redact_urls
from streamseq._warn import warn
from streamseq.errors import StreamError
from streamseq.io.remote import is_url
from streamseq.read.ref import StreamRef, describe

CACHE_FORMAT = "streamseq-lengths"
CACHE_VERSION = 1
_SIMPLE = (type(None), bool, int, float, str, bytes)


def _simple(value: Any) -> bool:
    """Whether ``repr(value)`` is a stable description (no addresses, no big arrays)."""
    if isinstance(value, _SIMPLE):
        return True
    if isinstance(value, (tuple, list)):
        return len(value) <= 16 and all(_simple(v) for v in value)
    if isinstance(value, dict):
        return len(value) <= 16 and all(_simple(k) and _simple(v) for k, v in value.items())
    return False


def _describe_value(value: Any) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, np.dtype):
        return repr(value)
    if _simple(value):
        return redact_text(repr(value), options=False)  # written to the cache: no secret
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


def _qualname(obj: Any) -> str:
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{getattr(obj, '__module__', None) or type(obj).__module__}.{name}"


def _is_path(value: Any) -> bool:
    return isinstance(value, (str, os.PathLike))


def _setting(name: str, value: Any) -> str:
    """``name=value`` for a cache key; a credential's value by a hash (never written)."""
    if is_sensitive(name):  # a password, or a dataset's key: told apart, not shown
        raw = repr(value) if _simple(value) else _describe_value(value)
        digest = hashlib.sha256(raw.encode()).hexdigest()[:12]
        return f"{name}=<sha256:{digest}>"
    return f"{name}={_describe_value(value)}"


def cache_key(opener: Any) -> tuple[str, str] | None:
    """The file behind an opener and a description of how it is opened, or ``None``.

    The file is the ``path`` attribute of a stream or opener (the sources of
    :mod:`streamseq.io` have one), or the first positional argument (or ``path=``
    keyword) of a :func:`functools.partial`. The description names the type or function
    and its other settings, so two openers that read the same file differently (another
    stream index, another window) are cached apart. Credentials are never written to the
    cache file: the ``storage_options`` of a URL are left out, a setting with a
    credential's name (``token=``, ``key=``, ...) is told by a hash of its value, and the
    user information and signature of a URL
    (``https://user:password@host/a?X-Amz-Signature=...``) are hidden (see
    :mod:`streamseq._redact`).

    Args:
        opener: a stream or a zero-argument opener.

    Returns:
        ``(absolute path, description)`` (a URL as it is, its credentials hidden), or
        ``None`` when no file can be told.

    Example:
        >>> import functools, numpy as np
        >>> path, how = cache_key(functools.partial(np.load, "/data/a.npy", mmap_mode="r"))
        >>> path, how
        ('/data/a.npy', "numpy.load(mmap_mode='r')")
        >>> url, how = cache_key(functools.partial(np.load, "https://me:pw@host/a.npy", token="a"))
        >>> url, how[:28]
        ('https://***@host/a.npy', 'numpy.load(token=<sha256:d74')
        >>> cache_key(np.arange(3)) is None
        True
    """
    found = _file_of(opener)
    return None if found is None else (redact_urls(found[0]), found[1])


def _file_of(opener: Any) -> tuple[str, str] | None:
    """:func:`cache_key` with the path as it is: where to ask whether the file changed."""
    path: Any = getattr(opener, "path", None)
    if _is_path(path):
        settings = {
            k: v
            for k, v in sorted(vars(opener).items() if hasattr(opener, "__dict__") else [])
            if not k.startswith("_") and k not in OPTIONS_NAMES and k != "path"
        }
        args = ", ".join(_setting(k, v) for k, v in settings.items())
        how = f"{type(opener).__module__}.{type(opener).__qualname__}({args})"
    elif isinstance(opener, functools.partial):
        rest = list(opener.args)
        keywords = {k: v for k, v in opener.keywords.items() if k not in OPTIONS_NAMES}
        if rest and _is_path(rest[0]):
            path = rest.pop(0)
        elif _is_path(keywords.get("path")):
            path = keywords.pop("path")
        else:
            return None
        parts = [_describe_value(v) for v in rest]
        parts += [_setting(k, v) for k, v in sorted(keywords.items())]
        how = f"{_qualname(opener.func)}({', '.join(parts)})"
    else:
        return None
    path = os.fspath(path)
    return (path if is_url(path) else os.path.abspath(path)), how


#: the fields of a cache entry that tell a version of a file, and their types
_IDENTITY = {"size": int, "mtime_ns": int, "etag": str, "mtime": str}


def _stat(path: str, opener: Any = None) -> dict[str, Any] | None:
    """What tells this version of a file, or ``None`` when it cannot be told.

    Size and modification time (ns); for a URL its size and ETag (or size and
    modification time where the server gives no ETag).

    A source made from a URL asked for it when it was made; other openers of a URL (a
    :func:`functools.partial`) are asked with their ``storage_options=`` keyword.
    """
    if is_url(path):
        remote = getattr(opener, "_remote", None)
        if remote is not None and getattr(remote, "url", None) == path:
            return dict(remote.stat)
        keywords = opener.keywords if isinstance(opener, functools.partial) else {}
        from streamseq.io import remote as remote_files

        try:
            return remote_files.stat(path, keywords.get("storage_options"))
        except Exception:  # unreachable, or no fsspec: measured (and failing) as usual
            return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return {"size": int(st.st_size), "mtime_ns": int(st.st_mtime_ns)}


def _identity(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: entry[k] for k in _IDENTITY if k in entry}


def _load_cache(path: str) -> dict[str, dict[str, Any]]:
    """Entries of a cache file; a missing file is empty, an unreadable one is warned about."""
    try:
        with open(path, encoding="utf-8") as f:
            content = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        warn(f"ignoring the unreadable length cache {path}: {e}")
        return {}
    if (
        not isinstance(content, dict)
        or content.get("format") != CACHE_FORMAT
        or content.get("version") != CACHE_VERSION
        or not isinstance(content.get("files"), dict)
    ):
        warn(
            f"ignoring the length cache {path}: not a {CACHE_FORMAT} file of version "
            f"{CACHE_VERSION}"
        )
        return {}
    files = {}
    for name, entry in content["files"].items():
        try:
            lengths = {str(k): int(v) for k, v in entry["lengths"].items() if int(v) >= 0}
            identity = {k: kind(entry[k]) for k, kind in _IDENTITY.items() if k in entry}
            int(entry["size"])  # every entry has one
            files[name] = {**identity, "lengths": lengths}
        except (KeyError, TypeError, ValueError, AttributeError):
            continue  # a damaged entry: measured again
    return files


#: how a cache file begins (``format`` is written first): recognised in a damaged one too
_HEADER = re.compile(rb'\A\s*\{\s*"format"\s*:\s*"' + CACHE_FORMAT.encode() + rb'"')


def _is_cache(path: str) -> bool:
    """Whether ``path`` is a regular file that begins as a length cache does."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as f:
        return bool(_HEADER.match(f.read(256)))


def _cache_target(path: str) -> str | None:
    """The file to write the cache of ``path`` to, or ``None`` (warned) to leave it alone.

    A new file is made at ``path`` (and its folders); an existing one, or the file a
    symbolic link at ``path`` points to, is replaced only when it is a length cache. A
    link whose target is missing is not followed: nothing is made where it points.

    Raises:
        IsADirectoryError: ``path`` is a folder.
    """
    linked = os.path.islink(path)
    target = os.path.realpath(path)
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        if linked:
            warn(
                f"the length cache {path} was not written: it is a symbolic link to "
                f"{target}, which does not exist (a link is written through only to an "
                f"existing {CACHE_FORMAT} file)"
            )
            return None
        return target
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), target)
    if not _is_cache(target):
        where = f"{path} (a symbolic link to {target})" if linked else path
        warn(
            f"the length cache {where} was not written: the file there is not a "
            f"{CACHE_FORMAT} file and is left as it is; remove it or give another cache"
        )
        return None
    return target


def _save_cache(path: str, files: dict[str, dict[str, Any]]) -> None:
    """Write the cache atomically: a reader sees the old file or the new one, never half.

    Only a new file or a length cache is written (see :func:`_cache_target`); through a
    symbolic link, the link stays and its target is replaced. The file keeps its
    permissions; a new file gets those of any new file (``0o666`` less the umask).

    Raises:
        OSError: the file cannot be written (a folder at ``path``, no permission, ...).
    """
    # the folders named, not where links lead: a dangling link among them is an error
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    target = _cache_target(path)
    if target is None:
        return
    try:
        mode: int | None = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = None
    content = {"format": CACHE_FORMAT, "version": CACHE_VERSION, "files": files}
    tmp = f"{target}.{os.getpid()}.{secrets.token_hex(4)}.tmp"  # beside it, for os.replace
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            f.write(json.dumps(content, separators=(",", ":")))  # C encoder: fast
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _try_save_cache(path: str, files: dict[str, dict[str, Any]]) -> None:
    """:func:`_save_cache`, a failure warned about: the lengths measured are still returned."""
    try:
        _save_cache(path, files)
    except OSError as e:
        warn(
            f"the length cache {path} was not written ({type(e).__name__}: {e}); the "
            "lengths are returned, and measured again next time"
        )


class _Timeout(BaseException):
    """A measurement took too long (not an :class:`Exception`: openers must not catch it)."""


@contextlib.contextmanager
def _deadline(seconds: float | None) -> Iterator[None]:
    """Raise :class:`_Timeout` in this thread after ``seconds`` (main thread, Unix only)."""
    usable = (
        seconds is not None
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _measure(opener: Any) -> int:
    """Measure a stream or what an opener returns, as the loader does.

    :class:`~streamseq.streams.StreamRef` calls an opener, checks that it returned a
    stream and closes it once its length is taken. A failure is a
    :class:`~streamseq.StreamError` whose ``message`` says which step failed; the index of
    the stream is the caller's to report.
    """
    return len(StreamRef(0, opener))


def _probe_chunk(
    chunk: list[tuple[int, Any]], timeout: float | None
) -> list[tuple[int, int | None, StreamError | str | None]]:
    """Measure a few streams: ``(index, length, None)`` or ``(index, None, error)`` each."""
    out: list[tuple[int, int | None, StreamError | str | None]] = []
    for index, opener in chunk:
        try:
            with _deadline(timeout):
                out.append((index, _measure(opener), None))
        except _Timeout:
            out.append((index, None, f"timed out after {timeout} s"))
        except StreamError as e:  # raised as it is (a SourceError stays one)
            out.append((index, None, e))
        except Exception as e:
            out.append((index, None, f"{type(e).__name__}: {e}"))
    return out


def _worker_init() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle


def _check_openers(openers: Sequence[Any]) -> list[Any]:
    """The openers as a list, checked as the loader checks them (:class:`TypeError`)."""
    openers = list(openers)
    for i, o in enumerate(openers):
        StreamRef(i, o)  # refuses paths, and what is neither a stream nor callable
    return openers


def probe_lengths(
    openers: Sequence[Any],
    *,
    num_workers: int = 0,
    cache: str | os.PathLike | None = None,
    progress: bool = True,
    timeout: float | None = None,
) -> list[int]:
    """Measure the length of every stream, in parallel, reusing a cache file.

    Each stream is measured as :class:`~streamseq.StreamLoader` would: an opener is
    called and ``len()`` taken of what it returns (then closed); a stream is measured
    directly. Give the result as ``lengths=`` to the loader, which then opens nothing
    until it reads.

    With ``cache``, lengths are stored in a JSON file, by file path (absolute), size and
    modification time (ns), and by how the file is opened (see :func:`cache_key`); a file
    at a URL by its URL and ETag (where the server gives none, its size and modification
    time). A later call measures only the streams whose file is new, changed (other size
    or modification time, other ETag) or opened differently, and adds them to the file.
    The file is written atomically (a temporary file beside it, then renamed over it),
    also when probing fails or is interrupted, so that finished measurements are kept,
    and keeps its permissions (a cache shared with a group stays so). Only a length cache
    is ever replaced, recognised by how it begins (a damaged one too): a new file is made
    at ``cache`` (and its folders); a symbolic link there is written through (the file it
    points to is replaced, the link stays) when it points to an existing length cache
    (a cache shared by several users or runs), and left alone otherwise (a link to a
    missing file makes nothing where it points); any other file is left as it is, with a
    warning. A cache that cannot be written (a folder at ``cache``, no permission, ...)
    is warned about and the lengths are returned all the same. Streams whose file cannot
    be told (in-memory arrays, arbitrary callables) are measured every time. Paths alone
    are refused: they do not say how to open the file. An unreadable or foreign cache
    file is ignored with a warning.

    Args:
        openers: streams (``len`` and slicing) or picklable zero-argument openers.
        num_workers: worker processes measuring in parallel; 0 measures in this process.
        cache: a JSON file to read lengths from and add new ones to (it is never written
            through a link, except to an existing length cache).
        progress: show a progress bar (tqdm) over the streams.
        timeout: seconds one stream may take to measure (Unix; in this process only
            from the main thread); a stream that takes longer is an error.

    Returns:
        The length of every stream, in order.

    Raises:
        TypeError: an entry is a path, or neither a stream nor a callable.
        ValueError: ``num_workers`` < 0 or ``timeout`` <= 0.
        streamseq.StreamError: a stream could not be measured (opening failed, ``len``
            failed or timed out); the error names the stream's index and its file.

    Example:
        >>> import functools, os, tempfile, numpy as np
        >>> folder = tempfile.mkdtemp()
        >>> openers = []
        >>> for i, n in enumerate([3, 5, 4]):
        ...     path = os.path.join(folder, f"tokens{i}.npy")
        ...     np.save(path, np.arange(n))
        ...     openers.append(functools.partial(np.load, path, mmap_mode="r"))
        >>> cache = os.path.join(folder, "lengths.json")
        >>> probe_lengths(openers, cache=cache, progress=False)
        [3, 5, 4]
        >>> probe_lengths(openers, cache=cache, progress=False)  # read back, nothing opened
        [3, 5, 4]
        >>> import shutil; shutil.rmtree(folder)
    """
    if num_workers < 0:
        raise ValueError(f"num_workers must be >= 0, got {num_workers}")
    if timeout is not None and timeout <= 0:
        raise ValueError(f"timeout must be > 0, got {timeout}")
    openers = _check_openers(openers)
    cache_path = None if cache is None else os.fspath(cache)
    files = _load_cache(cache_path) if cache_path is not None else {}
    lengths: list[int | None] = [None] * len(openers)
    keys: list[tuple[str, str, dict[str, Any]] | None] = [None] * len(openers)
    todo: list[tuple[int, Any]] = []
    for i, opener in enumerate(openers):
        found = _file_of(opener) if cache_path is not None else None
        stat = None if found is None else _stat(found[0], opener)
        if found is not None and stat is not None:
            keys[i] = (redact_urls(found[0]), found[1], stat)  # as cache_key(opener)
            entry = files.get(keys[i][0])
            if entry is not None and _identity(entry) == stat:
                lengths[i] = entry["lengths"].get(found[1])
        if lengths[i] is None:
            todo.append((i, opener))

    bar = tqdm(
        total=len(openers),
        initial=len(openers) - len(todo),
        desc="probing lengths",
        unit="stream",
        disable=not progress,
    )
    changed = False
    results = _run(todo, num_workers, timeout)
    try:
        for index, n, error in results:
            if error is not None:
                key = keys[index]
                where = key[0] if key is not None else describe(openers[index])  # redacted
                if isinstance(error, StreamError):
                    error.locate(index, where)
                    raise error
                raise StreamError(f"measuring the length failed: {error}", index, where)
            lengths[index] = n
            bar.update(1)
            key = keys[index]
            if key is not None:
                path, how, stat = key
                entry = files.get(path)
                if entry is None or _identity(entry) != stat:
                    entry = files[path] = {**stat, "lengths": {}}
                entry["lengths"][how] = n
                changed = True
    finally:
        results.close()  # ends the workers when measuring stops early
        bar.close()
        if changed and cache_path is not None:
            _try_save_cache(cache_path, files)
    return [int(n) for n in lengths]  # type: ignore[arg-type]


def _run(
    todo: list[tuple[int, Any]], num_workers: int, timeout: float | None
) -> Iterator[tuple[int, int | None, StreamError | str | None]]:
    """Results of :func:`_probe_chunk` over ``todo``, in this process or in worker processes."""
    workers = min(num_workers, len(todo))
    if workers == 0:
        for item in todo:
            yield from _probe_chunk([item], timeout)
        return
    size = max(1, min(32, len(todo) // (workers * 8)))
    chunks = [todo[k : k + size] for k in range(0, len(todo), size)]
    # a worker stuck where the alarm cannot reach (in C code) still ends the wait
    wait = None if timeout is None else timeout * size + 10.0
    pool = ProcessPoolExecutor(workers, initializer=_worker_init)
    try:
        pending = {pool.submit(_probe_chunk, c, timeout): c for c in chunks}
        while pending:
            done, _ = concurrent.futures.wait(pending, wait, FIRST_COMPLETED)
            if not done:
                raise StreamError(
                    f"no stream was measured for {wait:.0f} s: a worker is stuck on one of "
                    f"streams {_indices(pending.values())}"
                )
            for future in done:
                chunk = pending.pop(future)
                try:
                    results = future.result()
                except BrokenProcessPool:
                    raise StreamError(
                        "a worker process died while measuring one of streams "
                        f"{_indices([chunk, *pending.values()])}"
                    ) from None
                except Exception as e:  # the chunk could not be sent: an opener does not pickle
                    raise StreamError(
                        f"cannot send streams {_indices([chunk])} to a worker process "
                        f"({type(e).__name__}: {e}); openers must pickle (no lambdas or "
                        "local functions), or measure with num_workers=0"
                    ) from e
                yield from results
        pool.shutdown()
    finally:
        _stop(pool)


def _indices(chunks: Iterable[list[tuple[int, Any]]], most: int = 10) -> str:
    ids = sorted(i for chunk in chunks for i, _ in chunk)
    more = f", ... ({len(ids)} in all)" if len(ids) > most else ""
    return ", ".join(map(str, ids[:most])) + more


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel what is queued and end the workers now, stuck ones included."""
    terminate = getattr(pool, "terminate_workers", None)  # Python >= 3.14
    if terminate is not None:
        terminate()
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(5)
