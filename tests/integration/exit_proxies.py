"""Forwarding HTTP proxies on their own loopback addresses (127.0.0.2, 127.0.0.3, ...) and a site
that sees which of them a request came through, for the proxy pool tests.

Each proxy listens on its own address and opens its connection to the site *from* that address
(the socket is bound before it connects), so the site sees the proxy's exit address as its
client, as a real site sees a real proxy's. The proxies demand Basic credentials (a 407
otherwise) and forward plain ``GET http://<name>.test:<port>/...`` to 127.0.0.1 only.

The site answers every page after a short pause, counts requests and requests at once per
client address, and refuses (403) an address once it has made its quota of requests: the
block a proxy pool must rotate away from. It gives each visitor that comes without its cookie
one (``visitor=vN``) and logs which cookie and User-Agent each page came with: what a site
that ties a visitor to its cookies sees of a sticky session.
"""

from __future__ import annotations

import base64
import http.client
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

TEST_DOMAIN = ".test"


@dataclass
class SiteLog:
    requests: Counter[str] = field(default_factory=Counter)
    blocked: Counter[str] = field(default_factory=Counter)
    now: Counter[str] = field(default_factory=Counter)  # requests being answered, per address
    most_at_once: Counter[str] = field(default_factory=Counter)
    times: dict[str, list[float]] = field(default_factory=dict)  # each request's arrival
    by_site: dict[str, Counter[str]] = field(default_factory=dict)  # Host name -> addresses
    # Each page answered, in order: (Host name, address, the visitor cookie it came with or
    # None, the visitor cookie it was given or None, User-Agent).
    visits: list[tuple[str, str, str | None, str | None, str]] = field(default_factory=list)


class BlockingSite:
    """``quota``: address -> requests it may make before every later one is refused (403)."""

    def __init__(self, quota: dict[str, int], pause_s: float = 0.03) -> None:
        self.quota = quota
        self.pause_s = pause_s
        self.log = SiteLog()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, path: str, name: str = "site") -> str:
        return f"http://{name}{TEST_DOMAIN}:{self.port}{path}"

    def __enter__(self) -> BlockingSite:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _arrive(self, address: str, site: str) -> bool:
        """Counted; whether the address is refused."""
        with self._lock:
            log = self.log
            log.by_site.setdefault(site, Counter())[address] += 1
            log.requests[address] += 1
            log.times.setdefault(address, []).append(time.monotonic())
            log.now[address] += 1
            log.most_at_once[address] = max(log.most_at_once[address], log.now[address])
            refused = log.requests[address] > self.quota.get(address, 10**9)
            if refused:
                log.blocked[address] += 1
            return refused

    @staticmethod
    def _visitor(cookie_header: str) -> str | None:
        for part in cookie_header.split(";"):
            name, _, value = part.strip().partition("=")
            if name == "visitor":
                return value
        return None

    def _leave(self, address: str) -> None:
        with self._lock:
            self.log.now[address] -= 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/favicon.ico":
                    # A browser asks for it after the page, from its own timing: not a visit
                    # (it would overlap the next job's through the same exit).
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                address = self.client_address[0]
                name = (self.headers.get("Host") or "").rpartition(":")[0]
                refused = site._arrive(address, name)
                try:
                    time.sleep(site.pause_s)
                    status, title = (403, "Access denied") if refused else (200, "Welcome")
                    links = ""
                    if self.path == "/hub" and not refused:  # a page for a crawl to follow
                        links = "".join(f'<a href="/leaf/{n}">{n}</a>' for n in range(3))
                    body = (
                        f"<html><head><title>{title}</title></head><body>{links}</body></html>"
                    ).encode()
                    came_with = site._visitor(self.headers.get("Cookie") or "")
                    given = None if came_with else f"v{len(site.log.visits)}"
                    site.log.visits.append(
                        (name, address, came_with, given, self.headers.get("User-Agent") or "")
                    )
                    self.send_response(status)
                    if given:  # a visitor the site has not seen: it gives it a cookie
                        self.send_header("Set-Cookie", f"visitor={given}; Path=/")
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                finally:
                    site._leave(address)

        return Handler


class ExitProxy:
    """A forwarding proxy on ``address`` that goes out from ``address`` too."""

    def __init__(self, address: str, username: str, password: str) -> None:
        self.address = address
        self.username = username
        self.password = password
        self.forwarded = 0
        self.challenged = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((address, 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.username}:{self.password}@{self.address}:{self.port}"

    @property
    def bare_url(self) -> str:
        return f"http://{self.address}:{self.port}"

    def __enter__(self) -> ExitProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self
        expected = "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode(
            "ascii"
        )

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.headers.get("Proxy-Authorization") != expected:
                    with proxy._lock:
                        proxy.challenged += 1
                    self.send_response(407)
                    self.send_header("Proxy-Authenticate", 'Basic realm="exit"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                target = urllib.parse.urlsplit(self.path)
                if not (target.hostname or "").endswith(TEST_DOMAIN) or target.port is None:
                    self.send_response(502)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                upstream = http.client.HTTPConnection(
                    "127.0.0.1", target.port, timeout=10, source_address=(proxy.address, 0)
                )
                try:
                    path = target.path + (f"?{target.query}" if target.query else "")
                    hop = {"proxy-authorization", "proxy-connection", "connection", "host"}
                    sent = {k: v for k, v in self.headers.items() if k.lower() not in hop}
                    upstream.request("GET", path or "/", headers={**sent, "Host": target.netloc})
                    answer = upstream.getresponse()
                    body = answer.read()
                finally:
                    upstream.close()
                with proxy._lock:
                    proxy.forwarded += 1
                self.send_response(answer.status)
                for name in ("Content-Type", "Set-Cookie"):
                    if answer.getheader(name):
                        self.send_header(name, answer.getheader(name) or "")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler


@contextmanager
def exit_proxies(addresses: Sequence[str], user: str, password: str) -> Iterator[list[ExitProxy]]:
    """One ExitProxy per address (users ``<user>0``, ``<user>1``...), all stopped at the end."""
    with ExitStack() as stack:
        yield [
            stack.enter_context(ExitProxy(address, f"{user}{n}", password))
            for n, address in enumerate(addresses)
        ]


def job_rows(engine: Engine, ids: list[int]) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT * FROM jobs WHERE id = ANY(:ids)"), {"ids": ids})
        return [dict(r._mapping) for r in rows]


def all_finished(engine: Engine, ids: list[int]) -> bool:
    return all(j["status"] in ("completed", "failed") for j in job_rows(engine, ids))
