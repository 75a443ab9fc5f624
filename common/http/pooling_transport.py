"""The transport under the ``http_get`` client: a connection pool per proxy, and every socket
operation under the request's deadline and its egress rule.

A module of its own because it is the part of the client that never sees a job: it is handed
a request whose deadline and address rule the client set (``REQUEST_DEADLINE``,
``REQUEST_EGRESS``: context variables, since the pooled connections outlive any one request)
and a proxy (``PROXY_EXTENSION``), and it answers with a streamed response.

- **A pool per proxy** (direct is one more), the least recently used dropped past
  ``MAX_POOLS`` and closed once its last response is.
- **The deadline**: every read, write and connect is given only what is left of the request's
  deadline (common.http.deadline_transport), host names resolved in a helper thread so that a
  hung resolver counts too.
- **Egress**: a hop's addresses are checked by the request's rule (common.http.job_egress)
  where they are resolved, and the connection goes to those addresses and no others.
"""

from __future__ import annotations

import contextvars
import functools
import ssl
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

import httpcore
import httpx

from scrapefleet.common.http.deadline_transport import (
    DeadlineBackend,
    httpx_errors,
    resolve_within,
    system_addresses,
)
from scrapefleet.common.http.job_egress import Egress, EgressRefused

MAX_POOLS = 32  # distinct proxies (and direct) with a pool of their own
KEEPALIVE_CONNECTIONS = 32  # idle connections kept per pool
KEEPALIVE_EXPIRY_S = 30.0

PROXY_EXTENSION = "scrapefleet.proxy"  # the request's proxy URL, read by the transport

# The request's deadline (time.monotonic), set by the client for the whole of one fetch.
REQUEST_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "scrapefleet_http_deadline", default=None
)
# The request's address rule, read where its connections resolve their addresses.
REQUEST_EGRESS: contextvars.ContextVar[Egress | None] = contextvars.ContextVar(
    "scrapefleet_http_egress", default=None
)


class DeadlineExceeded(TimeoutError):
    """The request's whole deadline passed (raised as the httpx timeout of the operation)."""


def _request_deadline() -> float | None:
    return REQUEST_DEADLINE.get()


def _addresses(host: str, port: int, *, proxy: str | None) -> list[str]:
    """The host's addresses, resolved within the request's deadline and checked by its egress
    rule (``proxy``: the proxy this connection goes to, None for direct): the connection goes
    to these and no others, so what was checked is what is reached."""
    try:
        found = resolve_within(system_addresses, host, port, REQUEST_DEADLINE.get())
    except TimeoutError as exc:  # before OSError, which it is
        raise httpcore.ConnectTimeout(str(exc)) from None
    except (OSError, UnicodeError, ValueError) as exc:
        raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from None
    egress = REQUEST_EGRESS.get()
    if egress is not None and (proxy is None or egress.checks_proxy(proxy)):
        reason = egress.refusal(host, found)
        if reason is not None:
            raise EgressRefused(reason if proxy is None else f"{reason} (the job's proxy)")
    return [str(address) for address in found]


def split_proxy(proxy: str) -> tuple[str, tuple[str, str] | None]:
    """The proxy URL without its credentials, and the credentials (percent-decoded)."""
    parts = urlsplit(proxy)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    bare = urlunsplit((parts.scheme.lower(), netloc, "", "", ""))
    if parts.username is None:
        return bare, None
    return bare, (unquote(parts.username), unquote(parts.password or ""))


@dataclass
class _Pool:
    pool: httpcore.ConnectionPool | httpcore.HTTPProxy | httpcore.SOCKSProxy
    users: int = 0
    dropped: bool = False


class _ResponseStream(httpx.SyncByteStream):
    def __init__(self, response: httpcore.Response, request: httpx.Request, done: _Done) -> None:
        self._response = response
        self._request = request
        self._done = done

    def __iter__(self) -> Iterator[bytes]:
        with httpx_errors(self._request):
            yield from self._response.iter_stream()

    def close(self) -> None:
        try:
            self._response.close()
        finally:
            self._done()


