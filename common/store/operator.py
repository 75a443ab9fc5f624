"""An operator's writes about jobs and the fleet: cancel, retry, pause assignment.

(An operator's host commands, drain, enable, remove, are with the other host writes in hosts.)
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from scrapefleet.common.store.events import set_audit_message
from scrapefleet.common.store.records import JobFilter
from scrapefleet.common.store.statuses import JobStatus, sources, sql_list

__all__ = [
    "CANCEL_SQL",
    "RETRY_SQL",
    "SET_ASSIGNMENT_PAUSED_SQL",
    "cancel_jobs",
    "retry_jobs",
    "set_assignment_paused",
]

# JobFilter.params(): a part given as NULL matches every job; never all three are NULL.
_FILTER = (
    "(CAST(:ids AS bigint[]) IS NULL OR id = ANY(CAST(:ids AS bigint[])))"
    " AND (CAST(:kind AS text) IS NULL OR kind = :kind)"
    " AND (CAST(:host AS text) IS NULL OR host = :host)"
)
# A job already processing is left to finish: cancelling takes only what has not started.
CANCEL_SQL = sa.text(
    f"UPDATE jobs SET status = '{JobStatus.CANCELLED}', finished_at = now()"
    f" WHERE status IN {sql_list(sources('cancel_jobs', JobStatus.CANCELLED))} AND {_FILTER}"
    " RETURNING id"
)
RETRY_SQL = sa.text(
    f"UPDATE jobs SET status = '{JobStatus.PENDING}', attempts = 0, host = NULL,"
    " not_before = NULL, queued_at = NULL, started_at = NULL, finished_at = NULL"
    f" WHERE status IN {sql_list(sources('retry_jobs', JobStatus.PENDING))} AND {_FILTER}"
    " RETURNING id"
)
# The single row is created if a fresh (or truncated) database has none.
SET_ASSIGNMENT_PAUSED_SQL = sa.text(
    "INSERT INTO fleet_control (id, assignment_paused, changed_by, changed_at, reason)"
    " VALUES (true, :paused, :who, now(), :reason)"
    " ON CONFLICT (id) DO UPDATE SET assignment_paused = EXCLUDED.assignment_paused,"
    " changed_by = EXCLUDED.changed_by, changed_at = EXCLUDED.changed_at,"
    " reason = EXCLUDED.reason"
)


def cancel_jobs(conn: Connection, which: JobFilter) -> list[int]:
    """pending or queued -> cancelled. A job already processing is left to finish."""
    params = which.params()
    set_audit_message(conn, "cancelled by operator")
    return sorted(conn.execute(CANCEL_SQL, params).scalars())


def retry_jobs(conn: Connection, which: JobFilter) -> list[int]:
    """failed (or cancelled) -> pending with a fresh set of attempts."""
    params = which.params()
    set_audit_message(conn, "retried by operator")
    return sorted(conn.execute(RETRY_SQL, params).scalars())


def set_assignment_paused(conn: Connection, paused: bool, who: str, reason: str | None) -> None:
    """Pause or resume assignment for the whole fleet; the producer reads it every cycle."""
    conn.execute(SET_ASSIGNMENT_PAUSED_SQL, {"paused": paused, "who": who, "reason": reason})
