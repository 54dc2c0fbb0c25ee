"""A folder served over HTTP on 127.0.0.1 for tests: Basic auth, Range requests, chosen refusals.

What a corpus or an input behind a password-protected web server looks like to fsspec's HTTP
filesystem (aiohttp takes ``http://user:password@host/...`` as Basic auth). GET and HEAD only;
``Range: bytes=a-b`` answered 206; without the right credentials 401 (or 403 with ``forbid``).

    with FileServer(folder, user="alice", password="PASS") as server:
        server.url("corpus")            # http://alice:PASS@127.0.0.1:PORT/corpus
"""

from __future__ import annotations

import base64
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


class FileServer:
    """Serves ``root`` until stopped; ``requests`` records (method, path, status) of every request."""

    def __init__(self, root: str | Path, user: str | None = None, password: str | None = None,
                 forbid: bool = False) -> None:
        self.root = Path(root).resolve()
        self.user, self.password, self.forbid = user, password, forbid
        self.requests: list[tuple[str, str, int]] = []
        self.headers_seen: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:  # noqa: N802 - the http.server interface
                server.answer(self, body=False)

            def do_GET(self) -> None:  # noqa: N802
                server.answer(self, body=True)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> FileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def url(self, path: str = "", user: str | None = None, password: str | None = None) -> str:
        """The URL of ``path``, with this server's credentials in it (or the ones given)."""
        user = self.user if user is None else user
        password = self.password if password is None else password
        auth = f"{user}:{password}@" if user is not None else ""
        return f"http://{auth}127.0.0.1:{self.port}/{path.lstrip('/')}"

    def _authorized(self, header: str | None) -> bool:
        if self.user is None:
            return not self.forbid
        want = "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        return header == want and not self.forbid

    def answer(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        self.headers_seen.append(str(h.headers))
        status = self._answer(h, body)
        self.requests.append((h.command, h.path, status))

    def _answer(self, h: BaseHTTPRequestHandler, body: bool) -> int:
        if not self._authorized(h.headers.get("Authorization")):
            status = 403 if self.forbid else 401
            h.send_response(status)
            if status == 401:
                h.send_header("WWW-Authenticate", 'Basic realm="corpus"')
            h.send_header("Content-Length", "0")
            h.end_headers()
            return status
        path = (self.root / unquote(urlsplit(h.path).path).lstrip("/")).resolve()
        if not str(path).startswith(str(self.root)) or not path.is_file():
            h.send_response(404)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return 404
        size = os.path.getsize(path)
        start, end = 0, size - 1
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", h.headers.get("Range", "") or "")
        status = 200
        if m and size:
            if m.group(1):
                start = int(m.group(1))
                end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
            else:  # the last N bytes
                start = max(0, size - int(m.group(2)))
            if start >= size:
                h.send_response(416)
                h.send_header("Content-Range", f"bytes */{size}")
                h.send_header("Content-Length", "0")
                h.end_headers()
                return 416
            status = 206
        h.send_response(status)
        h.send_header("Accept-Ranges", "bytes")
        h.send_header("Content-Length", str(end - start + 1 if size else 0))
        if status == 206:
            h.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        h.end_headers()
        if body and size:
            with open(path, "rb") as f:
                f.seek(start)
                h.wfile.write(f.read(end - start + 1))
        return status
