"""A test site on 127.0.0.1 that pushes back the ways real sites do, recording when each path
was asked for:

- ``/gone``: 404, always;
- ``/busy``: 429 with ``Retry-After: 3`` the first time, then a page;
- ``/blocked``: 403 with a block page (title "Access denied", ``#blocked-marker``), always;
- ``/page``: a plain page with ``#content``.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RETRY_AFTER_S = 3
BLOCK_MARKER = "#blocked-marker"
BLOCK_PAGE = (
    "<!doctype html><html><head><title>Access denied</title></head><body>"
    '<div id="blocked-marker">Access denied: automated traffic</div></body></html>'
)
PAGE = (
    "<!doctype html><html><head><title>Ready</title></head><body>"
    '<p id="content">here</p></body></html>'
)
GONE_PAGE = "<!doctype html><html><head><title>Not found</title></head><body>gone</body></html>"
BUSY_PAGE = "<!doctype html><html><head><title>Slow down</title></head><body>busy</body></html>"


class PushbackSite:
    def __init__(self) -> None:
        self.hits: dict[str, list[float]] = {}  # path -> time.time() of each request
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def hit_times(self, path: str) -> list[float]:
        with self._lock:
            return list(self.hits.get(path, []))

    def __enter__(self) -> PushbackSite:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _answer(self, path: str) -> tuple[int, str, dict[str, str]]:
        with self._lock:
            seen = self.hits.setdefault(path, [])
            seen.append(time.time())
            first = len(seen) == 1
        if path == "/gone":
            return 404, GONE_PAGE, {}
        if path == "/busy" and first:
            return 429, BUSY_PAGE, {"Retry-After": str(RETRY_AFTER_S)}
        if path == "/blocked":
            return 403, BLOCK_PAGE, {}
        return 200, PAGE, {}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                path = urllib.parse.urlsplit(self.path).path
                if path == "/favicon.ico":
                    status, body, extra = 404, "", {}
                else:
                    status, body, extra = site._answer(path)
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                for name, value in extra.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        return Handler
