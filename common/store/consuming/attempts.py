"""A consumer's writes about its attempts: claims, outcomes, heartbeats.

Every write of an attempt moves a job only while this host still owns that attempt (``status =
'processing' AND claims = :claim AND host = :host``). ``claims`` (migration 0016) counts every
claim of the job and never goes back, so a claim's number is a token no other attempt of the
job ever had: an attempt rescued from a silent host, or timed out, and claimed again (even by
the same host) can neither finish the job nor keep it alive. ``attempts`` is the job's own
count of failed attempts, shown to people; it is never an attempt's identity. Outcomes
wake the producer (the trigger jobs_notify_finished NOTIFYs on its keyed channel at commit),
which refills the freed slot. (Releases and requeues, the
attempts a host hands back, are in releases.)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection

from scrapefleet.common.db.executes import Executes
from scrapefleet.common.errors import NotFound
from scrapefleet.common.identities.proxy_pools import SESSION_KEY
from scrapefleet.common.store.identity_pools.proxies import (
    LeasedProxy,
    proxy_for_attempt,
    session_for_attempt,
)
from scrapefleet.common.store.operating.crawls import spawn_children
from scrapefleet.common.store.records import Claim, ClaimedJob, Heartbeat, bounded_error
from scrapefleet.common.store.sql_text import statement

__all__ = [
    "CLAIM_SQL",
    "COMPLETE_MANY_SQL",
    "COMPLETE_SQL",
    "FAIL_ATTEMPT_SQL",
    "attempts_ended",
    "claim_jobs",
    "complete_job",
    "complete_jobs",
    "fail_attempt",
    "heartbeat",
]

# Browser jobs and the others are picked under separate limits (the stack's budget caps the
# first, free slots both), then the best ``limit`` of the two by priority and age. The host's
# browser budgets (jobs since the stack's restart and since boot) count the browser jobs only:
# they drive restarts and reboots, and only browsers leak. One statement, one round trip: the
# claim, the host's counters (written only when something was claimed, read otherwise) and
# whether jobs of this host stay queued that a freed slot could take (``more``: the consumer
# claims again as soon as a slot frees, and otherwise waits for the next assignment's NOTIFY).
# A row per claimed job, or one with no job when nothing was; none at all when the host has no
# row: the statement runs alone (autocommit), and a host with no row claims nothing rather than
# taking jobs it will never be told about (the caller raises NotFound on the empty answer).
# The host's counters are written through host_count_claims (migration 0017): a consumer's
# role has no UPDATE on hosts. ``:running``: jobs a thread of this host still runs an earlier
# attempt of (given up: timed out, rescued, stopped) stay queued until that thread has
# returned, so two attempts of one job never run side by side on one host.
CLAIM_SQL = statement(
    """
WITH browser AS (
  SELECT id, priority FROM jobs
  WHERE host = :host AND status = {job.queued} AND needs_browser
    AND EXISTS (SELECT 1 FROM hosts WHERE hosts.name = :host)
    AND id <> ALL(CAST(:running AS bigint[]))
  ORDER BY priority DESC, id LIMIT :browser_limit FOR UPDATE SKIP LOCKED
), plain AS (
  SELECT id, priority FROM jobs
  WHERE host = :host AND status = {job.queued} AND NOT needs_browser
    AND EXISTS (SELECT 1 FROM hosts WHERE hosts.name = :host)
    AND id <> ALL(CAST(:running AS bigint[]))
  ORDER BY priority DESC, id LIMIT :limit FOR UPDATE SKIP LOCKED
), picked AS (
  SELECT id FROM (SELECT * FROM browser UNION ALL SELECT * FROM plain) AS candidates
  ORDER BY priority DESC, id LIMIT :limit
), claimed AS (
  UPDATE jobs SET status = {job.processing}, attempts = jobs.attempts + 1,
    started_at = now(), heartbeat_at = now()
  FROM picked WHERE jobs.id = picked.id
  RETURNING jobs.id, jobs.kind, jobs.payload, jobs.attempts, jobs.max_attempts,
    jobs.lock_key, jobs.needs_browser, jobs.profile, jobs.claims, jobs.proxy_id,
    jobs.proxy_pool, jobs.traceparent, jobs.trace_link
), tally AS (
  SELECT count(*) AS n, count(*) FILTER (WHERE needs_browser) AS browser FROM claimed
), counted AS (
  SELECT c.jobs_since_restart, c.jobs_since_boot
  FROM (SELECT * FROM tally WHERE n > 0) AS t
  CROSS JOIN LATERAL host_count_claims(:host, CAST(t.n AS int), CAST(t.browser AS int))
    AS c
), counters AS (
  SELECT jobs_since_restart, jobs_since_boot FROM counted
  UNION ALL
  SELECT jobs_since_restart, jobs_since_boot FROM hosts
  WHERE name = :host AND NOT EXISTS (SELECT 1 FROM claimed)
)
SELECT counters.jobs_since_restart, counters.jobs_since_boot,
  EXISTS (
    SELECT 1 FROM jobs AS left_over WHERE left_over.host = :host
    AND left_over.status = {job.queued}
    AND left_over.id NOT IN (SELECT id FROM picked)
    -- A browser job left behind by the stack's budget waits for the budget (a restart wakes
    -- the consumer), not for a slot.
    AND (NOT left_over.needs_browser
      OR CAST(:browser_limit AS int) >= CAST(:limit AS int))
  ) AS more,
  claimed.*
