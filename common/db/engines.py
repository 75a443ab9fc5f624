"""Database access: engines, connection errors wrapped, and LISTEN for the daemons.

SQLAlchemy Core over psycopg 3. Every daemon connection goes through here so that a database
that cannot be reached is one DatabaseUnavailable with a one-line reason, never a traceback.

Every connection also gets its timeouts here (``with_connection_defaults``): TCP keepalives
and ``tcp_user_timeout`` on both ends of the socket, so a peer that vanished (a host powered
off, a link cut) is noticed in seconds instead of the kernel's two hours, and the server-side
statement, lock and idle-in-transaction timeouts. They go into the URL's query, so everything
derived from an engine's URL (the producer's lock connection, its LISTEN connection) has them
too. A parameter the URL already names is left as the URL says.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

import psycopg
import psycopg.sql
import psycopg.types.datetime
import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine, make_url

from scrapefleet.common.db.ping import ping_after_idle
from scrapefleet.common.db.pooler import pooled_connect_args, uses_pooler
from scrapefleet.common.error_lines import first_line
from scrapefleet.common.errors import DatabaseUnavailable, SchemaOutOfDate, SettingsError
from scrapefleet.common.settings import Settings, load_settings

log = logging.getLogger(__name__)

# A statement naming a table, column or function the database lacks: an unmigrated schema
# (the package was upgraded first), not a bug to show as a traceback.
MISSING_OBJECT_ERRORS = (
    psycopg.errors.UndefinedTable,
    psycopg.errors.UndefinedColumn,
    psycopg.errors.UndefinedFunction,
)
CONNECT_TIMEOUT_S = 5  # a server that does not answer a connection attempt at all

# Migrations may rewrite a big table, and wait behind the daemons' transactions for its lock
# (or behind another `db upgrade`, for the advisory lock in migrations/env.py).
MIGRATION_SERVER_PARAMS: Mapping[str, int] = {"statement_timeout": 0, "lock_timeout": 0}

# A time Python's datetime cannot hold ('infinity', a year past 9999) is read as the furthest
# one it can, not raised: one such value in a row (written before the CHECKs of migrations
# 0017 and 0031, or where they are missing) made every command, page and producer cycle that
# read the row fail. What shows it shows 9999-12-31 (or 0001-01-01): plainly a bad value.
FAR_FUTURE = datetime.max.replace(tzinfo=UTC)
FAR_PAST = datetime.min.replace(tzinfo=UTC)


class _BoundedTimestamptzLoader(psycopg.types.datetime.TimestamptzLoader):
    def load(self, data: Any) -> datetime:
        try:
            return super().load(data)
        except psycopg.DataError:
            return FAR_PAST if bytes(data).startswith(b"-") else FAR_FUTURE


class _BoundedTimestamptzBinaryLoader(psycopg.types.datetime.TimestamptzBinaryLoader):
    def load(self, data: Any) -> datetime:
        try:
            return super().load(data)
        except psycopg.DataError:
            return (
                FAR_PAST if int.from_bytes(bytes(data)[:8], "big", signed=True) < 0 else FAR_FUTURE
            )


psycopg.adapters.register_loader("timestamptz", _BoundedTimestamptzLoader)
psycopg.adapters.register_loader("timestamptz", _BoundedTimestamptzBinaryLoader)

# `-c name=value`, `-cname=value` and `--name=value`, as the server reads its startup options.
_OPTION_NAME = re.compile(r"(?:^|\s)(?:-c\s*|--)([A-Za-z_][A-Za-z0-9_.-]*)=")


def sqlalchemy_url(url: str | URL) -> URL:
    """Accept postgres://, postgresql:// and postgresql+psycopg:// alike."""
    if isinstance(url, URL):
        return url.set(drivername="postgresql+psycopg")
    try:
        parsed = make_url(url.replace("postgres://", "postgresql://", 1))
    except sa.exc.ArgumentError as exc:
        raise SettingsError(f"invalid setting database_url: {exc}") from None
    return parsed.set(drivername="postgresql+psycopg")


def libpq_url(url: str | URL) -> str:
    """The same URL for plain psycopg (LISTEN, COPY-heavy tools)."""
    parsed = sqlalchemy_url(url).set(drivername="postgresql")
    base = parsed.set(query={}).render_as_string(hide_password=False)
    if not parsed.query:
        return base
    # SQLAlchemy writes a space as '+', which libpq does not decode (options="-c a=1 -c b=2").
    return f"{base}?{urlencode(list(parsed.query.items()), doseq=True, quote_via=quote)}"


