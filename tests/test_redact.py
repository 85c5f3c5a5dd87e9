"""Credentials never shown: describe(), and the errors, warnings and reprs that use it."""

import functools
import logging
import string
import traceback
import urllib.parse
import warnings

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import streamseq
from streamseq._redact import (
    HARMLESS_OPTIONS,
    HIDDEN,
    describe,
    is_sensitive,
    redact_text,
    redact_urls,
    secrets_of,
    shorten,
)
from streamseq._warn import warn
from streamseq.errors import SourceError, StreamError
from streamseq.io import probe_lengths, tokens
from streamseq.read.ref import StreamRef

pytestmark = pytest.mark.timeout(120)

#: a secret access key as the object-storage recipe gives one: 40 characters
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
KEY = "AKIAIOSFODNN7EXAMPLE"


def pieces(secret, size=8):
    """Every ``size``-character piece of ``secret``."""
    return {secret[i : i + size] for i in range(len(secret) - size + 1)}


def assert_hidden(text, *secrets):
    """No secret, nor any 8-character piece of one, is in ``text``."""
    for secret in secrets:
        shown = [p for p in pieces(secret) if p in text]
        assert not shown, f"{shown[0]!r} of a secret is shown in {text!r}"


def object_storage(url="s3://bucket/tokens/a.bin"):
    """An opener of the object-storage recipe."""
    return functools.partial(tokens, url, storage_options={"key": KEY, "secret": SECRET})


# describe


def test_the_recipe_opener_described_without_its_credentials():
    text = describe(object_storage())
    assert text == (
        "functools.partial(tokens, 's3://bucket/tokens/a.bin', "
        f"storage_options={{'key': {HIDDEN}, 'secret': {HIDDEN}}})"
    )
    assert_hidden(text, SECRET, KEY)


def test_long_descriptions_shortened_after_hiding():
    long = functools.partial(tokens, "s3://bucket/" + "d/" * 100 + "a.bin", storage_options={})
    opener = functools.partial(tokens, long.args[0], storage_options={"secret": SECRET})
    text = describe(opener)
    assert len(text) <= 240 and "..." in text and text.endswith(f"{{'secret': {HIDDEN}}})")
    assert_hidden(text, SECRET)
    assert_hidden(describe(opener, limit=30), SECRET)


@pytest.mark.parametrize(
    "name",
    ["key", "Secret", "TOKEN", "password", "passwd", "credentials", "auth", "access_key",
     "session", "aws_secret_access_key", "sessionToken", "X-Amz-Security-Token", "api_key",
     "Authorization", "client_secret", "secretaccesskey", "sig", "AWSAccessKeyId"],
)  # fmt: skip
def test_sensitive_names(name):
    assert is_sensitive(name)
    assert describe({name: SECRET}) == f"{{{name!r}: {HIDDEN}}}"


@pytest.mark.parametrize(
    "name", ["path", "dtype", "mmap_mode", "endpoint_url", "anon", "tokenizer", "author", 0]
)
def test_other_names_shown(name):
    assert not is_sensitive(name)
    assert describe({name: "x"}) == f"{{{name!r}: 'x'}}"


def test_sensitive_values_hidden_whatever_they_are():
    nested = {"auth": {"user": "me", "pw": SECRET}, "token": 12345678901234, "a": [1]}
    assert describe(nested) == f"{{'auth': {HIDDEN}, 'token': {HIDDEN}, 'a': [1]}}"


def test_storage_options_show_only_harmless_settings():
    options = {
        "anon": False,
        "endpoint_url": f"https://me:{SECRET}@minio:9000",
        "region_name": "eu-west-1",
        "profile": "training",
        "client_kwargs": {"endpoint_url": "http://minio:9000", "aws_session_token": SECRET},
        "headers": {"Authorization": f"Bearer {SECRET}"},
        "skip_instance_cache": True,
    }
    text = describe({"storage_options": options}, limit=1000)
    assert text == (
        "{'storage_options': {'anon': False, 'endpoint_url': 'https://***@minio:9000', "
        "'region_name': 'eu-west-1', 'profile': ***, 'client_kwargs': ***, 'headers': ***, "
        "'skip_instance_cache': True}}"
    )
    assert {"anon", "endpoint_url", "region_name"} <= HARMLESS_OPTIONS
    assert describe(functools.partial(print, storage_options="opaque")).endswith(
        f"storage_options={HIDDEN})"
    )