FROM counters LEFT JOIN claimed ON true
"""
)
# Every write of an attempt moves its job only while this host still owns that attempt. A
# completed job keeps no error: an earlier attempt's ("rescued: ...", "interrupted: ...") read
# as this one's; job_events keeps each attempt's message.
COMPLETE_SQL = statement(
    """
WITH done AS (
  UPDATE jobs SET status = {job.completed}, result = CAST(:result AS jsonb),
    finished_at = now(), heartbeat_at = now(), last_error = NULL
  WHERE id = :id AND status = {job.processing} AND claims = :claim AND host = :host
  RETURNING id
)
SELECT id FROM done
"""
)
# Many completions in one statement (one NOTIFY: the trigger's are folded); each row still
# moves only if this host owns that attempt.
COMPLETE_MANY_SQL = statement(
    """
WITH done AS (
  UPDATE jobs SET status = {job.completed}, result = CAST(d.result AS jsonb),
    finished_at = now(), heartbeat_at = now(), last_error = NULL
  FROM unnest(CAST(:ids AS bigint[]), CAST(:claims AS int[]),
    CAST(:results AS text[])) AS d(id, claim, result)
  WHERE jobs.id = d.id AND jobs.status = {job.processing} AND jobs.claims = d.claim
    AND jobs.host = :host
  RETURNING jobs.id
)
SELECT (SELECT array_agg(id) FROM done) AS ids
"""
)
# Retried (the four CASEs' condition) only when the caller gives a time AND attempts are left
# (store.statuses.ATTEMPTS_EXHAUSTED_SQL): the database holds the rule even for a caller that
# got it wrong.
FAIL_ATTEMPT_SQL = statement(
    """
WITH ended AS (
  UPDATE jobs SET
    status = CASE
      WHEN (CAST(:retry_at AS timestamptz) IS NOT NULL AND NOT (attempts >= max_attempts))
      THEN {job.pending} ELSE {job.failed} END,
    host = CASE
      WHEN (CAST(:retry_at AS timestamptz) IS NOT NULL AND NOT (attempts >= max_attempts))
      THEN NULL ELSE host END,
    not_before = CASE
      WHEN (CAST(:retry_at AS timestamptz) IS NOT NULL AND NOT (attempts >= max_attempts))
      THEN CAST(:retry_at AS timestamptz) END,
    last_error = :error, error_class = :error_class,
    artifacts = coalesce(CAST(:artifacts AS jsonb), artifacts),
    finished_at = CASE
      WHEN (CAST(:retry_at AS timestamptz) IS NOT NULL AND NOT (attempts >= max_attempts))
      THEN NULL ELSE now() END,
    -- A timeout written while the attempt's thread runs on: its lock key stays held until
    -- this host confirms the thread returned (attempts_ended), or the margin passes.
    lingering_host = CASE WHEN :still_running THEN host ELSE lingering_host END,
    lingering_claim = CASE WHEN :still_running THEN claims ELSE lingering_claim END,
    lingering_until = CASE WHEN :still_running
      THEN now() + make_interval(secs => :linger) ELSE lingering_until END
  WHERE id = :id AND status = {job.processing} AND claims = :claim AND host = :host
  RETURNING status
)
SELECT status FROM ended
"""
)
# Only the attempts this host runs now, each by its claim: an attempt given up (rescued, timed
# out) and claimed again keeps no heartbeat alive for the one that replaced it.
HEARTBEAT_JOBS_SQL = statement(
    """
