"""Servers on 127.0.0.1 for the tests of remote files: S3 (moto) and HTTP with byte ranges.

Shared by tests/io and tests/examples (``from servers import ...``: pytest puts tests/ on
``sys.path``, as for ``helpers``).
"""

import hashlib
import http.server
import logging
import os
import re
import socket
import threading

import pytest

_LIVE = set()  # the sockets of the servers running in this process


def _close_in_child():
    # a forked worker must not hold the servers' sockets: a stopped server would still
    # accept connections there (into the backlog of a socket nobody serves), and hang
    for sock in list(_LIVE):
        try:
            sock.close()
        except OSError:
            pass
    _LIVE.clear()


os.register_at_fork(after_in_child=_close_in_child)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RangeHandler(http.server.BaseHTTPRequestHandler):
    """Serves the files of ``server.folder``, honouring ``Range: bytes=a-b`` (one range)."""

    protocol_version = "HTTP/1.1"  # keep-alive, as real servers

    def log_message(self, *args):
        pass

    def _file(self):
        path = os.path.join(self.server.folder, self.path.lstrip("/").split("?")[0])
        if not os.path.isfile(path):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        return path

    def _headers(self, path, status, start, end, size):
        with open(path, "rb") as f:
            etag = hashlib.md5(f.read()).hexdigest()
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{etag}"')
        self.send_header("Content-Length", str(end - start))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        self.end_headers()

    def do_HEAD(self):
        path = self._file()
        self.server.heads += 1
        if path is not None:
            size = os.path.getsize(path)
            self._headers(path, 200, 0, size, size)

    def do_GET(self):
        path = self._file()
        if path is None:
            return
        size = os.path.getsize(path)
        self.server.requests += 1
        match = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", ""))
        if match is None:
            start, end, status = 0, size, 200
        else:
            a, b = match.groups()
            if a == "":
                start, end = max(0, size - int(b)), size
            else:
                start, end = int(a), size if b == "" else min(size, int(b) + 1)
            status = 206
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        self._headers(path, status, start, end, size)
        with open(path, "rb") as f:
            f.seek(start)
            self.wfile.write(f.read(end - start))


class _Server(http.server.ThreadingHTTPServer):
    """Remembers its connections, to cut them when it stops (as a server that goes away)."""

    daemon_threads = True

    def get_request(self):
        conn, address = super().get_request()
        self.connections.append(conn)
        _LIVE.add(conn)
        return conn, address

    def cut(self):
        for conn in self.connections:
            _LIVE.discard(conn)
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class RangeServer:
    """A threaded HTTP server of the files of ``folder`` on a free port of 127.0.0.1."""

    def __init__(self, folder):
        self.folder = str(folder)
        self.server = None
        self.thread = None

    def start(self):
        self.server = _Server(("127.0.0.1", free_port()), RangeHandler)
        self.server.folder, self.server.requests, self.server.connections = self.folder, 0, []
        self.server.heads = 0
        _LIVE.add(self.server.socket)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        host, port = self.server.server_address[:2]
        self.url = f"http://{host}:{port}"
        return self

    @property
    def requests(self):
        """GET requests served."""
        return self.server.requests

    @property
    def heads(self):
        """HEAD requests served."""
        return self.server.heads

    def stop(self):
        if self.server is not None:
            _LIVE.discard(self.server.socket)
            self.server.shutdown()
            self.server.server_close()
            self.server.cut()
            self.thread.join(10)
            self.server = None


class S3Server:
    """moto's S3 on a free port of 127.0.0.1, with a bucket, and the options to reach it."""

    def __init__(self, bucket="streamseq"):
        self.bucket = bucket
        self.server = None

    def start(self):
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line a request
        self.port = free_port()
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()
        _LIVE.add(self.server._server.socket)
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.options = {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "us-east-1"},
        }
        self.client().create_bucket(Bucket=self.bucket)
        return self

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def upload(self, path, name=None):
        """Put a local file in the bucket; returns its ``s3://`` URL."""
        name = name or os.path.basename(str(path))
        with open(path, "rb") as f:
            self.client().put_object(Bucket=self.bucket, Key=name, Body=f.read())
        return f"s3://{self.bucket}/{name}"

    def stop(self):
        if self.server is not None:
            _LIVE.discard(self.server._server.socket)
            self.server.stop()
            self.server = None


@pytest.fixture(scope="module")
def s3_server():
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def http_folder(tmp_path_factory):
    return tmp_path_factory.mktemp("served")


@pytest.fixture(scope="module")
def http_server(http_folder):
    server = RangeServer(http_folder).start()
    try:
        yield server
    finally:
        server.stop()
