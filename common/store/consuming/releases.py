"""Jobs handed back: a release ends an attempt its host cut short, a requeue returns a queued
job its host will not run. Both go back to pending for the other hosts.

A release gives the attempt back: the host failed, not the job (a stack that would not start,
a consumer that died or was stopped mid-attempt, a rescue). It never spends an attempt.
``releases`` counts them all; ``page_releases`` only those the job's page caused (the browser
died under it), and only those are bounded (PAGE_RELEASES_EXHAUSTED_SQL): a page that kills
every browser must end somewhere, a host's own faults never fail a job.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from scrapefleet.common.constants import MAX_RELEASES_PER_JOB
from scrapefleet.common.settings import setting_default
from scrapefleet.common.store.events import set_audit_message
from scrapefleet.common.store.records import bounded_error
from scrapefleet.common.store.sql_text import statement

__all__ = [
    "RECOVER_SQL",
    "RELEASE_SQL",
    "REQUEUE_FROM_UNAVAILABLE_SQL",
    "REQUEUE_HOST_BROWSER_SQL",
    "REQUEUE_HOST_SQL",
    "RESCUE_SQL",
    "recover_host_jobs",
    "release_job",
    "requeue_from_unavailable_hosts",
    "requeue_host_browser_jobs",
    "requeue_host_queued",
    "rescue_stale_processing",
]

# A release is an attempt given back: processing -> pending, ``attempts`` back by one,
# ``releases`` up by one. Three statements, one per choice of rows:
#
# RELEASE_SQL: one attempt, only while this host still owns it; its thread may still run (a
# consumer that lost the database for too long gave it up, see consumer.serving). The attempt's
# own error (if any) stays while the job has releases left. ``:by_page``: the job's page
# caused it (the browser died under it), so it counts towards the bound
# (store.statuses.PAGE_RELEASES_EXHAUSTED_SQL): the one past ``:max_releases`` fails the job.
# ``:still_running``: nobody on the host confirmed the attempt's end, so the job's lock key
# stays held until its host confirms (attempts.attempts_ended) or for ``:linger`` seconds.
RELEASE_SQL = statement(
    """
UPDATE jobs SET
  status = CASE WHEN (CAST(:by_page AS boolean) AND page_releases >= :max_releases)
    THEN {job.failed} ELSE {job.pending} END,
  host = CASE WHEN (CAST(:by_page AS boolean) AND page_releases >= :max_releases)
    THEN host END,
  finished_at = CASE WHEN (CAST(:by_page AS boolean) AND page_releases >= :max_releases)
    THEN now() END,
  last_error = CASE WHEN (CAST(:by_page AS boolean) AND page_releases >= :max_releases)
    THEN :reason || ' (released ' || (page_releases + 1) || ' times by its page)'
    ELSE last_error END,
  attempts = greatest(attempts - 1, 0), releases = releases + 1,
  page_releases = page_releases + CASE WHEN CAST(:by_page AS boolean) THEN 1 ELSE 0 END,
  lingering_host = CASE WHEN CAST(:still_running AS boolean) THEN host ELSE lingering_host END,
  lingering_claim = CASE WHEN CAST(:still_running AS boolean) THEN claims ELSE lingering_claim END,
  lingering_until = CASE WHEN CAST(:still_running AS boolean)
    THEN now() + make_interval(secs => :linger) ELSE lingering_until END,
  started_at = NULL, queued_at = NULL
WHERE id = :id AND status = {job.processing} AND claims = :claim AND host = :host
RETURNING id
"""
)
# RECOVER_SQL: every attempt a host left behind when its consumer died; the reason replaces
# the error, and no release is the page's.
RECOVER_SQL = statement(
    """
UPDATE jobs SET
  status = {job.pending}, host = NULL, finished_at = NULL, last_error = :reason,
  attempts = greatest(attempts - 1, 0), releases = releases + 1,
  started_at = NULL, queued_at = NULL
WHERE status = {job.processing} AND host = :host
RETURNING id
"""
)
# RESCUE_SQL: every attempt whose heartbeat stopped: its consumer is gone, or frozen, or cut
# off from the database while its threads run on. Its lock key lingers
# (docs/attempts-and-locks.md). The producer's statements here take only the rows free now (a
# consumer's session may hold its own jobs' rows for as long as it likes): a row held is left
# for the next cycle, and the producer does not wait.
RESCUE_SQL = statement(
    """
UPDATE jobs SET
  status = {job.pending}, host = NULL, finished_at = NULL, last_error = :reason,
  attempts = greatest(attempts - 1, 0), releases = releases + 1,
  lingering_host = host, lingering_claim = claims,
  lingering_until = now() + make_interval(secs => :linger),
  started_at = NULL, queued_at = NULL
WHERE id IN (
    SELECT id FROM jobs
    WHERE status = {job.processing} AND heartbeat_at < now() - make_interval(secs => :stale)
    FOR NO KEY UPDATE SKIP LOCKED
  )
  AND status = {job.processing} AND heartbeat_at < now() - make_interval(secs => :stale)
