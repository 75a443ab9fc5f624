"""One webhook POST: resolved once, checked by the egress policy, sent to the checked address,
and over by one deadline whatever the receiver does.

- The URL's host is resolved once (in a helper thread, so a hung resolver counts against the
  deadline too) and every address is checked (producer/webhooks/webhook_egress.py). The connection
  then goes to those addresses and no others: httpcore is given a network backend that ignores the
  name it is asked to connect to, while the request keeps its URL, so the Host header, TLS SNI and
  the certificate check still use the name. A DNS answer that changes after the check (rebinding)
  is never asked for.
- ``timeout_s`` bounds the whole POST: DNS, connect, TLS, sending, and the answer's status
  line and headers. httpx's own timeouts apply to each socket operation, so a receiver that
  sends one byte a second would never trip them; here every read and write is given only what
  is left of the deadline. The answer's body is never read: only the status code counts.
- Nothing the receiver says is kept beyond its status code: the error recorded for a failed
  POST is built here, one bounded line, and a refusal is marked permanent.
"""

from __future__ import annotations

import functools
import http
import ipaddress
import ssl
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import httpcore
import httpx

from scrapefleet.common.http.deadline_transport import (
    DeadlineBackend,
    httpx_errors,
    resolve_within,
    system_addresses,
)
from scrapefleet.producer.webhooks.webhook_egress import IPAddress, Network, first_refusal

ERROR_CHARS = 200  # of the one line kept in last_error

Resolver = Callable[[str, int], Sequence[IPAddress]]


@dataclass(frozen=True)
class PostResult:
    delivered: bool
    response_code: int | None
    error: str | None
    permanent: bool = False  # refused by policy: no later attempt can go differently


def system_resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to, in the resolver's order, without repeats."""
    return system_addresses(host, port)


def resolve_by(resolve: Resolver, host: str, port: int, deadline: float) -> list[IPAddress]:
    """``resolve(host, port)``, or TimeoutError once the deadline passes first."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        return resolve_within(resolve, host, port, deadline)


@functools.cache
def default_ssl_context() -> ssl.SSLContext:
    """The system's trust store, loaded once: a context per POST would reload it each time."""
    return ssl.create_default_context()


def post(
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    timeout_s: float,
    allowed: Sequence[Network],
    resolve: Resolver = system_resolve,
    ssl_context: ssl.SSLContext | None = None,
) -> PostResult:
    """One POST of ``body``; 2xx is delivered, anything else (a status, a refusal, the
    deadline) is a failure with a one-line reason."""
    deadline = time.monotonic() + timeout_s
    try:
        target = httpx.URL(url)
    except httpx.InvalidURL as exc:
        return PostResult(False, None, _line(f"bad URL: {exc}"), permanent=True)
    if target.scheme not in ("http", "https") or not target.host:
        return PostResult(False, None, "bad URL: not an http(s) URL with a host", permanent=True)
    port = target.port or (443 if target.scheme == "https" else 80)
    name = target.raw_host.decode("ascii")  # IDNA-encoded, what DNS knows
    try:
        addresses = resolve_by(resolve, name, port, deadline)
    except TimeoutError:  # before OSError, which it is
        return PostResult(False, None, f"timed out: resolving {name} took over {timeout_s} s")
    except (OSError, UnicodeError, ValueError) as exc:
        return PostResult(False, None, _line(f"cannot resolve {name}: {_reason(exc)}"))
    if not addresses:
        return PostResult(False, None, f"cannot resolve {name}: no address")
    refused = first_refusal(addresses, allowed, name)
    if refused is not None:
        return PostResult(False, None, refused, permanent=True)
    transport = PinnedTransport(addresses, deadline, ssl_context or default_ssl_context())
    # trust_env off: a proxy from the environment would connect somewhere unchecked.
    with httpx.Client(transport=transport, trust_env=False, follow_redirects=False) as client:
        try:
            response = client.post(url, content=body, headers=dict(headers), timeout=timeout_s)
        except httpx.TimeoutException:
            return PostResult(False, None, f"timed out: no answer within {timeout_s} s")
        except httpx.HTTPError as exc:
            return PostResult(False, None, _line(f"{type(exc).__name__}: {_reason(exc)}"))
    code = response.status_code
    if 200 <= code < 300:
        return PostResult(True, code, None)
    return PostResult(False, code, f"HTTP {code}{_phrase(code)}")


def _phrase(code: int) -> str:
    """Our own name for the status, never the receiver's reason phrase."""
    try:
        return " " + http.HTTPStatus(code).phrase
    except ValueError:
        return ""


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def _line(text: str) -> str:
    return " ".join(text.split())[:ERROR_CHARS]


# -- the pinned, deadline-bound transport -------------------------------------------------------


class PinnedTransport(httpx.BaseTransport):
    """An httpx transport for one request: one connection to the checked addresses, under
    one deadline, closed as soon as the status line and headers have arrived."""

    def __init__(
        self, addresses: Iterable[IPAddress], deadline: float, ssl_context: ssl.SSLContext
    ) -> None:
        pinned = list(addresses)
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=1,
            retries=0,
            # The checked addresses, in order, whatever host name it is asked for.
            network_backend=DeadlineBackend(lambda _host, _port: pinned, lambda: deadline),
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
            ),
            headers=request.headers.raw,
            content=request.read(),
            extensions=request.extensions,
        )
        with httpx_errors(request):
            core_response = self._pool.handle_request(core_request)
            # The body is left unread: the status is the answer, and a body trickled a byte
            # at a time must not hold the delivery.
            core_response.close()
        return httpx.Response(status_code=core_response.status, headers=core_response.headers)

    def close(self) -> None:
        self._pool.close()
