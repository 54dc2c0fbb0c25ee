"""A fault-injecting HTTP proxy for tests: sits on 127.0.0.1 in front of an
object-store emulator and fails a seeded share of the requests.

    with FaultProxy(upstream="http://127.0.0.1:9023", rate=0.25, seed=1, max_faults=20) as proxy:
        os.environ["STORAGE_EMULATOR_HOST"] = proxy.url
        ...
    print(proxy.stats)

Fault kinds (chosen at random among ``kinds`` for each failed request):

- ``"503"``: answer 503 Service Unavailable without forwarding the request:
  the store never saw it (an S3-style XML error for AWS-signed requests, a
  GCS-style JSON error otherwise).
- ``"reset"``: read the request, then drop the connection with a TCP reset,
  without forwarding it.
- ``"reset_after"``: forward the request (the store acts on it), then drop the
  connection before answering: the client must cope with a lost response, e.g.
  a retried DELETE that finds nothing, a retried copy.
- ``"truncate"``: forward, send the status line, headers and half the body,
  then drop the connection (a stream cut mid-body).

``methods`` / ``match`` (a regex on the unquoted request path) restrict
which requests may fail; ``once`` fails each distinct (method, path) at most
once, so that with ``rate=1`` every matching request fails and its retry goes
through (clients retry 4-5 times; a fault on every try would just exhaust them). Faults are bounded in count (``max_faults``) and in time (``active_s`` after
the first request), so a test always finishes; which requests fail is drawn
from a seeded RNG (thread scheduling may shift which request gets which draw).
"""

from __future__ import annotations

import http.client
import json
import random
import re
import socket
import struct
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import unquote, urlsplit

FAULT_KINDS = ("503", "reset", "reset_after", "truncate")
# Hop-by-hop headers are the proxy's own business (RFC 9110 §7.6.1); bodies are
# re-framed with Content-Length.
_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade",
        "content-length"}


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients that hang up on a reset connection are the point of this proxy


class FaultProxy:
    """A threaded HTTP/1.1 proxy on 127.0.0.1 that injects seeded faults."""

    def __init__(self, upstream: str, rate: float = 0.25, seed: int = 0, max_faults: int = 20,
                 active_s: float = 600.0, kinds: tuple[str, ...] = ("503", "reset", "reset_after"),
                 methods: tuple[str, ...] | None = None, match: str | None = None, once: bool = False):
        unknown = set(kinds) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}")
        up = urlsplit(upstream)
        self.upstream_host, self.upstream_port = up.hostname or "127.0.0.1", up.port or 80
        self.rate, self.max_faults, self.active_s = rate, max_faults, active_s
        self.kinds, self.methods = kinds, methods
        self.match = re.compile(match) if match else None
        self.once = once
        self._failed: set[tuple[str, str]] = set()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._started: float | None = None
        self.requests = 0
        self.faults: Counter[str] = Counter()
        self.log: list[tuple[str, str, str]] = []  # (method, path, fault kind) of each injected fault
        self._server = _QuietServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="faultproxy", daemon=True)

    # ------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    @property
    def stats(self) -> dict[str, int]:
        return {"requests": self.requests, "faults": sum(self.faults.values()), **dict(self.faults)}

    # ------------------------------------------------------------ decisions

    def _draw(self, method: str, path: str) -> str | None:
        """The fault to inject for this request, or None to pass it through."""
        with self._lock:
            self.requests += 1
            now = time.monotonic()
            if self._started is None:
                self._started = now
            # Draw for every request so the sequence of decisions depends only on the seed.
            hit = self._rng.random() < self.rate
            kind = self._rng.choice(self.kinds)
            if not hit or sum(self.faults.values()) >= self.max_faults or now - self._started > self.active_s:
                return None
            if self.methods is not None and method not in self.methods:
                return None
            if self.match is not None and not self.match.search(unquote(path)):
                return None
            if self.once and (method, path) in self._failed:
                return None
            self._failed.add((method, path))
            if kind == "truncate" and method != "GET":
                kind = "reset_after"
            self.faults[kind] += 1
            self.log.append((method, path, kind))
            return kind

    # ------------------------------------------------------------ handler

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
                pass  # keep test output clean

            def _read_body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = bytearray()
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass  # trailers
                            return bytes(out)
                        out += self.rfile.read(size)
                        self.rfile.readline()
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def _error_503(self) -> tuple[list[tuple[str, str]], bytes]:
                """A 503 body in the dialect of the store the client believes it talks to."""
                if self.headers.get("Authorization", "").startswith("AWS4-HMAC-SHA256"):
                    # S3 (s3fs / botocore sign every request): the XML error S3 sends under load.
                    err = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>ServiceUnavailable</Code>"
                           "<Message>injected fault: service unavailable</Message></Error>")
                    return [("Content-Type", "application/xml")], err.encode()
                err = json.dumps({"error": {"code": 503, "message": "injected fault: service unavailable"}})
                return [("Content-Type", "application/json")], err.encode()

            def _reset(self) -> None:
                # SO_LINGER 0 makes close() send RST: the client sees "connection reset by peer".
                try:
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
                self.close_connection = True
                try:
                    self.connection.close()
                except OSError:
                    pass

            def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
                conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                    headers["Host"] = f"{proxy.upstream_host}:{proxy.upstream_port}"
                    if body or self.command in ("POST", "PUT", "PATCH"):
                        headers["Content-Length"] = str(len(body))
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    r = conn.getresponse()
                    data = r.read()
                    return r.status, r.reason, r.getheaders(), data
                finally:
                    conn.close()

            def _send(self, status: int, reason: str, headers: list[tuple[str, str]], data: bytes,
                      cut: bool = False) -> None:
                self.send_response(status, reason)
                up = f"{proxy.upstream_host}:{proxy.upstream_port}"
                for k, v in headers:
                    if k.lower() in _HOP:
                        continue
                    if k.lower() == "location":  # keep resumable-upload sessions on the proxy
                        v = v.replace(f"http://{up}", proxy.url)
                    self.send_header(k, v)
                if self.command == "HEAD":
                    # A HEAD reply has no body but announces the object's size (s3fs's info
                    # reads it): pass the upstream's Content-Length through unchanged.
                    length = next((v for k, v in headers if k.lower() == "content-length"), "0")
                    self.send_header("Content-Length", length)
                    self.end_headers()
                    return
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if cut:
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self._reset()
                    return
                self.wfile.write(data)

            def _handle(self) -> None:
                body = self._read_body()
                kind = proxy._draw(self.command, self.path)
                if kind == "503":
                    self._send(503, "Service Unavailable", *self._error_503())
                    return
                if kind == "reset":
                    self._reset()
                    return
                try:
                    status, reason, headers, data = self._forward(body)
                except OSError:
                    self.send_error(502, "upstream unreachable")
                    return
                if kind == "reset_after":
                    self._reset()
                    return
                self._send(status, reason, headers, data, cut=(kind == "truncate" and len(data) > 1))

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = _handle

        return Handler
