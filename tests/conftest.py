"""Shared fixtures: a real PostgreSQL database per test session, emptied between tests.

The server is SCRAPEFLEET_TEST_DATABASE_URL, else the one at 127.0.0.1:5432, else an embedded
pgserver. Each pytest process creates its own database (so parallel runs never collide),
migrates it with Alembic, and drops it at the end.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.db import libpq_url, make_engine, sqlalchemy_url
from common.migrate import upgrade

DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


def _server_url(tmp_root: Path) -> str:
    url = os.environ.get("SCRAPEFLEET_TEST_DATABASE_URL")
    if url:
        return url
    try:
        psycopg.connect(DEFAULT_SERVER, connect_timeout=2).close()
        return DEFAULT_SERVER
    except psycopg.OperationalError:
        pass
    import pgserver  # embedded fallback

    server = pgserver.get_server(tmp_root / "pgserver", cleanup_mode="stop")
    print(f"\n[tests] no PostgreSQL at 127.0.0.1:5432: using embedded pgserver {server.get_uri()}")
    return str(server.get_uri())


@pytest.fixture(scope="session")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A freshly created and migrated database; dropped after the session."""
    server = _server_url(Path("/tmp"))
    name = f"scrapefleet_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    admin = psycopg.connect(libpq_url(server), autocommit=True)
    admin.execute(f'CREATE DATABASE "{name}"')
    url = sqlalchemy_url(server).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        yield url
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture(scope="session")
def session_engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url, pool_size=8)
    yield engine
    engine.dispose()


@pytest.fixture
def engine(session_engine: Engine) -> Engine:
    """The session's engine over an empty database (every table truncated; fleet_control
    has no row, which reads as "not paused")."""
    with session_engine.begin() as conn:
        conn.execute(
            sa.text(
                "TRUNCATE jobs, hosts, job_events, host_events, jobs_archive, webhook_deliveries,"
                " fleet_control RESTART IDENTITY"
            )
        )
    return session_engine
