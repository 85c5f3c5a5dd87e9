"""Describe openers, sources and arguments for messages without showing credentials.

Every error, warning and ``repr`` that names a stream describes it with :func:`describe`:
a short ``repr`` in which what could be a credential is replaced by ``***``, *before*
anything is shortened (so the kept ends of a long value never show part of a secret).
The rules:

- **Sensitive names.** A value whose name (a mapping key, a keyword of a
  :func:`functools.partial`, a ``name=value`` or ``'name': value`` in a ``repr``, a URL's
  query parameter) says it is a credential is hidden, whatever it is (a string, a number,
  a nested mapping). A name is sensitive when one of its words (split at ``_``, ``-``,
  ``.`` and case changes, a plural counted as the singular) is one of
  :data:`SENSITIVE_WORDS`, or when it contains one of :data:`SENSITIVE_PARTS` (names
  written as one word: ``secretaccesskey``). Examples: ``key``, ``secret``, ``token``,
  ``password``, ``passwd``, ``credentials``, ``auth``, ``aws_access_key_id``,
  ``session``, ``X-Amz-Signature``, ``sig``.
- **storage_options.** The options of a filesystem name endpoints and settings but also,
  under names no list can foresee (``profile``, ``client_kwargs``, ``headers``), who is
  connecting. Of a mapping named :data:`OPTIONS_NAMES` (``storage_options``), only the
  values named in :data:`HARMLESS_OPTIONS` (where and how: ``endpoint_url``, ``anon``,
  ``region_name``, ...) are shown, themselves described by these rules; every other
  value is hidden. In the ``repr`` of an object (whose structure is unknown), a
  ``storage_options=`` value is hidden whole.
- **URLs.** The user information of a URL (``https://user:password@host``) is hidden
  whole, and so are the values of its sensitive query parameters
  (``?X-Amz-Signature=...``, ``&sig=...``); the rest (protocol, host, path) is shown.

A credential given as a bare positional argument, under a name that says nothing, cannot
be told from data and is shown: give credentials by name (``storage_options``).

Example:
    >>> import functools
    >>> def tokens(path, dtype=None, storage_options=None): ...
    >>> opener = functools.partial(
    ...     tokens, "s3://bucket/a.bin", storage_options={"key": "AKIA1234", "secret": "s3cr3t",
    ...     "endpoint_url": "http://minio:9000"})
    >>> describe(opener)
    "functools.partial(tokens, 's3://bucket/a.bin', storage_options={'key': ***, 'secret': ***, 'endpoint_url': 'http://minio:9000'})"
    >>> describe("https://me:pw@host/a.mp4?X-Amz-Signature=abc&part=2")
    "'https://***@host/a.mp4?X-Amz-Signature=***&part=2'"
"""  # noqa: E501

from __future__ import annotations

import builtins
import functools
import re
import reprlib
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

#: what replaces a hidden value
HIDDEN = "***"

#: words of a name that mark its value as a credential (compared in lower case)
SENSITIVE_WORDS = frozenset(
    {
        "access_key",
        "accesskey",
        "apikey",
        "auth",
        "authorization",
        "cookie",
        "credential",
        "key",
        "passphrase",
        "passwd",
        "password",
        "pwd",
        "secret",
        "session",
        "sig",
        "signature",
        "token",
    }
)

#: parts of a name written as one word that mark its value as a credential (regexes)
SENSITIVE_PARTS = (
    "accesskey",
    "apikey",
    "authoriz",
    "credential",
    "passw",
    "secret",
    "signature",
    "token(?!iz)",  # not a tokenizer
    "sess(?:ion)?_?id",  # a session's identifier: jsessionid, PHPSESSID, ASPSESSIONID
)

#: names of URL query parameters (and fragment fields) that carry credentials though no
#: word of theirs says so: OAuth codes and assertions, JSON web tokens, session ids
SENSITIVE_QUERY_NAMES = frozenset(
    {"assertion", "code", "id_token", "jwt", "saml", "samlresponse", "sid"}
)

