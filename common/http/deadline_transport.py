"""httpcore pieces that keep every step of one HTTP request under one deadline.

httpx's own timeouts apply to each socket operation, so a peer that sends one byte a second
never trips them. Here DNS, connect, TLS and every read and write are given only what is left
of a deadline (a ``time.monotonic()`` value) that a callable returns: a fixed one for a webhook
POST, the current request's for a pooled connection (which outlives any one request).

Used by the ``http_get`` client's transport (common.http.pooling_transport) and the webhook sender
(producer.webhooks.webhook_http).
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

import httpcore
import httpx

from scrapefleet.common.http.request_cancel import watching

Deadline = Callable[[], float | None]  # None: no deadline (httpx's per-operation timeouts only)
Address = TypeVar("Address")


def time_left(
    deadline: float | None, timeout: float | None, error: type[Exception]
) -> float | None:
    """The smaller of ``timeout`` and what is left before ``deadline``; ``error`` once it passed."""
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class DeadlineStream(httpcore.NetworkStream):
    """A connection whose every operation gets at most what is left of the deadline."""

    def __init__(self, inner: httpcore.NetworkStream, deadline: Deadline) -> None:
        self._inner = inner
        self._deadline = deadline

    def _left(self, timeout: float | None, error: type[Exception]) -> float | None:
        return time_left(self._deadline(), timeout, error)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        left = self._left(timeout, httpcore.ReadTimeout)
        # A given-up attempt's request is closed from another thread (common.http.request_cancel).
        with watching(self._inner.get_extra_info("socket")):
            return self._inner.read(max_bytes, left)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        left = self._left(timeout, httpcore.WriteTimeout)
        with watching(self._inner.get_extra_info("socket")):
            self._inner.write(buffer, left)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        left = self._left(timeout, httpcore.ConnectTimeout)
        inner = self._inner.start_tls(ssl_context, server_hostname, left)
        return DeadlineStream(inner, self._deadline)

    def get_extra_info(self, info: str) -> object:
        return self._inner.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """TCP connections to the addresses ``addresses_for(host, port)`` gives, tried in order
    (a refusal moves on to the next), each connect and every later operation within the
    deadline. Unix sockets are refused."""

    def __init__(
        self, addresses_for: Callable[[str, int], Sequence[object]], deadline: Deadline
    ) -> None:
        self._addresses_for = addresses_for
        self._deadline = deadline
        self._tcp = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        failed: Exception = httpcore.ConnectError(f"no address for {host}")
        for address in self._addresses_for(host, port):
            budget = time_left(self._deadline(), timeout, httpcore.ConnectTimeout)
            try:
                stream = self._tcp.connect_tcp(
                    str(address), port, budget, local_address, socket_options
                )
            except httpcore.ConnectError as exc:  # refused: the next address may answer
                failed = exc
                continue
            return DeadlineStream(stream, self._deadline)
        raise failed

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("connections are over TCP only")


def resolve_within(
    resolve: Callable[[str, int], Sequence[Address]],
    host: str,
    port: int,
    deadline: float | None,
) -> list[Address]:
    """``resolve(host, port)`` in a helper thread, so that a hung resolver counts against the
    deadline too (the lookup is left to finish on its own: getaddrinfo cannot be interrupted).
    TimeoutError once the deadline passes first; the resolver's own error otherwise."""
    answer: list[Sequence[Address] | BaseException] = []
    done = threading.Event()

    def lookup() -> None:
        try:
            answer.append(resolve(host, port))
        except BaseException as exc:  # handed to the waiting thread
            answer.append(exc)
        finally:
            done.set()

    threading.Thread(target=lookup, name="dns-lookup", daemon=True).start()
    wait_s = None if deadline is None else max(0.0, deadline - time.monotonic())
    if not done.wait(wait_s):
        raise TimeoutError(f"resolving {host} did not finish before the deadline")
    if isinstance(answer[0], BaseException):
        raise answer[0]
    return list(answer[0])


def system_addresses(host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Every address ``host`` resolves to (itself if it is one), in the resolver's order,
    without repeats."""
    with contextlib.suppress(ValueError):
        return [ipaddress.ip_address(host)]
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))


# httpcore's errors as the httpx ones callers catch (what httpx's own transport does).
_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
)


@contextlib.contextmanager
def httpx_errors(request: httpx.Request) -> Iterator[None]:
    """Raise httpcore's errors as their httpx counterparts, bound to ``request``."""
    try:
        yield
    except Exception as exc:
        for core_error, httpx_error in _ERRORS:
            if isinstance(exc, core_error):
                raise httpx_error(str(exc), request=request) from exc
        raise
