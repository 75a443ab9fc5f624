"""Database access: engines, connection errors wrapped, and LISTEN for the daemons.

SQLAlchemy Core over psycopg 3. Every daemon connection goes through here so that a database
that cannot be reached is one DatabaseUnavailable with a one-line reason, never a traceback.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg.sql
import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine, make_url

from scrapefleet.common.errors import DatabaseUnavailable, SettingsError

log = logging.getLogger(__name__)


def sqlalchemy_url(url: str) -> URL:
    """Accept postgres://, postgresql:// and postgresql+psycopg:// alike."""
    try:
        parsed = make_url(url.replace("postgres://", "postgresql://", 1))
    except sa.exc.ArgumentError as exc:
        raise SettingsError(f"invalid setting database_url: {exc}") from None
    return parsed.set(drivername="postgresql+psycopg")


def libpq_url(url: str) -> str:
    """The same URL for plain psycopg (LISTEN, COPY-heavy tools)."""
    return sqlalchemy_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def make_engine(url: str, *, pool_size: int = 5, application_name: str = "scrapefleet") -> Engine:
    return sa.create_engine(
        sqlalchemy_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        connect_args={"application_name": application_name, "connect_timeout": 5},
    )


def is_connection_error(exc: BaseException) -> bool:
    """True for errors that mean 'the database went away', as opposed to a bug or a conflict."""
    if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        return True
    cause = getattr(exc, "orig", exc)
    return isinstance(cause, psycopg.OperationalError | psycopg.InterfaceError)


def describe(exc: BaseException) -> str:
    cause = getattr(exc, "orig", None) or exc
    text = str(cause).strip().splitlines()
    return text[0] if text else type(cause).__name__


@contextlib.contextmanager
def wrapped_errors() -> Iterator[None]:
    """Turn a lost or refused connection into DatabaseUnavailable."""
    try:
        yield
    except (sa.exc.OperationalError, sa.exc.InterfaceError, psycopg.OperationalError) as exc:
        raise DatabaseUnavailable(f"database unavailable: {describe(exc)}") from exc
    except sa.exc.DBAPIError as exc:
        if is_connection_error(exc):
            raise DatabaseUnavailable(f"database unavailable: {describe(exc)}") from exc
        raise


@contextlib.contextmanager
def transaction(engine: Engine) -> Iterator[Connection]:
    with wrapped_errors(), engine.begin() as conn:
        yield conn


def check_reachable(engine: Engine) -> None:
    with wrapped_errors(), engine.connect() as conn:
        conn.execute(sa.text("SELECT 1"))


class Listener:
    """A dedicated autocommit connection that LISTENs on channels.

    NOTIFYs can be missed across a reconnect, so callers also poll; this only makes them
    faster. ``wait`` returns the payloads received within ``timeout_s`` (possibly none).
    """

    def __init__(self, url: str, channels: list[str]) -> None:
        self._url = libpq_url(url)
        self._channels = channels
        self._conn: psycopg.Connection[Any] | None = None

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self._url, autocommit=True, connect_timeout=5)
        for channel in self._channels:
            conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
        return conn

    def wait(self, timeout_s: float) -> list[str]:
        try:
            if self._conn is None or self._conn.closed:
                self._conn = self._connect()
            payloads = [n.payload for n in self._conn.notifies(timeout=timeout_s, stop_after=1)]
            # Drain whatever else already arrived, without waiting.
            payloads += [n.payload for n in self._conn.notifies(timeout=0)]
            return payloads
        except psycopg.Error as exc:
            log.warning("listen connection lost (%s); will reconnect", describe(exc))
            self.close()
            raise DatabaseUnavailable(f"database unavailable: {describe(exc)}") from exc

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
