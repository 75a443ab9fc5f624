"""An operator's writes about jobs and the fleet: cancel, retry, pause assignment.

(An operator's host commands, drain, enable, remove, are with the other host writes in hosts.)
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

from scrapefleet.common.errors import SubmitError
from scrapefleet.common.settings import setting_default
from scrapefleet.common.store.events import set_audit_message
from scrapefleet.common.store.operating.hosts import operator_waits
from scrapefleet.common.store.records import JobFilter
from scrapefleet.common.store.sql_text import statement
from scrapefleet.common.store.statuses import JobStatus, sources

__all__ = [
    "CANCEL_SOURCES",
    "CANCEL_SQL",
    "JOB_FILTER_SQL",
    "RETRY_INCLUDING_CANCELLED_SQL",
    "RETRY_SQL",
    "SET_ASSIGNMENT_PAUSED_SQL",
    "STOP_SQL",
    "cancel_jobs",
    "retry_jobs",
    "retry_sources",
    "set_assignment_paused",
    "stop_jobs",
]

# JobFilter.params(): a part given as NULL matches every job; never all three are NULL. The
# statements below hold it word for word (a test checks), and so do the reads that count or
# explain a command (common.reads.queries).
JOB_FILTER_SQL = """(CAST(:ids AS bigint[]) IS NULL OR id = ANY(CAST(:ids AS bigint[])))
  AND (CAST(:kind AS text) IS NULL OR kind = :kind)
  AND (CAST(:host AS text) IS NULL OR host = :host)"""
# Each statement's statuses are its move's sources in statuses.TRANSITIONS (a test checks).
# A job already processing is left to finish: cancelling takes only what has not started.
CANCEL_SOURCES = sources("cancel_jobs", JobStatus.CANCELLED)
CANCEL_SQL = statement(
    """
UPDATE jobs SET status = {job.cancelled}, finished_at = now()
WHERE status IN ({job.pending}, {job.queued})
  AND (CAST(:ids AS bigint[]) IS NULL OR id = ANY(CAST(:ids AS bigint[])))
  AND (CAST(:kind AS text) IS NULL OR kind = :kind)
  AND (CAST(:host AS text) IS NULL OR host = :host)
RETURNING id
"""
)
_RETRY_SOURCES = sources("retry_jobs", JobStatus.PENDING)
# A running job: cancelled here; its consumer sees at its next heartbeat that the job is no
# longer its own, ends the attempt's browser session and drops its late outcome. Until it
# confirms that end (or for :linger seconds) the job's lock key stays held.
STOP_SQL = statement(
    """
UPDATE jobs SET status = {job.cancelled}, finished_at = now(),
  last_error = 'stopped by operator',
  lingering_host = host, lingering_claim = claims,
  lingering_until = now() + make_interval(secs => :linger)
WHERE status IN ({job.processing}) AND id = ANY(:ids)
RETURNING id
"""
)


def retry_sources(include_cancelled: bool) -> tuple[JobStatus, ...]:
    """What a retry moves: failed jobs; cancelled ones only when asked, since someone
    cancelled them on purpose and a broad filter must not bring them back by surprise."""
    return tuple(
        s
        for s in _RETRY_SOURCES
        if isinstance(s, JobStatus) and (include_cancelled or s is not JobStatus.CANCELLED)
    )


# A retry: a fresh set of attempts. Failed jobs; cancelled ones too only when the operator says
# so (retry_sources).
RETRY_SQL = statement(
    """
UPDATE jobs SET status = {job.pending}, attempts = 0, blocks = 0, host = NULL,
  not_before = NULL, queued_at = NULL, started_at = NULL, finished_at = NULL
WHERE status IN ({job.failed})
  AND (CAST(:ids AS bigint[]) IS NULL OR id = ANY(CAST(:ids AS bigint[])))
  AND (CAST(:kind AS text) IS NULL OR kind = :kind)
  AND (CAST(:host AS text) IS NULL OR host = :host)
RETURNING id
"""
)
RETRY_INCLUDING_CANCELLED_SQL = statement(
    """
UPDATE jobs SET status = {job.pending}, attempts = 0, blocks = 0, host = NULL,
  not_before = NULL, queued_at = NULL, started_at = NULL, finished_at = NULL
WHERE status IN ({job.failed}, {job.cancelled})
  AND (CAST(:ids AS bigint[]) IS NULL OR id = ANY(CAST(:ids AS bigint[])))
  AND (CAST(:kind AS text) IS NULL OR kind = :kind)
  AND (CAST(:host AS text) IS NULL OR host = :host)
RETURNING id
"""
)
# The single row is created if a fresh (or truncated) database has none.
# Only a change is written (and stamped with who and why): pausing a paused fleet or resuming
# one that is not paused leaves the row, and its history, as it was. With no row yet the fleet
# has never been paused, so a resume inserts nothing.
SET_ASSIGNMENT_PAUSED_SQL = statement(
    """
INSERT INTO fleet_control (id, assignment_paused, changed_by, changed_at, reason)
SELECT true, :paused, :who, now(), :reason
WHERE :paused OR EXISTS (SELECT 1 FROM fleet_control WHERE assignment_paused)
ON CONFLICT (id) DO UPDATE SET
  assignment_paused = EXCLUDED.assignment_paused, changed_by = EXCLUDED.changed_by,
  changed_at = EXCLUDED.changed_at, reason = EXCLUDED.reason
WHERE fleet_control.assignment_paused <> EXCLUDED.assignment_paused
RETURNING id
"""
)


# A host's consumer may hold its own jobs' rows (queued, running) as long as it likes: the
# operator's commands wait a few seconds for them, then say so (common.store.operating.hosts).
_BUSY = "some of these jobs are locked by another session (their host's consumer?): try again"


def cancel_jobs(conn: Connection, which: JobFilter) -> list[int]:
    """pending or queued -> cancelled. A job already processing is left to finish."""
    params = which.params()
    set_audit_message(conn, "cancelled by operator")
    with operator_waits(conn, SubmitError(_BUSY)):
        return sorted(conn.execute(CANCEL_SQL, params).scalars())


def stop_jobs(
    conn: Connection, ids: list[int], linger_s: float = setting_default("lock_linger_s")
) -> list[int]:
    """processing -> cancelled, for the jobs named: their hosts end the attempts (their lock
    keys held until they confirm it, or for ``linger_s``)."""
    set_audit_message(conn, "stopped by operator")
    with operator_waits(conn, SubmitError(_BUSY)):
        return sorted(conn.execute(STOP_SQL, {"ids": list(ids), "linger": linger_s}).scalars())


def retry_jobs(conn: Connection, which: JobFilter, *, include_cancelled: bool = False) -> list[int]:
    """failed (and, with ``include_cancelled``, cancelled) -> pending with a fresh set of
    attempts."""
    params = which.params()
    set_audit_message(conn, "retried by operator")
    statement = RETRY_INCLUDING_CANCELLED_SQL if include_cancelled else RETRY_SQL
    with operator_waits(conn, SubmitError(_BUSY)):
        return sorted(conn.execute(statement, params).scalars())


def set_assignment_paused(conn: Connection, paused: bool, who: str, reason: str | None) -> bool:
    """Pause or resume assignment for the whole fleet; the producer reads it every cycle.
    False when it already was so (nothing written)."""
    params = {"paused": paused, "who": who, "reason": reason}
    return conn.execute(SET_ASSIGNMENT_PAUSED_SQL, params).first() is not None
