"""A small threaded HTTP proxy on 127.0.0.1 that records what passes through it.

It forwards plain requests (``GET http://host/path``) and tunnels ``CONNECT``, and may demand
Basic credentials (407 with ``Proxy-Authenticate``), so that tests can see a browser answer the
challenge. Each forwarded request is recorded with its headers; only loopback targets are
forwarded (tests never send traffic anywhere else).
"""

from __future__ import annotations

import base64
import contextlib
import select
import socket
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TUNNEL_IDLE_S = 30.0
LOOPBACK = ("127.0.0.1", "localhost")
# Pages behind the proxy are named <anything>.test: the proxy, not the browser, resolves them (to
# 127.0.0.1), and Chromium never sends loopback addresses through a proxy.
TEST_DOMAIN = ".test"


def _target(host: str | None) -> str | None:
    """Where a request for ``host`` goes: only loopback, whatever the name."""
    if host in LOOPBACK or (host or "").endswith(TEST_DOMAIN):
        return "127.0.0.1"
    return None


@dataclass
class Seen:
    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)

    def header(self, name: str) -> str | None:
        for key, value in self.headers.items():
            if key.lower() == name.lower():
                return value
        return None


class RecordingProxy:
    def __init__(self, username: str | None = None, password: str | None = None) -> None:
        self.username = username
        self.password = password
        self.seen: list[Seen] = []
        self.challenged = 0  # 407 answers sent
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, scheme: str = "http") -> str:
        if self.username is None:
            return f"{scheme}://127.0.0.1:{self.port}"
        return f"{scheme}://{self.username}:{self.password}@127.0.0.1:{self.port}"

    def requests_to(self, path: str) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if urllib.parse.urlsplit(s.url).path == path]

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    def _count_challenge(self) -> None:
        with self._lock:
            self.challenged += 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _authorised(self) -> bool:
                if proxy.username is None:
                    return True
                expected = base64.b64encode(f"{proxy.username}:{proxy.password}".encode()).decode()
                if self.headers.get("Proxy-Authorization", "") == f"Basic {expected}":
                    return True
                proxy._count_challenge()
                self.send_response(407)
                self.send_header("Proxy-Authenticate", 'Basic realm="test"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return False

            def do_CONNECT(self) -> None:
                if not self._authorised():
                    return
                host, _, port = self.path.rpartition(":")
                address = _target(host)
                if address is None:
                    self.send_error(403)
                    return
                proxy._record(Seen("CONNECT", self.path, dict(self.headers.items())))
                try:
                    upstream = socket.create_connection((address, int(port)), timeout=5)
                except OSError:
                    self.send_error(502)
                    return
                self.send_response(200, "Connection established")
                self.end_headers()
                self.close_connection = True
                _pipe(self.connection, upstream)

            def _forward(self) -> None:
                if not self._authorised():
                    return
                parts = urllib.parse.urlsplit(self.path)
                address = _target(parts.hostname)
                if address is None:
                    self.send_error(403)
                    return
                headers = dict(self.headers.items())
                proxy._record(Seen(self.command, self.path, headers))
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                target = parts.path + (f"?{parts.query}" if parts.query else "")
                lines = [f"{self.command} {target or '/'} HTTP/1.1"]
                for name, value in headers.items():
                    if name.lower() not in (
                        "proxy-authorization",
                        "proxy-connection",
                        "connection",
                    ):
                        lines.append(f"{name}: {value}")
                lines.append("Connection: close")
                raw = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
                try:
                    with socket.create_connection((address, parts.port or 80), 5) as up:
                        up.sendall(raw)
                        answer = _read_all(up)
                except OSError:
                    self.send_error(502)
                    return
                self.close_connection = True
                self.wfile.write(answer)

            do_GET = _forward
            do_POST = _forward
            do_HEAD = _forward

        return Handler


def _read_all(sock: socket.socket) -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _pipe(client: socket.socket, upstream: socket.socket) -> None:
    with upstream:
        sockets = [client, upstream]
        while True:
            readable, _, _ = select.select(sockets, [], [], TUNNEL_IDLE_S)
            if not readable:
                return
            for sock in readable:
                other = upstream if sock is client else client
                with contextlib.suppress(OSError):
                    data = sock.recv(65536)
                    if not data:
                        return
                    other.sendall(data)
                    continue
                return
