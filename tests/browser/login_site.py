"""A site on 127.0.0.1 with a login that lasts: ``/login?as=NAME`` sets a persistent cookie
(an hour), ``/whoami`` says whom the cookie names in its title (``who: NAME`` or
``who: nobody``), after ``?wait=S`` seconds when asked, so that a job lasts a while.
``/guarded`` is the same page, except for a login named ``banned``: a block page for it (403
and a ``#blocked`` marker)."""

from __future__ import annotations

import contextlib
import html
import time
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread
from urllib.parse import parse_qs, urlsplit

COOKIE = "login"
MAX_WAIT_S = 5.0


class LoginSite:
    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep pytest output clean
                pass

            def _send(
                self, title: str, headers: dict[str, str] | None = None, status: int = 200
            ) -> None:
                body = '<p id="blocked">access denied' if status == 403 else "<p>ok"
                data = f"<!doctype html><title>{html.escape(title)}</title>{body}".encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(data)

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                if parts.path == "/login":
                    name = query.get("as", "someone")
                    cookie = f"{COOKIE}={name}; Max-Age=3600; Path=/; SameSite=Lax"
                    self._send(f"logged in {name}", {"Set-Cookie": cookie})
                elif parts.path in ("/whoami", "/guarded"):
                    time.sleep(min(float(query.get("wait", 0)), MAX_WAIT_S))
                    jar = SimpleCookie(self.headers.get("Cookie", ""))
                    who = jar[COOKIE].value if COOKIE in jar else "nobody"
                    if parts.path == "/guarded" and who == "banned":
                        self._send("Access denied", status=403)
                    else:
                        self._send(f"who: {who}")
                else:
                    self.send_error(404)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str, host: str | None = None) -> str:
        """The page's URL on 127.0.0.1, or under ``host`` (a *.test name a proxy resolves)."""
        address, port = self.server.server_address[:2]
        return f"http://{host or address!s}:{port}{path}"

    def __enter__(self) -> LoginSite:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
