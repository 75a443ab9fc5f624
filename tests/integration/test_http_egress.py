"""The egress rule of consumers' HTTP jobs, against real servers on loopback addresses:
internal addresses refused unless allowed (also after a redirect, also for a job's proxy), the
connection made to the address that was checked, and a job's headers and cookies sent to its
own site only.

127.0.0.1 and 127.0.0.2 are both loopback; a test allows one and not the other. No database."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from scrapefleet.common.actions.builtin import HttpGetParams, http_get
from scrapefleet.common.http import client as http_client
from scrapefleet.common.http import pooling_transport
from scrapefleet.common.http.address_policy import parse_networks
from scrapefleet.common.http.job_egress import Egress, EgressRefused

pytestmark = pytest.mark.timeout(30)


@dataclass
class Site:
    address: str
    port: int = 0
    routes: dict[str, str] = field(default_factory=dict)  # path -> a 302 to this location
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def url(self, path: str = "/", host: str | None = None) -> str:
        return f"http://{host or self.address}:{self.port}{path}"


@pytest.fixture(autouse=True)
def fresh_client() -> Iterator[None]:
    http_client.close_shared_client()
    yield
    http_client.close_shared_client()


@pytest.fixture
def serve() -> Iterator[Callable[..., Site]]:
    servers: list[ThreadingHTTPServer] = []

    def start(address: str, **routes: str) -> Site:
        site = Site(address, routes={f"/{name}": to for name, to in routes.items()})

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                if self.path in site.routes:
                    self.send_response(302)
                    self.send_header("Location", site.routes[self.path])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = b"<title>ok</title>"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer((address, 0), Handler)
        site.port = server.server_address[1]
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return site

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _fetch(url: str, allowed: list[str], **kwargs: Any) -> http_client.Fetched:
    return http_client.fetch(
        url,
        timeout_s=10,
        max_body_bytes=1024,
        user_agent="egress-test",
        egress=Egress(parse_networks(allowed), kwargs.pop("trusted_proxy", None)),
        **kwargs,
    )


def test_an_http_job_reaches_no_internal_address_by_default(
    serve: Callable[..., Site], monkeypatch: pytest.MonkeyPatch
) -> None:
    site = serve("127.0.0.1")
    monkeypatch.delenv("SCRAPEFLEET_HTTP_ALLOW_NETWORKS", raising=False)  # the default
    with pytest.raises(EgressRefused) as refused:
        http_get(HttpGetParams(url=site.url("/secret")))
    assert str(refused.value).startswith(
        "refused: 127.0.0.1 is loopback; add it to http_allow_networks to allow"
    )
    # One line of settings lets it through.
    monkeypatch.setenv("SCRAPEFLEET_HTTP_ALLOW_NETWORKS", "127.0.0.1/32")
    assert http_get(HttpGetParams(url=site.url("/page")))["title"] == "ok"
    assert [path for path, _ in site.seen] == ["/page"]


def test_a_redirect_to_an_internal_address_is_refused(serve: Callable[..., Site]) -> None:
    inside = serve("127.0.0.2")
    start = serve("127.0.0.1", start=inside.url("/metadata"))
    with pytest.raises(EgressRefused, match=r"127\.0\.0\.2 is loopback"):
        _fetch(start.url("/start"), ["127.0.0.1/32"])
    assert [path for path, _ in start.seen] == ["/start"]
    assert inside.seen == []  # never connected


def test_the_connection_goes_to_the_address_that_was_checked(
    serve: Callable[..., Site], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name whose next DNS answer turns internal (rebinding) is asked once: the request
    goes to the first, checked answer."""
    checked, internal = serve("127.0.0.1"), serve("127.0.0.2")
    answers = iter(["127.0.0.1", "127.0.0.2", "127.0.0.2"])
    asked: list[str] = []
    real = pooling_transport.system_addresses

    def rebinding(host: str, port: int) -> list[Any]:
        asked.append(host)
        return real(next(answers), port)

    monkeypatch.setattr(pooling_transport, "system_addresses", rebinding)
    fetched = _fetch(checked.url("/page", host="rebind.test"), ["127.0.0.1/32"])
    assert fetched.status == 200
    assert asked == ["rebind.test"]
    assert [path for path, _ in checked.seen] == ["/page"]
    assert internal.seen == []


def test_a_jobs_headers_and_cookies_go_to_its_own_site_only(
    serve: Callable[..., Site], monkeypatch: pytest.MonkeyPatch
) -> None:
    """site.test/start -> sub.site.test/sub (same server, another origin) -> 127.0.0.2/hop
    -> site.test/back: the job's headers and cookie at the start and back, nowhere else."""
    names = {"site.test": "127.0.0.1", "sub.site.test": "127.0.0.1"}
    real = pooling_transport.system_addresses
    monkeypatch.setattr(
        pooling_transport, "system_addresses", lambda host, port: real(names.get(host, host), port)
    )
    job_site, other = serve("127.0.0.1"), serve("127.0.0.2")
    job_site.routes["/start"] = job_site.url("/sub", host="sub.site.test")
    job_site.routes["/sub"] = other.url("/hop")
    other.routes["/hop"] = job_site.url("/back", host="site.test")
    fetched = _fetch(
        job_site.url("/start", host="site.test"),
        ["127.0.0.0/8"],
        headers={"X-Api-Key": "k1", "Authorization": "Bearer t1"},
        cookies={"sid": "s1"},
    )
    assert fetched.status == 200
    seen = dict(job_site.seen + other.seen)
    assert list(seen) == ["/start", "/sub", "/back", "/hop"]
    for path in ("/start", "/back"):
        assert seen[path]["x-api-key"] == "k1"
        assert seen[path]["authorization"] == "Bearer t1"
        assert seen[path]["cookie"] == "sid=s1"
    for path in ("/sub", "/hop"):
        assert not {"x-api-key", "authorization", "cookie"} & set(seen[path]), path


def test_a_jobs_proxy_on_an_internal_address_is_refused_the_hosts_own_is_not(
    serve: Callable[..., Site],
) -> None:
    site = serve("127.0.0.1")
    proxy = "http://127.0.0.2:9/"  # nothing listens: only the refusal differs
    with pytest.raises(EgressRefused, match=r"127.0.0.2 is loopback.*\(the job's proxy\)"):
        _fetch(site.url("/page"), ["127.0.0.1/32"], proxy=proxy)
    with pytest.raises(RuntimeError) as failed:  # the host's own proxy: tried, not refused
        _fetch(site.url("/page"), ["127.0.0.1/32"], proxy=proxy, trusted_proxy=proxy)
    assert not isinstance(failed.value, EgressRefused)
    # A target written as an address is checked even through the host's proxy.
    with pytest.raises(EgressRefused, match=r"10\.0\.0\.1 is private"):
        _fetch("http://10.0.0.1/", [], proxy=proxy, trusted_proxy=proxy)
