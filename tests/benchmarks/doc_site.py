"""A real documentation site on 127.0.0.1: Debian's PostgreSQL 15 HTML manual, served as is.

    with DocSite() as site:
        urls = site.pages(300)   # the first 300 pages by name (cycled past 1,173)

    with DocSite(latency_s=0.25) as site:   # every answer a quarter of a second late
        ...

The stdlib's ThreadingHTTPServer and SimpleHTTPRequestHandler on a free loopback port, in a
thread: no framework, no network. Real pages (20-300 KB, hundreds of links, one stylesheet)
cost a browser more than the test site's few lines, which is the point of serving them.
"""

from __future__ import annotations

import functools
import itertools
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

DEFAULT_ROOT = Path("/usr/share/doc/postgresql-doc-15/html")
INSTALL_HINT = "apt-get install postgresql-doc-15"


class DocSiteMissing(SystemExit):
    """The manual is not installed: one line that says how to get it (exits the benchmark)."""


class _QuietHandler(SimpleHTTPRequestHandler):
    """Serves files without a log line per request (thousands per run)."""

    latency_s = 0.0

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def send_head(self) -> Any:
        # A real site answers after its network's and its server's time, not at once: a page
        # whose browser waits leaves the host CPU to spare, as a crawl of the web does.
        if self.latency_s:
            time.sleep(self.latency_s)
        return super().send_head()


class _QuietServer(ThreadingHTTPServer):
    """A browser that moved on before a late answer (a favicon's 404) is not an error."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class DocSite:
    def __init__(self, root: Path = DEFAULT_ROOT, latency_s: float = 0.0) -> None:
        self.root = Path(root)
        self.latency_s = latency_s
        if not self.root.is_dir():
            raise DocSiteMissing(
                f"no documentation site at {self.root}: run `{INSTALL_HINT}` (Debian/Ubuntu)"
            )
        self._names = sorted(p.name for p in self.root.glob("*.html"))
        if not self._names:
            raise DocSiteMissing(f"no *.html pages in {self.root}: run `{INSTALL_HINT}`")
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the documentation site is not started")
        return int(self._server.server_address[1])

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def pages(self, count: int) -> list[str]:
        """``count`` page URLs: the sorted page names from the first, cycled when ``count``
        exceeds them, so that every run of a benchmark fetches the same pages in order."""
        return [self.url(name) for name in itertools.islice(itertools.cycle(self._names), count)]

    def start(self) -> None:
        handler_class = type("_Handler", (_QuietHandler,), {"latency_s": self.latency_s})
        handler = functools.partial(handler_class, directory=str(self.root))
        # Port 0: a free port chosen by the kernel, so two runs never collide.
        self._server = _QuietServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True  # a browser's kept-alive connection never blocks exit
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="doc-site", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()  # returns once serve_forever has (it polls every 0.5 s)
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
        self._server = self._thread = None

    def __enter__(self) -> DocSite:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
