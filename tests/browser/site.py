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
SLOW_PAGE_S = 1.0
HTML = "text/html; charset=utf-8"
WORKER = "self.addEventListener('fetch', () => {});"
LONG = (
    "<!doctype html><title>Long</title><body style='margin:0'>"
    "<h1 id='top'>top</h1><div style='height:4000px;background:linear-gradient(red,blue)'></div>"
    "<p id='bottom'>bottom</p></body>"
)

# Markup whose text and attributes Selenium reads in its own ways: hidden parts, blocks and
# line breaks, no-break spaces, form state, resolved URLs, boolean attributes.
VARIED = """<!doctype html><html><head><title>Varied</title></head><body>
<div id="blocks"><p>first   para</p><p>second <b>bold</b>&nbsp;tail</p>line<br>break</div>
<div id="hidden-parent">shown<span style="display:none">secret</span> end</div>
<p class="gone a b" style="display: none">invisible</p>
<p class="ghost" style="visibility:hidden">ghost</p>
<p class="faded" style="opacity:0">faded</p>
<a class="rel" href="../x/y?q=1#h">relative</a>
<img class="pic" src="/img.png" alt="a picture">
<input class="box" type="checkbox" checked>
<input class="unchecked" type="checkbox">
<input class="name" type="text" value="initial">
<select class="sel"><option value="1">one</option><option value="2" selected>two</option></select>
<button class="off" disabled>Off</button>
<pre class="pre">  indented
    more</pre>
<div class="offscreen" style="position:absolute; left:-5000px">far away</div>
<p class="empty"></p>
<ul class="nested"><li>a <ul><li>a.1</li></ul></li><li>b</li></ul>
<script>document.querySelector('.name').value = 'typed';</script>
</body></html>"""
LINKS = 2400


def links_page(count: int = LINKS) -> str:
    anchors = "\n".join(f'<a class="l" href="/page/{n}">link {n}</a>' for n in range(count))
    return f"<!doctype html><title>Links</title><body>{anchors}</body>"


# Pages answered at once: path -> status, body, headers, content type.
STATIC: dict[str, tuple[int, str, dict[str, str], str]] = {
    "/item": (200, ITEM, {}, HTML),
    "/redirect": (302, "", {"Location": "/item"}, HTML),
    "/plain": (200, PLAIN, {}, HTML),
    "/error": (500, ERROR, {}, HTML),
    "/long": (200, LONG, {}, HTML),
    "/varied": (200, VARIED, {}, HTML),
    "/links": (200, links_page(), {}, HTML),
    "/worker.js": (200, WORKER, {}, "text/javascript"),  # a service worker that does nothing
}


class LocalSite:
    def __init__(self) -> None:
        self.release_hung = threading.Event()
        self.cached_hits = 0  # requests that reached the server for /cached
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep pytest output clean
                pass

            def _send(
                self,
                status: int,
                body: str,
                headers: dict[str, str] | None = None,
                content_type: str = HTML,
            ) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(data)  # the browser gave up on a hung page long ago

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                if path in STATIC:
                    self._send(*STATIC[path])
                elif path == "/cached":  # a browser that kept it asks only once
                    site.cached_hits += 1
                    self._send(200, PLAIN, {"Cache-Control": "max-age=600"})
                elif path == "/slow":  # a page that takes a second to answer, like many do
                    site.release_hung.wait(SLOW_PAGE_S)
                    self._send(200, PLAIN)
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
