"""A test site on 127.0.0.1 that records every request it gets, with its headers.

``/page`` loads a stylesheet, an image and a script that is missing (404), and writes what the
page's JavaScript sees (user agent, language, time zone, cookies, viewport) into ``#probe``.
Every response carries a ``cf-ray`` header naming its path, the image an ``x-trace`` too.
"""

from __future__ import annotations

import threading
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PAGE = """<!doctype html><html><head><title>Evidence</title>
<link rel="stylesheet" href="/style.css"></head><body>
<img src="/pixel.png" alt="pixel"><p id="probe"></p>
<script>
document.getElementById('probe').textContent = JSON.stringify({
  ua: navigator.userAgent, language: navigator.language,
  tz: Intl.DateTimeFormat().resolvedOptions().timeZone, cookie: document.cookie,
  width: innerWidth, height: innerHeight});
</script>
<script src="/missing.js"></script>
</body></html>"""
# A 1x1 transparent PNG.
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)
PIXEL_TRACE = "pixel-trace-7"


@dataclass(frozen=True)
class Request:
    path: str
    headers: dict[str, str]

    def header(self, name: str) -> str | None:
        for key, value in self.headers.items():
            if key.lower() == name.lower():
                return value
        return None


def ray_of(path: str) -> str:
    return f"ray-{path.strip('/').replace('/', '-') or 'root'}"


class EvidenceSite:
    def __init__(self) -> None:
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def seen(self, path: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    def __enter__(self) -> EvidenceSite:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                path = urllib.parse.urlsplit(self.path).path
                with site._lock:
                    site.requests.append(Request(path, dict(self.headers.items())))
                status, kind, body, extra = 200, "text/html; charset=utf-8", b"", {}
                if path == "/page":
                    body = PAGE.encode()
                elif path == "/style.css":
                    kind, body = "text/css", b"body { margin: 0 }"
                elif path == "/pixel.png":
                    kind, body, extra = "image/png", PIXEL, {"X-Trace": PIXEL_TRACE}
                else:
                    status, body = 404, b"<!doctype html><title>Not found</title>"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.send_header("CF-Ray", ray_of(path))
                for name, value in extra.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

        return Handler