def ambient_settings() -> Settings:
    """Settings from the environment (and SCRAPEFLEET_CONFIG), for callers that pass none.
    Invalid ones fall back to the defaults here: the program's own load reports them."""
    try:
        return load_settings()
    except SettingsError:
        return Settings.model_construct()


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def client_params(settings: Settings) -> dict[str, str]:
    """libpq's connection parameters for our end of the socket."""
    params = {
        "connect_timeout": str(CONNECT_TIMEOUT_S),
        "keepalives": "1",
        "keepalives_idle": str(settings.db_keepalives_idle_s),
        "keepalives_interval": str(settings.db_keepalives_interval_s),
        "keepalives_count": str(settings.db_keepalives_count),
    }
    if settings.db_tcp_user_timeout_s:
        params["tcp_user_timeout"] = str(_ms(settings.db_tcp_user_timeout_s))
    if settings.db_sslmode:
        params["sslmode"] = settings.db_sslmode
    return params


# libpq's socket parameter -> the server's setting of the same meaning for its end.
_SERVER_SOCKET_PARAMS = {
    "keepalives_idle": "tcp_keepalives_idle",
    "keepalives_interval": "tcp_keepalives_interval",
    "keepalives_count": "tcp_keepalives_count",
    "tcp_user_timeout": "tcp_user_timeout",
}


def server_params(
    settings: Settings, client: Mapping[str, str | tuple[str, ...]] | None = None
) -> dict[str, int]:
    """Server settings for the session, sent as startup options (-c name=value).

    The socket parameters again, for the server's end: a client that vanished keeps its
    backend, and the locks it holds (the producer's leader lock), until the server's socket
    gives up, and the server's own default is two hours. They mirror ``client`` (the
    connection's libpq parameters, a URL's own included), so one value rules both ends. A
    timeout of 0 is not sent: the server's setting applies.
    """
    client = client if client is not None else client_params(settings)
    params: dict[str, int] = {}
    for ours, theirs in _SERVER_SOCKET_PARAMS.items():
        value = _positive_int(client.get(ours))
        if value and (ours == "tcp_user_timeout" or client.get("keepalives") != "0"):
            params[theirs] = value
    timeouts = {
        "statement_timeout": settings.db_statement_timeout_s,
        "lock_timeout": settings.db_lock_timeout_s,
        "idle_in_transaction_session_timeout": settings.db_idle_in_transaction_timeout_s,
    }
    params.update({name: _ms(s) for name, s in timeouts.items() if s})
    return params


def _positive_int(value: str | tuple[str, ...] | None) -> int | None:
    try:
        number = int(value) if isinstance(value, str) else 0
    except ValueError:  # libpq refuses the connection and says why
        return None
    return number if number > 0 else None


def option_names(options: str) -> set[str]:
    """The server settings a libpq ``options`` string sets (lower case, as the server reads)."""
    return {name.lower().replace("-", "_") for name in _OPTION_NAME.findall(options)}


def with_connection_defaults(
    url: str | URL,
    settings: Settings | None = None,
    *,
    server: Mapping[str, int | str] | None = None,
    session_options: bool = True,
) -> URL:
    """``url`` with our connection parameters and server settings added where it names none.

    ``server`` adds or replaces server settings for one kind of connection (the migrations,
    the producer's lock session); the URL still wins over them. The user's ``options`` (from
    the URL, else libpq's PGOPTIONS, which an ``options`` parameter would otherwise silence)
    come after ours, so the server reads theirs last as well. Applying this twice changes
    nothing. Without ``session_options`` (a transaction pooler, which refuses them) only our
    end's parameters are added.
    """
    parsed = sqlalchemy_url(url)
    settings = settings if settings is not None else ambient_settings()
    query: dict[str, str | tuple[str, ...]] = dict(parsed.query)
    for name, value in client_params(settings).items():
        query.setdefault(name, value)
    if not session_options:
        return parsed.set(query=query)
    given = query.get("options")
    if given is None:
        given = os.environ.get("PGOPTIONS", "")
    if not isinstance(given, str):  # repeated in the URL: libpq takes one; leave them be
        return parsed.set(query=query)
    named = option_names(given)
    wanted: dict[str, int | str] = {**server_params(settings, query), **(server or {})}
    ours = [f"-c {name}={value}" for name, value in wanted.items() if name not in named]
    if ours:
        query["options"] = " ".join([*ours, given]).strip()
    return parsed.set(query=query)


