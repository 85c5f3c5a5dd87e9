"""The logs of the libraries that read URLs, cleaned of credentials before any handler.

fsspec (and the clients under it) log the URLs they read at DEBUG, user information and
signed query strings included: whoever turns those logs on to see what is slow would
write passwords to their log files. :func:`hide_in_logs` puts a filter on the loggers of
those libraries that rewrites each record with :func:`~streamseq._redact.redact` (its
message, its exception text and its stack) before any handler sees it, hiding the
secrets of every URL and ``storage_options`` this process opened.

A filter of a logger sees the records logged on that logger only, not those of its
children, and a library may make a logger while the first URL is opened (fsspec's
``fsspec.http`` on importing its HTTP filesystem): besides the filter on every logger of
these libraries that exists, the record factory of :mod:`logging` is wrapped, so that a
record of theirs is cleaned as it is made, whenever its logger was made. A factory set
later over it is wrapped again at the next URL opened.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ._redact import redact

#: the libraries whose loggers name the URLs they read
LIBRARIES = ("fsspec", "s3fs", "gcsfs", "adlfs", "aiobotocore", "botocore", "aiohttp", "urllib3")


class _Hidden(logging.Filter):
    """Rewrites every record with the secrets known so far hidden (never drops one)."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: frozenset[str] = frozenset()

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = self.secrets
        try:
            message = record.getMessage()
        except Exception:  # arguments that do not fit the message: logging prints both
            record.args = _hidden(record.args, secrets)
            record.msg = redact(str(record.msg), secrets)
        else:
            record.msg, record.args = redact(message, secrets), ()
        if record.exc_info:
            text = record.exc_text or logging.Formatter().formatException(record.exc_info)
            record.exc_info, record.exc_text = None, redact(text, secrets)
        elif record.exc_text:
            record.exc_text = redact(record.exc_text, secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, secrets)
        return True


def _hidden(args: Any, secrets: frozenset[str]) -> Any:
    """A record's arguments as their texts, hidden (a mapping stays a mapping)."""
    if isinstance(args, Mapping):
        return {k: redact(str(v), secrets) for k, v in args.items()}
    return tuple(redact(str(a), secrets) for a in args or ())


_FILTER = _Hidden()
_LOCK = threading.Lock()
_SEEN = [0]  # loggers that existed at the last look


class _Factory:
    """The record factory of :mod:`logging`, cleaning the records of :data:`LIBRARIES`."""

    def __init__(self, inner: Callable[..., logging.LogRecord]) -> None:
        self.inner = inner

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.inner(*args, **kwargs)
        if str(record.name).split(".", 1)[0] in LIBRARIES:
            _FILTER.filter(record)
        return record


def hide_in_logs(secrets: Iterable[str]) -> None:
    """Hide ``secrets`` (and every URL's user information) in the libraries' logs.

    Cheap when nothing is new: call it wherever a URL is opened.

    Example:
        >>> log = logging.getLogger("fsspec.example")
        >>> hide_in_logs({"pa55word"})
        >>> record = log.makeRecord("fsspec.example", logging.DEBUG, "f", 1,
        ...                         "get %s", ("https://me:pa55word@host/a",), None)
        >>> log.filter(record), record.getMessage()
        (True, 'get https://***@host/a')
    """
    secrets = frozenset(secrets)
    loggers = logging.Logger.manager.loggerDict
    factory = logging.getLogRecordFactory()
    if secrets <= _FILTER.secrets and len(loggers) == _SEEN[0] and isinstance(factory, _Factory):
        return
    with _LOCK:
        _FILTER.secrets = _FILTER.secrets | secrets
        factory = logging.getLogRecordFactory()
        if not isinstance(factory, _Factory):
            logging.setLogRecordFactory(_Factory(factory))
        _SEEN[0] = len(loggers)
        for name in list(loggers):
            if name.split(".", 1)[0] in LIBRARIES:
                logger = logging.getLogger(name)
                if _FILTER not in logger.filters:
                    logger.addFilter(_FILTER)
