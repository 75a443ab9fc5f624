"""The held connection of a consumer's claims and completions (common.db.statement_connection), on a
real PostgreSQL: rows as the store reads them, the store's own statements through it, a backend
ended while idle replaced without an error, one ended in use failing once as
DatabaseUnavailable and replaced on the next call, and a missing table as SchemaOutOfDate."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.db.statement_connection import StatementConnection
from scrapefleet.common.errors import DatabaseUnavailable, SchemaOutOfDate
from scrapefleet.common.settings import load_settings
from scrapefleet.common.store import HostSpec, NewJob
from tests.integration.backends import Clock, terminate

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]

PID_SQL = sa.text("SELECT pg_backend_pid() AS pid, current_setting('application_name') AS app")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def held(database_url: str, clock: Clock) -> Iterator[StatementConnection]:
    connection = StatementConnection(
        database_url, load_settings(None), "scrapefleet-test held", idle_ping_s=1.0, clock=clock
    )
    yield connection
    connection.close()


def backend_pid(held: StatementConnection) -> int:
    return int(held.execute(PID_SQL, {}).one().pid)


def test_rows_read_by_name_and_the_connection_is_kept(held: StatementConnection) -> None:
    row = held.execute(PID_SQL, {}).one()
    assert row.app == "scrapefleet-test held"
    assert backend_pid(held) == row.pid  # the same backend: held, not reconnected
    result = held.execute(sa.text("SELECT n FROM generate_series(1, :k) AS n"), {"k": 3})
    assert [r.n for r in result.all()] == [1, 2, 3]
    assert held.execute(sa.text("SELECT 7 WHERE false"), {}).first() is None
    with pytest.raises(sa.exc.NoResultFound):
        held.execute(sa.text("SELECT 1 WHERE false"), {}).one()


def test_the_store_claims_and_completes_through_it(
    held: StatementConnection, engine: Engine
) -> None:
    with engine.begin() as conn:
        store.add_host(conn, HostSpec(name="held-h1", capacity=6))
        ids = store.insert_jobs(conn, [NewJob("noop")] * 3, default_max_attempts=3).ids
        store.assign_jobs(conn, [(i, "held-h1") for i in ids])
    claim = store.claim_jobs(held, "held-h1", 2)
    assert [j.id for j in claim.jobs] == ids[:2] and claim.more
    moved = store.complete_jobs(held, "held-h1", [(j.id, j.attempt, {"n": 1}) for j in claim.jobs])
    assert moved == ids[:2]
    # Completed once: the same outcomes again move nothing.
    assert store.complete_jobs(held, "held-h1", [(ids[0], 1, {})]) == []
    with engine.connect() as conn:
        statuses = conn.execute(
            sa.text("SELECT id, status FROM jobs WHERE id = ANY(:ids) ORDER BY id"), {"ids": ids}
        ).all()
    assert [s for _, s in statuses] == ["completed", "completed", "queued"]


def test_a_backend_ended_while_idle_is_replaced_without_an_error(
    held: StatementConnection, clock: Clock, engine: Engine
) -> None:
    dead = backend_pid(held)
    terminate(engine, dead)
    clock.now += 5
    assert backend_pid(held) != dead


def test_a_backend_ended_in_use_fails_once_then_is_replaced(
    held: StatementConnection, clock: Clock, engine: Engine
) -> None:
    dead = backend_pid(held)
    terminate(engine, dead)
    clock.now += 0.5  # used a moment ago: not pinged, so the statement meets the dead backend
    with pytest.raises(DatabaseUnavailable):
        backend_pid(held)
    assert backend_pid(held) != dead


def test_a_missing_table_is_an_out_of_date_schema(held: StatementConnection) -> None:
    with pytest.raises(SchemaOutOfDate, match="scrapefleet db upgrade"):
        held.execute(sa.text("SELECT * FROM no_such_table"), {})
    assert backend_pid(held) > 0  # the connection is still good


def test_behind_a_transaction_pooler_nothing_is_prepared(database_url: str) -> None:
    settings = load_settings(None, database_pooler="pgbouncer")
    pooled = StatementConnection(database_url, settings, "scrapefleet-test pooled")
    try:
        for _ in range(8):  # psycopg prepares a statement on its fifth run otherwise
            pooled.execute(PID_SQL, {})
        prepared = pooled.execute(sa.text("SELECT count(*) FROM pg_prepared_statements"), {})
        assert prepared.scalar() == 0
    finally:
        pooled.close()