def migration_url(url: str | URL, settings: Settings | None = None) -> URL:
    """The URL for Alembic: no statement or lock timeout unless the URL sets one."""
    return with_connection_defaults(url, settings, server=MIGRATION_SERVER_PARAMS)


def make_engine(
    url: str | URL,
    *,
    pool_size: int = 5,
    application_name: str = "scrapefleet",
    settings: Settings | None = None,
) -> Engine:
    """A pooled engine; ``settings`` (default: from the environment) gives the timeouts, and
    whether ``url`` is a transaction pooler (common.db.pooler)."""
    settings = settings if settings is not None else ambient_settings()
    pooled = uses_pooler(settings)
    engine = sa.create_engine(
        with_connection_defaults(url, settings, session_options=not pooled),
        pool_size=pool_size,
        max_overflow=pool_size,
        connect_args={"application_name": application_name, **pooled_connect_args(settings)},
    )
    ping_after_idle(engine)  # not at every checkout: a round trip per claim and completion
    return engine


# Set on the database by `scrapefleet db grant` (ALTER DATABASE ... SET): the role that owns the
# schema. Absent in the single-URL setup, where the one login role owns everything.
OWNER_ROLE_PARAMETER = "scrapefleet.owner_role"
OWNER_ROLE_SQL = sa.text(
    "SELECT r.rolname FROM pg_roles r"
    " WHERE r.rolname = current_setting(:parameter, true)"
    "   AND pg_has_role(current_user, r.oid, 'MEMBER') AND r.rolname <> current_user"
)


def assume_owner_role(conn: Connection) -> str | None:
    """For migrations: act as the schema's owner role when the database names one and this
    login may act as it, so that every object a migration creates has that owner (and the
    grants `db grant` gave on it hold). Returns the role taken, None when none is."""
    owner = conn.execute(OWNER_ROLE_SQL, {"parameter": OWNER_ROLE_PARAMETER}).scalar()
    if owner is None:
        return None
    conn.exec_driver_sql(f"SET ROLE {psycopg.sql.Identifier(owner).as_string(None)}")
    return str(owner)


def is_connection_error(exc: BaseException) -> bool:
    """True for errors that mean 'the database went away', as opposed to a bug or a conflict."""
    if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        return True
    cause = getattr(exc, "orig", exc)
    return isinstance(cause, psycopg.OperationalError | psycopg.InterfaceError)


def unavailable(exc: BaseException) -> DatabaseUnavailable:
    """The error to raise (from ``exc``) for a lost or refused connection."""
    return DatabaseUnavailable(f"database unavailable: {first_line(exc)}")


def out_of_date(exc: BaseException) -> SchemaOutOfDate:
    """The error to raise (from ``exc``) for a statement naming what the schema lacks."""
    return SchemaOutOfDate(
        f"{first_line(exc)}: the database's schema is older than this scrapefleet"
        " (or was never created); run `scrapefleet db upgrade`"
    )


@contextlib.contextmanager
def wrapped_errors() -> Iterator[None]:
    """Turn a lost or refused connection into DatabaseUnavailable."""
    try:
        yield
    except (sa.exc.OperationalError, sa.exc.InterfaceError, psycopg.OperationalError) as exc:
        raise unavailable(exc) from exc
    except sa.exc.DBAPIError as exc:
        if is_connection_error(exc):
            raise unavailable(exc) from exc
        if isinstance(exc.orig, MISSING_OBJECT_ERRORS):
            raise out_of_date(exc) from exc
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

    def __init__(
        self,
        url: str,
        channels: list[str],
        settings: Settings | None = None,
        *,
        resolve: Callable[[psycopg.Connection[Any], list[str]], list[str]] | None = None,
    ) -> None:
        """``resolve``: the channels' real names, asked of the database at each connect (the
        producer's carry a key: common.db.channels.keyed_channels)."""
        # The keepalives matter most here: a LISTEN connection only waits, so without them a
        # silently dead one would wait (and miss every NOTIFY) for the kernel's two hours.
        self._url = libpq_url(with_connection_defaults(url, settings))
        self._channels = channels
        self._resolve = resolve
        self._conn: psycopg.Connection[Any] | None = None

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self._url, autocommit=True)
        channels = self._channels
        if self._resolve is not None:
            try:
                channels = self._resolve(conn, channels)
            except psycopg.Error:
                conn.close()
                raise
        for channel in channels:
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
            log.warning("listen connection lost (%s); will reconnect", first_line(exc))
            self.close()
            raise DatabaseUnavailable(f"database unavailable: {first_line(exc)}") from exc

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