RETURNING id
"""
)

# A host's queued jobs back to pending, those free now: its consumer's session may hold them
# (an operator's drain must not wait for it); the consumer's own requeue sees its own locks as
# free.
REQUEUE_HOST_SQL = statement(
    """
UPDATE jobs SET status = {job.pending}, host = NULL, queued_at = NULL
WHERE status = {job.queued} AND host = :host
  AND id IN (
    SELECT id FROM jobs WHERE status = {job.queued} AND host = :host
    FOR NO KEY UPDATE SKIP LOCKED
  )
RETURNING id
"""
)
REQUEUE_HOST_BROWSER_SQL = statement(
    """
UPDATE jobs SET status = {job.pending}, host = NULL, queued_at = NULL
WHERE status = {job.queued} AND host = :host AND needs_browser
  AND id IN (
    SELECT id FROM jobs WHERE status = {job.queued} AND host = :host
    FOR NO KEY UPDATE SKIP LOCKED
  )
RETURNING id
"""
)
# The queued jobs of hosts offline or disabled for longer than a grace period.
REQUEUE_FROM_UNAVAILABLE_SQL = statement(
    """
UPDATE jobs SET status = {job.pending}, host = NULL, queued_at = NULL
WHERE status = {job.queued}
  AND host IN (
    SELECT name FROM hosts WHERE state IN ({host.offline}, {host.disabled})
    AND state_changed_at < now() - make_interval(secs => :grace)
  )
  AND id IN (
    SELECT id FROM jobs
    WHERE status = {job.queued}
      AND host IN (
        SELECT name FROM hosts WHERE state IN ({host.offline}, {host.disabled})
        AND state_changed_at < now() - make_interval(secs => :grace)
      )
    FOR NO KEY UPDATE SKIP LOCKED
  )
RETURNING id
"""
)


def release_job(
    conn: Connection,
    host: str,
    job_id: int,
    claim: int,
    reason: str,
    *,
    linger_s: float | None = None,
    by_page: bool = False,
) -> bool:
    """processing -> pending, the attempt given back. ``by_page``: the job's page caused it
    (the browser died under it): such releases are bounded, the one after MAX_RELEASES_PER_JOB
    of them fails the job. ``linger_s``: the attempt's thread still runs, so the job's lock key
    stays held until this host confirms its end or for that long. False if the attempt (its
    ``claim``) was no longer ours."""
    set_audit_message(conn, reason)
    params = {
        "id": job_id,
        "claim": claim,
        "host": host,
        "max_releases": MAX_RELEASES_PER_JOB,
        "reason": bounded_error(reason),
        "still_running": linger_s is not None,
        "linger": linger_s or 0.0,
        "by_page": by_page,
    }
    released = conn.execute(RELEASE_SQL, params).first() is not None
    set_audit_message(conn, "")  # the next change in this transaction says its own
    return released


def recover_host_jobs(conn: Connection, host: str) -> list[int]:
    """At consumer start: jobs this host left processing when it died are released (back to
    pending, the attempt given back)."""
    reason = f"interrupted: consumer on {host} stopped mid-attempt"
    return _release_all(conn, RECOVER_SQL, {"host": host}, reason)


def rescue_stale_processing(
    conn: Connection, stale_after_s: float, linger_s: float = setting_default("lock_linger_s")
) -> list[int]:
    """Jobs processing with no heartbeat for ``stale_after_s``: their consumer is gone (or
    frozen, or cut off). Each is released (back to pending, the attempt given back), its lock
    key held until its host confirms the attempt ended or for ``linger_s``. A heartbeating job
    is never touched."""
    reason = f"rescued: no heartbeat for {stale_after_s:g} s"
    params: dict[str, object] = {"stale": stale_after_s, "linger": linger_s}
    return _release_all(conn, RESCUE_SQL, params, reason)


def _release_all(
    conn: Connection, statement: sa.TextClause, params: dict[str, object], reason: str
) -> list[int]:
    set_audit_message(conn, reason)
    params = {**params, "reason": reason, "max_releases": MAX_RELEASES_PER_JOB}
    return list(conn.execute(statement, params).scalars())


def requeue_host_queued(conn: Connection, host: str, reason: str) -> list[int]:
    """A host that will not run its queued jobs (draining, stopping) hands them back."""
    return _requeue(conn, REQUEUE_HOST_SQL, {"host": host}, reason)


def requeue_host_browser_jobs(conn: Connection, host: str, reason: str) -> list[int]:
    """A host whose browser stack cannot run hands back its queued browser jobs only."""
    return _requeue(conn, REQUEUE_HOST_BROWSER_SQL, {"host": host}, reason)


def requeue_from_unavailable_hosts(conn: Connection, grace_s: float) -> list[int]:
    """Queued jobs of hosts offline or disabled for longer than ``grace_s`` go back to pending,
    using no attempt (they never started)."""
    reason = f"requeued: host unavailable for more than {grace_s:g} s"
    return _requeue(conn, REQUEUE_FROM_UNAVAILABLE_SQL, {"grace": grace_s}, reason)


def _requeue(
    conn: Connection, statement: sa.TextClause, params: dict[str, object], reason: str
) -> list[int]:
    set_audit_message(conn, reason)
    return list(conn.execute(statement, params).scalars())