#: names of mappings of filesystem options, of which only harmless values are shown
OPTIONS_NAMES = frozenset({"storage_options"})

#: filesystem options that say where and how to connect, never who: shown
HARMLESS_OPTIONS = frozenset(
    {
        "anon",
        "asynchronous",
        "block_size",
        "cache_type",
        "default_block_size",
        "default_cache_type",
        "default_fill_cache",
        "endpoint_url",
        "listings_expiry_time",
        "max_concurrency",
        "region",
        "region_name",
        "requester_pays",
        "skip_instance_cache",
        "timeout",
        "use_listings_cache",
        "use_ssl",
        "version_aware",
    }
)

#: longest description :func:`describe` returns (before that, each part is shortened)
LIMIT = 240

#: shortest value hidden wherever it shows (:func:`secrets_of`): shorter ones are words
MIN_SECRET = 6

#: characters left as they are when a URL is shown encoded (none; a path's; yarl's query)
_SHOWN_SAFE = ("", "/", "?/:@!$'()*,;")

#: endings of names that are classes, not fields (``KeyError: 'a.mp4'``)
_NOT_NAMES = ("Error", "Exception", "Warning")
_PARTS = tuple(re.compile(part) for part in SENSITIVE_PARTS)
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_NAME_VALUE = re.compile(r"([A-Za-z_][\w.-]*)(['\"]?)(\s*[:=]\s*)")
# user information as URL parsers read it: up to the last "@" before the host (a password
# may hold "@" and quotes), or "user:" and a password with a "/" up to an "@"
_USERINFO = re.compile(r"(?i)([a-z][a-z0-9+.-]*://)(?:[^/?#\s]*|[^/?#@\s'\":]*:[^\s'\"]*)@")
# a query value ends at "&", ";", "#", a space, a quote that closes (one that a space, a
# comma, a bracket or the end follows), a bracket that closes (one that a space, a
# punctuation mark, a quote, another bracket or the end follows) or a ":" that ends a phrase
_QUERY = re.compile(
    r"([?&;#])([^=&;#?\s'\"]+)="
    r"((?:[^&;#\s'\":)\]}]|:(?!\s|$)|['\"](?![\s,)\]}>]|$)|[)\]}](?![\s,.;:)\]}>'\"]|$))*)"
)
# the fragment of a URL that is not of name=value pairs (those are hidden by name, as a
# query's): a token may stand there alone; up to a space, a quote, or a comma or a
# bracket that closes (as a query value ends)
_FRAGMENT = re.compile(
    r"(?i)([a-z][a-z0-9+.-]*://[^\s'\"#]*#)"
    r"(?:[^\s'\"=,)\]}]|[,)\]}](?![\s,.;:)\]}>'\"]|$))+(?![^\s'\",)\]}]*=)"
)
_QUOTES = "'\""
_OPEN = {"(": ")", "[": "]", "{": "}"}
_BARE_END = re.compile(r"[\s,;&)\]}'\"]")


def is_sensitive(name: Any) -> bool:
    """Whether a value named ``name`` could be a credential.

    Example:
        >>> [is_sensitive(n) for n in ["secret", "aws_access_key_id", "X-Amz-Signature"]]
        [True, True, True]
        >>> [is_sensitive(n) for n in ["path", "endpoint_url", "tokenizer", "KeyError", 3]]
        [False, False, False, False, False]
    """
    if not isinstance(name, str) or name.endswith(_NOT_NAMES):
        return False
    lower = name.lower()
    if lower in SENSITIVE_WORDS:
        return True
    words = [w.lower() for w in _WORD.findall(name)]
    singular = {w[:-1] if w.endswith("s") and len(w) > 3 else w for w in words}
    if singular & SENSITIVE_WORDS:
        return True
    return any(part.search(lower) for part in _PARTS)


