"""A small test site on 127.0.0.1, served by a thread: pages that load, hang, fail, are long."""

from __future__ import annotations

import contextlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HANG_MAX_S = 120.0  # a hung request is released at teardown, or after this at the latest

ITEM = """<!doctype html><html><head><title>Widget 42</title></head><body>
<h1 class="name">Widget</h1>
<a class="more" href="/next">more</a>
<span class="price" data-currency="EUR">9.99</span>
<ul><li>red</li><li>green</li><li>blue</li></ul>
<script>setTimeout(() => {
  const p = document.createElement('p'); p.id = 'late'; p.textContent = 'arrived';
  document.body.appendChild(p);
}, 300);</script>
</body></html>"""

PLAIN = "<!doctype html><title>Plain</title><p>nothing awaited here</p>"
ERROR = "<!doctype html><title>Oops</title><h1>boom</h1>"
LONG = (
    "<!doctype html><title>Long</title><body style='margin:0'>"
    "<h1 id='top'>top</h1><div style='height:4000px;background:linear-gradient(red,blue)'></div>"
    "<p id='bottom'>bottom</p></body>"
)


class LocalSite:
    def __init__(self) -> None:
        self.release_hung = threading.Event()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep pytest output clean
                pass

            def _send(self, status: int, body: str, headers: dict[str, str] | None = None) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(data)  # the browser gave up on a hung page long ago

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                if path == "/item":
                    self._send(200, ITEM)
                elif path == "/redirect":
                    self._send(302, "", {"Location": "/item"})
                elif path == "/plain":
                    self._send(200, PLAIN)
                elif path == "/error":
                    self._send(500, ERROR)
                elif path == "/long":
                    self._send(200, LONG)
                elif path == "/hang":
                    site.release_hung.wait(HANG_MAX_S)
                    self._send(200, PLAIN)
                else:
                    self._send(404, "<title>Not found</title>")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    def __enter__(self) -> LocalSite:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release_hung.set()
        self.server.shutdown()
        self.server.server_close()
