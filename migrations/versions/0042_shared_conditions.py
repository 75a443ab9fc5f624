"""Conditions the statements share, written once in the schema: ``ready_jobs``,
``jobs_with_archive`` and ``matching_jobs(...)``.

- ``ready_jobs`` (view): the pending jobs that may be assigned now as far as the database can
  tell: retry time passed, lock key free (no job in flight holds it, no ended attempt may
  still run with it), a profile of their pool free and usable, a proxy of their pool able to
  take them. What an operator paused and the rate limits are the statements' own conditions
  (they come as parameters). The producer's pending reads (common.store.producing.assignment,
  common.store.producing.tight_budgets) select from it, ``FOR UPDATE SKIP LOCKED`` included:
  PostgreSQL expands a simple view into the statement, locks the rows of ``jobs`` under it,
  and plans the whole on the pending jobs' partial indexes as before.
- ``jobs_with_archive`` (view): the columns of a job's result, of ``jobs`` and of
  ``jobs_archive`` (retention's finished jobs), one UNION ALL; a filter on it is pushed into
  both tables' scans.
- ``matching_jobs(statuses, kind, host, since, profile, crawl, error_class, was_on,
  rescued)``: the rows of ``jobs_with_archive`` a results filter matches (a NULL argument
  matches every job), as ``scrapefleet results`` lists, counts and exports them; in psql,
  ``SELECT * FROM matching_jobs(kind => 'fetch_page', was_on => 'h3')``. A LANGUAGE sql
  STABLE function of one SELECT: PostgreSQL inlines it into the calling statement, so an
  ``ORDER BY id DESC LIMIT`` on it reads the two tables' indexes, not every match.

Both views are ``security_invoker``: a reader needs the grants on the tables under them, and
the tables' row policies apply to it, exactly as when the statements read the tables
themselves (an owner's view would read ``jobs`` past its policies). They are not
``security_barrier``: they hide no row from anyone who may read the tables, and a barrier
would keep the statements' conditions (a rate key, a kind) out of the index scans. ``db
grant`` gives the producer and the reporting role their grants on views as on tables.

Revision ID: 0042
Revises: 0041
Create Date: 2026-11-28
"""

from alembic import op

revision = "0042"
down_revision = "0041"
branch_labels = None
depends_on = None

READY_JOBS = """
CREATE VIEW ready_jobs WITH (security_invoker = true) AS
SELECT id, priority, kind, rate_key, lock_key, needs_browser, profile_pool, profile,
  blocked_on_host, CASE WHEN lingering_until > now() THEN lingering_host END AS lingering_on_host,
  pinned_host, proxy_pool, proxy_id, proxy_session, crawl_id, not_before, created_at
FROM jobs
WHERE status = 'pending'
  AND (not_before IS NULL OR not_before <= now())
  -- Jobs whose lock key is held by a queued or processing job are left out: they cannot be
  -- assigned now, and reading them would let a large batch sharing one busy key fill the
  -- whole scan window and starve every other pending job. The NOT EXISTS probes the unique
  -- partial index on in-flight lock keys.
  AND (lock_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM jobs AS held WHERE held.lock_key = jobs.lock_key
    AND held.status IN ('queued', 'processing')))
  -- A lock key is held, too, by an attempt ended in the database that may still run on its
  -- host (rescued, stopped, timed out: migration 0016), the job's own included, until that
  -- host confirms the end or its lingering_until passes (docs/attempts-and-locks.md).
  AND (lock_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM jobs AS lingering WHERE lingering.lock_key = jobs.lock_key
    AND lingering.lock_key IS NOT NULL AND lingering.lingering_until IS NOT NULL
    AND lingering.lingering_until > now()))
  -- The same for profiles: a job of a pool waits, unread, while every profile of its pool is
  -- held by a job, cooling down, or bound to a host that is not active
  -- (producer.assigning.profile_rules decides again, with the planner's clock).
  AND (profile_pool IS NULL OR EXISTS (
    SELECT 1 FROM unnest(jobs.profile_pool) AS pool(name)
    WHERE NOT EXISTS (SELECT 1 FROM jobs AS held WHERE held.profile = pool.name
      AND held.status IN ('queued', 'processing'))
    AND NOT EXISTS (SELECT 1 FROM profiles AS pr
      LEFT JOIN hosts AS bound ON bound.name = pr.host WHERE pr.name = pool.name
      AND (pr.cooldown_until > now()
        OR (pr.host IS NOT NULL AND bound.state IS DISTINCT FROM 'active')))))
  -- The same for proxy pools: a job of a pool waits, unread, while no proxy of its pool can
  -- take it: every one disabled, banned, cooling down or at its pool's per-proxy cap
  -- (producer.assigning.proxy_rules decides again, with the planner's clock).
  AND (proxy_pool IS NULL OR EXISTS (
    SELECT 1 FROM proxies AS px JOIN proxy_pools AS pp ON pp.name = px.pool
    WHERE px.pool = jobs.proxy_pool AND px.state <> 'disabled'
    AND (px.banned_until IS NULL OR px.banned_until <= now())
    AND (px.cooldown_until IS NULL OR px.cooldown_until <= now())
    AND (SELECT count(*) FROM jobs AS held WHERE held.proxy_id = px.id
      AND held.status IN ('queued', 'processing')) < pp.max_jobs_per_proxy))
"""