def redact_urls(text: str) -> str:
    """``text`` with the user information, sensitive query values and fragments of URLs hidden.

    Safe on any text (a message, an error from another library): only
    ``scheme://user:password@``, ``?name=value``, ``&name=value`` or ``;name=value``
    with a sensitive name (``#name=value`` too), and a ``#fragment`` that is not of such
    pairs (all of it) change. Anything other than a string is returned as it is.

    Example:
        >>> redact_urls("403 for s3://key:secret@bucket/a.bin")
        '403 for s3://***@bucket/a.bin'
        >>> redact_urls("url='https://host/x?X-Amz-Credential=AKIA%2F1&X-Amz-Signature=ff00'")
        "url='https://host/x?X-Amz-Credential=***&X-Amz-Signature=***'"
        >>> redact_urls("KeyError: 'data/a.bin'")
        "KeyError: 'data/a.bin'"
    """
    if not isinstance(text, str):
        return text  # a path given as bytes: no URL
    # (the patterns need these characters: most paths skip them); the query first: a
    # value shown decoded may hold an "@", which would end a user information early
    if "?" in text or "&" in text or ";" in text or "#" in text:
        text = _QUERY.sub(_hide_query, text)
    if "@" in text:
        text = _USERINFO.sub(rf"\1{HIDDEN}@", text)
    if "#" in text:
        text = _FRAGMENT.sub(rf"\1{HIDDEN}", text)
    return text


def _hide_query(match: re.Match) -> str:
    sep, name, value = match.groups()
    return f"{sep}{name}={HIDDEN}" if _query_secret(name, value) else match.group(0)


def _query_secret(name: str, value: str) -> bool:
    """Whether the query parameter ``name=value`` is a credential, or holds one.

    A value that, percent-decoded (up to three times), holds a query with a credential
    (``next=%2Fb%3Fsig%3D...``) is one as a whole.
    """
    plain = urllib.parse.unquote_plus(name)
    if is_sensitive(plain) or plain.lower() in SENSITIVE_QUERY_NAMES:
        return True
    for _ in range(3):
        decoded = urllib.parse.unquote_plus(value)
        if decoded == value:
            return False
        value = decoded
        inner = _QUERY.finditer(value if value[:1] in "?&;#" else "&" + value)
        if any(_query_secret(m.group(2), m.group(3)) for m in inner):
            return True
    return False


def redact_text(text: str, options: bool = True) -> str:
    """``text`` of unknown structure (a ``repr``) with every sensitive value hidden.

    URLs as by :func:`redact_urls`; then a ``name=value``, ``name: value`` or
    ``'name': value`` whose name is sensitive has its value (a quoted string, a
    bracketed group or a bare word) hidden.

    Args:
        text: the text.
        options: also hide the value of a ``storage_options`` whole.

    Example:
        >>> redact_text("Opener(url='s3://b/x', secret='abc', storage_options={'a': 1})")
        "Opener(url='s3://b/x', secret=***, storage_options=***)"
    """
    text = redact_urls(text)
    out: list[str] = []
    at = 0
    for match in _NAME_VALUE.finditer(text):
        if match.start() < at:
            continue  # inside a value already hidden
        name = match.group(1)
        if not (is_sensitive(name) or (options and name in OPTIONS_NAMES)):
            continue
        start = match.end()
        if start >= len(text):
            continue
        out.append(text[at:start] + HIDDEN)
        at = _value_end(text, start)
    out.append(text[at:])
    return "".join(out)


def _value_end(text: str, start: int) -> int:
    """Where the value starting at ``text[start]`` ends: a quoted string, a group, a word."""
    first = text[start]
    if first in _QUOTES:
        return _string_end(text, start)
    if first in _OPEN:
        depth, i = 0, start
        while i < len(text):
            c = text[i]
            if c in _QUOTES:
                i = _string_end(text, i)
                continue
            if c in _OPEN:
                depth += 1
            elif c in _OPEN.values():
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return len(text)
    end = _BARE_END.search(text, start)
    return len(text) if end is None or end.start() == start else end.start()


def _string_end(text: str, start: int) -> int:
    """The end of the quoted string that starts at ``text[start]`` (escapes skipped)."""
    quote, i = text[start], start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == quote:
            return i + 1
        i += 1
    return len(text)


