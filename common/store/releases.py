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
from scrapefleet.common.store.statuses import (
    PAGE_RELEASES_EXHAUSTED_SQL,
    HostState,
    JobStatus,
    sql_list,
)

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

_PROCESSING = f"status = '{JobStatus.PROCESSING}'"


def _release_statement(
    where: str, *, keep_last_error: bool, linger: str | None = None, by_page: str = "false"
) -> sa.TextClause:
    """The one release UPDATE, for a given choice of rows. ``keep_last_error``: the attempt's
    own error (if any) stays while the job has releases left; otherwise the reason replaces it.
    ``linger`` (an SQL condition): the attempt may still run on its host (nobody there confirmed
    its end), so the job's lock key stays held until its host confirms (attempts.attempts_ended)
    or for ``:linger`` seconds. ``by_page`` (an SQL condition): the job's page caused it, so it
    counts towards the bound."""
    error = "last_error" if keep_last_error else ":reason"
    out = f"({by_page} AND {PAGE_RELEASES_EXHAUSTED_SQL})"
    lingering = (
        f"  lingering_host = CASE WHEN {linger} THEN host ELSE lingering_host END,"
        f"  lingering_claim = CASE WHEN {linger} THEN claims ELSE lingering_claim END,"
        f"  lingering_until = CASE WHEN {linger}"
        "    THEN now() + make_interval(secs => :linger) ELSE lingering_until END,"
        if linger
        else ""
    )
    return sa.text(
        "UPDATE jobs SET"
        f"  status = CASE WHEN {out} THEN '{JobStatus.FAILED}' ELSE '{JobStatus.PENDING}' END,"
        f"  host = CASE WHEN {out} THEN host END,"
        f"  finished_at = CASE WHEN {out} THEN now() END,"
        f"  last_error = CASE WHEN {out}"
        "    THEN :reason || ' (released ' || (page_releases + 1) || ' times by its page)'"
        f"    ELSE {error} END,"
        "  attempts = greatest(attempts - 1, 0), releases = releases + 1,"
        f"  page_releases = page_releases + CASE WHEN {by_page} THEN 1 ELSE 0 END,"
        f"{lingering}  started_at = NULL, queued_at = NULL"
        f" WHERE {where} RETURNING id"
    )


# One attempt, only while this host still owns it; its thread may still run (a consumer that
# lost the database for too long gave it up, see consumer.serving).
RELEASE_SQL = _release_statement(
    f"id = :id AND {_PROCESSING} AND claims = :claim AND host = :host",
    keep_last_error=True,
    linger="CAST(:still_running AS boolean)",
    by_page="CAST(:by_page AS boolean)",
)
# Every attempt a host left behind when its consumer died.
RECOVER_SQL = _release_statement(f"{_PROCESSING} AND host = :host", keep_last_error=False)
# Every attempt whose heartbeat stopped: its consumer is gone, or frozen, or cut off from the
# database while its threads run on. Its lock key lingers (docs/attempts-and-locks.md). The
# producer's two statements here take only the rows free now (a consumer's session may hold its
# own jobs' rows for as long as it likes): a row held is left for the next cycle, and the
# producer does not wait.
_STALE = f"{_PROCESSING} AND heartbeat_at < now() - make_interval(secs => :stale)"
RESCUE_SQL = _release_statement(
    f"id IN (SELECT id FROM jobs WHERE {_STALE} FOR NO KEY UPDATE SKIP LOCKED) AND {_STALE}",
    keep_last_error=False,
    linger="true",
)

_REQUEUE = (
    f"UPDATE jobs SET status = '{JobStatus.PENDING}', host = NULL, queued_at = NULL"
    f" WHERE status = '{JobStatus.QUEUED}'"
)
# A host's queued jobs, those free now: its consumer's session may hold them (an operator's
# drain must not wait for it); the consumer's own requeue sees its own locks as free.
_HOST_QUEUED_FREE = (
    f"id IN (SELECT id FROM jobs WHERE status = '{JobStatus.QUEUED}' AND host = :host"
    " FOR NO KEY UPDATE SKIP LOCKED)"
)
REQUEUE_HOST_SQL = sa.text(f"{_REQUEUE} AND host = :host AND {_HOST_QUEUED_FREE} RETURNING id")
REQUEUE_HOST_BROWSER_SQL = sa.text(
    f"{_REQUEUE} AND host = :host AND needs_browser AND {_HOST_QUEUED_FREE} RETURNING id"
)
_UNAVAILABLE = (HostState.OFFLINE, HostState.DISABLED)  # for longer than a grace period
_OF_UNAVAILABLE = (
    f"host IN (SELECT name FROM hosts WHERE state IN {sql_list(_UNAVAILABLE)}"
    "   AND state_changed_at < now() - make_interval(secs => :grace))"
)
REQUEUE_FROM_UNAVAILABLE_SQL = sa.text(
    f"{_REQUEUE} AND {_OF_UNAVAILABLE} AND id IN (SELECT id FROM jobs"
    f"   WHERE status = '{JobStatus.QUEUED}' AND {_OF_UNAVAILABLE} FOR NO KEY UPDATE SKIP LOCKED)"
    " RETURNING id"
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
        "reason": reason,
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
