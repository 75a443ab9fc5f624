"""Submitting jobs: many at once, all or nothing, deduplicated against unfinished jobs.

The INSERT fires the ``jobs_notify_insert`` trigger (one NOTIFY per statement), which wakes the
producer at commit.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from sqlalchemy.engine import Connection

from scrapefleet.common.actions.registry import get_action
from scrapefleet.common.browser.profile_names import payload_profile_pool
from scrapefleet.common.errors import SubmitError, UnknownAction
from scrapefleet.common.store.events import set_audit_message
from scrapefleet.common.store.identity_pools.proxies import known_pools
from scrapefleet.common.store.operating.hosts import require_host
from scrapefleet.common.store.records import InsertResult, NewJob
from scrapefleet.common.store.sql_text import statement
from scrapefleet.common.tracing import new_traceparent

__all__ = [
    "CREATE_STAGING_SQL",
    "INSERT_FROM_STAGING_SQL",
    "PIN_TO_HOST_SQL",
    "SUBMITTED_COLUMNS",
    "insert_jobs",
    "pin_jobs_to_host",
]

PROGRESS_EVERY_ROWS = 1000

# The columns a submit sets, in NewJob's terms; the database fills in the rest.
SUBMITTED_COLUMNS = (
    "kind",
    "payload",
    "priority",
    "max_attempts",
    "not_before",
    "dedupe_key",
    "lock_key",
    "callback_url",
    "needs_browser",
    "profile_pool",
    "rate_key",
    "proxy_pool",
    "proxy_session",
    "traceparent",
    "trace_link",
    "spawn_kinds",
)
# The staging table has SUBMITTED_COLUMNS with the types of jobs' columns (a test holds them
# to common.db.tables, so that it cannot drift from jobs), and the order of submission.
CREATE_STAGING_SQL = statement(
    """
CREATE TEMP TABLE incoming_jobs (
  seq int,
  kind TEXT,
  payload JSONB,
  priority INTEGER,
  max_attempts INTEGER,
  not_before TIMESTAMP WITH TIME ZONE,
  dedupe_key TEXT,
  lock_key TEXT,
  callback_url TEXT,
  needs_browser BOOLEAN,
  profile_pool TEXT[],
  rate_key TEXT,
  proxy_pool TEXT,
  proxy_session TEXT,
  traceparent TEXT,
  trace_link TEXT,
  spawn_kinds TEXT[]
) ON COMMIT DROP
"""
)
COPY_STAGING = """
COPY incoming_jobs (seq, kind, payload, priority, max_attempts, not_before, dedupe_key,
  lock_key, callback_url, needs_browser, profile_pool, rate_key, proxy_pool,
  proxy_session, traceparent, trace_link, spawn_kinds)
FROM STDIN
""".strip()
# Rows whose dedupe key an unfinished job holds are skipped (the unique partial index decides:
# the conflict's WHERE is its predicate).
INSERT_FROM_STAGING_SQL = statement(
    """
INSERT INTO jobs (kind, payload, priority, max_attempts, not_before, dedupe_key, lock_key,
  callback_url, needs_browser, profile_pool, rate_key, proxy_pool, proxy_session, traceparent,
  trace_link, spawn_kinds)
SELECT kind, payload, priority, max_attempts, not_before, dedupe_key, lock_key,
  callback_url, needs_browser, profile_pool, rate_key, proxy_pool, proxy_session, traceparent,
  trace_link, spawn_kinds
FROM incoming_jobs
ORDER BY seq
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND status IN {unfinished}
DO NOTHING
RETURNING id
"""
)
DROP_STAGING_SQL = statement("DROP TABLE incoming_jobs")
# A pinned job skips the planner: queued on its host at once, so only that host's consumer can
# claim it (a deploy's canary proves that THIS host runs jobs, not that some host does).
PIN_TO_HOST_SQL = statement(
    """
