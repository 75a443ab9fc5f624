"""The SQL reference is the migrated schema's own word: the committed page is what
tools/reference.py writes from this database's catalog, and every table and view says what it
answers in its COMMENT (a relation added without one fails here)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tools import reference

pytestmark = pytest.mark.integration


def test_committed_sql_page_is_what_the_generator_writes(database_url: str) -> None:
    committed = (reference.REFERENCE / "sql.md").read_text()
    assert committed == reference.sql_page(database_url), (
        "docs/reference/sql.md is stale: regenerate with .venv/bin/python -m tools.reference"
    )


def test_every_relation_has_a_description(session_engine: Engine) -> None:
    with session_engine.connect() as conn:
        undescribed = conn.execute(
            sa.text(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'v', 'p')"
                " AND c.relname <> 'alembic_version'"
                " AND coalesce(obj_description(c.oid, 'pg_class'), '') = ''"
            )
        ).scalars()
        assert sorted(undescribed) == []
