"""Ending a thread's HTTP requests from another thread: a given-up attempt's request is closed.

A consumer that gives an attempt up (timed out, rescued, stopped) must end it, not only drop
its result: a request left running keeps loading the site, holds what a lock key stands for
and keeps the thread busy. The attempt's thread runs under a ``RequestCanceller``
(``cancellable``); the connections of common.http.deadline_transport register their socket with it
around every read and write, and ``cancel()`` shuts those sockets down, which wakes a blocked
read at once with an error (the request fails; its late result is dropped by its token
anyway). Whatever the thread reads or writes after that fails at once.
"""

from __future__ import annotations

import contextlib
import contextvars
import socket
import threading
from collections.abc import Iterator

__all__ = ["RequestCancelled", "RequestCanceller", "cancellable", "watching"]


class RequestCancelled(OSError):
    """The request's attempt was given up: its connection was shut down."""


class RequestCanceller:
    """The sockets one attempt is reading or writing now, and whether it was cancelled."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._cancelled = False

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        """Shut down every socket in use now; later reads and writes fail at once."""
        with self._lock:
            self._cancelled = True
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):  # closed meanwhile: nothing left to end
                sock.shutdown(socket.SHUT_RDWR)

    @contextlib.contextmanager
    def watch(self, sock: object) -> Iterator[None]:
        """Around one read or write on ``sock``; raises if the attempt was cancelled."""
        if not isinstance(sock, socket.socket):  # a stream without one (a test double)
            yield
            return
        with self._lock:
            if self._cancelled:
                raise RequestCancelled("the attempt was given up")
            self._sockets.add(sock)
        try:
            yield
        finally:
            with self._lock:
                self._sockets.discard(sock)


_CURRENT: contextvars.ContextVar[RequestCanceller | None] = contextvars.ContextVar(
    "request_canceller", default=None
)


@contextlib.contextmanager
def cancellable(canceller: RequestCanceller) -> Iterator[None]:
    """The HTTP requests of this thread (context) until the block ends obey ``canceller``."""
    token = _CURRENT.set(canceller)
    try:
        yield
    finally:
        _CURRENT.reset(token)


@contextlib.contextmanager
def watching(sock: object) -> Iterator[None]:
    """Around a read or write: registered with the current canceller, if any."""
    canceller = _CURRENT.get()
    if canceller is None:
        yield
        return
    with canceller.watch(sock):
        yield