@pytest.mark.parametrize(
    "url, shown",
    [
        (f"https://me:{SECRET}@host/a.mp4", "https://***@host/a.mp4"),
        (f"s3://{KEY}:{SECRET}@bucket/a.bin", "s3://***@bucket/a.bin"),
        (f"https://{KEY}@github.com/org/repo", "https://***@github.com/org/repo"),
        (
            f"https://b.s3.amazonaws.com/a.mp4?X-Amz-Algorithm=AWS4-HMAC-SHA256"
            f"&X-Amz-Credential={KEY}%2F20240101&X-Amz-Signature={SECRET}"
            f"&X-Amz-Security-Token={SECRET}",
            "https://b.s3.amazonaws.com/a.mp4?X-Amz-Algorithm=AWS4-HMAC-SHA256"
            "&X-Amz-Credential=***&X-Amz-Signature=***&X-Amz-Security-Token=***",
        ),
        (f"https://acc.blob.core.windows.net/c/a.wav?sv=2022&sig={SECRET}", None),
        ("https://host:8080/data/a.mp4?part=2#t=3", "https://host:8080/data/a.mp4?part=2#t=3"),
    ],
)
def test_urls(url, shown):
    assert_hidden(redact_urls(url), SECRET, KEY)
    assert_hidden(describe(url), SECRET, KEY)
    if shown is not None:
        assert redact_urls(url) == shown


def test_reprs_of_unknown_objects_redacted_as_text():
    class Opener:
        def __repr__(self):
            return (
                f"Opener(url='s3://{KEY}:{SECRET}@b/a', secret=\"{SECRET}\", "
                f"storage_options={{'profile': '{SECRET}', 'x': [1, ('{SECRET}',)]}}, n=3)"
            )

    text = describe(Opener())
    assert text == "Opener(url='s3://***@b/a', secret=***, storage_options=***, n=3)"
    assert redact_text("KeyError: 'a.mp4'") == "KeyError: 'a.mp4'"


def test_a_repr_that_fails_is_still_described():
    class Broken:
        def __repr__(self):
            raise RuntimeError(SECRET)

    assert describe(Broken()) == "<Broken instance>"


def test_shorten():
    assert shorten("abc", 5) == "abc" and shorten("abcdefghij", 7) == "ab...ij"


# property: random secrets, placed where credentials go, never shown

#: secrets: upper case and digits; everything else generated below is lower case, so that
#: an 8-character piece of a secret cannot be found anywhere else by chance
secret_text = st.text(string.ascii_uppercase + string.digits, min_size=8, max_size=48)
plain_names = st.text(string.ascii_lowercase + "_", min_size=1, max_size=8)
plain_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-99, 99),
    st.text(string.ascii_lowercase + "/._-", max_size=24),
)
sensitive_names = st.sampled_from(
    ["key", "secret", "Secret", "token", "password", "passwd", "credentials", "auth",
     "access_key", "session", "aws_secret_access_key", "sessionToken", "api_key",
     "Authorization", "PASSWORD", "client_secret", "refresh_token"]
)  # fmt: skip
query_names = st.sampled_from(
    ["X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token", "X-Goog-Signature",
     "sig", "Signature", "AWSAccessKeyId", "token", "access_token"]
)  # fmt: skip
hosts = st.text(string.ascii_lowercase, min_size=1, max_size=8).map(lambda h: f"{h}.example")


def opener(*args, **kwargs):
    """A stand-in for a source function."""


class Opaque:
    """An object streamseq knows nothing of, whose repr shows its fields."""

    def __init__(self, **fields):
        self.fields = fields

    def __repr__(self):
        return f"Opaque({', '.join(f'{k}={v!r}' for k, v in self.fields.items())})"


