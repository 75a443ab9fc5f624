"""The connection settings arrive: on our socket (getsockopt), in the server's session (SHOW),
for engines, plain psycopg connections, the producer's lock session and the migrations alike,
and a URL's own parameters win over them."""

from __future__ import annotations

import socket
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from scrapefleet.common.db.engines import (
    libpq_url,
    make_engine,
    migration_url,
    sqlalchemy_url,
    with_connection_defaults,
)
from scrapefleet.common.settings import Settings, load_settings
from scrapefleet.producer.leader import LeaderSession

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]

LOCK_KEY = 0x5C_4A_9E_F3  # no producer contends for it
SERVER_SETTINGS = (
    "tcp_keepalives_idle",
    "tcp_keepalives_interval",
    "tcp_keepalives_count",
    "tcp_user_timeout",
    "statement_timeout",
    "lock_timeout",
    "idle_in_transaction_session_timeout",
    "idle_session_timeout",
)


def _settings(database_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": database_url,
        "db_keepalives_idle_s": 2,
        "db_keepalives_interval_s": 1,
        "db_keepalives_count": 4,
        "db_tcp_user_timeout_s": 3.0,
        "db_statement_timeout_s": 40.0,
        "db_lock_timeout_s": 7.0,
        "db_idle_in_transaction_timeout_s": 50.0,
    }
    return load_settings(**(values | overrides))


def _over_tcp(database_url: str) -> bool:
    url = sqlalchemy_url(database_url)
    return not str(url.query.get("host") or url.host or "/").startswith("/")


def _shown(raw: psycopg.Connection[Any]) -> dict[str, str]:
    shown = {}
    for name in SERVER_SETTINGS:
        row = raw.execute(f"SHOW {name}").fetchone()
        assert row is not None
        shown[name] = row[0]
    return shown


def _socket_options(raw: psycopg.Connection[Any]) -> tuple[int, ...]:
    sock = socket.socket(fileno=raw.fileno())
    try:
        return (
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
        )
    finally:
        sock.detach()  # the descriptor stays libpq's


def _raw(conn: Connection) -> psycopg.Connection[Any]:
    raw = conn.connection.driver_connection
    assert isinstance(raw, psycopg.Connection)
    return raw


def test_an_engine_connection_has_them_on_both_ends(database_url: str) -> None:
    engine = make_engine(database_url, settings=_settings(database_url), pool_size=1)
    try:
        with engine.connect() as conn:
            shown = _shown(_raw(conn))
            sockopts = _socket_options(_raw(conn)) if _over_tcp(database_url) else None
    finally:
        engine.dispose()
    assert shown["statement_timeout"] == "40s" and shown["lock_timeout"] == "7s"
    assert shown["idle_in_transaction_session_timeout"] == "50s"
    assert shown["idle_session_timeout"] == "0"  # only the producer's lock session has one
    if sockopts is None:
        pytest.skip("the server is on a Unix socket: no TCP options to check")
    assert sockopts == (1, 2, 1, 4, 3000)
    # The server's end of the same socket (PostgreSQL reads 0 for a Unix socket).
    assert (shown["tcp_keepalives_idle"], shown["tcp_keepalives_interval"]) == ("2", "1")
    assert (shown["tcp_keepalives_count"], shown["tcp_user_timeout"]) == ("4", "3000")


def test_what_the_url_names_wins(database_url: str) -> None:
    url = sqlalchemy_url(database_url)
    own = url.update_query_dict({"keepalives_idle": "9", "options": "-c lock_timeout=1234"})
    engine = make_engine(own, settings=_settings(database_url), pool_size=1)
    try:
        with engine.connect() as conn:
            shown = _shown(_raw(conn))
            sockopts = _socket_options(_raw(conn)) if _over_tcp(database_url) else None
    finally:
        engine.dispose()
    assert shown["lock_timeout"] == "1234ms" and shown["statement_timeout"] == "40s"
    if sockopts is not None:
        assert sockopts[1] == 9 and shown["tcp_keepalives_idle"] == "9"


def test_a_plain_psycopg_connection_gets_them_too(database_url: str) -> None:
    # The LISTEN connections' way in: spaces in options must survive the URL.
    url = libpq_url(with_connection_defaults(database_url, _settings(database_url)))
    with psycopg.connect(url) as raw:
        shown = _shown(raw)
        if _over_tcp(database_url):
            assert _socket_options(raw) == (1, 2, 1, 4, 3000)
    assert shown["statement_timeout"] == "40s" and shown["lock_timeout"] == "7s"


def test_the_lock_session_has_an_idle_timeout(database_url: str) -> None:
    settings = _settings(database_url, leader_idle_timeout_s=45)
    engine = make_engine(database_url, settings=settings, pool_size=1)
    leader = LeaderSession(engine.url, LOCK_KEY, "sf-timeouts", settings=settings)
    try:
        assert leader.try_acquire()
        with leader.transaction() as conn:
            shown = _shown(_raw(conn))
    finally:
        leader.release()
        engine.dispose()
    assert shown["idle_session_timeout"] == "45s" and shown["statement_timeout"] == "40s"


def test_migrations_have_no_statement_or_lock_timeout(database_url: str) -> None:
    settings = _settings(database_url)
    engine = make_engine(migration_url(database_url, settings), settings=settings, pool_size=1)
    try:
        with engine.connect() as conn:
            shown = _shown(_raw(conn))
            assert conn.execute(sa.text("SELECT 1")).scalar_one() == 1
    finally:
        engine.dispose()
    assert shown["statement_timeout"] == "0" and shown["lock_timeout"] == "0"
    assert shown["idle_in_transaction_session_timeout"] == "50s"
