"""A freshly created and migrated database on a real PostgreSQL, dropped afterwards.

The server is the one named by an environment variable, else the one at 127.0.0.1:5432, else
an embedded pgserver started for the occasion. Each call creates its own database, so parallel
runs never collide.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import psycopg

from scrapefleet.common.db.engines import libpq_url, sqlalchemy_url
from scrapefleet.common.db.migrate import upgrade
from scrapefleet.common.local.embedded_db import EmbeddedPostgres

DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


@contextlib.contextmanager
def throwaway_database(server_env: str, prefix: str) -> Iterator[str]:
    server = os.environ.get(server_env, DEFAULT_SERVER)
    embedded = None
    try:
        psycopg.connect(libpq_url(server), connect_timeout=2).close()
    except psycopg.OperationalError:
        embedded = EmbeddedPostgres()
        server = embedded.start()
        print(f"\nno PostgreSQL answers at {DEFAULT_SERVER}: using an embedded pgserver")
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
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
