"""Rate limits in the database: the figures the producer's budget is built from and the
back-off state in ``rate_keys`` (the pending jobs of keys and kinds with a little budget left
are read by common.store.producing.tight_budgets).

The producer alone writes ``rate_keys`` (a consumer's role has no grant on it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from sqlalchemy.engine import Connection

from scrapefleet.common.actions.error_classes import ErrorClass
from scrapefleet.common.constants import MAX_CRAWL_DELAY_S
from scrapefleet.common.jobs.rate_limits import (
    CRAWL_KINDS,
    RATE_KEY_DEFAULT_ROW,
    RateCount,
    RateLimit,
    Slowdown,
    ThrottleSeen,
)
from scrapefleet.common.store.sql_text import statement

__all__ = [
    "RATE_IN_FLIGHT_SQL",
    "RATE_WINDOW_SQL",
    "THROTTLES_SQL",
    "in_flight_counts",
    "rate_slowdowns",
    "save_rate_keys",
    "throttles_since",
    "window_counts",
]

# Every job queued or running: a few rows per slot of the fleet, whatever the history.
RATE_IN_FLIGHT_SQL = statement(
    """
SELECT rate_key, kind, count(*) AS n
FROM jobs
WHERE status IN {in_flight}
GROUP BY rate_key, kind
"""
)
# The trailing window's use: attempts started in it, and jobs queued, which start within
# moments (the started_at and in-flight partial indexes, OR-ed). A row counts once. The window
# is common.constants.RATE_WINDOW_S written out (a test holds the two together): a literal,
# not a parameter, so that the producer's generic plan is estimated on it.
RATE_WINDOW_SQL = statement(
    """
SELECT rate_key, kind, count(*) AS n
FROM jobs
WHERE started_at > now() - make_interval(secs => 60.0) OR status = {job.queued}
GROUP BY rate_key, kind
"""
)

# What the attempts of each key said since the last look (job_events by id): push-backs (an
# attempt that ended rate limited or blocked: the class on its own audit row, so a job handed
# back by a crashing host later is no push-back) with the latest time such a job may run again
# (its Retry-After), and completions. One indexed range of the audit table per cycle.
# Completions are read only while some key is slowed (``recovering``): most cycles join no job
# at all. ``last_event`` is the range's end whether or not any row in it mattered.
# ``:pushed_back`` is the classes rate_limited and blocked, ``:crawl_kinds`` the crawl actions'
# kinds (throttles_since binds them from their enums).
THROTTLES_SQL = statement(
    """
SELECT m.last_event, g.*
FROM (
  SELECT coalesce(max(id), :after) AS last_event FROM job_events WHERE id > :after
) AS m
LEFT JOIN LATERAL (
  SELECT j.rate_key,
    count(*) FILTER (WHERE e.error_class = ANY(CAST(:pushed_back AS text[]))) AS throttled,
    max(j.not_before) FILTER (WHERE e.to_status = {job.pending}
      AND e.error_class = :rate_limited) AS retry_at,
    count(*) FILTER (WHERE e.to_status = {job.completed}) AS completed,
    -- A crawl page's result says its site's Crawl-delay (common.crawl.action): a host's word,
    -- so read only as a JSON number and held to 0 up to MAX_CRAWL_DELAY_S (a bad value is no
    -- delay, and the most a lying host can do is slow a site it crawls, as a false push-back
    -- could).
    max(CASE WHEN jsonb_typeof(j.result -> 'crawl_delay_s') = 'number'
      THEN CAST(GREATEST(0, LEAST(CAST(j.result -> 'crawl_delay_s' AS numeric),
        CAST(:max_crawl_delay AS numeric))) AS float8) END)
      FILTER (WHERE e.to_status = {job.completed}
        AND j.kind = ANY(CAST(:crawl_kinds AS text[]))
        AND jsonb_typeof(j.result -> 'crawl_delay_s') = 'number') AS crawl_delay
  FROM job_events e JOIN jobs j ON j.id = e.job_id
  WHERE e.id > :after AND e.id <= m.last_event AND e.from_status = {job.processing}
    AND (e.error_class = ANY(CAST(:pushed_back AS text[]))
      OR (e.to_status = {job.completed} AND j.kind = ANY(CAST(:crawl_kinds AS text[]))
        AND jsonb_typeof(j.result -> 'crawl_delay_s') = 'number')
      OR (CAST(:recovering AS boolean) AND e.to_status = {job.completed}))
    AND j.rate_key IS NOT NULL
  GROUP BY j.rate_key
) AS g ON true
"""
)
LAST_EVENT_SQL = statement("SELECT coalesce(max(id), 0) FROM job_events")

# Every key slowed down or paused; ``:default_row`` is the default limits' row, never a key.
READ_RATE_KEYS_SQL = statement(
    """
SELECT key, factor, paused_until
FROM rate_keys
WHERE key <> :default_row AND (factor < 1 OR paused_until > now())
"""
)
# The producer's whole picture at once: its configured limits (named keys and the default row)
# and every slowdown; rows that say nothing any more (not named, factor 1, no pause) go. A row
# that says what it said is not written again.
UPSERT_RATE_KEY_SQL = statement(
    """
INSERT INTO rate_keys (key, named, concurrency, per_minute, factor, paused_until, updated_at)
SELECT *, now()
FROM unnest(CAST(:keys AS text[]), CAST(:named AS boolean[]), CAST(:concurrency AS int[]),
  CAST(:per_minute AS int[]), CAST(:factor AS float8[]), CAST(:paused_until AS timestamptz[]))
ON CONFLICT (key) DO UPDATE SET
  named = excluded.named, concurrency = excluded.concurrency,
  per_minute = excluded.per_minute, factor = excluded.factor,
  paused_until = excluded.paused_until, updated_at = now()
WHERE (rate_keys.named, rate_keys.concurrency, rate_keys.per_minute, rate_keys.factor,
    rate_keys.paused_until)
  IS DISTINCT FROM (excluded.named, excluded.concurrency, excluded.per_minute,
    excluded.factor, excluded.paused_until)
"""
)
DELETE_OTHER_RATE_KEYS_SQL = statement(
    """
DELETE FROM rate_keys WHERE key <> ALL(CAST(:keys AS text[]))
"""
)


def in_flight_counts(conn: Connection) -> list[RateCount]:
    """Per (rate key, kind): jobs queued or running."""
    return [RateCount(r.rate_key, r.kind, in_flight=r.n) for r in conn.execute(RATE_IN_FLIGHT_SQL)]


def window_counts(conn: Connection) -> list[RateCount]:
    """Per (rate key, kind): attempts started in the trailing window plus jobs queued."""
    return [RateCount(r.rate_key, r.kind, window=r.n) for r in conn.execute(RATE_WINDOW_SQL)]


def rate_slowdowns(conn: Connection) -> dict[str, Slowdown]:
    """Every key slowed down or paused, as last saved."""
    rows = conn.execute(READ_RATE_KEYS_SQL, {"default_row": RATE_KEY_DEFAULT_ROW})
    return {r.key: Slowdown(r.factor, r.paused_until) for r in rows}


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
    params = {
        "after": after_event,
        "recovering": recovering,
        "pushed_back": [ErrorClass.RATE_LIMITED.value, ErrorClass.BLOCKED.value],
        "rate_limited": ErrorClass.RATE_LIMITED.value,
        "crawl_kinds": list(CRAWL_KINDS),
        "max_crawl_delay": MAX_CRAWL_DELAY_S,
    }
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
