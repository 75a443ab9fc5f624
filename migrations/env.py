"""Alembic environment: runs online against the URL that common.db.migrate puts in the config."""

from __future__ import annotations

from alembic import context
from sqlalchemy import pool

from scrapefleet.common.db.engines import assume_owner_role, make_engine
from scrapefleet.common.db.tables import metadata

config = context.config


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    assert url, "common.db.migrate sets sqlalchemy.url"
    engine = make_engine(url, application_name="scrapefleet-migrate")
    engine.pool = pool.NullPool(engine.pool._creator)  # one-shot: no pooled leftovers
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=metadata)
        with context.begin_transaction():
            # Objects are created by the schema's owner role where `db grant` set one up.
            assume_owner_role(connection)
            # Two `db upgrade` at once must not both run DDL.
            context.execute("SELECT pg_advisory_xact_lock(7231001)")
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("scrapefleet migrations run online only: use `scrapefleet db upgrade`")
run_migrations_online()
