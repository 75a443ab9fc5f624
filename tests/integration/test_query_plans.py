"""With 1,000,000 job rows, the producer's pending query (and its rate-limit reads) and a
consumer's claim stay index scans; so do the producer's statements as its lock session runs
them, on one generic plan each (producer.leader.LEADER_PLANNING)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import Connection, Engine

from scrapefleet.common import store
from scrapefleet.common.reads import queries, results

pytestmark = pytest.mark.integration


def _plan(conn: Connection, statement: sa.TextClause, **params: object) -> str:
    params = {**store.NO_HOLDS.params(), **params}  # nothing paused by an operator
    plan = conn.execute(sa.text(f"EXPLAIN (FORMAT JSON) {statement.text}"), params).scalar_one()
    return json.dumps(plan)


def _generic_plan(conn: Connection, statement: sa.TextClause, **params: object) -> str:
    """The plan PostgreSQL keeps for ``statement`` prepared under the leader's planning: planned
    without its parameters' values."""
    params = {**store.NO_HOLDS.params(), **params}  # nothing paused by an operator
    names: list[str] = []

    def positional(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = re.sub(r"(?<!:):(\w+)", positional, statement.text)
    driver = conn.connection.driver_connection
    values = ", ".join(sql.Literal(params[n]).as_string(driver) for n in names)
    conn.execute(sa.text("SET LOCAL plan_cache_mode = force_generic_plan"))
    conn.exec_driver_sql(f"PREPARE generic AS {text}")
    try:
        args = f"({values})" if names else ""
        plan = conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) EXECUTE generic{args}").scalar_one()
    finally:
        conn.exec_driver_sql("DEALLOCATE generic")
    return json.dumps(plan)


def _scans(plan: str) -> set[tuple[str, str]]:
    """(node type, relation) of every scan in a JSON plan."""

    def nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield node
        for child in node.get("Plans", []):
            yield from nodes(child)

    return {
        (n["Node Type"], n["Relation Name"])
        for n in nodes(json.loads(plan)[0]["Plan"])
        if "Relation Name" in n
    }


SEQ_SCAN_ON_JOBS = ("Seq Scan", "jobs")


