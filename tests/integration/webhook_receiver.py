"""A webhook receiver on 127.0.0.1 for tests: records every POST, fails the first N on demand."""

from __future__ import annotations

import ssl
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes
    answered: int  # the status code we answered with


class Receiver:
    def __init__(
        self,
        fail_first: int = 0,
        fail_code: int = 500,
        tls: ssl.SSLContext | None = None,
        hold: threading.Event | None = None,
    ) -> None:
        """``hold``: every POST is read, counted in ``arrived``, then answered only once the
        event is set (a slow receiver the test releases at its end)."""
        self.fail_first = fail_first
        self.fail_code = fail_code
        self.received: list[Received] = []
        self.arrived = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if hold is not None:
                    with receiver._lock:
                        receiver.arrived += 1
                    hold.wait(60)
                with receiver._lock:
                    code = receiver.fail_code if receiver.fail_first > 0 else 200
                    receiver.fail_first -= 1
                    receiver.received.append(Received(dict(self.headers), body, code))
                self.send_response(code)
                self.end_headers()
                self.wfile.write(b"ok" if code == 200 else b"try later")

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self._server.server_port}/hook"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def accepted(self) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.answered == 200]

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
