"""A throwaway, migrated database for a benchmark run (dropped afterwards)."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import psycopg

from common.db import libpq_url, sqlalchemy_url
from common.embedded_db import EmbeddedPostgres
from common.migrate import upgrade

DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


@contextlib.contextmanager
def bench_database() -> Iterator[str]:
    server = os.environ.get("SCRAPEFLEET_BENCH_DATABASE_URL", DEFAULT_SERVER)
    embedded = None
    try:
        psycopg.connect(libpq_url(server), connect_timeout=2).close()
    except psycopg.OperationalError:
        embedded = EmbeddedPostgres()
        server = embedded.start()
        print(f"no PostgreSQL at {DEFAULT_SERVER}: using an embedded one")
    name = f"scrapefleet_bench_{uuid.uuid4().hex[:8]}"
    admin = psycopg.connect(libpq_url(server), autocommit=True)
    admin.execute(f'CREATE DATABASE "{name}"')
    url = sqlalchemy_url(server).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        yield url
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()
        if embedded is not None:
            embedded.stop()
