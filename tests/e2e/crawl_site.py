"""A linked test site on 127.0.0.1 for crawls, counting its hits per path.

Pages ``/p/<level>/<index>``: level L has BRANCHING**L pages; each links to its children (one
link twice more, with a fragment and with an upper-case scheme), to the first child of the next
page of its level (two parents), to its parent, the root and itself (cycles), to a page of
another site (``other``, a second server that must never be hit), a mailto: link, and, for
every DEAD_EVERY-th page, to a page that does not exist (404). ``/busy`` answers 503 and is
linked from nowhere; so is ``/js``, whose one link a script adds.

Every link goes one level down or back to a page already found (an ancestor, the root,
itself), so a page's depth in the crawl is its level whatever order the pages are fetched in:
the pages a crawl of depth D must visit are ``expected_paths(D)``, exactly.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BRANCHING = 6
LEVELS = 5  # 0..4: 1 + 6 + 36 + 216 + 1296 pages
DEAD_EVERY = 7
SCRIPTED = (
    "<!doctype html><title>Scripted</title><body><script>document.body.insertAdjacentHTML("
    "'beforeend', '<a href=\"/p/1/0#late\">late</a>')</script></body>"
)
PAGE_DELAY_S = 0.05  # each page takes this long: consumers are killed while pages are fetched


def page(level: int, index: int) -> str:
    return "/" if level == 0 else f"/p/{level}/{index}"


def links(level: int, index: int, port: int, other_port: int) -> list[str]:
    """The hrefs of a page, as written (relative, absolute, odd spellings)."""
    hrefs: list[str] = []
    if level + 1 < LEVELS:
        children = [page(level + 1, index * BRANCHING + k) for k in range(BRANCHING)]
        hrefs += children
        hrefs.append(f"{children[0]}#section")
        hrefs.append(f"HTTP://127.0.0.1:{port}{children[1]}#Top")
        width = BRANCHING**level
        hrefs.append(page(level + 1, ((index + 1) % width) * BRANCHING))
        if index % DEAD_EVERY == 0:
            hrefs.append(f"/dead/{level + 1}/{index}")
    if level > 0:
        hrefs.append(page(level - 1, index // BRANCHING))
    hrefs += ["/", page(level, index), f"#self-{index}"]
    hrefs.append(f"http://127.0.0.1:{other_port}/out/{level}/{index}")
    hrefs.append("mailto:someone@example.org")
    return hrefs


def expected_paths(depth: int) -> set[str]:
    """Every path a crawl from / of this depth fetches: the pages of levels 0..depth and the
    dead links of the levels above the last."""
    paths = set()
    for level in range(min(depth, LEVELS - 1) + 1):
        for index in range(BRANCHING**level):
            paths.add(page(level, index))
            if level < depth and level + 1 < LEVELS and index % DEAD_EVERY == 0:
                paths.add(f"/dead/{level + 1}/{index}")
    return paths


def _parse(path: str) -> tuple[int, int] | None:
    if path == "/":
        return 0, 0
    parts = path.split("/")
    if len(parts) != 4 or parts[1] != "p" or not (parts[2].isdigit() and parts[3].isdigit()):
        return None
    level, index = int(parts[2]), int(parts[3])
    return (level, index) if level < LEVELS and index < BRANCHING**level else None


@dataclass
class Site:
    port: int = 0
    other_port: int = 0
    hits: Counter[str] = field(default_factory=Counter)
    other_hits: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"


def _handler(site: Site, other: bool) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with site.lock:
                (site.other_hits if other else site.hits)[self.path] += 1
            where = None if other else _parse(self.path)
            time.sleep(PAGE_DELAY_S)
            if self.path == "/busy":
                body, status = b"<!doctype html><title>Busy</title>", 503
            elif self.path == "/js":
                body, status = SCRIPTED.encode(), 200
            elif where is None:
                body, status = b"<!doctype html><title>Not found</title>", 404
            else:
                level, index = where
                anchors = "".join(
                    f'<a href="{h}">{n}</a>\n'
                    for n, h in enumerate(links(level, index, site.port, site.other_port))
                )
                body = (
                    f"<!doctype html><html><head><title>Page {level}/{index}</title></head>"
                    f"<body><p class=level>{level}</p>{anchors}</body></html>"
                ).encode()
                status = 200
            send_page(self, status, "text/html; charset=utf-8", body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


def send_page(handler: BaseHTTPRequestHandler, status: int, content_type: str, body: bytes) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@contextmanager
def serve_site() -> Iterator[Site]:
    site = Site()
    servers = [
        ThreadingHTTPServer(("127.0.0.1", 0), _handler(site, other)) for other in (False, True)
    ]
    site.port, site.other_port = (s.server_address[1] for s in servers)
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    try:
        yield site
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
