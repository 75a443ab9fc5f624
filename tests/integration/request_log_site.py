"""A loopback site that logs its own requests: when each began and ended, and how.

``/stream?job=J&seconds=S`` answers with a page whose title names the request's serial number
(``request 3``), sent slowly over S seconds; a client that closes the connection meanwhile ends
the request at once (the site notices at its next write or as soon as the socket reads EOF).
The log is the site's own view, the one a lock key is meant to protect: two requests of jobs
that share a key must never overlap in it.
"""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

CHUNKS_PER_S = 10


@dataclass
class Request:
    serial: int
    job: str
    started: float  # time.monotonic()
    ended: float | None = None
    how: str = "running"  # "running", "answered" or "closed by the client"


class RequestLog:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[Request] = []

    def begin(self, job: str) -> Request:
        with self.lock:
            request = Request(len(self.requests) + 1, job, time.monotonic())
            self.requests.append(request)
            return request

    def end(self, request: Request, how: str) -> None:
        with self.lock:
            request.ended, request.how = time.monotonic(), how

    def of(self, job: str) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.job == job]

    def overlaps(self) -> list[tuple[Request, Request]]:
        """Pairs of requests whose times overlap (a running one reaches to now)."""
        now = time.monotonic()
        with self.lock:
            spans = [(r, now if r.ended is None else r.ended) for r in self.requests]
        return [
            (a, b)
            for i, (a, a_end) in enumerate(spans)
            for b, b_end in spans[i + 1 :]
            if a.started < b_end and b.started < a_end
        ]


@contextmanager
def request_log_site() -> Iterator[tuple[str, RequestLog]]:
    """The site's base URL and its log, for the block's duration."""
    log = RequestLog()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            query = parse_qs(urlsplit(self.path).query)
            job = query.get("job", ["?"])[0]
            seconds = float(query.get("seconds", ["0"])[0])
            request = log.begin(job)
            chunks = max(1, int(seconds * CHUNKS_PER_S))
            head = f"<html><head><title>request {request.serial}</title></head><body>".encode()
            chunk = b"." * 64
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(head) + chunks * len(chunk)))
            self.end_headers()
            try:
                self.wfile.write(head)
                self.wfile.flush()
                for _ in range(chunks):
                    # Readable while a client sends nothing means it closed the connection.
                    readable, _, _ = select.select([self.connection], [], [], 1 / CHUNKS_PER_S)
                    if readable and not self.connection.recv(1):
                        log.end(request, "closed by the client")
                        return
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except OSError:
                log.end(request, "closed by the client")
                return
            log.end(request, "answered")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", log
    finally:
        server.shutdown()
        server.server_close()
