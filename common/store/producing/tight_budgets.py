"""The pending jobs the producer may assign under the rate limits: the main pending read without
the keys and kinds at their limit, and, for each key or kind with a little budget left, at most
that budget of its jobs, best first (common.store.producing.rate_keys has the figures the budgets
come from).
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

from scrapefleet.common.jobs.rate_limits import PendingSkips
from scrapefleet.common.store.operating.controls import NO_HOLDS, Holds
from scrapefleet.common.store.producing.assignment import lock_pending_jobs, pending_jobs
from scrapefleet.common.store.records import PendingJob
from scrapefleet.common.store.sql_text import statement

__all__ = ["TIGHT_KEYS_SQL", "TIGHT_KINDS_SQL", "lock_pending_within_limits"]

# Keys (kinds) with budget left but a limit: each read for at most its budget, best first, on
# the pending index by key (kind). The main pending read leaves them out, so a backlog of
# thousands on one key costs this read a handful of rows and the others nothing. The pending
# jobs are those of the view ready_jobs (migration 0042), with what an operator paused left
# out as common.store.producing.assignment.HELD_NOW says (a test checks). When no host can take a
# browser job now (:browser_ok false), browser jobs are left out too: a filter on the index
# by key (kind), which has no browser-less twin, so one statement serves both. Read by key,
# the kinds at their limit are left out (:skip); read by kind, the rate keys at their limit
# and those read by key (an empty array: none).
TIGHT_KEYS_SQL = statement(
    """
SELECT j.*
FROM unnest(CAST(:names AS text[]), CAST(:budgets AS int[])) AS t(name, budget)
CROSS JOIN LATERAL (
SELECT id, priority, kind, rate_key, lock_key, needs_browser, profile_pool, profile,
  blocked_on_host, lingering_on_host, pinned_host, proxy_pool, proxy_id, proxy_session
FROM ready_jobs
WHERE rate_key = t.name
  AND (CAST(:browser_ok AS boolean) OR NOT needs_browser)
  AND kind <> ALL(CAST(:skip AS text[]))
  AND (rate_key IS NULL OR rate_key <> ALL(CAST(:held_keys AS text[])))
  AND kind <> ALL(CAST(:held_kinds AS text[]))
  AND (crawl_id IS NULL OR crawl_id <> ALL(CAST(:held_crawls AS bigint[])))
  AND (CAST(:only_kinds AS text[]) IS NULL OR kind = ANY(CAST(:only_kinds AS text[])))
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
  blocked_on_host, lingering_on_host, pinned_host, proxy_pool, proxy_id, proxy_session
FROM ready_jobs
WHERE kind = t.name
  AND (CAST(:browser_ok AS boolean) OR NOT needs_browser)
  AND (rate_key IS NULL OR rate_key <> ALL(CAST(:skip AS text[])))
  AND (rate_key IS NULL OR rate_key <> ALL(CAST(:held_keys AS text[])))
  AND kind <> ALL(CAST(:held_kinds AS text[]))
  AND (crawl_id IS NULL OR crawl_id <> ALL(CAST(:held_crawls AS bigint[])))
  AND (CAST(:only_kinds AS text[]) IS NULL OR kind = ANY(CAST(:only_kinds AS text[])))
ORDER BY priority DESC, id LIMIT t.budget FOR UPDATE SKIP LOCKED
) AS j
"""
)
_TIGHT_SQL = {"rate_key": TIGHT_KEYS_SQL, "kind": TIGHT_KINDS_SQL}


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
            "browser_ok": browser_ok,
            **holds.params(),
        }
        jobs.extend(pending_jobs(conn.execute(_TIGHT_SQL[column], params)))
    jobs.sort(key=lambda j: (-j.priority, j.id))
    return jobs
