"""The producer's assignment: pending jobs read under row locks, then moved to their hosts.

(The producer's other job writes, its rescue of silent attempts and its requeue of unavailable
hosts' jobs, hand jobs back: they are in releases.)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from scrapefleet.common.store.controls import NO_HOLDS, Holds
from scrapefleet.common.store.records import PendingJob
from scrapefleet.common.store.sql_text import fill, statement

__all__ = [
    "ASSIGN_SQL",
    "LOCK_PENDING_NO_BROWSER_SQL",
    "LOCK_PENDING_SQL",
    "PENDING_COLUMNS",
    "READY_NOW",
    "assign_jobs",
    "lock_pending_jobs",
    "pending_jobs",
]

# ``lingering_on_host``: the host that may still run an ended attempt of the job (0016), which
# the planner avoids while another host has a slot (that host would hold it queued until its
# thread returned).
# ``pinned_host``: the one host the job may go to (submit --host, migration 0027); the planner
# holds it back while that host has no slot. Pinned jobs are few (canaries, an operator's
# checks) and are pending only after their host handed them back, so they are read like any.
PENDING_COLUMNS = """id, priority, kind, rate_key, lock_key, needs_browser, profile_pool, profile,
  blocked_on_host, CASE WHEN lingering_until > now() THEN lingering_host END AS lingering_on_host,
  pinned_host, proxy_pool, proxy_id, proxy_session"""
# What makes a pending job assignable now besides its status: the conditions of the two
# statements below, also read by common.store.rate_keys (which passes a Holds' params too); a
# test checks that each statement holds them word for word.
READY_NOW = fill(
    """
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
"""
)
# The hot statement, named so that a test can EXPLAIN exactly what runs.
LOCK_PENDING_SQL = statement(
    """
SELECT id, priority, kind, rate_key, lock_key, needs_browser, profile_pool, profile,
  blocked_on_host, CASE WHEN lingering_until > now() THEN lingering_host END AS lingering_on_host,
  pinned_host, proxy_pool, proxy_id, proxy_session
FROM jobs
WHERE status = {job.pending}
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
  -- Rate keys and kinds at their limit are left out the same way (empty arrays: none), and
  -- so are those with a little budget left: common.store.rate_keys reads exactly that many
  -- of theirs, so that no backlog on one key fills the batch.
  AND (rate_key IS NULL OR rate_key <> ALL(CAST(:skip_keys AS text[])))
  AND kind <> ALL(CAST(:skip_kinds AS text[]))
ORDER BY priority DESC, id LIMIT :limit FOR UPDATE SKIP LOCKED
"""
)
# When no host can take a browser job now, browser jobs are left out by the statement itself,
# on a partial index of their own, so a backlog of them is never read, cycle after cycle, only
# to be skipped by the planner while the other jobs wait behind it. Otherwise the same.
LOCK_PENDING_NO_BROWSER_SQL = statement(
    """
SELECT id, priority, kind, rate_key, lock_key, needs_browser, profile_pool, profile,
  blocked_on_host, CASE WHEN lingering_until > now() THEN lingering_host END AS lingering_on_host,
  pinned_host, proxy_pool, proxy_id, proxy_session
FROM jobs
WHERE status = {job.pending} AND NOT needs_browser
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
  -- Rate keys and kinds at their limit are left out the same way (empty arrays: none), and
  -- so are those with a little budget left: common.store.rate_keys reads exactly that many
  -- of theirs, so that no backlog on one key fills the batch.
  AND (rate_key IS NULL OR rate_key <> ALL(CAST(:skip_keys AS text[])))
  AND kind <> ALL(CAST(:skip_kinds AS text[]))
ORDER BY priority DESC, id LIMIT :limit FOR UPDATE SKIP LOCKED
"""
)

# The move and the NOTIFY of every host that got work in one statement (one round trip of a
# wake cycle's few): each host on its channel of its own (host_channel, migration 0031), the
# host's name as the payload, in the order of the hosts. A row not pending any more (taken
# back by an operator meanwhile) moves nowhere, and a host none of whose rows moved is not
# told. The NOTIFYs are evaluated after the sort (PostgreSQL evaluates a volatile output
# column above the ORDER BY), and ``notified`` is joined so that it runs at all.
ASSIGN_SQL = statement(
    """
WITH assigned AS (
  UPDATE jobs SET status = {job.queued}, host = a.host, queued_at = now()
  FROM unnest(CAST(:ids AS bigint[]), CAST(:hosts AS text[])) AS a(id, host)
  WHERE jobs.id = a.id AND jobs.status = {job.pending}
  RETURNING jobs.id, jobs.host
), notified AS (
  SELECT count(*) AS hosts FROM (
    SELECT pg_notify(host_channel(c.host), c.host)
    FROM unnest(CAST(:channel_hosts AS text[])) WITH ORDINALITY AS c(host, i)
    WHERE c.host IN (SELECT host FROM assigned) ORDER BY c.i
  ) AS sent
)
SELECT assigned.id, assigned.host FROM assigned, notified
"""
)


def lock_pending_jobs(
    conn: Connection,
    limit: int,
    *,
    browser_ok: bool = True,
    skip_keys: Sequence[str] = (),
    skip_kinds: Sequence[str] = (),
    holds: Holds = NO_HOLDS,
) -> list[PendingJob]:
    """The highest-priority, oldest pending jobs that may run now (not_before passed, lock key
    free, not paused by an operator: ``holds``), row-locked for this transaction; rows another
    transaction holds are skipped, not waited for. ``browser_ok=False`` leaves browser jobs out
    (no host can take one now); ``skip_keys`` and ``skip_kinds`` leave out those rate keys and
    kinds."""
    statement = LOCK_PENDING_SQL if browser_ok else LOCK_PENDING_NO_BROWSER_SQL
    params = {
        "limit": limit,
        "skip_keys": list(skip_keys),
        "skip_kinds": list(skip_kinds),
        **holds.params(),
    }
    return pending_jobs(conn.execute(statement, params))


def pending_jobs(rows: Iterable[sa.Row[Any]]) -> list[PendingJob]:
    """PendingJob records of rows of PENDING_COLUMNS."""
    return [
        PendingJob(
            r.id,
            r.lock_key,
            r.needs_browser,
            tuple(r.profile_pool or ()),
            r.profile,
            priority=r.priority,
            kind=r.kind,
            rate_key=r.rate_key,
            blocked_on_host=r.blocked_on_host,
            lingering_on_host=r.lingering_on_host,
            pinned_host=r.pinned_host,
            proxy_pool=r.proxy_pool,
            last_proxy=r.proxy_id,
            proxy_session=r.proxy_session,
        )
        for r in rows
    ]


def assign_jobs(conn: Connection, assignments: Sequence[tuple[int, str]]) -> list[tuple[int, str]]:
    """pending -> queued on the planned host, and a NOTIFY to each host that got work."""
    if not assignments:
        return []
    hosts = sorted({host for _, host in assignments})
    rows = conn.execute(
        ASSIGN_SQL,
        {
            "ids": [a[0] for a in assignments],
            "hosts": [a[1] for a in assignments],
            "channel_hosts": hosts,
        },
    ).all()
    return [(r.id, r.host) for r in rows]