UPDATE jobs SET heartbeat_at = now()
FROM unnest(CAST(:ids AS bigint[]), CAST(:claims AS int[])) AS r(id, claim)
WHERE jobs.id = r.id AND jobs.claims = r.claim AND jobs.status = {job.processing}
  AND jobs.host = :host
RETURNING jobs.id, jobs.claims
"""
)
HEARTBEAT_HOST_SQL = statement("SELECT host_heartbeat(:host)")
# A consumer's word that its attempts given up earlier have ended (their threads returned, or
# the process that ran them is gone): their lock keys are free again (migration 0016's
# function, as the owner: a rescued job is no longer this host's to update).
ATTEMPTS_ENDED_SQL = statement("SELECT * FROM attempts_ended(:host, CAST(:ended AS jsonb))")
ALL_ATTEMPTS_ENDED_SQL = statement(
    """
SELECT * FROM attempts_ended(:host, (
  SELECT coalesce(jsonb_agg(jsonb_build_object('job', id, 'claim', lingering_claim)), '[]'::jsonb)
  FROM jobs WHERE lingering_host = :host
))
"""
)

# An attempt: (job id, claim).
AttemptKey = tuple[int, int]


def claim_jobs(
    conn: Executes,
    host: str,
    limit: int,
    browser_limit: int | None = None,
    *,
    running_here: Sequence[int] = (),
) -> Claim:
    """queued -> processing for up to ``limit`` of this host's jobs, of which at most
    ``browser_limit`` browser jobs (None: no separate limit), attempts + 1 and claims + 1 (the
    attempt's token). The host's browser budgets count the browser jobs claimed, in the same
    statement. ``running_here``: jobs a thread of this host still runs an earlier attempt of;
    they stay queued."""
    browser_limit = limit if browser_limit is None else min(browser_limit, limit)
    params = {
        "host": host,
        "limit": limit,
        "browser_limit": browser_limit,
        "running": sorted(set(running_here)),
    }
    rows = conn.execute(CLAIM_SQL, params).all()
    if not rows:
        raise NotFound(f"host {host!r} is not registered")
    # Read here, in the claim's own connection: the one moment the attempt is this host's and
    # nothing of it has run yet.
    leased = {
        r.id: proxy_for_attempt(conn, r.id, r.claims)
        for r in rows
        if r.id is not None and r.proxy_id is not None
    }
    # A sticky session's jar, for the jobs that asked for a session.
    sessions = {
        r.id: session_for_attempt(conn, r.id, r.claims)
        for r in rows
        if r.id in leased and isinstance(r.payload, dict) and r.payload.get(SESSION_KEY)
    }
    claimed = [
        ClaimedJob(
            r.id,
            r.kind,
            r.payload,
            r.attempts,
            r.max_attempts,
            r.lock_key,
            r.needs_browser,
            profile=r.profile,
            claim=r.claims,
            proxy_id=r.proxy_id,
            proxy_pool=r.proxy_pool,
            proxy_url=_url(leased.get(r.id)),
            proxy_block_statuses=_statuses(leased.get(r.id)),
            session=sessions.get(r.id),
            traceparent=r.traceparent,
            trace_link=r.trace_link,
        )
        for r in sorted(rows, key=lambda r: r.id or 0)
        if r.id is not None
    ]
    first = rows[0]
    return Claim(claimed, first.jobs_since_restart, first.jobs_since_boot, more=first.more)


def _url(leased: LeasedProxy | None) -> str | None:
    return None if leased is None else leased.url


def _statuses(leased: LeasedProxy | None) -> tuple[int, ...]:
    return () if leased is None else leased.block_statuses


def complete_job(
    conn: Connection,
    host: str,
    job_id: int,
    claim: int,
    result: dict[str, Any],
    spawn: Sequence[Mapping[str, Any]] = (),
) -> bool:
    """processing -> completed, only if this host still owns the attempt of this ``claim``;
    NOTIFY the producer. ``spawn``: children inserted with it (crawls.spawn_children), or not
    at all."""
    if spawn:
        spawn_children(conn, host, [(job_id, claim, spawn)])
    params = {
        "id": job_id,
        "claim": claim,
        "host": host,
        "result": json.dumps(result),
    }
    return conn.execute(COMPLETE_SQL, params).first() is not None


def complete_jobs(
    conn: Executes,
    host: str,
    completions: Sequence[tuple[int, int, dict[str, Any]]],
    spawns: Mapping[int, Sequence[Mapping[str, Any]]] | None = None,
) -> list[int]:
    """complete_job for many (job id, claim, result) at once: one statement, one NOTIFY.
    ``spawns``: job id -> the children its completion inserts. Returns the ids that moved."""
    if not completions:
        return []
    # Before the completion: spawn_children inserts only under a processing attempt of ours,
    # and locks it, so the UPDATE below moves exactly the jobs whose children went in.
    if spawns:
        spawn_children(conn, host, [(i, c, spawns[i]) for i, c, _ in completions if spawns.get(i)])
    params = {
        "ids": [c[0] for c in completions],
        "claims": [c[1] for c in completions],
        "results": [json.dumps(c[2]) for c in completions],
        "host": host,
    }
    return sorted(conn.execute(COMPLETE_MANY_SQL, params).one().ids or [])


def fail_attempt(
    conn: Connection,
    host: str,
    job_id: int,
    claim: int,
    error: str,
    *,
    retry_at: datetime | None,
    artifacts: dict[str, Any] | None = None,
    error_class: str = "transient",
    linger_s: float | None = None,
) -> str | None:
    """End a failed attempt: back to pending with ``not_before = retry_at``, or failed when
    ``retry_at`` is None or the job is out of attempts. ``error_class``
    (common.actions.error_classes) is kept on the job. ``linger_s``: the attempt's thread still runs
    (a timeout), so its job's lock key stays held until this host confirms its end (attempts_ended)
    or for this long. Returns the new status, or None if the attempt was no longer ours."""
    params = {
        "id": job_id,
        "claim": claim,
        "host": host,
        "retry_at": retry_at,
        "error": bounded_error(error),
        "error_class": error_class,
        "artifacts": json.dumps(artifacts) if artifacts is not None else None,
        "still_running": linger_s is not None,
        "linger": linger_s or 0.0,
    }
    status = conn.execute(FAIL_ATTEMPT_SQL, params).scalar()
    return None if status is None else str(status)


def heartbeat(conn: Connection, host: str, running: Sequence[AttemptKey]) -> Heartbeat:
    """Mark this host's running attempts, each a (job id, claim), and the host itself alive.
    Returns the host's state as the database has it (an operator may have drained or disabled
    it) and which of ``running`` are no longer this host's to run (stopped by an operator,
    rescued, claimed again)."""
    gone: frozenset[AttemptKey] = frozenset()
    if running:
        params = {"ids": [r[0] for r in running], "claims": [r[1] for r in running], "host": host}
        alive = {(r.id, r.claims) for r in conn.execute(HEARTBEAT_JOBS_SQL, params)}
        gone = frozenset(running) - alive
    state = conn.execute(HEARTBEAT_HOST_SQL, {"host": host}).scalar()
    return Heartbeat(None if state is None else str(state), gone)


def attempts_ended(conn: Connection, host: str, ended: Sequence[AttemptKey] | None) -> list[int]:
    """This host's attempts given up earlier have ended (``None``: all of them, the process
    that ran them is gone): the lock keys they held are free. Returns the jobs it freed."""
    if ended is None:
        return list(conn.execute(ALL_ATTEMPTS_ENDED_SQL, {"host": host}).scalars())
    if not ended:
        return []
    entries = json.dumps([{"job": job, "claim": claim} for job, claim in ended])
    return list(conn.execute(ATTEMPTS_ENDED_SQL, {"host": host, "ended": entries}).scalars())