RESULT_COLUMNS = """id, kind, status, host, attempts, created_at, started_at, finished_at,
  payload, result, last_error, error_class, profile, crawl_id, depth"""

JOBS_WITH_ARCHIVE = f"""
CREATE VIEW jobs_with_archive WITH (security_invoker = true) AS
SELECT {RESULT_COLUMNS} FROM jobs
UNION ALL
SELECT {RESULT_COLUMNS} FROM jobs_archive
"""

# Arguments are named as ``scrapefleet results`` names its options; in the body a column
# would win over an argument of the same name, so each argument is written with the
# function's name.
MATCHING_JOBS = """
CREATE FUNCTION matching_jobs(
  statuses text[] DEFAULT NULL, kind text DEFAULT NULL, host text DEFAULT NULL,
  since timestamptz DEFAULT NULL, profile text DEFAULT NULL, crawl bigint DEFAULT NULL,
  error_class text DEFAULT NULL, was_on text DEFAULT NULL, rescued boolean DEFAULT false
) RETURNS SETOF jobs_with_archive LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT * FROM jobs_with_archive AS j
WHERE (matching_jobs.statuses IS NULL OR j.status = ANY(matching_jobs.statuses))
  AND (matching_jobs.kind IS NULL OR j.kind = matching_jobs.kind)
  AND (matching_jobs.host IS NULL OR j.host = matching_jobs.host)
  AND (matching_jobs.since IS NULL OR coalesce(j.finished_at, j.created_at) >= matching_jobs.since)
  AND (matching_jobs.profile IS NULL OR j.profile = matching_jobs.profile)
  AND (matching_jobs.crawl IS NULL OR j.crawl_id = matching_jobs.crawl)
  AND (matching_jobs.error_class IS NULL OR j.error_class = matching_jobs.error_class)
  -- Ran there, or was rescued or released from there, at any attempt: job_events keeps the
  -- host of every move, where jobs.host is only the last one.
  -- Rescued only: the moves a rescue made (its audit row names the host).
  AND (matching_jobs.was_on IS NULL
    OR (NOT matching_jobs.rescued AND j.host = matching_jobs.was_on)
    OR j.id IN (SELECT e.job_id FROM job_events AS e WHERE e.host = matching_jobs.was_on
      AND (NOT matching_jobs.rescued
        OR (e.from_status = 'processing' AND e.message LIKE 'rescued:%'))))
$$
"""

COMMENTS = {
    "VIEW ready_jobs": (
        "The pending jobs the producer may assign now as far as the database can tell: retry"
        " time passed, lock key free (no queued or processing job holds it, no ended attempt"
        " may still run with it), a profile of their `profile_pool` free, not cooling down and"
        " on an active host, a proxy of their `proxy_pool` enabled, not banned, not cooling"
        " down and under its pool's cap; `lingering_on_host` is the host an ended attempt may"
        " still run on. Live pauses and rate limits are not applied here"
    ),
    "VIEW jobs_with_archive": (
        "Every job's result columns, of `jobs` and of `jobs_archive` (finished jobs retention"
        " moved), in one relation; `matching_jobs(statuses, kind, host, since, profile, crawl,"
        " error_class, was_on, rescued)` filters it as `scrapefleet results` does (a NULL"
        " argument matches every job), e.g. SELECT * FROM matching_jobs(kind => 'fetch_page',"
        " was_on => 'h3')"
    ),
    "FUNCTION matching_jobs(text[], text, text, timestamptz, text, bigint, text, text, boolean)": (
        "The rows of jobs_with_archive that `scrapefleet results` filters match (a NULL"
        " argument matches every job); e.g. SELECT * FROM matching_jobs(kind => 'fetch_page',"
        " was_on => 'h3')"
    ),
}


def upgrade() -> None:
    op.execute(READY_JOBS)
    op.execute(JOBS_WITH_ARCHIVE)
    op.execute(MATCHING_JOBS)
    for target, comment in COMMENTS.items():
        op.execute(f"COMMENT ON {target} IS '{comment.replace(chr(39), chr(39) * 2)}'")


def downgrade() -> None:
    op.execute(
        "DROP FUNCTION matching_jobs(text[], text, text, timestamptz, text, bigint, text, text,"
        " boolean)"
    )
    op.execute("DROP VIEW jobs_with_archive")
    op.execute("DROP VIEW ready_jobs")
