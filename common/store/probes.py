"""What the producer's probes learn about a host: its report, or one more failure in a row."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from scrapefleet.common.host_status import HostStatus
from scrapefleet.common.store.events import record_host_event

__all__ = [
    "PROBE_FAILED_SQL",
    "PROBE_SUCCEEDED_SQL",
    "record_probe_failure",
    "record_probe_success",
]

# Returns the values before the report, for the events that mark a change.
PROBE_SUCCEEDED_SQL = sa.text(
    "WITH old AS (SELECT name, probe_failures, last_probe_error, browser_state FROM hosts"
    "   WHERE name = :name FOR UPDATE)"
    " UPDATE hosts h SET last_seen_at = now(), probe_failures = 0,"
    "   last_probe_error = NULL, reported_running = :running,"
    "   memory_available_bytes = :memory, boot_id = :boot_id,"
    "   browser_state = :browser, browser_reason = :browser_reason,"
    "   browser_retry_at = to_timestamp(CAST(:browser_retry_at AS double precision))"
    " FROM old WHERE h.name = old.name"
    " RETURNING old.probe_failures, old.last_probe_error, old.browser_state"
)
PROBE_FAILED_SQL = sa.text(
    "UPDATE hosts SET probe_failures = probe_failures + 1, last_probe_error = :reason"
    " WHERE name = :name RETURNING probe_failures"
)


def record_probe_success(conn: Connection, name: str, status: HostStatus) -> None:
    """Store what the host reported; the end of a run of failures, and every change of what its
    browser stack can do, go to host_events."""
    before = conn.execute(
        PROBE_SUCCEEDED_SQL,
        {
            "name": name,
            "running": status.running,
            "memory": status.memory_available_bytes,
            "boot_id": status.boot_id,
            "browser": status.browser,
            "browser_reason": status.browser_reason,
            "browser_retry_at": status.browser_retry_at,
        },
    ).first()
    if before is None:
        return
    if before.probe_failures > 0:
        record_host_event(
            conn,
            name,
            "probe_ok",
            message=f"probe succeeds after {before.probe_failures} failure(s)",
            details={"last_error": before.last_probe_error},
        )
    if status.browser is not None and before.browser_state != status.browser:
        record_host_event(
            conn,
            name,
            "browser",
            from_state=before.browser_state,
            to_state=status.browser,
            message=status.browser_reason,
        )


def record_probe_failure(conn: Connection, name: str, reason: str) -> int:
    """Count one more consecutive failure; returns the count. The first failure of a run goes
    to host_events with its reason (later ones only update hosts.last_probe_error: one event
    per tick would bury the trail)."""
    failures = conn.execute(PROBE_FAILED_SQL, {"name": name, "reason": reason}).scalar_one()
    if failures == 1:
        record_host_event(conn, name, "probe_failed", message=reason)
    return int(failures)
