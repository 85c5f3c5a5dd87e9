"""No credential of a URL or of storage_options in any text, for every source and failure.

A random secret is put in a URL's user information, in a query parameter, or in the
``storage_options``; each source that takes URLs is made from it and read by a loader
(0 and 2 workers) while the server fails in one way. The secret is in no message, repr,
str, args, chained error, formatted traceback, pickled error, warning, log record, state
or description.
"""

import functools
import itertools
import logging
import pickle
import shutil
import string
import threading
import time
import traceback
import urllib.parse
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from media import write_audio, write_video
from servers import RangeHandler, RangeServer, s3_server  # noqa: F401

from streamseq import StreamLoader
from streamseq.errors import SourceError
from streamseq.io import audio, events, recording, synthetic_events, table, tokens, video
from streamseq.io import remote as remote_files

pytest.importorskip("aiohttp")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

pytestmark = pytest.mark.timeout(600)

#: what starts and ends every secret: a part of one shown is found by them
MARKS = ("Qz7S", "K3tX")
SECRETS = st.text(
    string.ascii_letters + string.digits + string.punctuation, min_size=4, max_size=24
)
QUERY_NAMES = [
    "X-Amz-Signature",
    "X-Amz-Credential",
    "X-Amz-Security-Token",
    "sig",
    "token",
    "key",
]
SOURCES = ["video", "audio", "tokens", "events", "table", "recording"]
FAILURES = ["missing", "gone", "http500", "http403", "changed", "timeout"]
_NAMES = itertools.count()


class FaultHandler(RangeHandler):
    """:class:`RangeHandler` whose folder ``/<name>/`` fails as ``server.modes[name]`` says."""

    def _mode(self):
        return self.server.modes.get(self.path.lstrip("/").split("/")[0])

    def _fail(self, methods):
        mode = self._mode()
        if mode == "timeout" and "GET" in methods:
            time.sleep(1.0)  # (the client gives up after 0.2 s)
            self.close_connection = True
            return True
        status = {"http500": 500, "http403": 403}.get(mode)
        if status is None or (mode == "http500" and "GET" not in methods):
            return False
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()
        return True

    def do_HEAD(self):
        if not self._fail(("HEAD",)):
            super().do_HEAD()

    def do_GET(self):
        if not self._fail(("GET",)):
            super().do_GET()


