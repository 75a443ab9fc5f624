"""Ping a pooled connection at checkout only when it has sat idle a while.

SQLAlchemy's ``pool_pre_ping`` pings at every checkout: one more round trip before each claim
and each batch of completions, which a busy consumer makes hundreds of times a second on
connections checked in a few milliseconds earlier. A connection that idle is as good as known
to be alive; one idle for longer may have been cut (a database restart, a pooler that closed
it, a dead link), and is pinged as before, and replaced if the ping fails.

A database lost within the idle threshold shows as an error on the next statement instead of at
checkout. Every caller already handles that (a statement can fail after any ping): the
connection is invalidated, and with it every connection the pool held before the failure
(SQLAlchemy invalidates the whole pool on a disconnect), so the retry connects afresh.

This is SQLAlchemy's documented recipe for pessimistic disconnect handling by pool events: a
``checkout`` listener that raises ``DisconnectionError`` makes the pool discard the connection
and check out another (up to three times).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

PING_AFTER_IDLE_S = 1.0
_CHECKED_IN_AT = "scrapefleet_checked_in_at"


def ping_after_idle(
    engine: Engine,
    idle_s: float = PING_AFTER_IDLE_S,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Register the pool listeners on ``engine`` (made with ``pool_pre_ping=False``)."""

    @sa.event.listens_for(engine, "checkin")
    def _checked_in(dbapi_connection: Any, record: Any) -> None:
        record.info[_CHECKED_IN_AT] = clock()

    @sa.event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        checked_in_at = record.info.get(_CHECKED_IN_AT)
        if checked_in_at is None or clock() - checked_in_at < idle_s:
            return  # new (just connected), or used a moment ago
        # The dialect's own ping (as pool_pre_ping's), which leaves no transaction open. It
        # raises rather than answer False when the server ended the session with an error
        # (pg_terminate_backend, a shutdown): any failure means the connection is not usable.
        try:
            alive = engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            raise sa.exc.DisconnectionError(f"connection lost while idle: {exc}") from exc
        if not alive:
            raise sa.exc.DisconnectionError("connection lost while idle")
