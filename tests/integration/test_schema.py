"""The migrated schema matches the declared tables, and the hot queries use the partial indexes."""

from __future__ import annotations

import dataclasses
import re

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.constants import CHANNEL_SUBMITTED, CHANNEL_WEBHOOKS_DUE
from scrapefleet.common.db.channels import keyed_channels
from scrapefleet.common.db.engines import Listener, make_engine
from scrapefleet.common.db.migrate import alembic_config
from scrapefleet.common.db.tables import metadata
from scrapefleet.common.reads import queries, results
from scrapefleet.common.store import NewJob
from scrapefleet.common.store.statuses import HostState, JobStatus
from tests.throwaway_db import throwaway_database
from tests.waiting import scaled, wait_for

pytestmark = pytest.mark.integration


def test_migrated_database_matches_declared_tables(engine: Engine) -> None:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_server_default": False})
        diff = compare_metadata(context, metadata)
    assert diff == [], f"migrations and common/db/tables.py disagree: {diff}"


def test_the_hosts_read_has_host_rows_fields_in_order(engine: Engine) -> None:
    """queries.hosts builds each HostRow from its row by position."""
    with engine.connect() as conn:
        columns = list(conn.execute(queries.HOSTS_SQL).keys())
    assert columns == [f.name for f in dataclasses.fields(queries.HostRow)]


def test_views_answer(engine: Engine) -> None:
    with engine.connect() as conn:
        for view in ("job_status_counts", "host_load", "recent_failures", "throughput_per_hour"):
            conn.execute(sa.text(f"SELECT * FROM {view}")).all()
        counts = dict(conn.execute(sa.text("SELECT status, jobs FROM job_status_counts")).all())
    assert counts == dict.fromkeys(
        ["pending", "queued", "processing", "completed", "failed", "cancelled"], 0
    )


def test_the_shared_views_have_the_columns_their_statements_read(engine: Engine) -> None:
    """The result reads return the rows of jobs_with_archive as they are (``SELECT *``), and
    the pending reads select PENDING_COLUMNS from ready_jobs."""
    with engine.connect() as conn:
        archive = list(conn.execute(sa.text("SELECT * FROM jobs_with_archive LIMIT 0")).keys())
        matching = list(conn.execute(sa.text("SELECT * FROM matching_jobs() LIMIT 0")).keys())
        ready = list(conn.execute(sa.text("SELECT * FROM ready_jobs LIMIT 0")).keys())
    assert archive == matching == list(results.COLUMNS)
    pending = [c.strip() for c in store.PENDING_COLUMNS.split(",")]
    assert ready[: len(pending)] == pending


def test_the_views_and_checks_know_exactly_the_enums_statuses(engine: Engine) -> None:
    """The migrations spell the statuses as they were when each ran; the enums are today's.
    A status added to an enum without a migration fails here."""
    with engine.connect() as conn:
        listed = conn.execute(sa.text("SELECT status FROM job_status_counts")).scalars().all()
        checks = dict(
            conn.execute(
                sa.text(
                    "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
                    " WHERE conname IN ('jobs_status_valid', 'hosts_state_valid')"
                )
            ).all()
        )
    assert listed == [s.value for s in JobStatus]  # in the flow's order
    allowed = {name: set(re.findall(r"'(\w+)'::text", sql)) for name, sql in checks.items()}
    assert allowed == {
        "jobs_status_valid": {s.value for s in JobStatus},
        "hosts_state_valid": {s.value for s in HostState},
    }
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET status = 'paused'"))
        conn.execute(sa.text("INSERT INTO hosts (name, state) VALUES ('x', 'sleeping')"))


def test_one_notify_per_insert_statement(engine: Engine, database_url: str) -> None:
    listener = Listener(database_url, [CHANNEL_SUBMITTED], resolve=keyed_channels)
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


def test_an_enqueued_webhook_notifies_and_nothing_else_does(
    engine: Engine, database_url: str
) -> None:
    with engine.begin() as conn:
        hooked, plain = store.insert_jobs(
            conn,
            [NewJob("noop", callback_url="http://127.0.0.1:9/hook"), NewJob("noop")],
            default_max_attempts=3,
        ).ids
    listener = Listener(database_url, [CHANNEL_WEBHOOKS_DUE], resolve=keyed_channels)
    finish = sa.text("UPDATE jobs SET status = 'completed', finished_at = now() WHERE id = :id")
    try:
        listener.wait(0)  # connects and LISTENs
        with engine.begin() as conn:
            conn.execute(finish, {"id": plain})
        assert listener.wait(scaled(0.3)) == []  # no callback URL: no delivery, no wake-up
        with engine.begin() as conn:
            conn.execute(finish, {"id": hooked})
        got = wait_for(lambda: listener.wait(0.2), 10, "the webhook notification")
        assert len(got) == 1, got
    finally:
        listener.close()


def _triggers(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        names = conn.execute(sa.text("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal"))
        return set(names.scalars())


def test_the_wake_up_migrations_go_down_and_up_again() -> None:
    with throwaway_database("SCRAPEFLEET_TEST_DATABASE_URL", "scrapefleet_downgrade") as url:
        engine = make_engine(url)
        try:
            wake_ups = {"jobs_notify_insert", "webhook_deliveries_notify_insert"}
            assert wake_ups <= _triggers(engine)
            command.downgrade(alembic_config(url), "0004")
            assert not wake_ups & _triggers(engine)
            command.upgrade(alembic_config(url), "head")
            assert wake_ups <= _triggers(engine)
            with engine.connect() as conn:
                context = MigrationContext.configure(conn, opts={"compare_server_default": False})
                assert compare_metadata(context, metadata) == []
        finally:
            engine.dispose()