class FaultServer(RangeServer):
    def start(self):
        super().start()
        self.server.shutdown()  # again with the handler that fails on demand
        self.thread.join(10)
        self.server.RequestHandlerClass = FaultHandler
        self.server.modes = {}
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    """One file of each kind, copied for each example."""
    folder = tmp_path_factory.mktemp("originals")
    write_video(folder / "a.mp4", 12, gop=5, bf=0)
    write_audio(folder / "s.wav", 8000, "pcm_s16le", "wav", 16000, "mono")
    np.save(folder / "t.npy", np.arange(60, dtype=np.int32).reshape(30, 2))
    np.save(folder / "ev.npy", synthetic_events(height=8, width=8, duration_us=50_000))
    rows = np.repeat(np.arange(3), [7, 5, 9])
    data = {"episode_index": rows, "x": np.arange(len(rows), dtype=np.float32)}
    pq.write_table(pa.table(data), folder / "d.parquet", row_group_size=8)
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = FaultServer(tmp_path_factory.mktemp("served")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def quick(monkeypatch):
    """Fewer, faster attempts (forked workers inherit them)."""
    monkeypatch.setattr(remote_files, "ATTEMPTS", 2)
    monkeypatch.setattr(remote_files, "BACKOFF", (0.01,))


FILES = {
    "video": "a.mp4",
    "audio": "s.wav",
    "tokens": "t.npy",
    "events": "ev.npy",
    "table": "d.parquet",
    "recording": "a.mp4",
}


def make(kind, url, options):
    """The streams of a source of ``kind`` at ``url`` (a list)."""
    kw = {"storage_options": options}
    if kind == "video":
        return [video(url, **kw), video(url, start=0.08, stop=0.4, **kw)]
    if kind == "audio":
        return [audio(url, frame=400, **kw)]
    if kind == "tokens":
        return [tokens(url, **kw)]
    if kind == "events":
        return [events(url, window_us=5000, height=8, width=8, **kw)]
    if kind == "table":
        return table(url, **kw)
    return [recording(0.04, video=video(url, **kw))]


def where(secret, place, name, server, file):
    """(URL, storage_options) with ``secret`` placed."""
    quoted = urllib.parse.quote(secret, safe="")
    base = f"{server.url}/{name}/{file}"
    options = {"client_kwargs": {"timeout": _timeout()}}
    if place == "userinfo":
        return base.replace("://", f"://user:{quoted}@"), options
    if place.startswith("query:"):
        return f"{base}?part=1&{place[6:]}={quoted}&n=2", options
    options["client_kwargs"]["headers"] = {"Authorization": secret}
    return base, options


def _timeout():
    import aiohttp

    return aiohttp.ClientTimeout(total=None, sock_connect=2, sock_read=0.2)


def texts_of_error(error):
    """Every text an error shows: its own, its chain's, its traceback, its pickled form."""
    out = ["".join(traceback.format_exception(error))]
    seen, todo = set(), [error]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        out += [str(e), repr(e), repr(e.args), repr(getattr(e, "__notes__", None))]
        out.append(repr(vars(e)) if hasattr(e, "__dict__") else "")
        try:
            data = pickle.dumps(e)
        except Exception:
            data = b""
        out.append(data.decode("latin-1"))
        if data:
            again = pickle.loads(data)
            out += [str(again), repr(again)]
        todo += [e.__cause__, e.__context__]
    return out


def assert_hidden(texts, secret):
    quoted = urllib.parse.quote(secret, safe="")
    for text in texts:
        for shown in {secret, quoted, *MARKS}:
            assert shown not in text, f"{shown!r} shown in {text!r}"


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.texts = []

    def emit(self, record):
        self.texts.append(record.getMessage())


def run_failure(kind, failure, workers, url, options, name, server, folder):
    """Make the sources, make the server fail, read: every text seen."""
    texts = []
    if failure == "missing":
        missing = url.replace(FILES[kind], "nowhere-" + FILES[kind])
        with pytest.raises((FileNotFoundError, SourceError)) as info:
            make(kind, missing, options)
        texts += texts_of_error(info.value)
        openers = [functools.partial(tokens, missing, storage_options=options)]
        loader = StreamLoader(openers, 1, 4, lengths=[30], num_workers=workers)
    else:
        streams = make(kind, url, options)
        texts += [repr(streams), str(streams)]
        texts += [repr(getattr(s, "videos", None)) for s in streams]
        loader = StreamLoader(streams, 2, 4, num_workers=workers)
        texts += [repr(loader), str(loader.state_dict()), repr(pickle.dumps(loader.state_dict()))]
        if failure == "gone":
            shutil.rmtree(folder / name)
        elif failure == "changed":
            with open(folder / name / FILES[kind], "ab") as f:
                f.write(b"\0" * 64)
        else:
            server.server.modes[name] = failure
            if failure == "http403":  # a source made in a worker (an opener) fails too
                opener = functools.partial(make_one, kind, url, options)
                texts += run_loader(StreamLoader([opener], 1, 4, lengths=[8], num_workers=workers))
    # (a table's file changed under a loader is not always an error yet: what it reads is
    # checked here only for secrets)
    texts += run_loader(loader, required=not (kind == "table" and failure == "changed"))
    return texts


def make_one(kind, url, options):
    return make(kind, url, options)[0]


def run_loader(loader, required=True):
    """The texts of the error that reading ``loader`` ends with (one is ``required``)."""
    texts = []
    try:
        for _ in loader:
            pass
    except Exception as e:  # any, as long as it shows no secret
        texts = texts_of_error(e)
    else:
        assert not required, "the failure went unnoticed"
    finally:
        loader.close()
    return texts


PLACES = ["userinfo", "options"] + [f"query:{n}" for n in QUERY_NAMES]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("failure", FAILURES)
@settings(max_examples=3, deadline=None)
@given(
    core=SECRETS,
    place=st.sampled_from(PLACES),
    kind=st.sampled_from(SOURCES),
)
def test_no_secret_in_any_text(
    originals, server, quick, caplog, failure, workers, core, place, kind
):
    secret = MARKS[0] + core + MARKS[1]
    name = f"ex{next(_NAMES)}"
    shutil.copytree(originals, server.folder + "/" + name)
    url, options = where(secret, place, name, server, FILES[kind])
    records = Records()
    logging.getLogger().addHandler(records)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            texts = run_failure(
                kind,
                failure,
                workers,
                url,
                options,
                name,
                server,
                __import__("pathlib").Path(server.folder),
            )
    finally:
        logging.getLogger().removeHandler(records)
        server.server.modes.pop(name, None)
    texts += [str(w.message) for w in caught] + records.texts
    assert_hidden(texts, secret)


# -- each defect, plainly -------------------------------------------------------------------

PASSWORD = "Qz7Sh0ldK3tX"


@pytest.mark.parametrize("make_source", [video, audio, tokens])
def test_missing_file_at_a_url_names_no_password(server, quick, make_source):
    url = f"{server.url.replace('://', f'://me:{PASSWORD}@')}/none/nowhere?X-Amz-Signature=Qz7Ssig"
    with pytest.raises(FileNotFoundError) as info:
        make_source(url)
    assert "***@" in str(info.value)
    assert_hidden(texts_of_error(info.value), PASSWORD)
    assert_hidden(texts_of_error(info.value), "Qz7Ssig")


def test_the_chained_cause_of_persistent_500s_names_no_password(originals, server, quick):
    shutil.copytree(originals, server.folder + "/c6")
    server.server.modes["c6"] = "http500"
    try:
        url = f"{server.url.replace('://', f'://me:{PASSWORD}@')}/c6/t.npy?sig={PASSWORD}"
        with pytest.raises(SourceError) as info:
            tokens(url)[0:3]
    finally:
        server.server.modes.pop("c6")
    cause = info.value.__cause__
    assert cause is not None and "500" in str(cause)  # its type and message stay
    assert_hidden(texts_of_error(info.value), PASSWORD)


def test_reprs_name_no_password(originals, server):
    shutil.copytree(originals, server.folder + "/c7")
    url = f"{server.url.replace('://', f'://me:{PASSWORD}@')}/c7/"
    shown = [
        video(url + "a.mp4"),
        video(url + "a.mp4", start=0.08, stop=0.4),
        tokens(url + "t.npy"),
        {"top": video(url + "a.mp4", start=0.08, stop=0.4)},  # as a LeRobot episode's .videos
    ]
    for obj in shown:
        assert "***@" in repr(obj)
        assert_hidden([repr(obj), str(obj)], PASSWORD)


@pytest.mark.parametrize("kind", ["tokens", "video"])
def test_debug_logs_of_the_remote_filesystems_name_no_password(originals, server, kind):
    """fsspec logs the URLs it reads at DEBUG: shown to a user who turns its logs on."""
    secret = MARKS[0] + "pa55:w@rd" + MARKS[1]
    name = f"log{next(_NAMES)}"
    shutil.copytree(originals, server.folder + "/" + name)
    url, options = where(secret, "userinfo", name, server, FILES[kind])
    records = Records()
    logging.getLogger().addHandler(records)
    formatted = logging.StreamHandler(__import__("io").StringIO())
    formatted.setFormatter(logging.Formatter("%(name)s %(message)s"))
    logging.getLogger().addHandler(formatted)
    saved = {n: logging.getLogger(n).level for n in ("fsspec", "fsspec.http")}
    for n in saved:
        logging.getLogger(n).setLevel(logging.DEBUG)
    try:
        loader = StreamLoader(make(kind, url, options), 1, 4)
        for _ in loader:
            pass
        loader.close()
    finally:
        for n, level in saved.items():
            logging.getLogger(n).setLevel(level)
        logging.getLogger().removeHandler(records)
        logging.getLogger().removeHandler(formatted)
    assert records.texts, "fsspec logged nothing at DEBUG: the test tests nothing"
    assert_hidden(records.texts + [formatted.stream.getvalue()], secret)


_FIRST_OPEN = """
import functools, http.server, io, logging, sys, threading
texts = io.StringIO()
logging.basicConfig(level=logging.DEBUG, stream=texts, format="%(name)s %(message)s")

class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

handler = functools.partial(Quiet, directory=sys.argv[1])
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
secret = sys.argv[2]
url = f"http://me:{secret}@127.0.0.1:{server.server_port}/a.bin?X-Amz-Signature={secret}"
from streamseq.io import remote
assert "fsspec.http" not in logging.Logger.manager.loggerDict  # made by the first open
file = remote.Remote(url).open()
assert len(file.read_range(0, 8)) == 8
file.close()
server.shutdown()
print(texts.getvalue())
"""


def test_debug_logs_of_the_first_url_a_process_opens_name_no_password(tmp_path):
    """The client's loggers are made while the first URL is opened: filtered from the first."""
    import subprocess
    import sys

    np.arange(64, dtype=np.uint16).tofile(tmp_path / "a.bin")
    secret = MARKS[0] + "pa55word" + MARKS[1]
    done = subprocess.run(
        [sys.executable, "-c", _FIRST_OPEN, str(tmp_path), secret],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "fsspec.http" in done.stdout, "fsspec logged nothing at DEBUG: the test tests nothing"
    assert_hidden([done.stdout, done.stderr], secret)
