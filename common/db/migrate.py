"""`scrapefleet db upgrade`: run the Alembic migrations shipped in the ``migrations`` package."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from scrapefleet import migrations
from scrapefleet.common.db.engines import migration_url, wrapped_errors


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    # '%' is ConfigParser's interpolation character; a password may contain it.
    # No statement or lock timeout: a migration may rewrite a big table, or wait its turn.
    rendered = migration_url(url).render_as_string(hide_password=False)
    config.set_main_option("sqlalchemy.url", rendered.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    with wrapped_errors():
        command.upgrade(alembic_config(url), revision)


def current_revision(url: str) -> str | None:
    from alembic.runtime.migration import MigrationContext

    from scrapefleet.common.db.engines import make_engine

    engine = make_engine(url)
    try:
        with wrapped_errors(), engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()
