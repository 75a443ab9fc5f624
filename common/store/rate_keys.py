"""Rate limits in the database: the figures the producer's budget is built from, the pending
jobs of keys and kinds with a little budget left, and the back-off state in ``rate_keys``.

The producer alone writes ``rate_keys`` (a consumer's role has no grant on it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from scrapefleet.common.actions.error_classes import ErrorClass
from scrapefleet.common.constants import MAX_CRAWL_DELAY_S, RATE_WINDOW_S
from scrapefleet.common.jobs.rate_limits import (
    CRAWL_KINDS,
    RATE_KEY_DEFAULT_ROW,
    PendingSkips,
    RateCount,
    RateLimit,
    Slowdown,
    ThrottleSeen,
)
from scrapefleet.common.store.assignment import (
    PENDING_COLUMNS,
    READY_NOW,
    lock_pending_jobs,
    pending_jobs,
)
from scrapefleet.common.store.controls import NO_HOLDS, Holds
from scrapefleet.common.store.records import PendingJob
from scrapefleet.common.store.statuses import IN_FLIGHT, JobStatus, sql_list

__all__ = [
    "RATE_IN_FLIGHT_SQL",
    "RATE_WINDOW_SQL",
    "THROTTLES_SQL",
    "TIGHT_KEYS_SQL",
    "TIGHT_KINDS_SQL",
    "in_flight_counts",
    "lock_pending_within_limits",
    "rate_slowdowns",
    "save_rate_keys",
    "throttles_since",
    "window_counts",
]

_IN_FLIGHT = f"status IN {sql_list(IN_FLIGHT)}"
# Every job queued or running: a few rows per slot of the fleet, whatever the history.
RATE_IN_FLIGHT_SQL = sa.text(
    f"SELECT rate_key, kind, count(*) AS n FROM jobs WHERE {_IN_FLIGHT} GROUP BY rate_key, kind"
)
# The trailing window's use: attempts started in it, and jobs queued, which start within
# moments (the started_at and in-flight partial indexes, OR-ed). A row counts once.
_RECENT = f"started_at > now() - make_interval(secs => {RATE_WINDOW_S})"
RATE_WINDOW_SQL = sa.text(
    "SELECT rate_key, kind, count(*) AS n FROM jobs"
    f" WHERE {_RECENT} OR status = '{JobStatus.QUEUED}' GROUP BY rate_key, kind"
)

# Keys (kinds) with budget left but a limit: each read for at most its budget, best first, on
# the pending index by key (kind). The main pending read leaves them out, so a backlog of
# thousands on one key costs this read a handful of rows and the others nothing.
_TIGHT = (
    "SELECT j.* FROM unnest(CAST(:names AS text[]), CAST(:budgets AS int[])) AS t(name, budget)"
    f" CROSS JOIN LATERAL (SELECT {PENDING_COLUMNS} FROM jobs"
    f"  WHERE status = '{JobStatus.PENDING}'{{browser}} AND {{column}} = t.name"
    + READY_NOW
    + " {skip} ORDER BY priority DESC, id LIMIT t.budget FOR UPDATE SKIP LOCKED) AS j"
)
_BY = {
    "rate_key": "AND kind <> ALL(CAST(:skip AS text[]))",
    "kind": "AND (rate_key IS NULL OR rate_key <> ALL(CAST(:skip AS text[])))",
}


def _tight(column: str, browser_ok: bool) -> sa.TextClause:
    browser = "" if browser_ok else " AND NOT needs_browser"
    return sa.text(_TIGHT.format(browser=browser, column=column, skip=_BY[column]))


TIGHT_KEYS_SQL = _tight("rate_key", True)
TIGHT_KINDS_SQL = _tight("kind", True)
_TIGHT_SQL = {(column, ok): _tight(column, ok) for column in _BY for ok in (True, False)}

# What the attempts of each key said since the last look (job_events by id): push-backs (an
# attempt that ended rate limited or blocked: the class on its own audit row, so a job handed
# back by a crashing host later is no push-back) with the latest time such a job may run again
# (its Retry-After), and completions. One indexed range of the audit table per cycle.
_PUSHED_BACK = sql_list((ErrorClass.RATE_LIMITED, ErrorClass.BLOCKED))
_S = JobStatus
# A crawl page's result says its site's Crawl-delay (common.crawl.action): a host's word, so
# read only as a JSON number and held to 0..MAX_CRAWL_DELAY_S (a bad value is no delay, and
# the most a lying host can do is slow a site it crawls, as a false push-back could).
_CRAWL_DONE = (
    f"e.to_status = '{_S.COMPLETED}' AND j.kind IN {sql_list(CRAWL_KINDS)}"
    " AND jsonb_typeof(j.result -> 'crawl_delay_s') = 'number'"
)
_CRAWL_DELAY = (
    f"CASE WHEN jsonb_typeof(j.result -> 'crawl_delay_s') = 'number' THEN CAST(GREATEST(0,"
    f" LEAST(CAST(j.result -> 'crawl_delay_s' AS numeric), {MAX_CRAWL_DELAY_S:g})) AS float8) END"
)
# Completions are read only while some key is slowed (``recovering``): most cycles join no
# job at all. ``last_event`` is the range's end whether or not any row in it mattered.
THROTTLES_SQL = sa.text(
    "SELECT m.last_event, g.* FROM"
    " (SELECT coalesce(max(id), :after) AS last_event FROM job_events WHERE id > :after) AS m"
    " LEFT JOIN LATERAL (SELECT j.rate_key,"
    f"   count(*) FILTER (WHERE e.error_class IN {_PUSHED_BACK}) AS throttled,"
    f"   max(j.not_before) FILTER (WHERE e.to_status = '{_S.PENDING}'"
    f"     AND e.error_class = '{ErrorClass.RATE_LIMITED}') AS retry_at,"
    f"   count(*) FILTER (WHERE e.to_status = '{_S.COMPLETED}') AS completed,"
    f"   max({_CRAWL_DELAY}) FILTER (WHERE {_CRAWL_DONE}) AS crawl_delay"
    "  FROM job_events e JOIN jobs j ON j.id = e.job_id"
    f"  WHERE e.id > :after AND e.id <= m.last_event AND e.from_status = '{_S.PROCESSING}'"
    f"    AND (e.error_class IN {_PUSHED_BACK} OR ({_CRAWL_DONE})"
    f"      OR (CAST(:recovering AS boolean) AND e.to_status = '{_S.COMPLETED}'))"
    "    AND j.rate_key IS NOT NULL"
    "  GROUP BY j.rate_key) AS g ON true"
)
LAST_EVENT_SQL = sa.text("SELECT coalesce(max(id), 0) FROM job_events")

READ_RATE_KEYS_SQL = sa.text(
    "SELECT key, factor, paused_until FROM rate_keys"
    f" WHERE key <> '{RATE_KEY_DEFAULT_ROW}' AND (factor < 1 OR paused_until > now())"
)
# The producer's whole picture at once: its configured limits (named keys and the default row)
# and every slowdown; rows that say nothing any more (not named, factor 1, no pause) go.
UPSERT_RATE_KEY_SQL = sa.text(
    "INSERT INTO rate_keys (key, named, concurrency, per_minute, factor, paused_until, updated_at)"
    " SELECT * , now() FROM unnest(CAST(:keys AS text[]), CAST(:named AS boolean[]),"
    "   CAST(:concurrency AS int[]), CAST(:per_minute AS int[]), CAST(:factor AS float8[]),"
    "   CAST(:paused_until AS timestamptz[]))"
    " ON CONFLICT (key) DO UPDATE SET named = excluded.named,"
    "   concurrency = excluded.concurrency, per_minute = excluded.per_minute,"
    "   factor = excluded.factor, paused_until = excluded.paused_until, updated_at = now()"
    " WHERE (rate_keys.named, rate_keys.concurrency, rate_keys.per_minute, rate_keys.factor,"
    "   rate_keys.paused_until) IS DISTINCT FROM (excluded.named, excluded.concurrency,"
    "   excluded.per_minute, excluded.factor, excluded.paused_until)"
)
DELETE_OTHER_RATE_KEYS_SQL = sa.text(
    "DELETE FROM rate_keys WHERE key <> ALL(CAST(:keys AS text[]))"
)


def in_flight_counts(conn: Connection) -> list[RateCount]:
    """Per (rate key, kind): jobs queued or running."""
    return [RateCount(r.rate_key, r.kind, in_flight=r.n) for r in conn.execute(RATE_IN_FLIGHT_SQL)]


def window_counts(conn: Connection) -> list[RateCount]:
    """Per (rate key, kind): attempts started in the trailing window plus jobs queued."""
    return [RateCount(r.rate_key, r.kind, window=r.n) for r in conn.execute(RATE_WINDOW_SQL)]


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


def rate_slowdowns(conn: Connection) -> dict[str, Slowdown]:
    """Every key slowed down or paused, as last saved."""
    return {r.key: Slowdown(r.factor, r.paused_until) for r in conn.execute(READ_RATE_KEYS_SQL)}


def throttles_since(
    conn: Connection, after_event: int | None, *, recovering: bool
) -> tuple[dict[str, ThrottleSeen], int]:
    """What each key's attempts said after the audit row ``after_event`` (None: from now on,
    nothing yet): push-backs, and completions too when ``recovering`` (a key is slowed).
    Returns that and the id to pass next time."""
    if after_event is None:
        return {}, int(conn.execute(LAST_EVENT_SQL).scalar_one())
    seen: dict[str, ThrottleSeen] = {}
    last = after_event
    params = {"after": after_event, "recovering": recovering}
    for r in conn.execute(THROTTLES_SQL, params):
        last = int(r.last_event)
        if r.rate_key is not None:
            seen[r.rate_key] = ThrottleSeen(r.throttled, r.retry_at, r.completed, r.crawl_delay)
    return seen, last


def save_rate_keys(
    conn: Connection,
    named: Mapping[str, RateLimit],
    default: RateLimit | None,
    slowdowns: Mapping[str, Slowdown],
    now: datetime,
) -> None:
    """Make rate_keys say exactly this: a row per named key, the default's row, a row per key
    slowed down; nothing else."""
    rows: dict[str, tuple[bool, RateLimit | None, Slowdown]] = {}
    for key, named_limit in named.items():
        rows[key] = (True, named_limit, Slowdown())
    if default is not None:
        rows[RATE_KEY_DEFAULT_ROW] = (True, default, Slowdown())
    for key, slowdown in slowdowns.items():
        if not slowdown.is_neutral(now):
            is_named, limit, _ = rows.get(key, (False, None, slowdown))
            rows[key] = (is_named, limit, slowdown)
    keys: Sequence[str] = list(rows)
    conn.execute(DELETE_OTHER_RATE_KEYS_SQL, {"keys": keys})
    if not keys:
        return
    values = list(rows.values())
    conn.execute(
        UPSERT_RATE_KEY_SQL,
        {
            "keys": keys,
            "named": [v[0] for v in values],
            "concurrency": [v[1].concurrency if v[1] else None for v in values],
            "per_minute": [v[1].per_minute if v[1] else None for v in values],
            "factor": [v[2].factor for v in values],
            "paused_until": [v[2].paused_until for v in values],
        },
    )
