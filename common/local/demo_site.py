"""A small website on 127.0.0.1 for the demo, tests and benchmarks.

/page/<n>   a page titled "Page <n>"
/flaky/<n>  answers 500 the first time it is asked for, 200 afterwards (to show retries)
/broken/<n> always 500
/item/<n>   a product page: "Widget <n>" and its price in ``.price`` (n.99); /item/0 is 404,
            "Product not found" (the scrapers tutorial, docs/scrapers.md, scrapes these)

Served on its own for the tutorial: ``python -m scrapefleet.common.local.demo_site --port 8321
--detach --pid-file site.pid`` (returns once it listens; the server runs on in the background).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType


def item_page(n: str) -> tuple[int, str]:
    if not n.isdigit() or int(n) == 0:
        return 404, "<html><head><title>Product not found</title></head><body></body></html>"
    return 200, (
        f"<html><head><title>Widget {int(n)}</title></head><body>"
        f'<h1>Widget {int(n)}</h1><span class="price">{int(n)}.99</span></body></html>'
    )


class DemoSite:
    def __init__(self, port: int = 0) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, body = site.answer(self.path)
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:  # keep the demo's terminal readable
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def answer(self, path: str) -> tuple[int, str]:
        kind, _, n = path.strip("/").partition("/")
        if kind == "flaky":
            with self._lock:
                first = path not in self._seen
                self._seen.add(path)
            if first:
                return 500, "<title>try again</title>"
        if kind == "broken":
            return 500, "<title>broken</title>"
        if kind == "item":
            return item_page(n)
        if kind in ("page", "flaky"):
            return (
                200,
                f"<html><head><title>Page {n}</title></head><body><h1>{n}</h1></body></html>",
            )
        return 404, "<title>not found</title>"

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (the tutorial's site on its own)."""
        self._server.serve_forever()

    def __enter__(self) -> DemoSite:
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The demo's website on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=0, help="default: any free port")
    parser.add_argument(
        "--detach", action="store_true", help="return once listening; serve in the background"
    )
    parser.add_argument("--pid-file", help="write the server's process id here (to stop it)")
    args = parser.parse_args(argv)
    site = DemoSite(args.port)  # listening from here: a detached parent returns only now
    if args.detach and (child := os.fork()) > 0:
        if args.pid_file:
            with open(args.pid_file, "w") as handle:
                handle.write(f"{child}\n")
        print(f"serving {site.url} (pid {child})", flush=True)
        os._exit(0)
    if args.pid_file and not args.detach:
        with open(args.pid_file, "w") as handle:
            handle.write(f"{os.getpid()}\n")
    if not args.detach:
        print(f"serving {site.url} (Ctrl-C stops it)", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        site.serve_forever()


if __name__ == "__main__":
    main()
