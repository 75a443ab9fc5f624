"""A large submit leaves the planner a true picture of the pending jobs: on a fresh table (the
statistics say none are pending) the producer's pending read is the ordered index scan at once,
not a read and sort of every pending row each cycle until autovacuum analyzes the table. The
refresh runs with the producer's own role and is refused to a consumer's."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.store import NewJob
from scrapefleet.common.store.operating.submit import REFRESH_STATISTICS_AFTER_ROWS
from tests.integration.test_db_roles import (  # noqa: F401  (fixtures)
    Fleet,
    admin,
    fleet,
    own,
    refused,
)
from tests.throwaway_db import throwaway_database

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

NONE: list[str] = []


def _nodes(plan: object) -> list[str]:
    """Every node type and index name of an EXPLAIN (FORMAT JSON) plan."""
    found: list[str] = []

    def walk(node: dict[str, object]) -> None:
        found.append(str(node["Node Type"]))
        if "Index Name" in node:
            found.append(str(node["Index Name"]))
        for child in node.get("Plans", []):  # type: ignore[attr-defined]
            walk(child)

    walk(plan[0]["Plan"])  # type: ignore[index]
    return found


def _pending_read_plan(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        statement = f"EXPLAIN (FORMAT JSON) {store.LOCK_PENDING_SQL.text}"
        params = {"limit": 60, "skip_keys": NONE, "skip_kinds": NONE, **store.NO_HOLDS.params()}
        return _nodes(conn.execute(sa.text(statement), params).scalar_one())


def _submit(engine: Engine, count: int) -> None:
    with engine.begin() as conn:
        store.insert_jobs(conn, [NewJob("noop")] * count, default_max_attempts=3)


def test_the_pending_read_is_an_ordered_index_scan_right_after_a_big_submit() -> None:
    with throwaway_database("SCRAPEFLEET_TEST_DATABASE_URL", "scrapefleet_stats") as url:
        engine = sa.create_engine(url)
        try:
            with engine.begin() as conn:  # what a fresh table's statistics say: nothing pending
                conn.execute(sa.text("ANALYZE jobs"))
            _submit(engine, REFRESH_STATISTICS_AFTER_ROWS * 10)
            nodes = _pending_read_plan(engine)
            assert "jobs_pending_idx" in nodes and "Sort" not in nodes, nodes
        finally:
            engine.dispose()


def test_a_small_submit_leaves_the_statistics_alone() -> None:
    with throwaway_database("SCRAPEFLEET_TEST_DATABASE_URL", "scrapefleet_stats") as url:
        engine = sa.create_engine(url)
        try:
            _submit(engine, REFRESH_STATISTICS_AFTER_ROWS - 1)
            with engine.connect() as conn:
                analyzed = conn.execute(
                    sa.text(
                        "SELECT analyze_count + autoanalyze_count FROM pg_stat_user_tables"
                        " WHERE relname = 'jobs'"
                    )
                ).scalar_one()
            assert analyzed == 0
        finally:
            engine.dispose()


def test_the_producer_role_refreshes_and_a_consumer_role_may_not(
    fleet: Fleet,  # noqa: F811
    admin: Engine,  # noqa: F811
    own: Engine,  # noqa: F811
) -> None:
    producer = sa.create_engine(fleet.url(fleet.names.producer))
    try:
        _submit(producer, REFRESH_STATISTICS_AFTER_ROWS)  # not the owner: through the function
        assert "consumer host's role" in refused(own, "SELECT refresh_job_statistics()")
    finally:
        producer.dispose()
