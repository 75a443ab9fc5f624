"""Serve the dashboard with waitress, a production WSGI server (a pool of threads, bounded
request sizes, no debugger), on loopback unless told otherwise.

``scrapefleet dashboard`` runs ``serve_forever`` in the foreground; tests run it in a thread
on port 0 and read the port back.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

from flask import Flask
from waitress import wasyncore
from waitress.server import create_server

from scrapefleet.common.ops.dashboard.security import is_loopback_literal

THREADS = 8  # a few operators' browsers, each opening a handful of connections


def is_loopback_address(address: str) -> bool:
    """Whether every address ``address`` resolves to is a loopback one (a name that does not
    resolve is not)."""
    literal = is_loopback_literal(address)
    if literal is not None:
        return literal
    try:
        infos = socket.getaddrinfo(address, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    return bool(infos) and all(is_loopback_literal(str(info[4][0])) for info in infos)


class DashboardServer:
    def __init__(self, app: Flask, address: str, port: int, threads: int = THREADS) -> None:
        trusts_proxies = bool(app.config["SCRAPEFLEET_SETTINGS"].dashboard_proxies)
        self._server: Any = create_server(
            app,
            host=address,
            port=port,
            threads=threads,
            ident="scrapefleet",
            # ProxyFix (set up by create_app) reads X-Forwarded-* when proxies are trusted;
            # otherwise waitress drops them before the application sees them.
            clear_untrusted_proxy_headers=not trusts_proxies,
        )
        self.address = address
        self.port: int = int(self._server.effective_port)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}"

    def serve_forever(self) -> None:
        self._server.run()

    def start(self) -> DashboardServer:
        self._thread = threading.Thread(target=self.serve_forever, name="dashboard", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        sockets = self._server._map
        if self._thread is not None and self._thread.is_alive():
            # Closed from inside the loop's own thread (the trigger runs it there): closing a
            # socket under another thread's select() would fail it with EBADF. An empty map
            # ends the loop.
            self._server.trigger.pull_trigger(lambda: wasyncore.close_all(sockets))
            self._thread.join(5)
        else:
            wasyncore.close_all(sockets)
        self._server.task_dispatcher.shutdown()
