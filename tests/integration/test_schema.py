"""The migrated schema matches the declared tables, and the hot queries use the partial indexes."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.constants import CHANNEL_SUBMITTED
from scrapefleet.common.db import Listener
from scrapefleet.common.store import NewJob
from scrapefleet.common.tables import metadata
from tests.waiting import wait_for

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


def test_one_notify_per_insert_statement(engine: Engine, database_url: str) -> None:
    listener = Listener(database_url, [CHANNEL_SUBMITTED])
    try:
        listener.wait(0)  # connects and LISTENs
        with engine.begin() as conn:
            store.insert_jobs(conn, [NewJob("noop")] * 50, default_max_attempts=3)
        got = wait_for(lambda: listener.wait(0.2), 10, "the submit notification")
        assert len(got) == 1, got
        with engine.begin() as conn:  # uncommitted work notifies nobody
            store.insert_jobs(conn, [NewJob("noop")], default_max_attempts=3)
            conn.rollback()
        assert listener.wait(0.3) == []
    finally:
        listener.close()


def test_audit_orders_changes_within_one_transaction(engine: Engine) -> None:
    with engine.begin() as conn:
        (job_id,) = store.insert_jobs(conn, [NewJob("noop")], default_max_attempts=3).ids
        conn.execute(sa.text("UPDATE jobs SET status = 'queued' WHERE id = :id"), {"id": job_id})
        conn.execute(sa.text("UPDATE jobs SET status = 'pending' WHERE id = :id"), {"id": job_id})
    with engine.connect() as conn:
        times = (
            conn.execute(
                sa.text("SELECT at FROM job_events WHERE job_id = :id ORDER BY id"), {"id": job_id}
            )
            .scalars()
            .all()
        )
    assert len(times) == 3 and times[0] < times[1] < times[2], times
