"""http_get against real HTTP servers on 127.0.0.1: what the job sends arrives, what the page
says comes back, redirects, one deadline over the whole request, a bounded body, a proxy.

No database: these need loopback sockets only."""

from __future__ import annotations

import base64
import contextlib
import gzip
import http.client
import json
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest

from scrapefleet.common.actions.builtin import HttpGetParams, http_get
from scrapefleet.common.http import client as http_client
from scrapefleet.common.http import pooling_transport, response_body
from tests.waiting import scaled, wait_for

pytestmark = pytest.mark.timeout(30)

TITLE_HTML = b"<html><head><title>os &#8212; Misc &amp; more</title></head><body>hi</body></html>"


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    client_port: int


@dataclass
class Server:
    url: str
    seen: list[Seen] = field(default_factory=list)


Route = Callable[[BaseHTTPRequestHandler], None]


def _send(
    handler: BaseHTTPRequestHandler,
    status: int,
    body: bytes,
    headers: dict[str, str] | None = None,
) -> None:
    handler.send_response(status)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@pytest.fixture(autouse=True)
def fresh_client() -> Iterator[None]:
    """Each test starts and ends with no pooled connection from another test."""
    http_client.close_shared_client()
    yield
    http_client.close_shared_client()


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    """Set at teardown: a slow handler stops pacing itself."""
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def serve(stop: threading.Event) -> Iterator[Callable[[dict[str, Route]], Server]]:
    servers: list[ThreadingHTTPServer] = []

    def start(routes: dict[str, Route]) -> Server:
        record: list[Seen] = []

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, so the client's pool is used

            def do_GET(self) -> None:
                path = urlsplit(self.path).path
                record.append(Seen(self.path, dict(self.headers), self.client_address[1]))
                route = routes.get(path)
                if route is None:
                    _send(self, 404, b"<title>Not found</title>")
                else:
                    route(self)

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        servers.append(server)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        return Server(f"http://127.0.0.1:{server.server_port}", record)

    yield start
    stop.set()
    for server in servers:
        server.shutdown()
        server.server_close()


def _get(url: str, **params: Any) -> dict[str, Any]:
    return http_get(HttpGetParams(url=url, **params))


def test_what_the_job_sends_arrives_and_the_page_comes_back(serve: Any) -> None:
    def page(handler: BaseHTTPRequestHandler) -> None:
        _send(
            handler,
            200,
            TITLE_HTML,
            {
                "Content-Type": "text/html; charset=utf-8",
                "X-Served-By": "test",
                "Set-Cookie": "s=1",
            },
        )

    site = serve({"/page": page})
    result = _get(
        f"{site.url}/page",
        user_agent="Mozilla/5.0 (scrapefleet test)",
        headers={"Accept-Language": "fr-FR", "X-Trace": "abc"},
        cookies={"session": "s3cr3t", "consent": "yes"},
    )
    assert result["status"] == 200
    assert result["final_url"] == f"{site.url}/page"
    assert result["title"] == "os \u2014 Misc & more"
    assert result["bytes"] == len(TITLE_HTML)
    assert result["truncated"] is False
    assert result["headers"]["content-type"] == "text/html; charset=utf-8"
    assert result["headers"]["x-served-by"] == "test"
    assert result["headers"]["set-cookie"] == "s=1"
    [seen] = site.seen
    assert seen.headers["User-Agent"] == "Mozilla/5.0 (scrapefleet test)"
    assert seen.headers["Accept-Language"] == "fr-FR"
    assert seen.headers["X-Trace"] == "abc"
    cookies = sorted(part.strip() for part in seen.headers["Cookie"].split(";"))
    assert cookies == ["consent=yes", "session=s3cr3t"]


