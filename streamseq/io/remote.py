"""Files behind URLs (``s3://``, ``gs://``, ``http(s)://``, any fsspec protocol).

A source given a URL reads it through `fsspec <https://filesystem-spec.readthedocs.io>`_,
imported only then (with the package of the protocol: ``s3fs``, ``gcsfs``, ``aiohttp``
for HTTP; ``pip install 'streamseq[remote]'``). Local paths never come here.

- **Ranged reads, read ahead.** Files are opened with fsspec's read-ahead cache (the
  decoders and token files read forward) or its block cache (event files, searched by
  bisection) in blocks of :data:`BLOCK_SIZE` bytes: one request fetches the next 4 MiB,
  so consecutive steps do not pay a round trip each. Object stores answer a request in
  tens of milliseconds and stream at 50-200 MB/s, so a 4 MiB block spends about as long
  transferring as waiting, and a worker holds one block per open file.
- **One connection per process.** The filesystem (its HTTP session, its event loop) is
  made once per process and never shared across a fork: a forked child makes its own
  (and keeps the parent's, unused: closing it would close the parent's connections).
  fsspec's own cache of filesystems is skipped.
- **What a forked child may inherit.** Making an S3 client parses botocore's JSON
  descriptions of the service and its endpoints (about 70 ms of Python in each process).
  They are parsed once: the S3 sessions of every process share a botocore loader (its
  cache of parsed files: plain data, no connection, no lock, no loop), which a forked
  child inherits from its parent with whatever the parent parsed; the child still makes
  its own session, client, HTTP connections and event loop.
- **One request to start reading.** A source that an opener makes to be read at once
  (:func:`~streamseq.read.handle.is_opening`) reads the file's first block with the
  request that tells its size and ETag (an S3 ranged GET answers both), rather than
  asking for them first; the first file it opens starts from that block. Files are
  opened with the size and ETag known, so s3fs asks for neither again.
- **Bounded failures.** Clients get connect and read timeouts, and a failed request is
  tried :data:`ATTEMPTS` times in all, with a short backoff, before it is a
  :class:`~streamseq.errors.SourceError` naming the URL. A missing file is a
  :class:`FileNotFoundError`, at once.
- **No credential in any error.** Every error a request ends with, and every error
  chained to it, has the credentials of the URL and the values of ``storage_options``
  hidden (:func:`~streamseq.errors.redact_error`): a missing file's
  :class:`FileNotFoundError` names the URL as ``https://***@host/a.mp4?X-Amz-Signature=***``.
- **Changed files.** A source records the ETag (else the size and last modification) of
  its file when it is made, and each process that opens the file asks again (one
  request): another one is a :class:`~streamseq.errors.SourceError` naming the URL
  without its credentials or query (:func:`public_url`). Bytes already fetched, and those
  of a file replaced while a process reads it, are not checked again.
"""

from __future__ import annotations

import errno
import io
import json
import re
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from streamseq._logs import hide_in_logs
from streamseq._redact import describe, redact, secrets_of
from streamseq.errors import SourceError, redact_error
from streamseq.read.handle import ProcessLocal, is_opening

T = TypeVar("T")

#: bytes fetched by one request (the block of the read-ahead and block caches)
BLOCK_SIZE = 4 * 2**20
#: attempts of a request before it is an error, and the wait before each new one (seconds)
ATTEMPTS = 3
BACKOFF = (0.2, 0.5)
#: client settings unless ``storage_options`` say otherwise (seconds)
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 20.0

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_FILESYSTEMS: ProcessLocal[dict[str, Any]] = ProcessLocal(dict)
_S3 = ("s3", "s3a")
#: botocore loaders by data path: parsed JSON files only, so a forked child inherits them
#: (unlike the filesystems above, which hold connections and are made again there)
_LOADERS: dict[Any, Any] = {}