@st.composite
def placed(draw, secret):
    """``secret`` where a credential goes: a hidden place."""
    kind = draw(st.sampled_from(["named", "options", "userinfo", "user", "query", "endpoint"]))
    host, path = draw(hosts), draw(st.text(string.ascii_lowercase + "/", max_size=12))
    scheme = draw(st.sampled_from(["https", "s3", "gs", "http"]))
    if kind == "named":
        return {draw(sensitive_names): secret}
    if kind == "options":
        name = draw(plain_names.filter(lambda n: n not in HARMLESS_OPTIONS))
        return {"storage_options": {name: secret, "anon": draw(st.booleans())}}
    if kind == "userinfo":
        return f"{scheme}://{draw(plain_names)}:{secret}@{host}/{path}"
    if kind == "user":
        return f"{scheme}://{secret}@{host}/{path}"
    if kind == "query":
        before = draw(st.sampled_from(["", "a=1&", "X-Amz-Date=20240101&"]))
        return f"{scheme}://{host}/{path}?{before}{draw(query_names)}={secret}&part=2"
    return {"storage_options": {"endpoint_url": f"https://{draw(plain_names)}:{secret}@{host}"}}


def nest(children):
    """Structures holding ``children``: containers, partials, opaque objects."""
    return st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(plain_names, children, max_size=4),
        st.lists(children, max_size=3).map(lambda args: functools.partial(opener, *args)),
        st.dictionaries(plain_names, children, max_size=3).map(
            lambda kw: functools.partial(opener, **kw)
        ),
        st.dictionaries(plain_names, children, max_size=3).map(lambda kw: Opaque(**kw)),
        children.map(lambda c: functools.partial(opener, storage_options={"x": c})),
    )


@st.composite
def structures(draw):
    secret = draw(secret_text)
    leaves = st.one_of(plain_values, placed(secret))
    tree = draw(st.recursive(leaves, nest, max_leaves=12))
    return secret, draw(nest(st.just(tree)) | st.just(tree) | placed(secret))


@given(structures(), st.sampled_from([40, 80, 240, 10_000]))
def test_random_secrets_never_shown(case, limit):
    secret, obj = case
    text = describe(obj, limit=limit)
    assert len(text) <= limit
    assert_hidden(text, secret)


@given(secret_text, st.text(string.ascii_lowercase + " :/", max_size=30), hosts, query_names)
def test_random_secrets_in_urls_of_messages_never_shown(secret, words, host, query):
    message = f"{words} https://me:{secret}@{host}/a?{query}={secret} {words}"
    assert_hidden(redact_urls(message), secret)


# where streamseq describes streams: errors, warnings, logs, reprs


def fail_to_fetch(url, storage_options=None):
    """An opener whose error names its URL (as an HTTP client's does)."""
    raise OSError(f"403 Forbidden: {url}")


def leaky_openers():
    """Openers whose failure once showed their credentials."""
    signed = f"https://me:{SECRET}@host/a.bin?X-Amz-Credential={KEY}&X-Amz-Signature={SECRET}"
    return [
        object_storage("memory://bucket/missing.bin"),
        functools.partial(fail_to_fetch, signed, storage_options={"token": SECRET}),
    ]


def everything_said(error, caught, caplog):
    """The text of an error (its chain too), of the warnings and of the log records."""
    texts = [str(error), repr(error), *(str(w.message) for w in caught)]
    texts += [r.getMessage() for r in caplog.records]
    if isinstance(error, StreamError):
        texts += [str(error.stream), error.message]
    return texts


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("which", [0, 1])
def test_a_loader_whose_opener_fails(workers, which, caplog):
    caplog.set_level(logging.DEBUG)
    good = np.arange(40, dtype=np.uint16)  # the first stream, read for the data's spec
    streams = [good, leaky_openers()[which]]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = streamseq.StreamLoader(
            streams, batch_size=2, tbins=4, num_workers=workers, lengths=[40, 40]
        )
        with pytest.raises(StreamError) as info:
            list(loader)
    assert info.value.index == 1
    said = everything_said(info.value, caught, caplog)
    said += [repr(loader), repr(loader.spec), repr(StreamRef(1, streams[1]))]
    if which == 0:  # no message of another library names the credentials: the whole chain
        said.append("".join(traceback.format_exception(info.value)))
    for text in said:
        assert_hidden(text, SECRET, KEY)
    assert "***" in str(info.value)


