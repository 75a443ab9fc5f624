"""Serve the dashboard with Werkzeug's threaded server (a few operators, not the internet).

``scrapefleet dashboard`` runs ``serve_forever`` in the foreground; tests run it in a thread
on port 0 and read the port back.
"""

from __future__ import annotations

import threading

from flask import Flask
from werkzeug.serving import BaseWSGIServer, make_server


class DashboardServer:
    def __init__(self, app: Flask, address: str, port: int) -> None:
        self._server: BaseWSGIServer = make_server(address, port, app, threaded=True)
        self.address = address
        self.port: int = self._server.server_port
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def start(self) -> DashboardServer:
        self._thread = threading.Thread(target=self.serve_forever, name="dashboard", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
