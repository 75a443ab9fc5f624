"""The producer stores every host's report in one statement, and still writes what the per-host
path wrote: a run of failures ended, a change of browser state, the host back to active."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common.errors import ProbeError
from scrapefleet.common.host_status import HostStatus
from scrapefleet.producer.daemon import Producer
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
        producer_settings(database_url, tmp_path, probe_failures_offline=1),
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
