"""The pending jobs the producer may assign under the rate limits: the main pending read without
the keys and kinds at their limit, and, for each key or kind with a little budget left, at most
that budget of its jobs, best first (common.store.rate_keys has the figures the budgets come
from).
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

from scrapefleet.common.jobs.rate_limits import PendingSkips
from scrapefleet.common.store.assignment import lock_pending_jobs, pending_jobs
from scrapefleet.common.store.controls import NO_HOLDS, Holds
from scrapefleet.common.store.records import PendingJob
from scrapefleet.common.store.sql_text import statement

__all__ = ["TIGHT_KEYS_SQL", "TIGHT_KINDS_SQL", "lock_pending_within_limits"]

# Keys (kinds) with budget left but a limit: each read for at most its budget, best first, on
# the pending index by key (kind). The main pending read leaves them out, so a backlog of
# thousands on one key costs this read a handful of rows and the others nothing. The pending
# job's conditions are common.store.assignment.READY_NOW word for word (a test checks), and
# when no host can take a browser job now, browser jobs are left out by the statement itself,
# as by the main read. Four statements: by key or by kind, with or without browser jobs.
TIGHT_KEYS_SQL = statement(
    """
SELECT j.*
FROM unnest(CAST(:names AS text[]), CAST(:budgets AS int[])) AS t(name, budget)
CROSS JOIN LATERAL (
SELECT id, priority, kind, rate_key, lock_key, needs_browser, profile_pool, profile,
  blocked_on_host, CASE WHEN lingering_until > now() THEN lingering_host END AS lingering_on_host,
  pinned_host, proxy_pool, proxy_id, proxy_session
FROM jobs
WHERE status = {job.pending} AND rate_key = t.name
  AND (not_before IS NULL OR not_before <= now())
  -- Jobs whose lock key is held by a queued or processing job are left out: they cannot be
  -- assigned now, and reading them would let a large batch sharing one busy key fill the
  -- whole scan window and starve every other pending job. The NOT EXISTS probes the unique
  -- partial index on in-flight lock keys.
  AND (lock_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM jobs AS held WHERE held.lock_key = jobs.lock_key
    AND held.status IN {in_flight}))
  -- A lock key is held, too, by an attempt ended in the database that may still run on its
  -- host (rescued, stopped, timed out: migration 0016), the job's own included, until that
  -- host confirms the end or its lingering_until passes (docs/attempts-and-locks.md).
  AND (lock_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM jobs AS lingering WHERE lingering.lock_key = jobs.lock_key
    AND lingering.lock_key IS NOT NULL AND lingering.lingering_until IS NOT NULL
    AND lingering.lingering_until > now()))
  -- The same for profiles: a job of a pool waits, unread, while every profile of its pool is
  -- held by a job, cooling down, or bound to a host that is not active
  -- (producer.profile_rules decides again, with the planner's clock).
  AND (profile_pool IS NULL OR EXISTS (
    SELECT 1 FROM unnest(jobs.profile_pool) AS pool(name)
    WHERE NOT EXISTS (SELECT 1 FROM jobs AS held WHERE held.profile = pool.name
      AND held.status IN {in_flight})
    AND NOT EXISTS (SELECT 1 FROM profiles AS pr
      LEFT JOIN hosts AS bound ON bound.name = pr.host WHERE pr.name = pool.name
      AND (pr.cooldown_until > now()
        OR (pr.host IS NOT NULL AND bound.state IS DISTINCT FROM {host.active})))))
  -- The same for proxy pools: a job of a pool waits, unread, while no proxy of its pool can
  -- take it: every one disabled, banned, cooling down or at its pool's per-proxy cap
  -- (producer.proxy_rules decides again, with the planner's clock).
  AND (proxy_pool IS NULL OR EXISTS (
    SELECT 1 FROM proxies AS px JOIN proxy_pools AS pp ON pp.name = px.pool
    WHERE px.pool = jobs.proxy_pool AND px.state <> 'disabled'
    AND (px.banned_until IS NULL OR px.banned_until <= now())
    AND (px.cooldown_until IS NULL OR px.cooldown_until <= now())
    AND (SELECT count(*) FROM jobs AS held WHERE held.proxy_id = px.id
      AND held.status IN {in_flight}) < pp.max_jobs_per_proxy))
  -- What an operator paused live (common.store.controls.Holds: empty arrays, nothing held),
  -- and the kinds no host with a free slot runs (only_kinds NULL: any kind).
  AND (rate_key IS NULL OR rate_key <> ALL(CAST(:held_keys AS text[])))
  AND kind <> ALL(CAST(:held_kinds AS text[]))
  AND (crawl_id IS NULL OR crawl_id <> ALL(CAST(:held_crawls AS bigint[])))
  AND (CAST(:only_kinds AS text[]) IS NULL OR kind = ANY(CAST(:only_kinds AS text[])))
  -- Kinds at their limit are left out here too (an empty array: none).
  AND kind <> ALL(CAST(:skip AS text[]))
ORDER BY priority DESC, id LIMIT t.budget FOR UPDATE SKIP LOCKED
) AS j
"""
)
TIGHT_KEYS_NO_BROWSER_SQL = statement(
    """
SELECT j.*
FROM unnest(CAST(:names AS text[]), CAST(:budgets AS int[])) AS t(name, budget)
CROSS JOIN LATERAL (
SELECT id, priority, kind, rate_key, lock_key, needs_browser, profile_pool, profile,
  blocked_on_host, CASE WHEN lingering_until > now() THEN lingering_host END AS lingering_on_host,
  pinned_host, proxy_pool, proxy_id, proxy_session
FROM jobs
WHERE status = {job.pending} AND NOT needs_browser AND rate_key = t.name
  AND (not_before IS NULL OR not_before <= now())
  -- Jobs whose lock key is held by a queued or processing job are left out: they cannot be
  -- assigned now, and reading them would let a large batch sharing one busy key fill the
  -- whole scan window and starve every other pending job. The NOT EXISTS probes the unique
  -- partial index on in-flight lock keys.
  AND (lock_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM jobs AS held WHERE held.lock_key = jobs.lock_key
    AND held.status IN {in_flight}))
  -- A lock key is held, too, by an attempt ended in the database that may still run on its
  -- host (rescued, stopped, timed out: migration 0016), the job's own included, until that
  -- host confirms the end or its lingering_until passes (docs/attempts-and-locks.md).
  AND (lock_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM jobs AS lingering WHERE lingering.lock_key = jobs.lock_key
    AND lingering.lock_key IS NOT NULL AND lingering.lingering_until IS NOT NULL
    AND lingering.lingering_until > now()))
  -- The same for profiles: a job of a pool waits, unread, while every profile of its pool is
  -- held by a job, cooling down, or bound to a host that is not active
  -- (producer.profile_rules decides again, with the planner's clock).
  AND (profile_pool IS NULL OR EXISTS (
    SELECT 1 FROM unnest(jobs.profile_pool) AS pool(name)
    WHERE NOT EXISTS (SELECT 1 FROM jobs AS held WHERE held.profile = pool.name
      AND held.status IN {in_flight})
    AND NOT EXISTS (SELECT 1 FROM profiles AS pr
      LEFT JOIN hosts AS bound ON bound.name = pr.host WHERE pr.name = pool.name
      AND (pr.cooldown_until > now()
        OR (pr.host IS NOT NULL AND bound.state IS DISTINCT FROM {host.active})))))
  -- The same for proxy pools: a job of a pool waits, unread, while no proxy of its pool can
  -- take it: every one disabled, banned, cooling down or at its pool's per-proxy cap
  -- (producer.proxy_rules decides again, with the planner's clock).
  AND (proxy_pool IS NULL OR EXISTS (
    SELECT 1 FROM proxies AS px JOIN proxy_pools AS pp ON pp.name = px.pool
    WHERE px.pool = jobs.proxy_pool AND px.state <> 'disabled'
    AND (px.banned_until IS NULL OR px.banned_until <= now())
    AND (px.cooldown_until IS NULL OR px.cooldown_until <= now())
    AND (SELECT count(*) FROM jobs AS held WHERE held.proxy_id = px.id
      AND held.status IN {in_flight}) < pp.max_jobs_per_proxy))
  -- What an operator paused live (common.store.controls.Holds: empty arrays, nothing held),
  -- and the kinds no host with a free slot runs (only_kinds NULL: any kind).
  AND (rate_key IS NULL OR rate_key <> ALL(CAST(:held_keys AS text[])))
  AND kind <> ALL(CAST(:held_kinds AS text[]))
  AND (crawl_id IS NULL OR crawl_id <> ALL(CAST(:held_crawls AS bigint[])))
  AND (CAST(:only_kinds AS text[]) IS NULL OR kind = ANY(CAST(:only_kinds AS text[])))
  -- Kinds at their limit are left out here too (an empty array: none).
  AND kind <> ALL(CAST(:skip AS text[]))
ORDER BY priority DESC, id LIMIT t.budget FOR UPDATE SKIP LOCKED
) AS j
"""
)
TIGHT_KINDS_SQL = statement(
    """
SELECT j.*
FROM unnest(CAST(:names AS text[]), CAST(:budgets AS int[])) AS t(name, budget)
CROSS JOIN LATERAL (
SELECT id, priority, kind, rate_key, lock_key, needs_browser, profile_pool, profile,
  blocked_on_host, CASE WHEN lingering_until > now() THEN lingering_host END AS lingering_on_host,
  pinned_host, proxy_pool, proxy_id, proxy_session
FROM jobs
WHERE status = {job.pending} AND kind = t.name
  AND (not_before IS NULL OR not_before <= now())
  -- Jobs whose lock key is held by a queued or processing job are left out: they cannot be
  -- assigned now, and reading them would let a large batch sharing one busy key fill the
  -- whole scan window and starve every other pending job. The NOT EXISTS probes the unique
  -- partial index on in-flight lock keys.
  AND (lock_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM jobs AS held WHERE held.lock_key = jobs.lock_key
    AND held.status IN {in_flight}))
  -- A lock key is held, too, by an attempt ended in the database that may still run on its
  -- host (rescued, stopped, timed out: migration 0016), the job's own included, until that
  -- host confirms the end or its lingering_until passes (docs/attempts-and-locks.md).
  AND (lock_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM jobs AS lingering WHERE lingering.lock_key = jobs.lock_key
    AND lingering.lock_key IS NOT NULL AND lingering.lingering_until IS NOT NULL
    AND lingering.lingering_until > now()))
  -- The same for profiles: a job of a pool waits, unread, while every profile of its pool is
  -- held by a job, cooling down, or bound to a host that is not active
  -- (producer.profile_rules decides again, with the planner's clock).
  AND (profile_pool IS NULL OR EXISTS (
    SELECT 1 FROM unnest(jobs.profile_pool) AS pool(name)
    WHERE NOT EXISTS (SELECT 1 FROM jobs AS held WHERE held.profile = pool.name
      AND held.status IN {in_flight})
    AND NOT EXISTS (SELECT 1 FROM profiles AS pr
      LEFT JOIN hosts AS bound ON bound.name = pr.host WHERE pr.name = pool.name
      AND (pr.cooldown_until > now()
        OR (pr.host IS NOT NULL AND bound.state IS DISTINCT FROM {host.active})))))
  -- The same for proxy pools: a job of a pool waits, unread, while no proxy of its pool can
  -- take it: every one disabled, banned, cooling down or at its pool's per-proxy cap
  -- (producer.proxy_rules decides again, with the planner's clock).
  AND (proxy_pool IS NULL OR EXISTS (
    SELECT 1 FROM proxies AS px JOIN proxy_pools AS pp ON pp.name = px.pool
    WHERE px.pool = jobs.proxy_pool AND px.state <> 'disabled'
    AND (px.banned_until IS NULL OR px.banned_until <= now())
    AND (px.cooldown_until IS NULL OR px.cooldown_until <= now())
    AND (SELECT count(*) FROM jobs AS held WHERE held.proxy_id = px.id
      AND held.status IN {in_flight}) < pp.max_jobs_per_proxy))
  -- What an operator paused live (common.store.controls.Holds: empty arrays, nothing held),
  -- and the kinds no host with a free slot runs (only_kinds NULL: any kind).
  AND (rate_key IS NULL OR rate_key <> ALL(CAST(:held_keys AS text[])))
  AND kind <> ALL(CAST(:held_kinds AS text[]))
  AND (crawl_id IS NULL OR crawl_id <> ALL(CAST(:held_crawls AS bigint[])))
  AND (CAST(:only_kinds AS text[]) IS NULL OR kind = ANY(CAST(:only_kinds AS text[])))
  -- Rate keys at their limit, and those read by key, are left out here (an empty
  -- array: none).
  AND (rate_key IS NULL OR rate_key <> ALL(CAST(:skip AS text[])))
ORDER BY priority DESC, id LIMIT t.budget FOR UPDATE SKIP LOCKED
) AS j
"""
)
TIGHT_KINDS_NO_BROWSER_SQL = statement(
    """
SELECT j.*
FROM unnest(CAST(:names AS text[]), CAST(:budgets AS int[])) AS t(name, budget)
CROSS JOIN LATERAL (
SELECT id, priority, kind, rate_key, lock_key, needs_browser, profile_pool, profile,
  blocked_on_host, CASE WHEN lingering_until > now() THEN lingering_host END AS lingering_on_host,
  pinned_host, proxy_pool, proxy_id, proxy_session
FROM jobs
WHERE status = {job.pending} AND NOT needs_browser AND kind = t.name
  AND (not_before IS NULL OR not_before <= now())
  -- Jobs whose lock key is held by a queued or processing job are left out: they cannot be
  -- assigned now, and reading them would let a large batch sharing one busy key fill the
  -- whole scan window and starve every other pending job. The NOT EXISTS probes the unique
  -- partial index on in-flight lock keys.
  AND (lock_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM jobs AS held WHERE held.lock_key = jobs.lock_key
    AND held.status IN {in_flight}))
  -- A lock key is held, too, by an attempt ended in the database that may still run on its
  -- host (rescued, stopped, timed out: migration 0016), the job's own included, until that
  -- host confirms the end or its lingering_until passes (docs/attempts-and-locks.md).
  AND (lock_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM jobs AS lingering WHERE lingering.lock_key = jobs.lock_key
    AND lingering.lock_key IS NOT NULL AND lingering.lingering_until IS NOT NULL
    AND lingering.lingering_until > now()))
  -- The same for profiles: a job of a pool waits, unread, while every profile of its pool is
  -- held by a job, cooling down, or bound to a host that is not active
  -- (producer.profile_rules decides again, with the planner's clock).
  AND (profile_pool IS NULL OR EXISTS (
    SELECT 1 FROM unnest(jobs.profile_pool) AS pool(name)
    WHERE NOT EXISTS (SELECT 1 FROM jobs AS held WHERE held.profile = pool.name
      AND held.status IN {in_flight})
    AND NOT EXISTS (SELECT 1 FROM profiles AS pr
      LEFT JOIN hosts AS bound ON bound.name = pr.host WHERE pr.name = pool.name
      AND (pr.cooldown_until > now()
        OR (pr.host IS NOT NULL AND bound.state IS DISTINCT FROM {host.active})))))
  -- The same for proxy pools: a job of a pool waits, unread, while no proxy of its pool can
  -- take it: every one disabled, banned, cooling down or at its pool's per-proxy cap
  -- (producer.proxy_rules decides again, with the planner's clock).
  AND (proxy_pool IS NULL OR EXISTS (
    SELECT 1 FROM proxies AS px JOIN proxy_pools AS pp ON pp.name = px.pool
    WHERE px.pool = jobs.proxy_pool AND px.state <> 'disabled'
    AND (px.banned_until IS NULL OR px.banned_until <= now())
    AND (px.cooldown_until IS NULL OR px.cooldown_until <= now())
    AND (SELECT count(*) FROM jobs AS held WHERE held.proxy_id = px.id
      AND held.status IN {in_flight}) < pp.max_jobs_per_proxy))
  -- What an operator paused live (common.store.controls.Holds: empty arrays, nothing held),
  -- and the kinds no host with a free slot runs (only_kinds NULL: any kind).
  AND (rate_key IS NULL OR rate_key <> ALL(CAST(:held_keys AS text[])))
  AND kind <> ALL(CAST(:held_kinds AS text[]))
  AND (crawl_id IS NULL OR crawl_id <> ALL(CAST(:held_crawls AS bigint[])))
  AND (CAST(:only_kinds AS text[]) IS NULL OR kind = ANY(CAST(:only_kinds AS text[])))
  -- Rate keys at their limit, and those read by key, are left out here (an empty
  -- array: none).
  AND (rate_key IS NULL OR rate_key <> ALL(CAST(:skip AS text[])))
ORDER BY priority DESC, id LIMIT t.budget FOR UPDATE SKIP LOCKED
) AS j
"""
)
_TIGHT_SQL = {
    ("rate_key", True): TIGHT_KEYS_SQL,
    ("rate_key", False): TIGHT_KEYS_NO_BROWSER_SQL,
    ("kind", True): TIGHT_KINDS_SQL,
    ("kind", False): TIGHT_KINDS_NO_BROWSER_SQL,
}


def lock_pending_within_limits(
    conn: Connection,
    limit: int,
    skips: PendingSkips,
    *,
    browser_ok: bool = True,
    holds: Holds = NO_HOLDS,
) -> list[PendingJob]:
    """lock_pending_jobs without the keys and kinds at their limit, and with at most its budget
    of jobs of each key or kind that has a little left; in the pending order. Nothing an
    operator paused (``holds``) is read."""
    left_out_keys = [*skips.saturated_keys, *skips.tight_keys]
    left_out_kinds = [*skips.saturated_kinds, *skips.tight_kinds]
    jobs = lock_pending_jobs(
        conn,
        limit,
        browser_ok=browser_ok,
        skip_keys=left_out_keys,
        skip_kinds=left_out_kinds,
        holds=holds,
    )
    for column, budgets, skip in (
        ("rate_key", skips.tight_keys, list(skips.saturated_kinds)),
        ("kind", skips.tight_kinds, left_out_keys),
    ):
        if not budgets:
            continue
        params = {
            "names": list(budgets),
            "budgets": list(budgets.values()),
            "skip": skip,
            **holds.params(),
        }
        jobs.extend(pending_jobs(conn.execute(_TIGHT_SQL[column, browser_ok], params)))
    jobs.sort(key=lambda j: (-j.priority, j.id))
    return jobs
