"""A small website on 127.0.0.1 for the demo, tests and benchmarks.

/page/<n>   a page titled "Page <n>"
/flaky/<n>  answers 500 the first time it is asked for, 200 afterwards (to show retries)
/broken/<n> always 500
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType


class DemoSite:
    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, body = site.answer(self.path)
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:  # keep the demo's terminal readable
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def answer(self, path: str) -> tuple[int, str]:
        kind, _, n = path.strip("/").partition("/")
        if kind == "flaky":
            with self._lock:
                first = path not in self._seen
                self._seen.add(path)
            if first:
                return 500, "<title>try again</title>"
        if kind == "broken":
            return 500, "<title>broken</title>"
        if kind in ("page", "flaky"):
            return (
                200,
                f"<html><head><title>Page {n}</title></head><body><h1>{n}</h1></body></html>",
            )
        return 404, "<title>not found</title>"

    def __enter__(self) -> DemoSite:
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()
