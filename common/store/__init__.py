"""Every statement that changes a job row or a host row, and nothing else.

Each job status change is one conditional UPDATE (``WHERE ... status = expected``), so two
actors can never both move the same job; the ``jobs_audit`` trigger writes a job_events row for
each change. Callers pass an open SQLAlchemy Connection inside their own transaction; these
functions never commit, so a caller can group several of them atomically.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from scrapefleet.common import tables
from scrapefleet.common.actions import get_action
from scrapefleet.common.constants import CHANNEL_ASSIGNED, CHANNEL_FINISHED, MAX_RELEASES_PER_JOB
from scrapefleet.common.errors import NotFound, SubmitError, UnknownAction
from scrapefleet.common.host_status import HostStatus

# ---------------------------------------------------------------- jobs: submit


@dataclass(frozen=True)
class NewJob:
    kind: str
    payload: dict[str, Any] = field(default_factory=dict)
    priority: int = 0
    max_attempts: int | None = None  # None -> the settings' default
    not_before: datetime | None = None
    dedupe_key: str | None = None
    lock_key: str | None = None
    callback_url: str | None = None  # POSTed when the job completes or fails for good
    # Only a host whose browser stack takes them runs it; None: from its kind's action.
    needs_browser: bool | None = None


@dataclass(frozen=True)
class InsertResult:
    ids: list[int]  # of the jobs inserted, in input order
    skipped_duplicates: int  # rows whose dedupe key matched an unfinished job


_COPY_COLUMNS = (
    "seq",
    "kind",
    "payload",
    "priority",
    "max_attempts",
    "not_before",
    "dedupe_key",
    "lock_key",
    "callback_url",
    "needs_browser",
)


def _needs_browser(job: NewJob) -> bool:
    if job.needs_browser is not None:
        return job.needs_browser
    try:
        return get_action(job.kind).needs_browser
    except UnknownAction:  # the consumer fails it; no browser is ever involved
        return False


def insert_jobs(
    conn: Connection,
    jobs: Sequence[NewJob],
    *,
    default_max_attempts: int,
    progress: Callable[[int], None] | None = None,
) -> InsertResult:
    """Insert many jobs fast: COPY into a temporary table, then one INSERT ... SELECT that skips
    rows whose dedupe key is held by an unfinished job. All or nothing with the caller's
    transaction."""
    if not jobs:
        return InsertResult([], 0)
    conn.execute(
        sa.text(
            "CREATE TEMP TABLE incoming_jobs (seq int, kind text, payload jsonb, priority int,"
            " max_attempts int, not_before timestamptz, dedupe_key text, lock_key text,"
            " callback_url text, needs_browser boolean)"
            " ON COMMIT DROP"
        )
    )
    raw = conn.connection.driver_connection
    assert raw is not None
    with (
        raw.cursor() as cur,
        cur.copy(f"COPY incoming_jobs ({', '.join(_COPY_COLUMNS)}) FROM STDIN") as copy,
    ):
        for seq, job in enumerate(jobs):
            copy.write_row(
                (
                    seq,
                    job.kind,
                    json.dumps(job.payload),
                    job.priority,
                    job.max_attempts or default_max_attempts,
                    job.not_before,
                    job.dedupe_key,
                    job.lock_key,
                    job.callback_url,
                    _needs_browser(job),
                )
            )
            if progress and seq % 1000 == 999:
                progress(1000)
    if progress:
        progress(len(jobs) % 1000)
    ids = conn.execute(
        sa.text(
            "INSERT INTO jobs (kind, payload, priority, max_attempts, not_before, dedupe_key,"
            " lock_key, callback_url, needs_browser)"
            " SELECT kind, payload, priority, max_attempts, not_before, dedupe_key, lock_key,"
            " callback_url, needs_browser"
            " FROM incoming_jobs ORDER BY seq"
            " ON CONFLICT (dedupe_key)"
            "   WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'queued', 'processing')"
            " DO NOTHING RETURNING id"
        )
    ).scalars()
    inserted = sorted(ids)
    conn.execute(sa.text("DROP TABLE incoming_jobs"))
    return InsertResult(inserted, len(jobs) - len(inserted))


# ---------------------------------------------------------------- jobs: producer


# The two hot statements, named so that a test can EXPLAIN exactly what runs.
# Jobs whose lock key is held by a queued or processing job are left out: they cannot be
# assigned now, and reading them would let a large batch sharing one busy key fill the whole
# scan window and starve every other pending job. The NOT EXISTS probes the unique partial
# index on in-flight lock keys.
_PENDING_SQL = (
    "SELECT id, lock_key, needs_browser FROM jobs"
    " WHERE status = 'pending'{browser} AND (not_before IS NULL OR not_before <= now())"
    "   AND (lock_key IS NULL OR NOT EXISTS ("
    "     SELECT 1 FROM jobs AS held WHERE held.lock_key = jobs.lock_key"
    "     AND held.status IN ('queued', 'processing')))"
    " ORDER BY priority DESC, id LIMIT :limit FOR UPDATE SKIP LOCKED"
)
LOCK_PENDING_SQL = sa.text(_PENDING_SQL.format(browser=""))
# When no host can take a browser job now, browser jobs are left out by the statement itself,
# on a partial index of their own, so a backlog of them is never read, cycle after cycle, only
# to be skipped by the planner while the other jobs wait behind it.
LOCK_PENDING_NO_BROWSER_SQL = sa.text(_PENDING_SQL.format(browser=" AND NOT needs_browser"))
# Browser jobs and the others are picked under separate limits (the stack's budget caps the
# first, free slots both), then the best ``limit`` of the two by priority and age.
CLAIM_SQL = sa.text(
    "WITH browser AS ("
    "  SELECT id, priority FROM jobs"
    "  WHERE host = :host AND status = 'queued' AND needs_browser"
    "  ORDER BY priority DESC, id LIMIT :browser_limit FOR UPDATE SKIP LOCKED),"
    " plain AS ("
    "  SELECT id, priority FROM jobs"
    "  WHERE host = :host AND status = 'queued' AND NOT needs_browser"
    "  ORDER BY priority DESC, id LIMIT :limit FOR UPDATE SKIP LOCKED),"
    " picked AS ("
    "  SELECT id FROM (SELECT * FROM browser UNION ALL SELECT * FROM plain) AS candidates"
    "  ORDER BY priority DESC, id LIMIT :limit)"
    " UPDATE jobs SET status = 'processing', attempts = jobs.attempts + 1,"
    "   started_at = now(), heartbeat_at = now()"
    " FROM picked WHERE jobs.id = picked.id"
    " RETURNING jobs.id, jobs.kind, jobs.payload, jobs.attempts, jobs.max_attempts,"
    "   jobs.lock_key, jobs.needs_browser"
)


@dataclass(frozen=True)
class PendingJob:
    id: int
    lock_key: str | None
    needs_browser: bool = False


def lock_pending_jobs(conn: Connection, limit: int, *, browser_ok: bool = True) -> list[PendingJob]:
    """The highest-priority, oldest pending jobs that may run now (not_before passed, lock key
    free), row-locked for this transaction; rows another transaction holds are skipped, not
    waited for. ``browser_ok=False`` leaves browser jobs out (no host can take one now)."""
    statement = LOCK_PENDING_SQL if browser_ok else LOCK_PENDING_NO_BROWSER_SQL
    rows = conn.execute(statement, {"limit": limit})
    return [PendingJob(r.id, r.lock_key, r.needs_browser) for r in rows]


def assign_jobs(conn: Connection, assignments: Sequence[tuple[int, str]]) -> list[tuple[int, str]]:
    """pending -> queued on the planned host, then NOTIFY each host that got work."""
    if not assignments:
        return []
    rows = conn.execute(
        sa.text(
            "UPDATE jobs SET status = 'queued', host = a.host, queued_at = now()"
            " FROM unnest(CAST(:ids AS bigint[]), CAST(:hosts AS text[])) AS a(id, host)"
            " WHERE jobs.id = a.id AND jobs.status = 'pending'"
            " RETURNING jobs.id, jobs.host"
        ),
        {"ids": [a[0] for a in assignments], "hosts": [a[1] for a in assignments]},
    ).all()
    for host in sorted({r.host for r in rows}):
        conn.execute(
            sa.text("SELECT pg_notify(:channel, :host)"),
            {"channel": CHANNEL_ASSIGNED, "host": host},
        )
    return [(r.id, r.host) for r in rows]


def rescue_stale_processing(conn: Connection, stale_after_s: float) -> list[int]:
    """Jobs processing with no heartbeat for ``stale_after_s``: their consumer is gone. Each is
    released (back to pending, the attempt given back). A heartbeating job is never touched."""
    return _end_interrupted(
        conn,
        "status = 'processing' AND heartbeat_at < now() - make_interval(secs => :stale)",
        {"stale": stale_after_s},
        f"rescued: no heartbeat for {stale_after_s:g} s",
    )


def requeue_from_unavailable_hosts(conn: Connection, grace_s: float) -> list[int]:
    """Queued jobs of hosts offline or disabled for longer than ``grace_s`` go back to pending,
    using no attempt (they never started)."""
    _audit_message(conn, f"requeued: host unavailable for more than {grace_s:g} s")
    return list(
        conn.execute(
            sa.text(
                "UPDATE jobs SET status = 'pending', host = NULL, queued_at = NULL"
                " WHERE status = 'queued' AND host IN ("
                "   SELECT name FROM hosts WHERE state IN ('offline', 'disabled')"
                "   AND state_changed_at < now() - make_interval(secs => :grace))"
                " RETURNING id"
            ),
            {"grace": grace_s},
        ).scalars()
    )


# ---------------------------------------------------------------- jobs: consumer


@dataclass(frozen=True)
class ClaimedJob:
    id: int
    kind: str
    payload: dict[str, Any]
    attempt: int  # this attempt's number, 1-based
    max_attempts: int
    lock_key: str | None
    needs_browser: bool = False


@dataclass(frozen=True)
class Claim:
    jobs: list[ClaimedJob]
    jobs_since_restart: int
    jobs_since_boot: int


def claim_jobs(conn: Connection, host: str, limit: int, browser_limit: int | None = None) -> Claim:
    """queued -> processing for up to ``limit`` of this host's jobs, of which at most
    ``browser_limit`` browser jobs (None: no separate limit), attempts + 1. The host's browser
    budgets (jobs since the stack's restart and since boot) count the browser jobs only, in the
    same transaction: they drive restarts and reboots, and only browsers leak."""
    browser_limit = limit if browser_limit is None else min(browser_limit, limit)
    rows = conn.execute(
        CLAIM_SQL, {"host": host, "limit": limit, "browser_limit": browser_limit}
    ).all()
    browser_jobs = sum(1 for r in rows if r.needs_browser)
    counters = conn.execute(
        sa.text(
            "UPDATE hosts SET jobs_since_restart = jobs_since_restart + :browser,"
            " jobs_since_boot = jobs_since_boot + :browser, jobs_total = jobs_total + :n"
            " WHERE name = :host RETURNING jobs_since_restart, jobs_since_boot"
        ),
        {"host": host, "n": len(rows), "browser": browser_jobs},
    ).one_or_none()
    if counters is None:
        raise NotFound(f"host {host!r} is not registered")
    claimed = [
        ClaimedJob(r.id, r.kind, r.payload, r.attempts, r.max_attempts, r.lock_key, r.needs_browser)
        for r in sorted(rows, key=lambda r: r.id)
    ]
    return Claim(claimed, counters.jobs_since_restart, counters.jobs_since_boot)


def complete_job(
    conn: Connection, host: str, job_id: int, attempt: int, result: dict[str, Any]
) -> bool:
    """processing -> completed, only if this host still owns this attempt; NOTIFY the producer."""
    row = conn.execute(
        sa.text(
            "WITH done AS ("
            "  UPDATE jobs SET status = 'completed', result = CAST(:result AS jsonb),"
            "    finished_at = now(), heartbeat_at = now()"
            "  WHERE id = :id AND status = 'processing' AND attempts = :attempt AND host = :host"
            "  RETURNING id)"
            " SELECT id, pg_notify(:channel, :host) FROM done"
        ),
        {
            "id": job_id,
            "attempt": attempt,
            "host": host,
            "result": json.dumps(result),
            "channel": CHANNEL_FINISHED,
        },
    ).first()
    return row is not None


def fail_attempt(
    conn: Connection,
    host: str,
    job_id: int,
    attempt: int,
    error: str,
    *,
    retry_at: datetime | None,
    artifacts: dict[str, Any] | None = None,
) -> str | None:
    """End a failed attempt: back to pending with ``not_before = retry_at``, or failed when
    ``retry_at`` is None. Returns the new status, or None if the attempt was no longer ours."""
    return conn.execute(
        sa.text(
            "WITH ended AS ("
            "  UPDATE jobs SET"
            "    status = CASE WHEN :retry THEN 'pending' ELSE 'failed' END,"
            "    host = CASE WHEN :retry THEN NULL ELSE host END,"
            "    not_before = :retry_at, last_error = :error,"
            "    artifacts = coalesce(CAST(:artifacts AS jsonb), artifacts),"
            "    finished_at = CASE WHEN :retry THEN NULL ELSE now() END"
            "  WHERE id = :id AND status = 'processing' AND attempts = :attempt AND host = :host"
            "  RETURNING status)"
            " SELECT status, pg_notify(:channel, :host) FROM ended"
        ),
        {
            "id": job_id,
            "attempt": attempt,
            "host": host,
            "retry": retry_at is not None,
            "retry_at": retry_at,
            "error": error,
            "artifacts": json.dumps(artifacts) if artifacts is not None else None,
            "channel": CHANNEL_FINISHED,
        },
    ).scalar()


# A release hands an attempt back: the host failed, not the job (a stack that would not start,
# a consumer that died or was stopped mid-attempt, a rescue). It never counts as an attempt;
# it has its own bound, so a job that takes every host down with it cannot loop forever.
RELEASES_EXHAUSTED = "releases >= :max_releases"


def _release_statement(where: str, *, always_set_error: bool) -> sa.TextClause:
    error = ":reason" if always_set_error else "last_error"
    return sa.text(
        "UPDATE jobs SET"
        f"  status = CASE WHEN {RELEASES_EXHAUSTED} THEN 'failed' ELSE 'pending' END,"
        f"  host = CASE WHEN {RELEASES_EXHAUSTED} THEN host END,"
        f"  finished_at = CASE WHEN {RELEASES_EXHAUSTED} THEN now() END,"
        f"  last_error = CASE WHEN {RELEASES_EXHAUSTED}"
        "    THEN :reason || ' (released ' || (releases + 1) || ' times)'"
        f"    ELSE {error} END,"
        "  attempts = greatest(attempts - 1, 0), releases = releases + 1,"
        "  started_at = NULL, queued_at = NULL"
        f" WHERE {where} RETURNING id"
    )


RELEASE_SQL = _release_statement(
    "id = :id AND status = 'processing' AND attempts = :attempt AND host = :host",
    always_set_error=False,
)


def release_job(conn: Connection, host: str, job_id: int, attempt: int, reason: str) -> bool:
    """processing -> pending, the attempt given back (see RELEASES_EXHAUSTED); failed once the
    job was released MAX_RELEASES_PER_JOB times. False if the attempt was no longer ours."""
    _audit_message(conn, reason)
    params = {
        "id": job_id,
        "attempt": attempt,
        "host": host,
        "max_releases": MAX_RELEASES_PER_JOB,
        "reason": reason,
    }
    return conn.execute(RELEASE_SQL, params).first() is not None


def heartbeat(conn: Connection, host: str, job_ids: Sequence[int]) -> str | None:
    """Mark this host's running jobs and the host itself alive; returns the host's state as the
    database has it (an operator may have drained or disabled it)."""
    if job_ids:
        conn.execute(
            sa.text(
                "UPDATE jobs SET heartbeat_at = now()"
                " WHERE id = ANY(:ids) AND status = 'processing' AND host = :host"
            ),
            {"ids": list(job_ids), "host": host},
        )
    return conn.execute(
        sa.text("UPDATE hosts SET heartbeat_at = now() WHERE name = :host RETURNING state"),
        {"host": host},
    ).scalar()


def recover_host_jobs(conn: Connection, host: str) -> list[int]:
    """At consumer start: jobs this host left processing when it died are released (back to
    pending, the attempt given back)."""
    return _end_interrupted(
        conn,
        "status = 'processing' AND host = :host",
        {"host": host},
        f"interrupted: consumer on {host} stopped mid-attempt",
    )


def requeue_host_queued(conn: Connection, host: str, reason: str) -> list[int]:
    """A host that will not run its queued jobs (draining, stopping) hands them back."""
    _audit_message(conn, reason)
    return list(
        conn.execute(
            sa.text(
                "UPDATE jobs SET status = 'pending', host = NULL, queued_at = NULL"
                " WHERE status = 'queued' AND host = :host RETURNING id"
            ),
            {"host": host},
        ).scalars()
    )


def _end_interrupted(
    conn: Connection, where: str, params: dict[str, Any], message: str
) -> list[int]:
    """Attempts cut short by their host (its consumer died, or went silent): releases."""
    _audit_message(conn, message)
    statement = _release_statement(where, always_set_error=True)
    return list(
        conn.execute(
            statement, {**params, "reason": message, "max_releases": MAX_RELEASES_PER_JOB}
        ).scalars()
    )


# ---------------------------------------------------------------- jobs: operator


@dataclass(frozen=True)
class JobFilter:
    """Which jobs an operator command acts on: explicit ids, or every job matching the rest."""

    ids: Sequence[int] = ()
    kind: str | None = None
    host: str | None = None

    def clause(self) -> tuple[str, dict[str, Any]]:
        parts: list[str] = []
        params: dict[str, Any] = {}
        if self.ids:
            parts.append("id = ANY(:ids)")
            params["ids"] = list(self.ids)
        if self.kind:
            parts.append("kind = :kind")
            params["kind"] = self.kind
        if self.host:
            parts.append("host = :host")
            params["host"] = self.host
        if not parts:
            raise SubmitError("name job ids or a filter (--kind, --host); refusing to act on all")
        return " AND ".join(parts), params


def cancel_jobs(conn: Connection, which: JobFilter) -> list[int]:
    """pending or queued -> cancelled. A job already processing is left to finish."""
    where, params = which.clause()
    _audit_message(conn, "cancelled by operator")
    return sorted(
        conn.execute(
            sa.text(
                "UPDATE jobs SET status = 'cancelled', finished_at = now()"
                f" WHERE status IN ('pending', 'queued') AND {where} RETURNING id"
            ),
            params,
        ).scalars()
    )


def retry_jobs(conn: Connection, which: JobFilter) -> list[int]:
    """failed (or cancelled) -> pending with a fresh set of attempts."""
    where, params = which.clause()
    _audit_message(conn, "retried by operator")
    return sorted(
        conn.execute(
            sa.text(
                "UPDATE jobs SET status = 'pending', attempts = 0, host = NULL, not_before = NULL,"
                " queued_at = NULL, started_at = NULL, finished_at = NULL"
                f" WHERE status IN ('failed', 'cancelled') AND {where} RETURNING id"
            ),
            params,
        ).scalars()
    )


# ---------------------------------------------------------------- hosts


@dataclass(frozen=True)
class HostSpec:
    name: str
    capacity: int
    address: str | None = None
    ssh_port: int = 22
    ssh_user: str = "scrapefleet"
    ssh_key_file: str | None = None
    known_hosts_file: str | None = None


def add_host(conn: Connection, spec: HostSpec) -> bool:
    """Create the host, or update its settings if it exists (so provisioning can re-run).
    Returns True when it was created."""
    created = conn.execute(
        sa.text(
            "INSERT INTO hosts AS h (name, capacity, address, ssh_port, ssh_user, ssh_key_file,"
            " known_hosts_file)"
            " VALUES (:name, :capacity, :address, :ssh_port, :ssh_user, :ssh_key_file,"
            " :known_hosts_file)"
            " ON CONFLICT (name) DO UPDATE SET capacity = EXCLUDED.capacity,"
            " address = EXCLUDED.address, ssh_port = EXCLUDED.ssh_port,"
            " ssh_user = EXCLUDED.ssh_user, ssh_key_file = EXCLUDED.ssh_key_file,"
            " known_hosts_file = EXCLUDED.known_hosts_file"
            " RETURNING (xmax = 0) AS created"
        ),
        spec.__dict__,
    ).scalar_one()
    if created:
        record_host_event(conn, spec.name, "added", to_state="active")
    return bool(created)


@dataclass(frozen=True)
class Registration:
    capacity: int
    state: str
    jobs_since_restart: int
    jobs_since_boot: int


def register_consumer(conn: Connection, name: str, capacity: int, boot_id: str) -> Registration:
    """A consumer starting up: create its host row if new. A new boot id resets the since-boot
    counter. Its state becomes active unless an operator drained or disabled it."""
    old = conn.execute(
        sa.text("SELECT state, boot_id FROM hosts WHERE name = :name FOR UPDATE"), {"name": name}
    ).first()
    if old is None:
        add_host(conn, HostSpec(name=name, capacity=capacity))
    row = conn.execute(
        sa.text(
            "UPDATE hosts SET boot_id = :boot_id, heartbeat_at = now(),"
            " jobs_since_boot = CASE WHEN boot_id IS DISTINCT FROM :boot_id"
            "   THEN 0 ELSE jobs_since_boot END"
            " WHERE name = :name"
            " RETURNING capacity, state, jobs_since_restart, jobs_since_boot"
        ),
        {"name": name, "boot_id": boot_id},
    ).one()
    state = row.state
    if state not in ("draining", "disabled"):
        set_host_state(conn, name, "active", "consumer started")
        state = "active"
    return Registration(row.capacity, state, row.jobs_since_restart, row.jobs_since_boot)


def set_host_state(
    conn: Connection,
    name: str,
    to_state: str,
    reason: str | None = None,
    *,
    expected: Sequence[str] | None = None,
) -> bool:
    """Move a host to ``to_state`` (only from one of ``expected`` when given), recording the
    change in host_events. Returns False when nothing changed."""
    row = conn.execute(
        sa.text(
            "WITH old AS (SELECT name, state FROM hosts WHERE name = :name FOR UPDATE)"
            " UPDATE hosts h SET state = :to_state, state_reason = :reason,"
            "   state_changed_at = now()"
            " FROM old WHERE h.name = old.name AND old.state <> :to_state"
            "   AND (CAST(:expected AS text[]) IS NULL"
            "        OR old.state = ANY(CAST(:expected AS text[])))"
            " RETURNING old.state AS from_state"
        ),
        {
            "name": name,
            "to_state": to_state,
            "reason": reason,
            "expected": list(expected) if expected else None,
        },
    ).first()
    if row is None:
        return False
    record_host_event(
        conn, name, "state", from_state=row.from_state, to_state=to_state, message=reason
    )
    return True


def drain_host(conn: Connection, name: str, reason: str = "drained by operator") -> list[int]:
    """No new work for the host; its queued jobs go back to pending for the others. Jobs it is
    running finish there."""
    _require_host(conn, name)
    set_host_state(conn, name, "draining", reason)
    return requeue_host_queued(conn, name, f"requeued: host {name} draining")


def enable_host(conn: Connection, name: str) -> bool:
    _require_host(conn, name)
    conn.execute(
        sa.text("UPDATE hosts SET probe_failures = 0, last_probe_error = NULL WHERE name = :name"),
        {"name": name},
    )
    return set_host_state(conn, name, "active", "enabled by operator")


def remove_host(conn: Connection, name: str) -> None:
    """Remove a host that runs nothing; its queued jobs go back to pending first."""
    _require_host(conn, name)
    running = conn.execute(
        sa.text("SELECT count(*) FROM jobs WHERE host = :name AND status = 'processing'"),
        {"name": name},
    ).scalar_one()
    if running:
        raise SubmitError(f"host {name!r} is running {running} job(s): drain it and wait first")
    requeue_host_queued(conn, name, f"requeued: host {name} removed")
    conn.execute(sa.text("DELETE FROM hosts WHERE name = :name"), {"name": name})
    record_host_event(conn, name, "removed")


def record_probe_success(conn: Connection, name: str, status: HostStatus) -> None:
    """Store what the host reported; the end of a run of failures, and every change of what its
    browser stack can do, go to host_events."""
    before = conn.execute(
        sa.text(
            "WITH old AS (SELECT name, probe_failures, last_probe_error, browser_state FROM hosts"
            "   WHERE name = :name FOR UPDATE)"
            " UPDATE hosts h SET last_seen_at = now(), probe_failures = 0,"
            "   last_probe_error = NULL, reported_running = :running,"
            "   memory_available_bytes = :memory, boot_id = :boot_id,"
            "   browser_state = :browser, browser_reason = :browser_reason,"
            "   browser_retry_at = to_timestamp(CAST(:browser_retry_at AS double precision))"
            " FROM old WHERE h.name = old.name"
            " RETURNING old.probe_failures, old.last_probe_error, old.browser_state"
        ),
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
    failures = conn.execute(
        sa.text(
            "UPDATE hosts SET probe_failures = probe_failures + 1, last_probe_error = :reason"
            " WHERE name = :name RETURNING probe_failures"
        ),
        {"name": name, "reason": reason},
    ).scalar_one()
    if failures == 1:
        record_host_event(conn, name, "probe_failed", message=reason)
    return int(failures)


def reset_restart_counter(conn: Connection, name: str, details: dict[str, Any]) -> None:
    """After a browser stack restart: the since-restart count starts again; the event keeps
    the figures (duration, memory before/after, processes killed)."""
    conn.execute(
        sa.text("UPDATE hosts SET jobs_since_restart = 0 WHERE name = :name"), {"name": name}
    )
    record_host_event(conn, name, "restart", details=details)


def record_host_event(
    conn: Connection,
    host: str,
    event: str,
    *,
    from_state: str | None = None,
    to_state: str | None = None,
    message: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    conn.execute(
        sa.text(
            "INSERT INTO host_events (host, event, from_state, to_state, message, details)"
            " VALUES (:host, :event, :from_state, :to_state, :message, CAST(:details AS jsonb))"
        ),
        {
            "host": host,
            "event": event,
            "from_state": from_state,
            "to_state": to_state,
            "message": message,
            "details": json.dumps(details) if details is not None else None,
        },
    )


def _require_host(conn: Connection, name: str) -> None:
    if (
        conn.execute(sa.text("SELECT 1 FROM hosts WHERE name = :name"), {"name": name}).first()
        is None
    ):
        raise NotFound(f"no host named {name!r}")


def _audit_message(conn: Connection, message: str) -> None:
    """The message the audit trigger writes for the job changes of this transaction."""
    conn.execute(
        sa.text("SELECT set_config('scrapefleet.audit_message', :m, true)"), {"m": message}
    )


def reactivate_after_own_drain(conn: Connection, name: str, own_reason: str) -> bool:
    """A consumer killed while draining for its own shutdown left its host 'draining' under
    ``own_reason``; when it starts again the host is active again. A drain by an operator has
    another reason and stays. Returns True when the host was reactivated."""
    row = conn.execute(
        sa.text("SELECT state, state_reason FROM hosts WHERE name = :name FOR UPDATE"),
        {"name": name},
    ).first()
    if row is None or row.state != "draining" or row.state_reason != own_reason:
        return False
    return set_host_state(conn, name, "active", "consumer restarted", expected=["draining"])


def complete_jobs(
    conn: Connection, host: str, completions: Sequence[tuple[int, int, dict[str, Any]]]
) -> list[int]:
    """complete_job for many (job id, attempt, result) at once: one statement, one NOTIFY.
    Each row still moves only if this host owns that attempt; returns the ids that moved."""
    if not completions:
        return []
    row = conn.execute(
        sa.text(
            "WITH done AS ("
            "  UPDATE jobs SET status = 'completed', result = CAST(d.result AS jsonb),"
            "    finished_at = now(), heartbeat_at = now()"
            "  FROM unnest(CAST(:ids AS bigint[]), CAST(:attempts AS int[]),"
            "    CAST(:results AS text[])) AS d(id, attempt, result)"
            "  WHERE jobs.id = d.id AND jobs.status = 'processing' AND jobs.attempts = d.attempt"
            "    AND jobs.host = :host"
            "  RETURNING jobs.id)"
            " SELECT (SELECT array_agg(id) FROM done) AS ids,"
            "   CASE WHEN EXISTS (SELECT 1 FROM done) THEN pg_notify(:channel, :host) END"
        ),
        {
            "ids": [c[0] for c in completions],
            "attempts": [c[1] for c in completions],
            "results": [json.dumps(c[2]) for c in completions],
            "host": host,
            "channel": CHANNEL_FINISHED,
        },
    ).one()
    return sorted(row.ids or [])


# ---------------------------------------------------------------- operator (issue 6)
# The fleet pause switch, webhook delivery state, retention. Same rules as above: the caller's
# transaction, no commit here.


def set_assignment_paused(conn: Connection, paused: bool, who: str, reason: str | None) -> None:
    """Pause or resume assignment for the whole fleet; the producer reads it every cycle. The
    single row is created if a fresh (or truncated) database has none."""
    conn.execute(
        sa.text(
            "INSERT INTO fleet_control (id, assignment_paused, changed_by, changed_at, reason)"
            " VALUES (true, :paused, :who, now(), :reason)"
            " ON CONFLICT (id) DO UPDATE SET assignment_paused = EXCLUDED.assignment_paused,"
            " changed_by = EXCLUDED.changed_by, changed_at = EXCLUDED.changed_at,"
            " reason = EXCLUDED.reason"
        ),
        {"paused": paused, "who": who, "reason": reason},
    )


@dataclass(frozen=True)
class DueWebhook:
    id: int
    job_id: int
    status: str
    url: str
    payload: dict[str, Any]
    attempt: int  # this attempt's number, 1-based


def take_due_webhooks(conn: Connection, limit: int, lease_s: float) -> list[DueWebhook]:
    """Deliveries whose time has come, their attempt counted and their next attempt pushed
    ``lease_s`` ahead before any POST: a producer that dies mid-POST leaves them due again after
    the lease, and a second producer never takes the same row meanwhile (SKIP LOCKED)."""
    rows = conn.execute(
        sa.text(
            "WITH due AS ("
            "  SELECT id FROM webhook_deliveries"
            "  WHERE next_attempt_at IS NOT NULL AND next_attempt_at <= now()"
            "  ORDER BY next_attempt_at LIMIT :limit FOR UPDATE SKIP LOCKED)"
            " UPDATE webhook_deliveries w SET attempts = w.attempts + 1,"
            "   next_attempt_at = now() + make_interval(secs => :lease)"
            " FROM due WHERE w.id = due.id"
            " RETURNING w.id, w.job_id, w.status, w.url, w.payload, w.attempts"
        ),
        {"limit": limit, "lease": lease_s},
    )
    return [
        DueWebhook(r.id, r.job_id, r.status, r.url, r.payload, r.attempts)
        for r in sorted(rows, key=lambda r: r.id)
    ]


def record_webhook_delivered(conn: Connection, delivery_id: int, response_code: int) -> None:
    conn.execute(
        sa.text(
            "UPDATE webhook_deliveries SET delivered_at = now(), next_attempt_at = NULL,"
            " response_code = :code, last_error = NULL WHERE id = :id"
        ),
        {"id": delivery_id, "code": response_code},
    )


def record_webhook_failed(
    conn: Connection,
    delivery_id: int,
    error: str,
    response_code: int | None,
    *,
    retry_at: datetime | None,
) -> None:
    """A POST that failed: due again at ``retry_at``, or given up when it is None."""
    conn.execute(
        sa.text(
            "UPDATE webhook_deliveries SET last_error = :error, response_code = :code,"
            " next_attempt_at = :retry_at,"
            " gave_up_at = CASE WHEN CAST(:retry_at AS timestamptz) IS NULL THEN now() END"
            " WHERE id = :id AND delivered_at IS NULL"
        ),
        {"id": delivery_id, "error": error, "code": response_code, "retry_at": retry_at},
    )


# Finished jobs past retention, oldest first, moved in one statement per batch: the DELETE's
# RETURNING feeds the INSERT, so a row is in exactly one of the two tables at every commit.
# SKIP LOCKED: a row some operator is touching right now waits for the next batch, the mover
# never waits for it. jobs_finished_at_idx finds the candidates.
# Every column jobs has, read from the table definitions: a hand-kept list once lost one.
_ARCHIVED_COLUMNS = ", ".join(
    c.name for c in tables.jobs.columns if c.name in tables.jobs_archive.columns
)
ARCHIVE_BATCH_SQL = sa.text(
    "WITH moved AS ("
    "  DELETE FROM jobs WHERE id IN ("
    "    SELECT id FROM jobs"
    "    WHERE finished_at IS NOT NULL AND finished_at < :cutoff"
    "      AND status IN ('completed', 'failed', 'cancelled')"
    "    ORDER BY finished_at LIMIT :batch FOR UPDATE SKIP LOCKED)"
    f"  RETURNING {_ARCHIVED_COLUMNS})"
    f" INSERT INTO jobs_archive ({_ARCHIVED_COLUMNS}) SELECT {_ARCHIVED_COLUMNS} FROM moved"
)


def archive_finished_jobs(conn: Connection, cutoff: datetime, batch_rows: int) -> int:
    """Move up to ``batch_rows`` jobs finished before ``cutoff`` to jobs_archive; returns how
    many moved. Call it in a transaction per batch, until it returns less than ``batch_rows``."""
    return conn.execute(ARCHIVE_BATCH_SQL, {"cutoff": cutoff, "batch": batch_rows}).rowcount


# ---------------------------------------------------------------- hosts: browser stack upkeep
# (issue 4) The consumer's stack supervisor reports its restarts, reboots and faults here.


def begin_stack_lifetime(
    conn: Connection, name: str, jobs_in_flight: int, details: dict[str, Any]
) -> None:
    """A browser stack started where none ran (first browser job of this consumer, or after a
    failed start): its lifetime counts the jobs already in flight, which may use it."""
    conn.execute(
        sa.text("UPDATE hosts SET jobs_since_restart = :n WHERE name = :name"),
        {"name": name, "n": jobs_in_flight},
    )
    record_host_event(conn, name, "stack_start", details=details)


def record_reboot_request(conn: Connection, name: str, reason: str) -> list[int]:
    """The host is about to run its reboot command: its queued jobs go back to pending at once
    (the producer would otherwise wait out the offline grace), and the event is kept."""
    requeued = requeue_host_queued(conn, name, f"requeued: host {name} rebooting")
    record_host_event(conn, name, "reboot", message=reason, details={"requeued": len(requeued)})
    return requeued


def record_stack_failure(
    conn: Connection, name: str, reason: str, details: dict[str, Any]
) -> list[int]:
    """The host's browser stack would not start: the host stays in the fleet for every other
    job, and the browser jobs queued on it go back to pending for hosts whose stack runs."""
    record_host_event(conn, name, "stack_failure", message=reason, details=details)
    _audit_message(conn, f"requeued: browser stack of {name} failing")
    return list(
        conn.execute(
            sa.text(
                "UPDATE jobs SET status = 'pending', host = NULL, queued_at = NULL"
                " WHERE status = 'queued' AND host = :host AND needs_browser RETURNING id"
            ),
            {"host": name},
        ).scalars()
    )
