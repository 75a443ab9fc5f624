"""The producer stores every host's report in one statement, and still writes what the per-host
path wrote: a run of failures ended, a change of browser state, the host back to active."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common.errors import ProbeError
from scrapefleet.common.status.document import HostStatus
from scrapefleet.producer.producer_daemon import Producer
from tests.host_status_factory import status_for
from tests.integration.producer_helpers import add_hosts, producer_settings
from tests.integration.test_health_isolation import FixedProbe

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


def test_batched_reports_write_events_moves_and_failures(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    names = [f"b{i:02d}" for i in range(20)]
    add_hosts(engine, dict.fromkeys(names, 2))
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE hosts SET state = 'offline', probe_failures = 3,"
                " last_probe_error = 'unreachable' WHERE name = 'b00'"
            )
        )
        conn.execute(sa.text("UPDATE hosts SET browser_state = 'ready' WHERE name = 'b01'"))
    results: dict[str, HostStatus | ProbeError] = {name: status_for(name) for name in names}
    results["b01"] = status_for("b01", browser="failing", browser_reason="grid down")
    results["b02"] = ProbeError("connection refused")
    producer = Producer(
        producer_settings(database_url, tmp_path, probe_failures_offline=1, probe_start_grace_s=0),
        engine,
        FixedProbe(results),
    )
    try:
        report = producer.run_cycle()
    finally:
        producer.stop()
    with engine.connect() as conn:
        hosts = {
            r.name: r
            for r in conn.execute(
                sa.text(
                    "SELECT name, state, probe_failures, last_probe_error, last_seen_at,"
                    " browser_state FROM hosts"
                )
            )
        }
        events = conn.execute(
            sa.text("SELECT host, event FROM host_events WHERE event <> 'state' ORDER BY id")
        ).all()
    assert set(report.transitions) == {("b00", "offline", "active"), ("b02", "active", "offline")}
    assert hosts["b00"].state == "active" and hosts["b00"].probe_failures == 0
    assert hosts["b00"].last_probe_error is None
    assert hosts["b01"].browser_state == "failing"
    assert hosts["b02"].probe_failures == 1 and hosts["b02"].last_seen_at is None
    assert all(hosts[n].last_seen_at is not None for n in names if n != "b02")
    assert ("b00", "probe_ok") in events and ("b01", "browser") in events
    assert ("b02", "probe_failed") in events


def test_a_hosts_browser_limit_reaches_its_row_host_load_its_events_and_the_plan(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    """A host that takes fewer browser jobs says why in host_load, leaves the change in its
    events, and the producer gives it no more browser jobs than that."""
    add_hosts(engine, {"slow": 6})
    why = "taking 2 of 6 browser jobs: CPU pressure 91% in 8 of the last 10 samples"
    status = status_for("slow", browser="ready", browser_limit=2, browser_limit_reason=why)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO jobs (kind, payload, status, needs_browser, max_attempts)"
                " SELECT 'fetch_page', '{}'::jsonb, 'pending', true, 3 FROM generate_series(1, 5)"
            )
        )
    producer = Producer(
        producer_settings(database_url, tmp_path), engine, FixedProbe({"slow": status})
    )
    try:
        producer.run_cycle()
        producer.run_cycle()  # the second plans on the first's probe
    finally:
        producer.stop()
    with engine.connect() as conn:
        row = conn.execute(
            sa.text("SELECT browser_limit, browser_limit_reason FROM host_load WHERE host = 'slow'")
        ).one()
        event = conn.execute(
            sa.text("SELECT message, details FROM host_events WHERE event = 'browser_limit'")
        ).one()
        queued = conn.execute(
            sa.text("SELECT count(*) FROM jobs WHERE host = 'slow' AND status = 'queued'")
        ).scalar_one()
    assert (row.browser_limit, row.browser_limit_reason) == (2, why)
    assert event.message == why and event.details == {"from": None, "to": 2}
    assert queued == 2