class _Done:
    """Releases a pool once, however many times the response is closed."""

    def __init__(self, transport: PoolingTransport, entry: _Pool) -> None:
        self._transport = transport
        self._entry: _Pool | None = entry

    def __call__(self) -> None:
        entry, self._entry = self._entry, None
        if entry is not None:
            self._transport._release(entry)


class PoolingTransport(httpx.BaseTransport):
    """An httpx transport with a connection pool per proxy (the request's ``PROXY_EXTENSION``,
    None for direct), every connection under the request's deadline."""

    def __init__(self, ssl_context: ssl.SSLContext) -> None:
        self._ssl_context = ssl_context
        self._pools: OrderedDict[str | None, _Pool] = OrderedDict()
        self._lock = threading.Lock()

    def _new_pool(self, proxy: str | None) -> _Pool:
        # Its own backend: whether the address it connects to is checked depends on the proxy.
        backend = DeadlineBackend(functools.partial(_addresses, proxy=proxy), _request_deadline)
        if proxy is None:
            return _Pool(
                httpcore.ConnectionPool(
                    ssl_context=self._ssl_context,
                    max_connections=None,  # the consumer's threads bound the requests
                    max_keepalive_connections=KEEPALIVE_CONNECTIONS,
                    keepalive_expiry=KEEPALIVE_EXPIRY_S,
                    network_backend=backend,
                )
            )
        url, auth = split_proxy(proxy)
        if url.startswith("socks5"):
            return _Pool(
                httpcore.SOCKSProxy(
                    proxy_url=url,
                    proxy_auth=auth,
                    ssl_context=self._ssl_context,
                    max_connections=None,
                    max_keepalive_connections=KEEPALIVE_CONNECTIONS,
                    keepalive_expiry=KEEPALIVE_EXPIRY_S,
                    network_backend=backend,
                )
            )
        return _Pool(
            httpcore.HTTPProxy(
                proxy_url=url,
                proxy_auth=auth,
                ssl_context=self._ssl_context,
                # TLS to the proxy itself for an https:// proxy (refused for http://).
                proxy_ssl_context=self._ssl_context if url.startswith("https:") else None,
                max_connections=None,
                max_keepalive_connections=KEEPALIVE_CONNECTIONS,
                keepalive_expiry=KEEPALIVE_EXPIRY_S,
                network_backend=backend,
            )
        )

    def _acquire(self, proxy: str | None) -> _Pool:
        dropped: list[_Pool] = []
        with self._lock:
            entry = self._pools.get(proxy)
            if entry is None:
                entry = self._pools[proxy] = self._new_pool(proxy)
                while len(self._pools) > MAX_POOLS:
                    _, old = self._pools.popitem(last=False)
                    old.dropped = True
                    if old.users == 0:
                        dropped.append(old)
            self._pools.move_to_end(proxy)
            entry.users += 1
        for old in dropped:
            old.pool.close()
        return entry

    def _release(self, entry: _Pool) -> None:
        with self._lock:
            entry.users -= 1
            close = entry.dropped and entry.users == 0
        if close:
            entry.pool.close()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        proxy = request.extensions.get(PROXY_EXTENSION)
        url = request.url
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions={k: v for k, v in request.extensions.items() if k != PROXY_EXTENSION},
        )
        entry = self._acquire(proxy)
        try:
            with httpx_errors(request):
                core_response = entry.pool.handle_request(core_request)
        except BaseException:
            self._release(entry)
            raise
        return httpx.Response(
            status_code=core_response.status,
            headers=core_response.headers,
            stream=_ResponseStream(core_response, request, _Done(self, entry)),
            extensions=core_response.extensions,
        )

    def close(self) -> None:
        with self._lock:
            pools = list(self._pools.values())
            self._pools.clear()
        for entry in pools:
            entry.pool.close()
