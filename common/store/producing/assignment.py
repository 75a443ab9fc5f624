"""The producer's assignment: pending jobs read under row locks, then moved to their hosts.

(The producer's other job writes, its rescue of silent attempts and its requeue of unavailable
hosts' jobs, hand jobs back: they are in releases.)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from scrapefleet.common.store.operating.controls import NO_HOLDS, Holds
from scrapefleet.common.store.records import PendingJob
from scrapefleet.common.store.sql_text import statement

__all__ = [
    "ASSIGN_SQL",
    "HELD_NOW",
    "LOCK_PENDING_NO_BROWSER_SQL",
    "LOCK_PENDING_SQL",
    "PENDING_COLUMNS",
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
  blocked_on_host, lingering_on_host, pinned_host, proxy_pool, proxy_id, proxy_session"""
# What the pending reads add to the view ready_jobs (migration 0042: the pending jobs the
# database can tell may run now, their lock keys, profiles and proxies free): what an
# operator paused live (common.store.operating.controls.Holds: empty arrays, nothing held), and the
# kinds no host with a free slot runs (only_kinds NULL: any kind). A test checks that each
# pending read holds them word for word.
HELD_NOW = """
  AND (rate_key IS NULL OR rate_key <> ALL(CAST(:held_keys AS text[])))
  AND kind <> ALL(CAST(:held_kinds AS text[]))
  AND (crawl_id IS NULL OR crawl_id <> ALL(CAST(:held_crawls AS bigint[])))
  AND (CAST(:only_kinds AS text[]) IS NULL OR kind = ANY(CAST(:only_kinds AS text[])))
"""
# The hot statement, named so that a test can EXPLAIN exactly what runs. FOR UPDATE on the
# view locks the rows of jobs under it, and the planner reads the view's conditions as if
# they were written here: the pending jobs' partial index, as before the view.
# Rate keys and kinds at their limit are left out (empty arrays: none), and so are those with
# a little budget left: common.store.producing.tight_budgets reads exactly that many of theirs, so
# that no backlog on one key fills the batch.
LOCK_PENDING_SQL = statement(
    """
SELECT id, priority, kind, rate_key, lock_key, needs_browser, profile_pool, profile,
  blocked_on_host, lingering_on_host, pinned_host, proxy_pool, proxy_id, proxy_session
FROM ready_jobs
WHERE (rate_key IS NULL OR rate_key <> ALL(CAST(:skip_keys AS text[])))
  AND kind <> ALL(CAST(:skip_kinds AS text[]))
  AND (rate_key IS NULL OR rate_key <> ALL(CAST(:held_keys AS text[])))
  AND kind <> ALL(CAST(:held_kinds AS text[]))
  AND (crawl_id IS NULL OR crawl_id <> ALL(CAST(:held_crawls AS bigint[])))
  AND (CAST(:only_kinds AS text[]) IS NULL OR kind = ANY(CAST(:only_kinds AS text[])))
ORDER BY priority DESC, id LIMIT :limit FOR UPDATE SKIP LOCKED
"""
)
# When no host can take a browser job now, browser jobs are left out by the statement itself,
# on a partial index of their own, so a backlog of them is never read, cycle after cycle, only
# to be skipped by the planner while the other jobs wait behind it. Otherwise the same.
LOCK_PENDING_NO_BROWSER_SQL = statement(
    """
SELECT id, priority, kind, rate_key, lock_key, needs_browser, profile_pool, profile,
  blocked_on_host, lingering_on_host, pinned_host, proxy_pool, proxy_id, proxy_session
FROM ready_jobs
WHERE NOT needs_browser
  AND (rate_key IS NULL OR rate_key <> ALL(CAST(:skip_keys AS text[])))
  AND kind <> ALL(CAST(:skip_kinds AS text[]))
  AND (rate_key IS NULL OR rate_key <> ALL(CAST(:held_keys AS text[])))
  AND kind <> ALL(CAST(:held_kinds AS text[]))
  AND (crawl_id IS NULL OR crawl_id <> ALL(CAST(:held_crawls AS bigint[])))
  AND (CAST(:only_kinds AS text[]) IS NULL OR kind = ANY(CAST(:only_kinds AS text[])))
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