@pytest.mark.timeout(300)
def test_hot_queries_use_partial_indexes_at_one_million_rows(engine: Engine) -> None:
    with engine.begin() as conn:
        # History needs no audit rows here; filling 1M rows through the trigger only costs time.
        conn.execute(sa.text("ALTER TABLE jobs DISABLE TRIGGER USER"))
        conn.execute(
            sa.text(
                "INSERT INTO jobs (kind, status, host, priority, lock_key, finished_at,"
                " needs_browser, rate_key, started_at)"
                " SELECT CASE WHEN n % 300 = 0 THEN 'fetch_page' ELSE 'noop' END,"
                "  CASE WHEN n % 100 = 0 THEN 'pending' WHEN n % 1000 = 1 THEN 'queued'"
                "       WHEN n % 1000 = 2 THEN 'processing' ELSE 'completed' END,"
                "  CASE WHEN n % 100 = 0 THEN NULL ELSE 'h' || (n % 10) END,"
                "  n % 3,"
                "  CASE WHEN n % 200 = 0 THEN 'account-' || (n % 997) END,"
                "  CASE WHEN n % 100 > 2 THEN now() END,"
                "  n % 300 = 0,"
                "  'site-' || (n % 300) || '.test',"
                "  CASE WHEN n % 100 <> 0 THEN now() - (n || ' seconds')::interval END"
                " FROM generate_series(1, 1000000) AS n"
            )
        )
        conn.execute(sa.text("ALTER TABLE jobs ENABLE TRIGGER USER"))
    with engine.connect() as conn:
        conn.execute(sa.text("ANALYZE jobs"))
        assert conn.execute(sa.text("SELECT count(*) FROM jobs")).scalar_one() == 1_000_000
        none: list[str] = []
        pending = _plan(conn, store.LOCK_PENDING_SQL, limit=240, skip_keys=none, skip_kinds=none)
        no_browser = _plan(
            conn, store.LOCK_PENDING_NO_BROWSER_SQL, limit=240, skip_keys=none, skip_kinds=none
        )
        claim = _plan(conn, store.CLAIM_SQL, host="h3", limit=6, browser_limit=6, running=[])
        in_flight = _plan(conn, queries.FLEET_SNAPSHOT_SQL)
        # Rate limits: a key or kind with a little budget left, read for it alone; the
        # in-flight figures; the trailing minute's use.
        key = ["site-7.test"]
        tight_key = _plan(
            conn, store.TIGHT_KEYS_SQL, names=key, budgets=[2], skip=none, browser_ok=True
        )
        tight_kind = _plan(
            conn, store.TIGHT_KINDS_SQL, names=["noop"], budgets=[2], skip=none, browser_ok=True
        )
        rate_in_flight = _plan(conn, store.RATE_IN_FLIGHT_SQL)
        rate_window = _plan(conn, store.RATE_WINDOW_SQL)
        skipping = _plan(conn, store.LOCK_PENDING_SQL, limit=240, skip_keys=key, skip_kinds=none)
        # A results listing: matching_jobs() inlined, newest first by the key of jobs.
        newest = results.ResultFilter(limit=50)
        listing = _plan(conn, results.LIST_RESULTS_SQL, **newest.params(), limit=50)
    with engine.begin() as conn:
        generic = [
            _generic_plan(conn, store.LOCK_PENDING_SQL, limit=240, skip_keys=none, skip_kinds=none),
            _generic_plan(
                conn, store.LOCK_PENDING_NO_BROWSER_SQL, limit=240, skip_keys=key, skip_kinds=none
            ),
            _generic_plan(conn, queries.FLEET_SNAPSHOT_SQL),
            _generic_plan(
                conn, store.TIGHT_KEYS_SQL, names=key, budgets=[2], skip=none, browser_ok=True
            ),
            _generic_plan(
                conn, store.TIGHT_KINDS_SQL, names=["noop"], budgets=[2], skip=none, browser_ok=True
            ),
            # No host takes a browser job now: the same index, browser jobs filtered out.
            _generic_plan(
                conn, store.TIGHT_KEYS_SQL, names=key, budgets=[2], skip=none, browser_ok=False
            ),
            _generic_plan(conn, store.RATE_IN_FLIGHT_SQL),
            _generic_plan(conn, store.RATE_WINDOW_SQL),
            # The full cycle's rescue and requeue, on the same session.
            _generic_plan(
                conn, store.RESCUE_SQL, stale=60.0, reason="rescued", max_releases=5, linger=60.0
            ),
            _generic_plan(conn, store.REQUEUE_FROM_UNAVAILABLE_SQL, grace=60.0),
        ]
    assert "jobs_pending_idx" in pending, pending
    # A proxy pool's condition reads the proxies once per statement (a hashed subplan): a scan
    # of that small table is fine; of jobs, never.
    assert SEQ_SCAN_ON_JOBS not in _scans(pending), pending
    assert {name for kind, name in _scans(pending) if kind == "Seq Scan"} <= {
        "proxies",
        "proxy_pools",
    }, pending
    assert "jobs_pending_no_browser_idx" in no_browser, no_browser
    assert SEQ_SCAN_ON_JOBS not in _scans(no_browser), no_browser
    assert "jobs_in_flight_by_host_idx" in claim and "Seq Scan" not in claim, claim
    assert "jobs_in_flight_by_host_idx" in in_flight, in_flight
    assert SEQ_SCAN_ON_JOBS not in _scans(in_flight), in_flight
    assert "jobs_pending_by_rate_key_idx" in tight_key, tight_key
    for plan in (tight_key, tight_kind, rate_in_flight, rate_window, skipping):
        assert SEQ_SCAN_ON_JOBS not in _scans(plan), plan
    assert "jobs_started_at_idx" in rate_window, rate_window
    assert "jobs_pending_idx" in skipping, skipping
    assert "Function Scan" not in listing, listing
    assert ("Index Scan", "jobs") in _scans(listing), listing
    assert SEQ_SCAN_ON_JOBS not in _scans(listing), listing
    assert "jobs_pending_idx" in generic[0], generic[0]
    for plan in (generic[3], generic[5]):  # by key, with and without browser jobs
        assert "jobs_pending_by_rate_key_idx" in plan, plan
    for plan in generic:
        assert SEQ_SCAN_ON_JOBS not in _scans(plan), plan