def test_a_loader_measuring_a_failing_opener(caplog):
    for opener in leaky_openers():
        with pytest.raises(StreamError) as info:
            streamseq.StreamLoader([opener], batch_size=1, tbins=2)
        for text in everything_said(info.value, [], caplog):
            assert_hidden(text, SECRET, KEY)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("cache", [False, True])
def test_probe_lengths_over_failing_openers(tmp_path, workers, cache, caplog):
    caplog.set_level(logging.DEBUG)
    np.save(tmp_path / "a.npy", np.arange(3))
    measured = functools.partial(np.load, str(tmp_path / "a.npy"))  # written to the cache
    for opener in leaky_openers():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(StreamError) as info:
                probe_lengths(
                    [measured, opener],
                    num_workers=workers,
                    cache=tmp_path / "lengths.json" if cache else None,
                    progress=False,
                )
        assert info.value.index == 1
        for text in everything_said(info.value, caught, caplog):
            assert_hidden(text, SECRET, KEY)
        written = tmp_path / "lengths.json"
        assert written.exists() or not cache or workers  # (workers: maybe measured after)
        if written.exists():
            assert_hidden(written.read_text(), SECRET, KEY)


def test_a_path_given_as_a_stream_is_named_without_credentials():
    with pytest.raises(TypeError, match="is a path") as info:
        StreamRef(0, f"https://me:{SECRET}@host/a.mp4")
    assert_hidden(str(info.value), SECRET)


def test_errors_and_warnings_hide_the_credentials_of_urls():
    url = f"s3://{KEY}:{SECRET}@bucket/a.bin?X-Amz-Signature={SECRET}"
    error = SourceError(url, "truncated")
    assert str(error) == "s3://***@bucket/a.bin?X-Amz-Signature=***: truncated"
    error.locate(2, describe(object_storage()), (0, 4))
    assert_hidden(str(error), SECRET, KEY)
    assert_hidden(str(StreamError(f"reading {url} failed", 1, "x")), SECRET, KEY)
    with pytest.warns(UserWarning) as caught:
        warn(f"cannot reach {url}")
    assert_hidden(str(caught[0].message), SECRET, KEY)


def test_remote_file_reprs():
    from streamseq.io.remote import Remote, RemoteFile

    url = f"https://me:{SECRET}@host/a.bin"
    for cls in (Remote, RemoteFile):
        obj = cls.__new__(cls)
        obj.url = url
        assert repr(obj) == f"{cls.__name__}('https://***@host/a.bin')"


# user information as URL parsers read it: up to the last "@" of the authority

password_text = st.text(
    st.characters(codec="ascii", categories=["L", "N", "P", "S"], exclude_characters="/?#%\\[]"),
    min_size=8,
    max_size=32,
).filter(lambda s: len(s.strip("@:")) >= 8)


@pytest.mark.parametrize(
    "url",
    [
        "http://user:pa@ssWORD123@h/t.npy",
        "http://user:pa'ssQUOTE44@h/t.npy",
        'http://user:pa"ssQUOTE44@h/t.npy',
        "s3://user:a@b@c@dSECRET99@bucket/k.bin?part=1",
    ],
)
def test_a_password_with_at_signs_or_quotes_is_hidden_whole(url):
    parts = urllib.parse.urlsplit(url)
    secret = parts.password
    assert len(secret) >= 8
    for text in (redact_urls(url), describe(url), redact_urls(f"failed: {url!r} (x)")):
        assert_hidden(text, secret)
        assert f"{HIDDEN}@{parts.hostname}" in text


@given(password_text, hosts)
def test_random_passwords_as_parsers_read_them_never_shown(secret, host):
    url = f"https://me:{secret}@{host}/a.mp4"
    assume(secret not in f"GET https://me:***@{host}/a.mp4 failed, n=1")
    assert urllib.parse.urlsplit(url).hostname == host  # what a client connects to
    for text in (url, f"GET {url} failed", repr(url), f"url={url!r}, n=1"):
        assert secret not in redact_urls(text)
    assert secret not in describe(url)


