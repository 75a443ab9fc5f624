"""What the producer's probes learn about a host: its report, or one more failure in a row."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy.engine import Connection

from scrapefleet.common.status.document import HostStatus
from scrapefleet.common.store.events import record_host_event
from scrapefleet.common.store.sql_text import statement

__all__ = [
    "PROBES_SUCCEEDED_SQL",
    "PROBE_FAILED_SQL",
    "PROBE_SUCCEEDED_SQL",
    "record_probe_failure",
    "record_probe_success",
    "record_probe_successes",
]

# Returns the values before the report, for the events that mark a change.
PROBE_SUCCEEDED_SQL = statement(
    """
WITH old AS (
  SELECT name, probe_failures, last_probe_error, browser_state, browser_limit, kinds
  FROM hosts
  WHERE name = :name FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE hosts h SET last_seen_at = now(), probe_failures = 0,
  last_probe_error = NULL, reported_running = :running,
  memory_available_bytes = :memory, boot_id = :boot_id,
  browser_state = :browser, browser_reason = :browser_reason,
  browser_retry_at = to_timestamp(CAST(:browser_retry_at AS double precision)),
  browser_limit = :browser_limit, browser_limit_reason = :browser_limit_reason,
  kinds = CAST(:kinds AS jsonb)
FROM old
WHERE h.name = old.name
RETURNING old.probe_failures, old.last_probe_error, old.browser_state, old.browser_limit,
  old.kinds
"""
)
# The same for many hosts in one statement: a producer of a thousand hosts would otherwise spend
# most of its cycle on a round trip (and a savepoint) per host. Rows locked in name order, as
# every other writer of many host rows does.
# SKIP LOCKED in all three: a consumer's session may hold its own row as long as it likes (its
# role sets its own statement_timeout), and the producer must not wait for it, nor the other
# hosts' health with it: a row held is left for the next cycle.
PROBES_SUCCEEDED_SQL = statement(
    """
WITH report AS (
  SELECT * FROM unnest(CAST(:names AS text[]), CAST(:running AS int[]),
      CAST(:memory AS bigint[]), CAST(:boot_ids AS text[]), CAST(:browser AS text[]),
      CAST(:browser_reason AS text[]), CAST(:browser_retry_at AS double precision[]),
      CAST(:browser_limit AS int[]), CAST(:browser_limit_reason AS text[]),
      CAST(:kinds AS text[]))
    AS r(name, running, memory, boot_id, browser, browser_reason, browser_retry_at,
         browser_limit, browser_limit_reason, kinds)
), old AS (
  SELECT h.name, h.probe_failures, h.last_probe_error, h.browser_state,
    h.browser_limit, h.kinds
  FROM hosts h JOIN report r ON r.name = h.name
  ORDER BY h.name
  FOR NO KEY UPDATE OF h SKIP LOCKED
)
UPDATE hosts h SET last_seen_at = now(), probe_failures = 0,
  last_probe_error = NULL, reported_running = r.running,
  memory_available_bytes = r.memory, boot_id = r.boot_id,
  browser_state = r.browser, browser_reason = r.browser_reason,
  browser_retry_at = to_timestamp(r.browser_retry_at),
  browser_limit = r.browser_limit, browser_limit_reason = r.browser_limit_reason,
  kinds = CAST(r.kinds AS jsonb)
FROM old JOIN report r ON r.name = old.name
WHERE h.name = old.name
RETURNING h.name, old.probe_failures, old.last_probe_error, old.browser_state,
  old.browser_limit, old.kinds
"""
)
PROBE_FAILED_SQL = statement(
    """
WITH free AS (
  SELECT name FROM hosts WHERE name = :name FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE hosts h SET probe_failures = h.probe_failures + 1, last_probe_error = :reason
FROM free
WHERE h.name = free.name
RETURNING h.probe_failures
"""
)


def record_probe_success(conn: Connection, name: str, status: HostStatus) -> bool:
    """Store what the host reported; the end of a run of failures, and every change of what its
    browser stack can do, go to host_events. False when nothing was stored (no row, or the row
    held by another session: left for the next cycle)."""
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
            "browser_limit": status.browser_limit,
            "browser_limit_reason": status.browser_limit_reason,
            "kinds": _kinds_json(status),
        },
    ).first()
    if before is None:
        return False
    _success_events(conn, name, status, before)
    return True


def record_probe_successes(conn: Connection, reports: Mapping[str, HostStatus]) -> list[str]:
    """record_probe_success for many hosts in one statement; returns the names stored (a name
    without a row is skipped). One value the database refuses fails them all: the caller then
    stores them one by one. A row another session holds is skipped, as if it had none."""
    if not reports:
        return []
    names = sorted(reports)
    columns: dict[str, list[Any]] = {
        "names": names,
        "running": [reports[n].running for n in names],
        "memory": [reports[n].memory_available_bytes for n in names],
        "boot_ids": [reports[n].boot_id for n in names],
        "browser": [reports[n].browser for n in names],
        "browser_reason": [reports[n].browser_reason for n in names],
        "browser_retry_at": [reports[n].browser_retry_at for n in names],
        "browser_limit": [reports[n].browser_limit for n in names],
        "browser_limit_reason": [reports[n].browser_limit_reason for n in names],
        "kinds": [_kinds_json(reports[n]) for n in names],
    }
    stored = []
    for before in conn.execute(PROBES_SUCCEEDED_SQL, columns).all():
        _success_events(conn, before.name, reports[before.name], before)
        stored.append(before.name)
    return stored


def _kinds_json(status: HostStatus) -> str | None:
    return None if status.kinds is None else json.dumps(status.kinds, sort_keys=True)


def _success_events(conn: Connection, name: str, status: HostStatus, before: Any) -> None:
    if before.probe_failures > 0:
        record_host_event(
            conn,
            name,
            "probe_ok",
            message=f"probe succeeds after {before.probe_failures} failure(s)",
            details={"last_error": before.last_probe_error},
        )
    if status.browser_limit is not None and before.browser_limit != status.browser_limit:
        # The trail of a night's slow hours: when the host took fewer browser jobs, and why.
        record_host_event(
            conn,
            name,
            "browser_limit",
            message=status.browser_limit_reason
            or f"taking {status.browser_limit} browser jobs at once",
            details={"from": before.browser_limit, "to": status.browser_limit},
        )
    if status.kinds is not None and before.kinds != status.kinds:
        # The trail of a rollout: when a host began to run a kind, or another version of it.
        record_host_event(
            conn,
            name,
            "kinds",
            message=_kinds_change(before.kinds or {}, status.kinds),
            details={"from": before.kinds, "to": status.kinds},
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


def _kinds_change(old: dict[str, Any], new: dict[str, str | None]) -> str:
    """One line: the kinds added, removed and upgraded (the first few of each)."""
    added = sorted(set(new) - set(old))
    gone = sorted(set(old) - set(new))
    moved = sorted(k for k in set(old) & set(new) if old[k] != new[k])
    parts = [
        f"{label} {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}"
        for label, names in (("runs", added), ("no longer runs", gone), ("new version of", moved))
        if names
    ]
    return "; ".join(parts) or "kinds unchanged"


def record_probe_failure(conn: Connection, name: str, reason: str) -> int | None:
    """Count one more consecutive failure; returns the count (None: not counted, the row is
    gone or held by another session). The first failure of a run goes to host_events with its
    reason (later ones only update hosts.last_probe_error: one event per tick would bury the
    trail)."""
    failures = conn.execute(PROBE_FAILED_SQL, {"name": name, "reason": reason}).scalar()
    if failures is None:
        return None
    if failures == 1:
        record_host_event(conn, name, "probe_failed", message=reason)
    return int(failures)
