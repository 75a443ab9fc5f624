"""Read-only SQL of the dashboard's pages (every write goes through scrapefleet.common.store)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from scrapefleet.common.ops.dashboard.job_sorts import DEFAULT_SORT, SORTS


@dataclass(frozen=True)
class JobSearch:
    """Validated search fields; None = not part of the search."""

    job_id: int | None = None
    kind: str | None = None
    status: str | None = None
    host: str | None = None
    error_class: str | None = None  # of the job's last failed attempt
    crawl: int | None = None  # the pages of this crawl (its root job's id)
    # Jobs that ran on this host at any attempt (``rescued``: that were rescued from it), as
    # the CLI's ``--was-on``: jobs.host is only the last host, job_events has every one.
    was_on: str | None = None
    rescued: bool = False
    since: datetime | None = None  # finished (or, unfinished, created) at or after
    sort: str = DEFAULT_SORT  # a name in job_sorts.SORTS
    # The page: the rows after this cursor in the sort's order (job_sorts.parse_cursor's
    # parameters); empty = the first page.
    after: dict[str, Any] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return self == JobSearch()


def hosts_overview(conn: Connection) -> list[dict[str, Any]]:
    rows = conn.execute(
        sa.text(
            "SELECT l.host, l.state, l.capacity, l.running, l.queued, l.completed_last_hour,"
            " l.jobs_since_restart, l.jobs_since_boot, l.state_reason, h.memory_available_bytes,"
            " h.last_seen_at, h.probe_failures, h.last_probe_error, h.jobs_total,"
            " l.browser, l.browser_reason, l.browser_retry_at, l.browser_limit,"
            " l.browser_limit_reason"
            " FROM host_load l JOIN hosts h ON h.name = l.host ORDER BY l.host"
        )
    )
    return [dict(r._mapping) for r in rows]


def recent_failures(conn: Connection, limit: int) -> list[dict[str, Any]]:
    rows = conn.execute(sa.text("SELECT * FROM recent_failures LIMIT :limit"), {"limit": limit})
    return [dict(r._mapping) for r in rows]


def finished_counts(conn: Connection, since: datetime, step_s: int) -> dict[tuple[int, str], int]:
    """(bucket start in epoch seconds, status) -> completed/failed jobs finished in it. One
    range scan of jobs_finished_at_idx; the caller fills the empty buckets."""
    rows = conn.execute(
        sa.text(
            "SELECT extract(epoch FROM date_bin(make_interval(secs => :step), finished_at,"
            "   TIMESTAMPTZ '1970-01-01 00:00:00+00'))::bigint AS bucket, status, count(*) AS n"
            " FROM jobs WHERE finished_at >= :since AND status IN ('completed', 'failed')"
            " GROUP BY 1, 2"
        ),
        {"since": since, "step": step_s},
    )
    return {(r.bucket, r.status): r.n for r in rows}


# The rescue's audit row names the host the attempt was taken from (its message "rescued: ...",
# as the host_outcomes view classifies it).
WAS_ON = "(host = :was_on OR id IN (SELECT job_id FROM job_events WHERE host = :was_on))"
RESCUED_FROM = (
    "id IN (SELECT job_id FROM job_events WHERE host = :was_on"
    " AND from_status = 'processing' AND message LIKE 'rescued:%')"
)
COUNT_CAP = 100_000  # a count past this says "100,000+" rather than scan the whole table


def _search_filter(search: JobSearch) -> tuple[list[str], dict[str, Any]]:
    where: list[str] = []
    params: dict[str, Any] = {}
    for column, value in (
        ("id", search.job_id),
        ("kind", search.kind),
        ("status", search.status),
        ("host", search.host),
        ("error_class", search.error_class),
        ("crawl_id", search.crawl),
    ):
        if value is not None:
            where.append(f"{column} = :{column}")
            params[column] = value
    if search.was_on is not None:
        where.append(RESCUED_FROM if search.rescued else WAS_ON)
        params["was_on"] = search.was_on
    if search.since is not None:
        where.append("coalesce(finished_at, created_at) >= :since")
        params["since"] = search.since
    if (only := SORTS[search.sort].only) is not None:
        where.append(only)
    return where, params


def _where(conditions: list[str]) -> str:
    return f"WHERE {' AND '.join(conditions)}" if conditions else ""


def search_jobs(conn: Connection, search: JobSearch, limit: int) -> list[dict[str, Any]]:
    """One page of matching jobs in the search's order: those after its cursor (keyset
    paging, as cheap on the last page as on the first)."""
    sort = SORTS[search.sort]
    where, params = _search_filter(search)
    if search.after:
        where.append(sort.after)
        params.update(search.after)
    rows = conn.execute(
        sa.text(
            "SELECT id, kind, status, host, attempts, max_attempts, priority, created_at,"
            " finished_at, error_class, (regexp_match(last_error, '([^\\n]+)\\s*$'))[1] AS error"
            f" FROM jobs {_where(where)} ORDER BY {sort.order_by} LIMIT :limit"
        ),
        {**params, "limit": limit},
    )
    return [dict(r._mapping) for r in rows]


def count_jobs(conn: Connection, search: JobSearch) -> int:
    """How many jobs match (every page), counted up to COUNT_CAP + 1."""
    where, params = _search_filter(search)
    clause = _where(where)
    return int(
        conn.execute(
            sa.text(f"SELECT count(*) FROM (SELECT 1 FROM jobs {clause} LIMIT :cap) AS m"),
            {**params, "cap": COUNT_CAP + 1},
        ).scalar_one()
    )


def archived_job(conn: Connection, job_id: int) -> dict[str, Any] | None:
    row = conn.execute(sa.text("SELECT * FROM jobs_archive WHERE id = :id"), {"id": job_id}).first()
    return dict(row._mapping) if row is not None else None


def webhook_deliveries(conn: Connection, job_id: int) -> list[dict[str, Any]]:
    rows = conn.execute(
        sa.text(
            "SELECT status, url, attempts, next_attempt_at, delivered_at, gave_up_at, last_error,"
            " response_code FROM webhook_deliveries WHERE job_id = :id ORDER BY id"
        ),
        {"id": job_id},
    )
    return [dict(r._mapping) for r in rows]


def host_page(conn: Connection, name: str, events: int) -> dict[str, Any] | None:
    """One host for its page: its row and load, its attempts' outcomes over the last hour and
    day, its last ``events`` host events (state changes, restarts, reboots) and the failures
    of the jobs it ran last. None when there is no such host."""
    host = conn.execute(
        sa.text(
            "SELECT l.*, h.memory_available_bytes, h.last_seen_at, h.probe_failures,"
            " h.last_probe_error, h.jobs_total, h.boot_id, h.state_changed_at, h.kinds"
            " FROM host_load l JOIN hosts h ON h.name = l.host WHERE l.host = :name"
        ),
        {"name": name},
    ).first()
    if host is None:
        return None
    outcomes = conn.execute(
        sa.text("SELECT * FROM host_outcomes WHERE host = :name"), {"name": name}
    ).first()
    history = conn.execute(
        sa.text(
            "SELECT at, event, from_state, to_state, message, details FROM host_events"
            " WHERE host = :name ORDER BY at DESC, id DESC LIMIT :n"
        ),
        {"name": name, "n": events},
    )
    failures = conn.execute(
        sa.text("SELECT * FROM recent_failures WHERE host = :name LIMIT :n"),
        {"name": name, "n": events},
    )
    return {
        "host": dict(host._mapping),
        "outcomes": dict(outcomes._mapping) if outcomes else None,
        "events": [dict(r._mapping) for r in history],
        "failures": [dict(r._mapping) for r in failures],
    }


# -- the object pages: one list per kind of object, keyset-paged by its own key -------------
#
# Each read returns at most ``limit`` rows after ``after`` (the last key of the previous page;
# None: the first page), in a fixed order of a unique key, so a page never repeats or skips a
# row when others are added meanwhile.

# ``live_paused``: an operator paused it live (common.store.operating.controls).
_CRAWLS_SQL = sa.text(
    "SELECT w.*, coalesce(c.paused, false) AS live_paused FROM crawls w"
    " LEFT JOIN live_controls c ON c.scope = 'crawl' AND c.name = w.crawl_id::text"
    " WHERE CAST(:after AS bigint) IS NULL OR w.crawl_id < :after"
    " ORDER BY w.crawl_id DESC LIMIT :limit"
)
_RATE_KEYS_SQL = sa.text(
    "SELECT r.*, coalesce(c.paused, false) AS live_paused FROM rate_limits r"
    " LEFT JOIN live_controls c ON c.scope = 'rate_key' AND c.name = r.key"
    " WHERE CAST(:after AS text) IS NULL OR r.key > :after"
    " ORDER BY r.key LIMIT :limit"
)
_PROFILES_SQL = sa.text(
    "SELECT name, host, state, cooldown_until, last_used_at, jobs, blocks, created_at"
    " FROM profiles WHERE CAST(:after AS text) IS NULL OR name > :after"
    " ORDER BY name LIMIT :limit"
)

# Proxies (their URLs without credentials) and profiles, with their ban rates (migration 0032).
_IDENTITIES_SQL = sa.text(
    "SELECT kind, pool, identity, state, jobs, blocks, errors, jobs_last_hour,"
    " blocks_last_hour, ban_rate_hour, jobs_last_day, ban_rate_day, cooldown_until,"
    " banned_until FROM identity_health"
    " WHERE CAST(:after AS text) IS NULL OR identity > :after"
    " ORDER BY identity LIMIT :limit"
)


def crawl_list(conn: Connection, after: int | None, limit: int) -> list[dict[str, Any]]:
    """Crawls, newest first."""
    rows = conn.execute(_CRAWLS_SQL, {"after": after, "limit": limit})
    return [dict(r._mapping) for r in rows]


def rate_key_list(conn: Connection, after: str | None, limit: int) -> list[dict[str, Any]]:
    """Rate keys with work or limits (the rate_limits view), by key."""
    rows = conn.execute(_RATE_KEYS_SQL, {"after": after, "limit": limit})
    return [dict(r._mapping) for r in rows]


def profile_list(conn: Connection, after: str | None, limit: int) -> list[dict[str, Any]]:
    """Browser profiles, by name."""
    rows = conn.execute(_PROFILES_SQL, {"after": after, "limit": limit})
    return [dict(r._mapping) for r in rows]


def identity_list(conn: Connection, after: str | None, limit: int) -> list[dict[str, Any]]:
    """Proxies and profiles with their ban rates (the identity_health view), by name."""
    rows = conn.execute(_IDENTITIES_SQL, {"after": after, "limit": limit})
    return [dict(r._mapping) for r in rows]


def schedules(conn: Connection, limit: int) -> list[dict[str, Any]]:
    """The schedules view's rows for the schedules page, by name."""
    rows = conn.execute(
        sa.text(
            "SELECT name, cron, every_s, timezone, paused, catch_up, overlap, next_run_at,"
            " last_slot, last_fired_at, last_lag_s, last_outcome, last_jobs, last_completed,"
            " last_failed, last_unfinished FROM schedules ORDER BY name LIMIT :limit"
        ),
        {"limit": limit},
    )
    return [dict(r._mapping) for r in rows]