def shorten(text: str, limit: int = LIMIT) -> str:
    """``text`` cut in the middle to at most ``limit`` characters (``...`` marks the cut).

    Only for text already redacted: both ends are kept.

    Example:
        >>> shorten("abcdefghij", 7)
        'ab...ij'
    """
    if len(text) <= limit:
        return text
    head = max(0, (limit - 3) // 2)
    tail = max(0, limit - 3 - head)
    return text[:head] + "..." + (text[len(text) - tail :] if tail else "")


class _Redactor(reprlib.Repr):
    """A :class:`reprlib.Repr` that redacts every part before it shortens it."""

    def __init__(self) -> None:
        super().__init__()
        self.maxstring = 80
        self.maxother = 80
        self.maxdict = 8
        self.maxlist = 6
        self.maxtuple = 6

    def repr_str(self, x: str, level: int) -> str:
        return shorten(builtins.repr(redact_text(x, options=False)), self.maxstring)

    def repr_instance(self, x: Any, level: int) -> str:
        try:
            text = builtins.repr(x)
        except Exception:
            return f"<{type(x).__name__} instance>"
        return shorten(redact_text(text), self.maxother)

    def repr_dict(self, x: Mapping, level: int) -> str:
        return self._mapping(x, level, options=False)

    def repr_mappingproxy(self, x: Mapping, level: int) -> str:
        return self._mapping(x, level, options=False)

    def _mapping(self, x: Mapping, level: int, options: bool) -> str:
        """``{k: v, ...}``, values redacted by their names (``options``: storage options)."""
        if not x:
            return "{}"
        if level <= 0:
            return "{...}"
        parts = []
        for i, (key, value) in enumerate(x.items()):
            if i == self.maxdict:
                parts.append("...")
                break
            text = self._named(key, value, level - 1, options)
            parts.append(f"{self.repr1(key, level - 1)}: {text}")
        return "{" + ", ".join(parts) + "}"

    def _named(self, name: Any, value: Any, level: int, options: bool = False) -> str:
        """``value`` described as the value of ``name``: hidden when the name says so."""
        if is_sensitive(name) or (options and name not in HARMLESS_OPTIONS):
            return HIDDEN
        if name in OPTIONS_NAMES and isinstance(value, Mapping):
            return self._mapping(value, level, options=True)
        if name in OPTIONS_NAMES and value is not None:
            return HIDDEN
        return self.repr1(value, level)

    def repr_partial(self, x: functools.partial, level: int) -> str:
        if level <= 0:
            return "functools.partial(...)"
        func = getattr(x.func, "__qualname__", None)
        parts = [func if isinstance(func, str) else self.repr1(x.func, level - 1)]
        parts += [self.repr1(a, level - 1) for a in x.args]
        parts += [f"{k}={self._named(k, v, level - 1)}" for k, v in x.keywords.items()]
        return f"functools.partial({', '.join(parts)})"


_REDACTOR = _Redactor()


def describe(obj: Any, limit: int = LIMIT) -> str:
    """A short description of an opener, a source or an argument, credentials hidden.

    Args:
        obj: what to describe.
        limit: the longest description returned.

    Returns:
        A ``repr``-like text in which what could be a credential is ``***`` (see the
        rules of this module), shortened in the middle to ``limit`` characters.

    Example:
        >>> describe({"path": "a.mp4", "password": "hunter2"})
        "{'path': 'a.mp4', 'password': ***}"
        >>> describe(list(range(100)))
        '[0, 1, 2, 3, 4, 5, ...]'
    """
    return shorten(_REDACTOR.repr(obj), limit)


def redacted_repr(obj: Any) -> str:
    """``repr(obj)`` in full (not shortened), credentials hidden: for the ``repr`` of a source.

    Example:
        >>> print(redacted_repr("https://me:pw@host/a.mp4?sig=abc"))
        'https://***@host/a.mp4?sig=***'
    """
    return redact_text(builtins.repr(obj))


def secrets_of(url: Any = None, storage_options: Mapping[str, Any] | None = None) -> frozenset:
    """The credentials in a URL and in filesystem options, as the literal texts to hide.

    Where another library's message could show them (an error naming the URL, echoing a
    header), :func:`redact` hides them whatever the text around them: the user
    information of ``url`` (whole, its password, percent-decoded or not), the values of
    its sensitive query parameters, and every text in ``storage_options`` but the values
    of :data:`HARMLESS_OPTIONS` (at any depth: ``client_kwargs={"headers": ...}``).
    Texts shorter than :data:`MIN_SECRET` are left out (they would hide ordinary words).

    Example:
        >>> sorted(secrets_of("https://me:pa55word@host/a?X-Amz-Signature=ff00aa11&n=3"))
        ['ff00aa11', 'me%3Apa55word', 'me:pa55word', 'pa55word']
        >>> sorted(secrets_of("s3://b/a", {"secret": "s3cr3t!", "endpoint_url": "http://h:9"}))
        ['s3cr3t!', 's3cr3t%21']
    """
    found: set[str] = set()
    if isinstance(url, str) and "://" in url:
        rest = url.split("://", 1)[1]
        netloc = re.split("[/?#]", rest, maxsplit=1)[0]
        if "@" in netloc:
            userinfo = netloc.rpartition("@")[0]
            found.update((userinfo, userinfo.partition(":")[2]))
        query = re.split("[?#]", rest, maxsplit=1)[1] if re.search("[?#]", rest) else ""
        for part in re.split("[&;#?]", query):
            name, _, value = part.partition("=")
            if value and _query_secret(name, value):
                found.add(value)
    if storage_options:
        _option_texts(storage_options, found)
    plain = {urllib.parse.unquote(s) for s in found} | {
        urllib.parse.unquote_plus(s) for s in found
    }
    found |= plain  # and as other libraries encode them again to show them
    found |= {urllib.parse.quote(s, safe=safe) for s in plain for safe in _SHOWN_SAFE}
    return frozenset(s for s in found if len(s) >= MIN_SECRET)


def _option_texts(value: Any, found: set[str]) -> None:
    """Add to ``found`` the texts of ``value`` (options), but those of harmless names."""
    if isinstance(value, Mapping):
        for name, item in value.items():
            if name not in HARMLESS_OPTIONS:
                _option_texts(item, found)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            _option_texts(item, found)
    elif isinstance(value, (str, bytes)):
        found.add(value if isinstance(value, str) else value.decode("utf-8", "replace"))


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every credential hidden: by the rules above, and each of ``secrets``.

    Args:
        text: any text (a message, an error of another library, a ``repr``).
        secrets: literal values to hide wherever they show (:func:`secrets_of`).

    Example:
        >>> redact("403 at https://u:p@host/a, key AKIAXYZ123 refused", {"AKIAXYZ123"})
        '403 at https://***@host/a, key *** refused'
    """
    for secret in sorted(secrets, key=len, reverse=True):
        if secret and secret in text:
            text = text.replace(secret, HIDDEN)
    if "%" in text or "+" in text:  # shown encoded some other way: character by character
        for secret in sorted(secrets, key=len, reverse=True):
            if secret:
                text = _encoded_forms(urllib.parse.unquote(secret)).sub(HIDDEN, text)
    return redact_text(text)


@functools.lru_cache(maxsize=256)
def _encoded_forms(plain: str) -> re.Pattern:
    """A pattern of ``plain`` with each character as it is or percent-encoded (any case).

    Clients encode a URL's characters each their own way (yarl keeps ``'`` and ``,`` but
    encodes ``;`` in a query value): no list of encodings of a secret catches them all.

    Example:
        >>> _encoded_forms("a;',b").sub("***", "x=a%3B',b&y=a%3b%27%2Cb")
        'x=***&y=***'
    """
    parts = []
    for c in plain:
        hexes = "".join(
            "%" + "".join(f"[{h}{h.lower()}]" if h.isalpha() else h for h in f"{b:02X}")
            for b in c.encode("utf-8")
        )
        parts.append(f"(?:{re.escape(c)}|{hexes}{'|[+]' if c == ' ' else ''})")
    return re.compile("".join(parts))