@pytest.mark.parametrize(
    "url, secret",
    [
        ("https://h/a.bin?jwt=eyJhbGciOiJIUzI1NiJ9abc", "eyJhbGciOiJIUzI1NiJ9abc"),
        ("https://h/a.bin?code=SPLX4455AAbb", "SPLX4455AAbb"),
        ("https://h/a.bin#access_token=FRAGTOKEN777", "FRAGTOKEN777"),
        ("https://h/a.bin?a=1%26X-Amz-Signature%3DNESTEDSIG88", "NESTEDSIG88"),
        ("https://h/a.bin?next=%2Fb%3Fsig%3DNESTEDSIG99", "NESTEDSIG99"),
    ],
)
def test_credentials_in_other_query_forms_are_hidden(url, secret):
    assert_hidden(redact_urls(url), secret)
    assert_hidden(describe(url), secret)
    assert any(secret in s for s in secrets_of(url))


@pytest.mark.parametrize(
    "url",
    [
        "https://h/a.bin;jsessionid=S3CR3T-1",
        "https://h/a.bin;jsessionid=S3CR3T-1?x=1",
        "https://h/a.bin?PHPSESSID=S3CR3T-1",
        "https://h/a.bin?sid=S3CR3T-1&n=2",
        "https://h/a.bin?ASPSESSIONID=S3CR3T-1",
        "https://h/a.bin?session_id=S3CR3T-1",
    ],
)
def test_session_identifiers_in_a_url_are_hidden(url):
    shown = redact_urls(f"cannot read {url}")
    assert "S3CR3T" not in shown
    assert "https://h/a.bin" in shown


@pytest.mark.parametrize(
    "text, shown",
    [
        ("video(https://h/x.mp4?token=abc)", "video(https://h/x.mp4?token=***)"),
        ("[https://h/x.mp4?sig=abc]", "[https://h/x.mp4?sig=***]"),
        ("{https://h/x.mp4?sig=abc}, next", "{https://h/x.mp4?sig=***}, next"),
        ("f(g(https://h/x?sig=abc))", "f(g(https://h/x?sig=***))"),
        ("(https://h/x?sig=abc) at steps 3:5", "(https://h/x?sig=***) at steps 3:5"),
        ("https://h/x?sig=ab)c", "https://h/x?sig=***"),  # (a bracket inside a value)
    ],
)
def test_a_bracket_closing_around_a_url_stays_after_its_hidden_query_value(text, shown):
    assert redact_urls(text) == shown
    assert redact_text(text) == shown


@pytest.mark.parametrize(
    "text, shown",
    [
        ("no such file: https://h/a.bin#FRAGSEC123", "no such file: https://h/a.bin#***"),
        (
            "table(https://u@h/a.parquet#FRAGSEC123) failed",
            "table(https://***@h/a.parquet#***) failed",
        ),
        ("'s3://b/k.npy#FRAGSEC123'", "'s3://b/k.npy#***'"),
        ("https://h/a.bin?x=1#FRAGSEC123", "https://h/a.bin?x=1#***"),
        ("https://h/a.bin#access_token=FRAGSEC123&b=2", "https://h/a.bin#access_token=***&b=2"),
        ("https://h/a.mp4#t=3", "https://h/a.mp4#t=3"),  # (pairs: hidden by name)
        ("https://h/a.bin#FRAGSEC123, a=1", "https://h/a.bin#***, a=1"),
        ("(https://h/a.bin#FRAGSEC123),a=1", "(https://h/a.bin#***),a=1"),
        ("issue #12 of /data/#1/a.bin", "issue #12 of /data/#1/a.bin"),  # (no URL)
    ],
)
def test_the_fragment_of_a_url_is_hidden_unless_it_is_of_harmless_pairs(text, shown):
    assert redact_urls(text) == shown
    assert "FRAGSEC" not in describe(text)