def test_the_hosts_defaults_apply_and_the_jobs_own_win(
    serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = serve({"/page": lambda h: _send(h, 200, TITLE_HTML)})
    monkeypatch.setenv("SCRAPEFLEET_HTTP_USER_AGENT", "fleet-default/1.0")
    _get(f"{site.url}/page")
    _get(f"{site.url}/page", user_agent="job-own/2.0")
    assert [s.headers["User-Agent"] for s in site.seen] == ["fleet-default/1.0", "job-own/2.0"]


def test_no_cookie_is_kept_from_one_job_to_the_next(serve: Any) -> None:
    site = serve({"/set": lambda h: _send(h, 200, b"", {"Set-Cookie": "tracker=1; Path=/"})})
    _get(f"{site.url}/set", cookies={"mine": "1"})
    _get(f"{site.url}/set")
    assert "Cookie" in site.seen[0].headers
    assert "Cookie" not in site.seen[1].headers


def test_connections_are_pooled_across_jobs(serve: Any) -> None:
    site = serve({"/page": lambda h: _send(h, 200, TITLE_HTML)})
    for _ in range(3):
        _get(f"{site.url}/page")
    assert len({seen.client_port for seen in site.seen}) == 1


def test_redirects_give_the_final_url_and_carry_the_cookies(serve: Any) -> None:
    def hop(target: str, cookie: str | None = None) -> Route:
        def route(handler: BaseHTTPRequestHandler) -> None:
            headers = {"Location": target}
            if cookie:
                headers["Set-Cookie"] = cookie
            _send(handler, 302, b"", headers)

        return route

    site = serve(
        {
            "/start": hop("/middle", "set_by_redirect=1; Path=/"),
            "/middle": hop("/landing?x=1"),
            "/landing": lambda h: _send(h, 200, b"<title>Landed</title>"),
        }
    )
    result = _get(f"{site.url}/start", cookies={"session": "abc"})
    assert result["status"] == 200
    assert result["final_url"] == f"{site.url}/landing?x=1"
    assert result["title"] == "Landed"
    assert [s.path for s in site.seen] == ["/start", "/middle", "/landing?x=1"]
    landing_cookies = sorted(p.strip() for p in site.seen[-1].headers["Cookie"].split(";"))
    assert landing_cookies == ["session=abc", "set_by_redirect=1"]


def test_a_redirect_loop_fails(serve: Any) -> None:
    site = serve({"/loop": lambda h: _send(h, 302, b"", {"Location": "/loop"})})
    with pytest.raises(RuntimeError, match="more than 10 redirects"):
        _get(f"{site.url}/loop")


def test_http_errors_keep_their_semantics(serve: Any) -> None:
    site = serve({"/broken": lambda h: _send(h, 500, b"<title>Oops</title>")})
    with pytest.raises(RuntimeError, match=f"^{re.escape(f'HTTP 500 from {site.url}/broken')}$"):
        _get(f"{site.url}/broken")
    result = _get(f"{site.url}/broken", fail_on_status=False)
    assert (result["status"], result["title"]) == (500, "Oops")
    missing = _get(f"{site.url}/nowhere", fail_on_status=False)
    assert (missing["status"], missing["title"]) == (404, "Not found")


def test_a_refused_connection_fails_the_attempt() -> None:
    with pytest.raises(RuntimeError, match=re.escape("ConnectError fetching http://127.0.0.1:9/")):
        _get("http://127.0.0.1:9/", timeout_s=5)


def test_a_slow_body_is_cut_at_the_total_deadline(serve: Any, stop: threading.Event) -> None:
    """A byte every 50 ms never trips a per-read timeout; the request's deadline cuts it."""

    def trickle(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", "1000000")
        handler.end_headers()
        handler.wfile.write(b"<title>slow</title>")
        handler.wfile.flush()
        try:
            while not stop.wait(0.05):
                handler.wfile.write(b"x")
                handler.wfile.flush()
        except OSError:
            pass  # the client hung up: what the test wants

    site = serve({"/slow": trickle})
    deadline_s = 1.0
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=f"within {deadline_s} s"):
        _get(f"{site.url}/slow", timeout_s=deadline_s)
    elapsed = time.monotonic() - started
    assert deadline_s * 0.9 <= elapsed < deadline_s + scaled(1.0)


def test_a_slow_answer_is_cut_at_the_total_deadline(serve: Any, stop: threading.Event) -> None:
    def silent(handler: BaseHTTPRequestHandler) -> None:
        stop.wait(scaled(20))

    site = serve({"/silent": silent})
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        _get(f"{site.url}/silent", timeout_s=0.5)
    assert time.monotonic() - started < 0.5 + scaled(1.0)


def test_a_body_over_the_cap_is_cut(serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    big = b"<title>Big</title>" + b"x" * 200_000
    site = serve({"/big": lambda h: _send(h, 200, big)})
    monkeypatch.setenv("SCRAPEFLEET_HTTP_MAX_BODY_BYTES", "4096")
    result = _get(f"{site.url}/big")
    assert (result["bytes"], result["truncated"], result["title"]) == (4096, True, "Big")
    exact = _get(f"{site.url}/big", fail_on_status=True)
    assert exact["bytes"] == 4096
    monkeypatch.setenv("SCRAPEFLEET_HTTP_MAX_BODY_BYTES", str(len(big)))
    whole = _get(f"{site.url}/big")
    assert (whole["bytes"], whole["truncated"]) == (len(big), False)


def test_a_compressed_body_is_decoded_and_cut_after_decoding(
    serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A few kilobytes of gzip that expand to 20 MB stop at the cap, not in memory."""
    bomb = gzip.compress(b"<title>Zipped &amp; small</title>" + b"\0" * 20_000_000)
    assert len(bomb) < 100_000
    site = serve({"/bomb": lambda h: _send(h, 200, bomb, {"Content-Encoding": "gzip"})})
    monkeypatch.setenv("SCRAPEFLEET_HTTP_MAX_BODY_BYTES", "65536")
    result = _get(f"{site.url}/bomb")
    assert (result["bytes"], result["truncated"]) == (65536, True)
    assert result["title"] == "Zipped & small"
    assert "gzip" in site.seen[0].headers["Accept-Encoding"]


def test_the_headers_in_the_result_are_bounded(serve: Any) -> None:
    # Within h11's 16 KiB for a response head, which bounds what any server can send.
    many = {"X-Long": "v" * 3000, **{f"X-H{n:03}": "v" * 60 for n in range(80)}}
    site = serve({"/many": lambda h: _send(h, 200, b"", many)})
    headers = _get(f"{site.url}/many")["headers"]
    assert len(headers) == response_body.RESULT_MAX_HEADERS
    assert all(len(value) <= response_body.RESULT_HEADER_CHARS for value in headers.values())


# -- through a proxy -------------------------------------------------------------------------------


@dataclass
class Proxy:
    url: str
    seen: list[Seen]


@pytest.fixture
def forward_proxy() -> Iterator[Proxy]:
    """A tiny forwarding HTTP proxy: takes absolute-form GETs, fetches them itself, adds a Via
    header on the way in, answers 407 without the right credentials."""
    record: list[Seen] = []
    expected_auth = "Basic " + base64.b64encode(b"fleet:p@ss").decode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            record.append(Seen(self.path, dict(self.headers), self.client_address[1]))
            if self.headers.get("Proxy-Authorization") != expected_auth:
                _send(self, 407, b"", {"Proxy-Authenticate": 'Basic realm="test"'})
                return
            target = urlsplit(self.path)
            forwarded = {
                k: v
                for k, v in self.headers.items()
                if k.lower() not in ("proxy-authorization", "connection", "proxy-connection")
            }
            forwarded["Via"] = "1.1 test-proxy"
            upstream = http.client.HTTPConnection(target.netloc, timeout=scaled(10))
            try:
                upstream.request("GET", target.path or "/", headers=forwarded)
                answer = upstream.getresponse()
                body = answer.read()
                headers = {
                    k: v
                    for k, v in answer.getheaders()
                    if k.lower() not in ("content-length", "connection", "transfer-encoding")
                }
                _send(self, answer.status, body, headers)
            finally:
                upstream.close()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield Proxy(f"http://127.0.0.1:{server.server_port}", record)
    server.shutdown()
    server.server_close()


def _echo(handler: BaseHTTPRequestHandler) -> None:
    body = json.dumps(dict(handler.headers)).encode()
    _send(handler, 200, b"<title>via proxy</title>" + body, {"X-Origin": "yes"})


def test_the_jobs_proxy_is_used(serve: Any, forward_proxy: Proxy) -> None:
    site = serve({"/echo": _echo})
    proxy = forward_proxy.url.replace("http://", "http://fleet:p%40ss@")
    result = _get(f"{site.url}/echo", proxy=proxy, cookies={"session": "abc"})
    assert result["status"] == 200
    assert result["title"] == "via proxy"
    assert result["headers"]["x-origin"] == "yes"
    [through] = forward_proxy.seen
    assert through.path == f"{site.url}/echo"  # absolute form: a proxy request
    [arrived] = site.seen
    assert arrived.headers["Via"] == "1.1 test-proxy"
    assert arrived.headers["Cookie"] == "session=abc"


def test_the_hosts_proxy_is_used_unless_the_job_names_one(
    serve: Any, forward_proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = serve({"/echo": _echo})
    monkeypatch.setenv(
        "SCRAPEFLEET_HTTP_PROXY", forward_proxy.url.replace("http://", "http://fleet:p%40ss@")
    )
    _get(f"{site.url}/echo")
    assert len(forward_proxy.seen) == 1
    assert site.seen[0].headers["Via"] == "1.1 test-proxy"


def test_wrong_proxy_credentials_are_an_http_error(serve: Any, forward_proxy: Proxy) -> None:
    site = serve({"/echo": _echo})
    proxy = forward_proxy.url.replace("http://", "http://fleet:wrong@")
    with pytest.raises(RuntimeError, match="HTTP 407"):
        _get(f"{site.url}/echo", proxy=proxy)
    assert site.seen == []


@pytest.fixture
def socks5_proxy() -> Iterator[Proxy]:
    """A tiny SOCKS5 proxy (username/password auth, CONNECT only) relaying bytes both ways."""
    record: list[Seen] = []
    listener = socket.create_server(("127.0.0.1", 0))
    sockets: list[socket.socket] = [listener]

    def read(conn: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def handle(conn: socket.socket) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            _version, count = read(conn, 2)
            if 2 not in read(conn, count):
                conn.sendall(b"\x05\xff")
                return
            conn.sendall(b"\x05\x02")
            read(conn, 1)
            user = read(conn, read(conn, 1)[0]).decode()
            password = read(conn, read(conn, 1)[0]).decode()
            ok = (user, password) == ("fleet", "p@ss")
            conn.sendall(b"\x01\x00" if ok else b"\x01\x01")
            if not ok:
                return
            _v, _cmd, _rsv, atyp = read(conn, 4)
            if atyp == 1:
                host = socket.inet_ntoa(read(conn, 4))
            else:
                host = read(conn, read(conn, 1)[0]).decode()
            port = int.from_bytes(read(conn, 2), "big")
            record.append(Seen(f"{host}:{port}", {"user": user}, 0))
            upstream = socket.create_connection((host, port), timeout=scaled(10))
            upstream.settimeout(None)
            sockets.append(upstream)
            conn.sendall(b"\x05\x00\x00\x01\x00\x00\x00\x00\x00\x00")
            threading.Thread(target=pump, args=(upstream, conn), daemon=True).start()
            pump(conn, upstream)

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                sockets.append(conn)
                threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield Proxy(f"socks5://fleet:p%40ss@127.0.0.1:{listener.getsockname()[1]}", record)
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()


def test_a_socks5_proxy_is_used(serve: Any, socks5_proxy: Proxy) -> None:
    site = serve({"/echo": _echo})
    result = _get(f"{site.url}/echo", proxy=socks5_proxy.url)
    assert (result["status"], result["title"]) == (200, "via proxy")
    port = urlsplit(site.url).port
    assert [s.path for s in socks5_proxy.seen] == [f"127.0.0.1:{port}"]
    assert len(site.seen) == 1


def test_threads_share_one_client_and_its_pool(serve: Any) -> None:
    site = serve({"/page": lambda h: _send(h, 200, TITLE_HTML)})
    clients: set[int] = set()
    results: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(5):
            status = _get(f"{site.url}/page")["status"]
            with lock:
                clients.add(id(http_client.shared_client()))
                results.append(status)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(scaled(20))
    assert results == [200] * 40
    assert len(clients) == 1
    # Keep-alive: fewer connections than requests (at most one per thread at a time).
    assert len({seen.client_port for seen in site.seen}) <= 8


def test_a_dropped_proxy_pool_is_closed_once_its_last_response_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pooling_transport, "MAX_POOLS", 2)
    transport = pooling_transport.PoolingTransport(ssl.create_default_context())
    closed: list[str] = []

    def acquire(proxy: str) -> Any:
        entry = transport._acquire(proxy)
        monkeypatch.setattr(entry.pool, "close", lambda: closed.append(proxy))
        return entry

    held = acquire("http://a.invalid:1")  # a request through a is still being answered
    transport._release(acquire("http://b.invalid:1"))
    transport._release(acquire("http://c.invalid:1"))  # pushes a, the least recently used, out
    assert closed == []  # a's request is still running
    transport._release(held)
    assert closed == ["http://a.invalid:1"]
    transport.close()
    assert sorted(closed) == ["http://a.invalid:1", "http://b.invalid:1", "http://c.invalid:1"]


def test_a_cancelled_request_is_closed_at_once_on_the_site() -> None:
    """A given-up attempt's request is ended, not left to run: the site sees the connection
    closed, and the thread returns, as soon as another thread cancels it."""
    from scrapefleet.common.http.request_cancel import RequestCanceller, cancellable
    from tests.integration.request_log_site import request_log_site

    canceller = RequestCanceller()
    raised: list[BaseException] = []

    def attempt(url: str) -> None:
        with cancellable(canceller):
            try:
                _get(url, timeout_s=scaled(30))
            except BaseException as exc:
                raised.append(exc)

    with request_log_site() as (site, log):
        thread = threading.Thread(target=attempt, args=(f"{site}/stream?job=a&seconds=30",))
        thread.start()
        wait_for(lambda: log.of("a"), what="the request reached the site")
        canceller.cancel()
        thread.join(scaled(5))
        assert not thread.is_alive(), "the cancelled request's thread returned"
        wait_for(lambda: log.of("a")[0].ended is not None, what="the site saw the close")
        [request] = log.of("a")
        assert request.how == "closed by the client"
        assert request.ended is not None and request.ended - request.started < scaled(5)
    assert raised, "the cancelled request failed"
