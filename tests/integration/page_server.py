"""A small HTTP site on 127.0.0.1 whose pages a test writes: path -> (status, content type,
body bytes), or a redirect. It counts each path's hits, and keeps the User-Agent of each
request and when it came (a site's log of request times)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.e2e.crawl_site import send_page

HTML = "text/html; charset=utf-8"


@dataclass
class PageSite:
    pages: dict[str, tuple[int, str, bytes]] = field(default_factory=dict)
    port: int = 0
    hits: Counter[str] = field(default_factory=Counter)
    user_agents: list[str] = field(default_factory=list)
    redirects: dict[str, str] = field(default_factory=dict)  # path -> Location (301)
    requests: list[tuple[float, str]] = field(default_factory=list)  # (time.monotonic(), path)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def page(self, path: str, body: str | bytes, *, status: int = 200, ctype: str = HTML) -> None:
        self.pages[path] = (status, ctype, body.encode() if isinstance(body, str) else body)

    def redirect(self, path: str, location: str) -> None:
        self.redirects[path] = location


def _handler(site: PageSite) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with site.lock:
                site.hits[self.path] += 1
                site.requests.append((time.monotonic(), self.path))
                site.user_agents.append(self.headers.get("User-Agent", ""))
            if self.path in site.redirects:
                self.send_response(301)
                self.send_header("Location", site.redirects[self.path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status, ctype, body = site.pages.get(self.path, (404, HTML, b"<title>gone</title>"))
            send_page(self, status, ctype, body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@contextmanager
def serve_pages() -> Iterator[PageSite]:
    site = PageSite()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(site))
    site.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()
