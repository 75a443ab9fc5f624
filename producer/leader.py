"""Leadership: the one producer that assigns holds a PostgreSQL session-level advisory lock.

The lock is taken on a dedicated connection and every write of the active producer runs on
that same connection. So a producer can never assign without holding the lock, and a
connection that drops (database restart, pg_terminate_backend, a killed producer) is a lock
released by the server, which the hot standby takes at its next try.

The connection comes from its own engine without a pool: closing it really disconnects (a
pooled connection would keep the session, and the lock, alive after "close").
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection
from sqlalchemy.pool import NullPool

from scrapefleet.common.db import wrapped_errors

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5


class LeaderSession:
    def __init__(self, url: URL, lock_key: int, application_name: str | None = None) -> None:
        self._lock_key = lock_key
        # The OS pid in the name lets an operator (and a test) see which process leads.
        name = application_name or f"scrapefleet-producer-{os.getpid()}"
        self._engine = sa.create_engine(
            url,
            poolclass=NullPool,
            connect_args={"application_name": name, "connect_timeout": CONNECT_TIMEOUT_S},
        )
        self._conn: Connection | None = None
        self.is_leader = False
        self.backend_pid: int | None = None  # the server process of the leader connection

    def try_acquire(self) -> bool:
        """Take the lock if free; True when this session holds it. Raises DatabaseUnavailable."""
        if self.is_leader:
            return True
        conn = self._connection()
        with wrapped_errors(), conn.begin():
            got = conn.execute(
                sa.text("SELECT pg_try_advisory_lock(:key)"), {"key": self._lock_key}
            ).scalar_one()
        self.is_leader = bool(got)
        return self.is_leader

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One transaction on the lock's connection (only while leading)."""
        if not self.is_leader or self._conn is None:
            raise RuntimeError("not the leader: no transaction on the leader connection")
        with wrapped_errors(), self._conn.begin():
            yield self._conn

    def drop(self) -> None:
        """Forget a connection that failed; the server released its lock when it went."""
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.invalidate()
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None
        self.is_leader = False
        self.backend_pid = None

    def release(self) -> None:
        """Unlock and disconnect (disconnecting alone would release it too; unlocking first
        makes the hand-over explicit in the server's log)."""
        if self._conn is not None and self.is_leader:
            try:
                with wrapped_errors(), self._conn.begin():
                    self._conn.execute(
                        sa.text("SELECT pg_advisory_unlock(:key)"), {"key": self._lock_key}
                    )
            except Exception as exc:  # the connection is going away either way
                log.debug("advisory unlock failed: %s", exc)
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None
        self.is_leader = False
        self.backend_pid = None
        self._engine.dispose()

    def _connection(self) -> Connection:
        if self._conn is None or self._conn.closed or self._conn.invalidated:
            self.drop()
            with wrapped_errors():
                conn = self._engine.connect()
                self.backend_pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
                conn.commit()
            self._conn = conn
        return self._conn
