"""One psycopg connection, kept open, for a consumer's single-statement writes.

A consumer's hot path is two statements repeated hundreds of times a second: its claim and a
batch of completions, each a single autocommit statement. Through SQLAlchemy each call checks a
connection out of the pool, sets and resets its isolation level, checks it back in and builds a
result object: about 230 us of the client's CPU per claim on the development machine, against
about 93 us through a psycopg connection held open (`python -m
tests.benchmarks.bench_statement_connection`). This class is that held connection. The store's
functions take it where they take a SQLAlchemy connection (common.db.executes).

It keeps the engine's behaviour where it matters: the same connection parameters and server
settings (common.db.engines.with_connection_defaults), no server-side prepared statement behind a
transaction pooler, a ping before the first statement after a second idle (common.db.ping), and
the same errors: a lost connection is DatabaseUnavailable (and is replaced on the next call), a
missing table SchemaOutOfDate. Threads take turns on it: a consumer's main loop claims and its
recorder completes through one connection, each statement a round trip of a millisecond or less.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import psycopg
import sqlalchemy as sa
from psycopg.rows import namedtuple_row
from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect
from sqlalchemy.engine import URL
from sqlalchemy.sql.elements import TextClause

from scrapefleet.common.db.engines import (
    MISSING_OBJECT_ERRORS,
    libpq_url,
    out_of_date,
    unavailable,
    with_connection_defaults,
)
from scrapefleet.common.db.ping import PING_AFTER_IDLE_S
from scrapefleet.common.db.pooler import pooled_connect_args, uses_pooler
from scrapefleet.common.settings import Settings

__all__ = ["StatementConnection", "StatementResult"]

_DIALECT = psycopg_dialect.dialect()


class StatementResult:
    """The rows of one statement, with the parts of SQLAlchemy's result the store uses."""

    def __init__(self, rows: Sequence[Any]) -> None:
        self._rows = rows

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)

    def all(self) -> Sequence[Any]:
        return self._rows

    def first(self) -> Any:
        return self._rows[0] if self._rows else None

    def one(self) -> Any:
        if len(self._rows) != 1:
            raise sa.exc.NoResultFound(f"expected one row, got {len(self._rows)}")
        return self._rows[0]

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None


class StatementConnection:
    """An autocommit psycopg connection for single statements, one at a time."""

    def __init__(
        self,
        url: str | URL,
        settings: Settings,
        application_name: str,
        *,
        idle_ping_s: float = PING_AFTER_IDLE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        pooled = uses_pooler(settings)
        self._url = libpq_url(with_connection_defaults(url, settings, session_options=not pooled))
        self._connect_args = {"application_name": application_name, **pooled_connect_args(settings)}
        self._idle_ping_s = idle_ping_s
        self._clock = clock
        self._conn: psycopg.Connection[Any] | None = None
        self._last_used = 0.0
        self._compiled: dict[int, tuple[TextClause, str]] = {}
        self._lock = threading.Lock()  # one statement at a time on the connection

    def execute(self, statement: TextClause, parameters: Mapping[str, Any]) -> StatementResult:
        """Run ``statement`` (its own transaction) and fetch its rows."""
        with self._lock:
            return self._execute(statement, parameters)

    def _execute(self, statement: TextClause, parameters: Mapping[str, Any]) -> StatementResult:
        sql = self._sql(statement)
        try:
            conn = self._connection()
            cursor = conn.execute(sql, parameters)
            rows = cursor.fetchall() if cursor.description is not None else []
        except MISSING_OBJECT_ERRORS as exc:
            raise out_of_date(exc) from exc
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            self._close()  # replaced on the next call
            raise unavailable(exc) from exc
        finally:
            self._last_used = self._clock()
        return StatementResult(rows)

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _connection(self) -> psycopg.Connection[Any]:
        conn = self._conn
        if conn is not None and self._clock() - self._last_used >= self._idle_ping_s:
            # As the engine's pool does after a second idle: a connection cut meanwhile (a
            # database restart, a pooler's idle timeout) is replaced before the statement, so
            # the statement does not fail for it.
            try:
                conn.execute("SELECT 1")
            except psycopg.Error:
                self._close()
                conn = None
        if conn is None or conn.closed:
            conn = psycopg.connect(
                self._url, autocommit=True, row_factory=namedtuple_row, **self._connect_args
            )
            self._conn = conn
        return conn

    def _sql(self, statement: TextClause) -> str:
        """The statement in psycopg's parameter style, compiled once per statement object."""
        cached = self._compiled.get(id(statement))
        if cached is None or cached[0] is not statement:
            cached = (statement, str(statement.compile(dialect=_DIALECT)))
            self._compiled[id(statement)] = cached
        return cached[1]