def is_url(path: Any) -> bool:
    """Whether ``path`` is a URL (``protocol://...``) rather than a local path.

    Example:
        >>> is_url("s3://bucket/a.mp4"), is_url("https://host/a.wav"), is_url("data/a.mp4")
        (True, True, False)
    """
    return isinstance(path, str) and _URL.match(path) is not None


def public_url(url: str) -> str:
    """``url`` without its user information, query and fragment (which may hold secrets).

    Example:
        >>> public_url("https://me:pw@host:8080/a.mp4?X-Amz-Signature=abc#t=3")
        'https://host:8080/a.mp4'
        >>> public_url("s3://bucket/a.npy")
        's3://bucket/a.npy'
    """
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


def _protocol(url: str) -> str:
    return url.split("://", 1)[0].lower()


def _import_fsspec(url: str) -> Any:
    try:
        import fsspec
    except ImportError as e:
        raise ImportError(
            f"reading {describe(url)} needs fsspec: pip install 'streamseq[remote]'"
        ) from e
    return fsspec


def _defaults(protocol: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with timeouts set for the clients that take them."""
    options = dict(options)
    if protocol in _S3:
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("connect_timeout", CONNECT_TIMEOUT)
        config.setdefault("read_timeout", READ_TIMEOUT)
        config.setdefault("retries", {"max_attempts": 1, "mode": "standard"})
        options["config_kwargs"] = config
    elif protocol in ("http", "https"):
        client = dict(options.get("client_kwargs") or {})
        if "timeout" not in client:
            import aiohttp

            client["timeout"] = aiohttp.ClientTimeout(
                total=None, sock_connect=CONNECT_TIMEOUT, sock_read=READ_TIMEOUT
            )
        options["client_kwargs"] = client
    return options


def filesystem(url: str, storage_options: Mapping[str, Any] | None = None) -> Any:
    """The fsspec filesystem of ``url`` for this process, made on first use.

    One per protocol and ``storage_options`` in each process (a forked child makes its
    own), with the timeouts of this module unless the options set them.

    Raises:
        ImportError: fsspec, or the package of the protocol, is not installed.
    """
    protocol = _protocol(url)
    options = dict(storage_options or {})
    hide_in_logs(secrets_of(url, storage_options))  # the clients log the URLs they read
    key = protocol + json.dumps(options, sort_keys=True, default=repr)
    cache = _FILESYSTEMS.get()
    fs = cache.get(key)
    if fs is None:
        with _FILESYSTEMS.lock:  # threads opening files at once: one filesystem, one client
            fs = cache.get(key)
            if fs is None:
                fs = cache[key] = _make_filesystem(url, protocol, options)
    return fs


def _make_filesystem(url: str, protocol: str, options: dict[str, Any]) -> Any:
    """A new filesystem of ``protocol`` (see :func:`filesystem`)."""
    fsspec = _import_fsspec(url)
    try:
        cls = fsspec.get_filesystem_class(protocol)
        options = _defaults(protocol, options)
    except ImportError as e:
        raise ImportError(
            f"reading {describe(url)} needs the fsspec package of {protocol}:// ({e}); "
            "pip install 'streamseq[remote]'"
        ) from e
    fs = cls(skip_instance_cache=True, **options)
    if protocol in _S3:
        fs.retries = 1  # retried here, with the other protocols
        if fs.session is None:  # (not one given in the options)
            fs.session = _s3_session(fs.kwargs)
    return fs


def _s3_session(kwargs: Mapping[str, Any]) -> Any:
    """A new aiobotocore session for an S3 filesystem, with the shared botocore loader.

    The session is what s3fs would make (``AioSession(**kwargs)``, with the keyword
    arguments it does not take itself), and new in each process: only its loader, the
    cache of parsed JSON files (service model, endpoints, rules), is shared, by every
    session of this process and with the children forked after it parsed them.
    """
    from aiobotocore.session import AioSession
    from botocore.loaders import create_loader

    session = AioSession(**kwargs)
    path = session.get_config_variable("data_path")
    loader = _LOADERS.get(path)
    if loader is None:
        loader = _LOADERS.setdefault(path, create_loader(path))
    session.register_component("data_loader", loader)
    return session


def _retryable(error: BaseException) -> bool:
    """Whether ``error`` may be a network failure (fsspec's HTTP calls some "not found")."""
    if isinstance(error, FileNotFoundError):
        cause = error.__cause__ or error.__context__
        if cause is None or isinstance(cause, FileNotFoundError):
            return False
        status = getattr(cause, "status", None)  # an HTTP answer: 4xx tells, but 408, 429
        return not (isinstance(status, int) and 400 <= status < 500 and status not in (408, 429))
    return not isinstance(error, (PermissionError, IsADirectoryError, ValueError, TypeError))


def retry(
    url: str,
    what: str,
    call: Callable[[], T],
    storage_options: Mapping[str, Any] | None = None,
) -> T:
    """``call()``, tried :data:`ATTEMPTS` times in all when it fails for a network error.

    Whatever it raises has the credentials of ``url`` and ``storage_options`` hidden, in
    its text and in the errors chained to it (:func:`~streamseq.errors.redact_error`).

    Raises:
        FileNotFoundError: at once, for a missing file.
        SourceError: naming ``url`` and ``what`` was being done, after the last attempt.
    """
    for attempt in range(ATTEMPTS):
        try:
            return call()
        except Exception as e:
            if isinstance(e, SourceError) or not _retryable(e):
                redact_error(e, secrets_of(url, storage_options))
                raise
            if attempt == ATTEMPTS - 1:
                secrets = secrets_of(url, storage_options)
                shown = e.__cause__ if isinstance(e, FileNotFoundError) and e.__cause__ else e
                text = redact(f"{type(shown).__name__}: {shown}", secrets)
                redact_error(e, secrets)
                raise SourceError(url, f"{what} failed after {ATTEMPTS} attempts: {text}") from e
            time.sleep(BACKOFF[min(attempt, len(BACKOFF) - 1)])
    raise AssertionError("unreachable")


def stat(url: str, storage_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Size, and ETag or modification time, of the file at ``url``.

    Returns:
        ``{"size": int, "etag": str}``, or ``{"size": int, "mtime": str}`` where the
        server gives no ETag (``{"size": int}`` where it gives neither).

    Raises:
        FileNotFoundError: no file there.
        SourceError: the server could not be reached (after the retries).
    """
    fs = filesystem(url, storage_options)
    info = retry(url, "getting its size", lambda: fs.info(url), storage_options)
    if info.get("type") == "directory":
        raise IsADirectoryError(errno.EISDIR, "a folder, not a file", describe(url))
    etag = next((info[k] for k in ("ETag", "etag", "Etag") if info.get(k)), None)
    mtime = next(
        (info[k] for k in ("LastModified", "Last-Modified", "mtime", "updated") if k in info),
        None,
    )
    return _state(info["size"], etag, mtime)


def _state(size: int, etag: Any, mtime: Any) -> dict[str, Any]:
    """What :func:`stat` returns, from a size, an ETag and a modification time."""
    out: dict[str, Any] = {"size": int(size)}
    if etag:
        out["etag"] = str(etag)
    elif mtime is not None:
        out["mtime"] = str(mtime)
    return out


def _s3_start(fs: Any, url: str) -> tuple[dict[str, Any], bytes] | None:
    """One ranged GET of the first :data:`BLOCK_SIZE` bytes: the state and the bytes.

    ``None`` where the GET cannot tell (no such key: a missing file or a folder, which
    :func:`stat` tells apart; a range refused: an empty file).
    """
    from fsspec.asyn import sync

    bucket, key, version = fs.split_path(url)
    extra = {"VersionId": version} if version else {}

    async def get() -> tuple[dict[str, Any], bytes] | None:
        try:
            response = await fs._call_s3(
                "get_object", Bucket=bucket, Key=key, Range=f"bytes=0-{BLOCK_SIZE - 1}", **extra
            )
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno == errno.EINVAL:  # InvalidRange: nothing at byte 0
                return None
            raise
        body = response["Body"]
        try:
            data = await body.read()
        finally:
            body.close()
        length = int(response.get("ContentLength", len(data)))
        if len(data) != length:
            raise OSError(f"short read: {len(data)} of {length} bytes at 0")
        whole = response.get("ContentRange")  # "bytes 0-4194303/123456789"
        size = int(whole.rpartition("/")[2]) if whole else length
        state = _state(size, response.get("ETag"), response.get("LastModified"))
        return state, data

    return sync(fs.loop, get)


def stat_and_start(
    url: str, storage_options: Mapping[str, Any] | None = None
) -> tuple[dict[str, Any], bytes]:
    """:func:`stat` of ``url`` and the first bytes of its file, in one request if possible.

    On S3, one ranged GET answers both (the first :data:`BLOCK_SIZE` bytes, or the whole
    of a smaller file); elsewhere, and for an empty or missing file, it is :func:`stat`
    and no bytes (``b""``).

    Raises:
        FileNotFoundError: no file there.
        SourceError: the server could not be reached (after the retries).
    """
    if _protocol(url) in _S3:
        fs = filesystem(url, storage_options)
        got = retry(url, "reading its first bytes", lambda: _s3_start(fs, url), storage_options)
        if got is not None:
            return got
    return stat(url, storage_options), b""


class RemoteFile(io.RawIOBase):
    """A read-only, seekable file at a URL: fsspec's cached file, with retries.

    A read that fails is tried again from a newly opened file at the same position, up to
    :data:`ATTEMPTS` times in all; then it is a :class:`~streamseq.errors.SourceError`
    naming the URL.

    Args:
        url: the file.
        storage_options: for fsspec.
        size: its size in bytes (asked to the server when ``None``).
        cache_type: ``"readahead"`` for forward reading, ``"blockcache"`` for random
            reading.
        start: the first bytes of the file, read already (:func:`stat_and_start`): reads
            within them are answered from memory until a read starts past them.
        etag: the file's ETag, if known (then s3fs does not ask for it when it opens the
            file).
    """

    def __init__(
        self,
        url: str,
        storage_options: Mapping[str, Any] | None = None,
        size: int | None = None,
        cache_type: str = "readahead",
        start: bytes = b"",
        etag: str | None = None,
    ):
        super().__init__()
        self._file: Any = None  # (first: a file whose stat fails is closed when collected)
        self.url = url
        self.storage_options = dict(storage_options or {})
        if size is None:
            state = stat(url, storage_options)
            size, etag = state["size"], state.get("etag")
        self.size = int(size)
        self.cache_type = cache_type
        self.etag = etag
        self.pos = 0
        self._start = start

    def __repr__(self) -> str:
        return f"RemoteFile({describe(self.url)})"

    def _open(self) -> Any:
        fs = filesystem(self.url, self.storage_options)
        options = {"maxblocks": 8} if self.cache_type == "blockcache" else {}
        file = fs.open(
            self.url,
            "rb",
            block_size=BLOCK_SIZE,
            cache_type=self.cache_type,
            cache_options=options,
            size=self.size,
        )
        if _protocol(self.url) in _S3 and getattr(file, "_details", None) is None:
            # s3fs's file asks for them (a HEAD) on its first read unless told; it compares
            # the ETag only with ``local_expiry_check``, which then needs it
            details = {"name": file.path, "size": self.size, "type": "file"}
            if self.etag is not None:
                file.details = {**details, "ETag": self.etag}
            elif not getattr(fs, "local_expiry_check", False):
                file.details = details
        return file

    def readable(self) -> bool:
        """Always true."""
        return True

    def seekable(self) -> bool:
        """Always true."""
        return True

    def tell(self) -> int:
        """The position of the next read."""
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move to a position (nothing is read until the next read)."""
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self.pos + offset
        elif whence == io.SEEK_END:
            pos = self.size + offset
        else:
            raise ValueError(f"invalid whence {whence}")
        if pos < 0:
            raise ValueError(f"negative position {pos}")
        self.pos = pos
        return pos

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (all the rest when negative), through the cache."""
        end = self.size if size is None or size < 0 else min(self.size, self.pos + size)
        if end <= self.pos:
            return b""
        data = self.read_range(self.pos, end)
        self.pos += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        """Read into ``buffer``; the number of bytes read."""
        data = self.read(len(memoryview(buffer)))
        memoryview(buffer).cast("B")[: len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        """All the bytes from the position on."""
        return self.read(-1)

    def read_range(self, start: int, end: int) -> bytes:
        """Bytes ``start`` to ``end`` (clamped to the file), through the cache."""
        end = min(end, self.size)
        if end <= start:
            return b""
        held = len(self._start)
        if held:
            if start >= held:  # read on past the first block: let it go
                self._start = b""
            elif end <= held:
                return self._start[start:end]
            else:
                return self._start[start:] + self.read_range(held, end)

        def attempt() -> bytes:
            if self._file is None:
                self._file = self._open()
            try:
                self._file.seek(start)
                data = self._file.read(end - start)
            except Exception:
                self._drop()
                raise
            if len(data) != end - start:
                self._drop()
                raise OSError(f"short read: {len(data)} of {end - start} bytes at {start}")
            return data

        return retry(self.url, f"reading bytes {start}:{end}", attempt, self.storage_options)

    def _drop(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            try:
                file.close()
            except Exception:  # a broken connection: nothing more to release
                pass

    def close(self) -> None:
        """Drop the open file and its cache."""
        self._drop()
        self._start = b""
        super().close()


class Remote:
    """Where a source reads from when given a URL: picklable, no connection in it.

    Args:
        url: the file.
        storage_options: for fsspec.

    The file is asked for its size (and ETag) once, here: a missing file is a
    :class:`FileNotFoundError` when the source is made, as for a local path. A source
    compares :attr:`stat` with :meth:`current_state` whenever a process opens the file.

    Made while an opener makes a source to be read at once (:func:`is_opening`), it
    reads the first block of the file with the same request (:func:`stat_and_start`) and
    hands it to the first file that :meth:`open` gives in this process (never pickled,
    never to another process).
    """

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None):
        self.url = url
        self.storage_options = dict(storage_options or {})
        self._start: ProcessLocal[bytes] = ProcessLocal()
        if is_opening():
            self.stat, start = stat_and_start(url, self.storage_options)
            if start:
                self._start.set(start)
        else:
            self.stat = stat(url, self.storage_options)
        self.size: int = self.stat["size"]

    def __repr__(self) -> str:
        return f"Remote({describe(self.url)})"

    @property
    def public_url(self) -> str:
        """The URL as errors may show it: no user information, query or fragment."""
        return public_url(self.url)

    def current_state(self) -> dict[str, Any]:
        """Size, and ETag or modification time, of the file now (a request: see :func:`stat`).

        Compared with :attr:`stat`, what it was when this object was made.
        """
        return stat(self.url, self.storage_options)

    def open(self, cache_type: str = "readahead") -> RemoteFile:
        """A file object reading it, for this process (see :class:`RemoteFile`)."""
        start = self._start.take() or b""
        etag = self.stat.get("etag")
        return RemoteFile(self.url, self.storage_options, self.size, cache_type, start, etag)


def locate(path: str, storage_options: Mapping[str, Any] | None) -> Remote | None:
    """A :class:`Remote` for a URL, ``None`` for a local path (``storage_options`` refused).

    Example:
        >>> locate("data/a.mp4", None) is None
        True
    """
    if is_url(path):
        return Remote(path, storage_options)
    if storage_options:
        raise ValueError(f"storage_options are for URLs, {describe(path)} is a local path")
    return None