UPDATE jobs SET status = {job.queued}, host = :host, pinned_host = :host, queued_at = now()
WHERE id = ANY(CAST(:ids AS bigint[])) AND status = {job.pending}
RETURNING id
"""
)
NOTIFY_HOST_SQL = statement("SELECT pg_notify(host_channel(:host), :host)")


# A submit this large can turn the planner's picture of the pending jobs upside down (none
# pending, says a fresh table's statistics): refresh it with the jobs (migration 0014), tens of
# milliseconds, rather than read every pending row each producer cycle until autovacuum does.
REFRESH_STATISTICS_AFTER_ROWS = 1_000
REFRESH_STATISTICS_SQL = statement("SELECT refresh_job_statistics()")


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
    _refuse_unusable_pools(conn, jobs)
    conn.execute(CREATE_STAGING_SQL)
    raw = conn.connection.driver_connection
    assert raw is not None
    with raw.cursor() as cur, cur.copy(COPY_STAGING) as copy:
        for seq, job in enumerate(jobs):
            needs_browser = _needs_browser(job)  # only a browser job runs in a profile
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
                    needs_browser,
                    payload_profile_pool(job.payload) if needs_browser else None,
                    job.rate_key,  # None: the URL's host for the built-in actions (trigger)
                    job.proxy_pool,
                    job.proxy_session,
                    job.traceparent or new_traceparent(),  # every job in a trace of its own
                    job.trace_link,
                    _spawn_kinds(job),
                )
            )
            if progress and seq % PROGRESS_EVERY_ROWS == PROGRESS_EVERY_ROWS - 1:
                progress(PROGRESS_EVERY_ROWS)
    if progress:
        progress(len(jobs) % PROGRESS_EVERY_ROWS)
    inserted = sorted(conn.execute(INSERT_FROM_STAGING_SQL).scalars())
    conn.execute(DROP_STAGING_SQL)
    if len(inserted) >= REFRESH_STATISTICS_AFTER_ROWS:
        conn.execute(REFRESH_STATISTICS_SQL)
    return InsertResult(inserted, len(jobs) - len(inserted))


def pin_jobs_to_host(conn: Connection, ids: Sequence[int], host: str) -> list[int]:
    """Jobs just inserted (pending) -> queued on ``host``, which must exist, then NOTIFY it.
    The producer never sees them pending: the caller's transaction commits both at once."""
    require_host(conn, host)
    set_audit_message(conn, f"pinned to host {host} at submit")
    pinned = sorted(conn.execute(PIN_TO_HOST_SQL, {"ids": list(ids), "host": host}).scalars())
    if pinned:
        conn.execute(NOTIFY_HOST_SQL, {"host": host})
    return pinned


# A browser cannot authenticate to a SOCKS proxy (common.browser.options): a browser job may not
# ask for a pool holding one with credentials.
_SOCKS_WITH_CREDENTIALS_SQL = statement(
    """
SELECT DISTINCT pool FROM proxies
WHERE pool = ANY(CAST(:pools AS text[])) AND has_credentials AND url LIKE 'socks%'
"""
)


def _refuse_unusable_pools(conn: Connection, jobs: Sequence[NewJob]) -> None:
    """SubmitError naming the first job whose proxy pool does not exist, or is one a browser
    cannot use; nothing is inserted."""
    asked = {job.proxy_pool for job in jobs if job.proxy_pool is not None}
    if not asked:
        return
    known = known_pools(conn, asked)
    browser_pools = {job.proxy_pool for job in jobs if job.proxy_pool and _needs_browser(job)}
    socks = (
        set(conn.execute(_SOCKS_WITH_CREDENTIALS_SQL, {"pools": sorted(browser_pools)}).scalars())
        if browser_pools
        else set()
    )
    for number, job in enumerate(jobs, 1):
        if job.proxy_pool is None:
            continue
        if job.proxy_pool not in known:
            raise SubmitError(
                f"job {number}: payload.proxy_pool: no proxy pool named {job.proxy_pool!r}"
                " (`scrapefleet proxies add` makes one)"
            )
        if job.proxy_pool in socks and _needs_browser(job):
            raise SubmitError(
                f"job {number}: payload.proxy_pool: pool {job.proxy_pool!r} holds a socks5"
                " proxy with credentials, which a browser cannot use (an http proxy can)"
            )


def _spawn_kinds(job: NewJob) -> list[str] | None:
    """The kinds its action declares it spawns besides its own (None: none, or unknown)."""
    try:
        return list(get_action(job.kind).spawns) or None
    except UnknownAction:
        return None


def _needs_browser(job: NewJob) -> bool:
    if job.needs_browser is not None:
        return job.needs_browser
    try:
        return get_action(job.kind).needs_browser
    except UnknownAction:  # the consumer fails it; no browser is ever involved
        return False
