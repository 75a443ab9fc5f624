"""Leadership: the one producer that assigns holds a PostgreSQL session-level advisory lock.

The lock is taken on a dedicated connection and every write of the active producer runs on
that same connection. So a producer can never assign without holding the lock, and a
connection that drops (database restart, pg_terminate_backend, a killed producer) is a lock
released by the server, which the hot standby takes at its next try.

The connection comes from its own engine without a pool: closing it really disconnects (a
pooled connection would keep the session, and the lock, alive after "close").

A connection can also die without dropping: the producer's host vanishes, or a link breaks
with no FIN or RST. Both ends must then notice on their own, and each has two ways:

- the server: TCP keepalives and ``tcp_user_timeout`` on its end of the socket (set by
  common.db.engines for every session) end the backend, and the lock with it, when the host is gone;
  where something between keeps TCP alive (a proxy, a NAT that answers for it) only the
  session's ``idle_session_timeout`` (``leader_idle_timeout_s``) does, since the live producer
  runs a statement on it every cycle;
- the producer: its keepalives and ``tcp_user_timeout`` make a statement on a dead link fail;
  where TCP still seems fine, the watchdog below ends any transaction that gets no answer
  within ``leader_timeout_s``. Either way the session steps down (``is_leader`` false, a
  warning logged) and the daemon reconnects and tries the lock again at its next cycle.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection
from sqlalchemy.pool import NullPool

from scrapefleet.common.db.engines import ambient_settings, with_connection_defaults, wrapped_errors
from scrapefleet.common.errors import DatabaseUnavailable
from scrapefleet.common.settings import Settings

log = logging.getLogger(__name__)

LEADER_IDLE_TIMEOUT_MIN_S = 60.0  # the default's floor: well above a slow probe round
LEADER_IDLE_INTERVALS = 4  # ... and above this many producer intervals

# How the lock session's statements are planned. Under PostgreSQL's default the assignment's
# pending read is planned again on every run (its LIMIT is a parameter, so its generic plan is
# costed as a scan of the whole index, dearer than any custom plan): 0.3-0.5 ms of planning a
# cycle for 0.1-0.2 ms of execution. Every statement on this session is the producer's own
# and writes its statuses into the SQL, so a generic plan still matches the partial indexes;
# it is planned once per statement and connection. JIT off: over a large backlog that same
# generic estimate passes jit_above_cost, and compiling took ~280 ms of a 0.2 ms read.
LEADER_PLANNING = {"plan_cache_mode": "force_generic_plan", "jit": "off"}


def leader_idle_timeout_s(settings: Settings) -> float:
    """How long the server keeps a lock session that runs nothing (0 = forever)."""
    if settings.leader_idle_timeout_s is not None:
        return settings.leader_idle_timeout_s
    return max(LEADER_IDLE_TIMEOUT_MIN_S, LEADER_IDLE_INTERVALS * settings.producer_interval_s)


class LeaderSession:
    """``settings`` default to the environment's (common.db.engines.ambient_settings)."""

    def __init__(
        self,
        url: URL | str,
        lock_key: int,
        application_name: str | None = None,
        *,
        settings: Settings | None = None,
    ) -> None:
        settings = settings if settings is not None else ambient_settings()
        self._lock_key = lock_key
        self._timeout_s = settings.leader_timeout_s
        # The OS pid in the name lets an operator (and a test) see which process leads.
        name = application_name or f"scrapefleet-producer-{os.getpid()}"
        idle_s = leader_idle_timeout_s(settings)
        server: dict[str, int | str] = dict(LEADER_PLANNING)
        if idle_s:
            server["idle_session_timeout"] = round(idle_s * 1000)
        self._engine = sa.create_engine(
            with_connection_defaults(url, settings, server=server),
            poolclass=NullPool,
            connect_args={"application_name": name},
        )
        self._watchdog = _Watchdog(f"{name}-watchdog", settings.leader_timeout_s)
        self._conn: Connection | None = None
        self.is_leader = False
        self.backend_pid: int | None = None  # the server process of the leader connection
        self.losses = 0  # times this session lost the lock while leading

    def try_acquire(self) -> bool:
        """Take the lock if free; True when this session holds it. Raises DatabaseUnavailable."""
        if self.is_leader:
            return True
        conn = self._connection()
        with self._stepping_down_on_loss(conn), conn.begin():
            got = conn.execute(
                sa.text("SELECT pg_try_advisory_lock(:key)"), {"key": self._lock_key}
            ).scalar_one()
        self.is_leader = bool(got)
        return self.is_leader

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One transaction on the lock's connection (only while leading). A lost connection
        raises DatabaseUnavailable and this session is no longer the leader."""
        if not self.is_leader or self._conn is None:
            raise RuntimeError("not the leader: no transaction on the leader connection")
        conn = self._conn
        with self._stepping_down_on_loss(conn), conn.begin():
            yield conn

    @contextlib.contextmanager
    def _stepping_down_on_loss(self, conn: Connection) -> Iterator[None]:
        """Bound the round trips on ``conn`` by the watchdog; on a lost connection, step down."""
        try:
            with self._watchdog.guard(conn), wrapped_errors():
                yield
        except DatabaseUnavailable as exc:
            if self._watchdog.fired:
                reason = f"no answer on the leader connection within {self._timeout_s:g} s"
                self.drop(reason)
                raise DatabaseUnavailable(f"database unavailable: {reason}") from exc
            self.drop(str(exc))
            raise

    def drop(self, reason: str = "its connection failed") -> None:
        """Forget a connection that failed; the server released its lock when it went (or
        will, when its keepalives or idle_session_timeout end the session)."""
        if self.is_leader:
            self.losses += 1
            log.warning(
                "leader lock lost, standing down (backend_pid=%s): %s", self.backend_pid, reason
            )
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
                conn = self._conn
                with self._watchdog.guard(conn), wrapped_errors(), conn.begin():
                    conn.execute(
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
        self._watchdog.close()
        self._engine.dispose()

    def _connection(self) -> Connection:
        if self._conn is None or self._conn.closed or self._conn.invalidated:
            self.drop()
            with wrapped_errors():
                conn = self._engine.connect()  # bounded by connect_timeout
            try:
                with self._watchdog.guard(conn), wrapped_errors():
                    self.backend_pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
                    conn.commit()
            except DatabaseUnavailable:
                with contextlib.suppress(Exception):
                    conn.invalidate()
                raise
            self._conn = conn
        return self._conn


class _Watchdog:
    """Shuts a connection's socket when a guarded round trip on it outlasts ``timeout_s``.

    Where TCP cannot tell that the other end is gone (a proxy or NAT that keeps both halves
    open, a server that hangs), keepalives are answered and nothing sent stays unacknowledged,
    so a statement would wait for its answer forever. Shutting the socket makes that wait fail
    at once, like any lost connection. One thread per session, started on first use; it wakes
    at least every ``timeout_s``, so arming it (every transaction) never has to wake it.
    """

    def __init__(self, name: str, timeout_s: float) -> None:
        self._name = name
        self._timeout_s = timeout_s
        self._cond = threading.Condition()
        self._armed: tuple[float, Connection] | None = None  # deadline (monotonic), connection
        self._thread: threading.Thread | None = None
        self._closed = False
        self.fired = False  # the last guarded block was cut short

    @contextlib.contextmanager
    def guard(self, conn: Connection) -> Iterator[None]:
        with self._cond:
            self.fired = False
            self._armed = (time.monotonic() + self._timeout_s, conn)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._cond:
                self._armed = None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._armed = None
            self._cond.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)
        self._thread = None

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                # Armed after this thread went to sleep for timeout_s: the deadline is no
                # earlier than its waking, so no deadline is overslept.
                if self._armed is None:
                    self._cond.wait(self._timeout_s)
                    continue
                deadline, conn = self._armed
                remaining = deadline - time.monotonic()
                if remaining > 0:
                    self._cond.wait(remaining)
                    continue
                self._armed = None
                self.fired = True
                _shut_socket(conn)


def _shut_socket(conn: Connection) -> None:
    """shutdown(2) the connection's socket: the thread waiting on it wakes with an error. The
    file descriptor itself stays libpq's (closed by psycopg when the connection is)."""
    try:
        raw = conn.connection.driver_connection
        # Raises once the connection is closed, so a number reused since is never touched.
        fd = raw.pgconn.socket  # type: ignore[union-attr]
        dup = socket.socket(fileno=os.dup(fd))
    except Exception as exc:  # already closed: nothing is waiting on it
        log.debug("leader watchdog: no socket to shut: %s", exc)
        return
    log.warning("leader connection gave no answer in time: shutting its socket")
    with contextlib.suppress(OSError), dup:
        dup.shutdown(socket.SHUT_RDWR)
