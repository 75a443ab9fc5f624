"""Proxy pools (common.identities.proxy_pools): an operator adds, disables and removes proxies,
the producer leases one to each attempt of a pool's job as it assigns it, a consumer reads the
one it leased and says how the attempt ended for it (through the definer functions of
migration 0032: its role has no grant on these tables).

A proxy's password lives in ``proxy_credentials`` only: never in a job row, never returned by
the reads here except ``proxy_for_attempt``, which a consumer calls for the attempt it runs.
Cool-downs and bans are times, not timers: ``state`` is for people, brought back to ``ready``
by the next lease or a reset.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote

from sqlalchemy.engine import Connection

from scrapefleet.common.db.executes import Executes
from scrapefleet.common.errors import NotFound, ScrapefleetError
from scrapefleet.common.identities.proxy_pools import LeaseOutcome, ProxyEntry
from scrapefleet.common.store.sql_text import statement

__all__ = [
    "ADD_PROXY_SQL",
    "LEASE_SQL",
    "NO_CHANGE",
    "POOL_SETTINGS",
    "PRUNE_LEASES_SQL",
    "LeasedProxy",
    "ProxyBusy",
    "ProxyRow",
    "add_proxies",
    "charge_identity",
    "known_pools",
    "lease_identities",
    "list_pools",
    "list_proxies",
    "proxy_for_attempt",
    "proxy_rows",
    "prune_identity_leases",
    "remove_proxies",
    "reset_proxies",
    "set_pool",
    "set_proxies_disabled",
]

# What an operator may set on a pool (`proxies pool NAME --setting value`).
POOL_SETTINGS = (
    "max_jobs_per_proxy",
    "cooldown_s",
    "max_cooldown_s",
    "ban_blocks",
    "ban_window_s",
    "ban_s",
    "error_cooldown_s",
    "escalate_after_blocks",
)


class ProxyBusy(ScrapefleetError):
    """An operator's removal of a proxy a job holds now."""


@dataclass(frozen=True)
class ProxyRow:
    """What the planner reads of a pool's proxy."""

    id: int
    pool: str
    state: str
    cooldown_until: datetime | None
    banned_until: datetime | None
    last_used_at: datetime | None
    in_flight: int  # jobs queued or running under it now
    cap: int  # its pool's max_jobs_per_proxy


# A pool is made by its first proxy, with the defaults; its settings are changed apart.
ENSURE_POOL_SQL = statement(
    "INSERT INTO proxy_pools (name) VALUES (:pool) ON CONFLICT (name) DO NOTHING"
)
# A proxy added again keeps its counts and state; its credentials are replaced (an operator's
# rotation of a password is `proxies add` with the new one).
ADD_PROXY_SQL = statement(
    """
INSERT INTO proxies (pool, url, has_credentials) VALUES (:pool, :url, :has_credentials)
ON CONFLICT (pool, url) DO UPDATE SET has_credentials = EXCLUDED.has_credentials
RETURNING id, (xmax = 0) AS inserted
"""
)
SET_CREDENTIALS_SQL = statement(
    """
INSERT INTO proxy_credentials (proxy_id, username, password)
VALUES (:proxy_id, :username, :password)
ON CONFLICT (proxy_id) DO UPDATE SET username = EXCLUDED.username, password = EXCLUDED.password
"""
)
DROP_CREDENTIALS_SQL = statement("DELETE FROM proxy_credentials WHERE proxy_id = :proxy_id")
_SET_POOL_SQL = statement(
    """
UPDATE proxy_pools SET
  max_jobs_per_proxy = coalesce(:max_jobs_per_proxy, max_jobs_per_proxy),
  cooldown_s = coalesce(:cooldown_s, cooldown_s),
  max_cooldown_s = coalesce(:max_cooldown_s, max_cooldown_s),
  ban_blocks = coalesce(:ban_blocks, ban_blocks),
  ban_window_s = coalesce(:ban_window_s, ban_window_s),
  ban_s = coalesce(:ban_s, ban_s),
  error_cooldown_s = coalesce(:error_cooldown_s, error_cooldown_s),
  escalate_after_blocks = coalesce(:escalate_after_blocks, escalate_after_blocks),
  next_pool = CASE WHEN :set_next_pool THEN CAST(:next_pool AS text) ELSE next_pool END
WHERE name = :pool
RETURNING name
"""
)
_HELD_SQL = statement(
    """
SELECT j.id, p.url FROM jobs j JOIN proxies p ON p.id = j.proxy_id
WHERE p.pool = :pool AND p.url = ANY(CAST(:urls AS text[])) AND j.status IN {in_flight}
LIMIT 1
"""
)
_REMOVE_SQL = statement(
    """
DELETE FROM proxies WHERE pool = :pool AND url = ANY(CAST(:urls AS text[])) RETURNING url
"""
)
_DROP_EMPTY_POOL_SQL = statement(
    """
DELETE FROM proxy_pools WHERE name = :pool
  AND NOT EXISTS (SELECT 1 FROM proxies WHERE pool = :pool)
  AND NOT EXISTS (SELECT 1 FROM jobs WHERE proxy_pool = :pool AND status IN {unfinished})
"""
)
_SET_DISABLED_SQL = statement(
    """
UPDATE proxies SET state = CASE WHEN :disabled THEN 'disabled' ELSE 'ready' END
WHERE pool = :pool AND url = ANY(CAST(:urls AS text[]))
RETURNING url
"""
)
_RESET_SQL = statement(
    """
UPDATE proxies SET state = CASE WHEN state = 'disabled' THEN state ELSE 'ready' END,
  cooldown_until = NULL, banned_until = NULL, consecutive_blocks = 0
WHERE pool = :pool AND (CAST(:urls AS text[]) IS NULL OR url = ANY(CAST(:urls AS text[])))
RETURNING url
"""
)

# The producer's. Every proxy of these pools with its jobs in flight; the rows are not locked:
# the leader is the only writer of leases, and a consumer's charge meanwhile only makes the
# proxy cool down a little later than the planner thought.
_ROWS_SQL = statement(
    """
SELECT p.id, p.pool, p.state, p.cooldown_until, p.banned_until, p.last_used_at,
  pp.max_jobs_per_proxy AS cap,
  (SELECT count(*) FROM jobs j WHERE j.proxy_id = p.id AND j.status IN {in_flight})
    AS in_flight
FROM proxies p JOIN proxy_pools pp ON pp.name = p.pool
WHERE p.pool = ANY(CAST(:pools AS text[]))
ORDER BY p.id
"""
)
# The leased proxy goes on each job and is counted; every assignment under a proxy or a
# profile gets its lease row (the ban rates' denominators). ``counted`` is not read: a
# data-modifying WITH runs to completion whether or not anything reads it.
LEASE_SQL = statement(
    """
WITH chosen AS (
  SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:proxies AS bigint[]),
    CAST(:profiles AS text[])) AS c(id, proxy_id, profile)
), marked AS (
  UPDATE jobs SET proxy_id = chosen.proxy_id FROM chosen
  WHERE jobs.id = chosen.id AND chosen.proxy_id IS NOT NULL
  RETURNING chosen.proxy_id
), counted AS (
  UPDATE proxies AS p SET jobs = p.jobs + m.n, last_used_at = now(),
    state = CASE WHEN p.state = 'disabled' THEN p.state
      WHEN p.banned_until > now() THEN 'banned'
      WHEN p.cooldown_until > now() THEN 'cooling' ELSE 'ready' END
  FROM (SELECT proxy_id, count(*) AS n FROM marked GROUP BY proxy_id) AS m
  WHERE p.id = m.proxy_id
  RETURNING p.id
)
INSERT INTO identity_leases (job_id, proxy_id, profile)
SELECT id, proxy_id, profile FROM chosen
"""
)
# Retention (producer.retention_sweep): lease rows past the cutoff, oldest first, a batch a time.
PRUNE_LEASES_SQL = statement(
    """
DELETE FROM identity_leases WHERE id IN (
  SELECT id FROM identity_leases WHERE at < :cutoff ORDER BY id LIMIT :batch
)
"""
)
_FOR_ATTEMPT_SQL = statement(
    "SELECT url, username, password, block_statuses FROM proxy_for_attempt(:job_id, :claim)"
)
_CHARGE_SQL = statement("SELECT identity_charge(:job_id, :claim, :outcome)")

# Reads for people (no credentials: that table is not joined).
_LIST_SQL = statement(
    """
SELECT p.id, p.pool, p.url, p.has_credentials,
  CASE WHEN p.state = 'disabled' THEN 'disabled'
       WHEN p.banned_until > now() THEN 'banned'
       WHEN p.cooldown_until > now() THEN 'cooling' ELSE 'ready' END AS state,
  p.jobs, p.blocks, p.errors, p.consecutive_blocks, p.last_used_at, p.cooldown_until,
  p.banned_until,
  (SELECT count(*) FROM jobs j WHERE j.proxy_id = p.id AND j.status IN {in_flight})
    AS in_flight
FROM proxies p
WHERE CAST(:pool AS text) IS NULL OR p.pool = CAST(:pool AS text)
ORDER BY p.pool, p.id
"""
)
_POOLS_SQL = statement(
    """
SELECT name, max_jobs_per_proxy, cooldown_s, max_cooldown_s, ban_blocks, ban_window_s, ban_s,
  error_cooldown_s, block_statuses, next_pool, escalate_after_blocks,
  (SELECT count(*) FROM proxies p WHERE p.pool = pp.name) AS proxies
FROM proxy_pools pp ORDER BY name
"""
)
_KNOWN_SQL = statement("SELECT name FROM proxy_pools WHERE name = ANY(CAST(:pools AS text[]))")


def add_proxies(conn: Connection, pool: str, entries: Sequence[ProxyEntry]) -> tuple[int, int]:
    """Add ``entries`` to ``pool`` (made with the default settings if new); a proxy already in
    the pool gets the credentials given now. Returns (added, updated)."""
    conn.execute(ENSURE_POOL_SQL, {"pool": pool})
    added = updated = 0
    for entry in entries:
        row = conn.execute(
            ADD_PROXY_SQL,
            {"pool": pool, "url": entry.url, "has_credentials": entry.username is not None},
        ).one()
        if row.inserted:
            added += 1
        else:
            updated += 1
        if entry.username is None:
            conn.execute(DROP_CREDENTIALS_SQL, {"proxy_id": row.id})
        else:
            conn.execute(
                SET_CREDENTIALS_SQL,
                {"proxy_id": row.id, "username": entry.username, "password": entry.password},
            )
    return added, updated


NO_CHANGE = object()  # set_pool's next_pool when it stays as it is


def set_pool(
    conn: Connection,
    pool: str,
    settings: dict[str, float | int | None],
    next_pool: str | object | None = NO_CHANGE,
) -> None:
    """Change a pool's settings (None: unchanged) and its next pool (None: no tier above it);
    NotFound if there is no such pool, or no such next pool."""
    params: dict[str, Any] = {name: settings.get(name) for name in POOL_SETTINGS}
    params["set_next_pool"] = next_pool is not NO_CHANGE
    params["next_pool"] = None if next_pool is NO_CHANGE else next_pool
    if isinstance(next_pool, str) and next_pool not in known_pools(conn, [next_pool]):
        raise NotFound(f"no proxy pool named {next_pool!r} (the next pool)")
    if conn.execute(_SET_POOL_SQL, {"pool": pool, **params}).first() is None:
        raise NotFound(f"no proxy pool named {pool!r}")


def remove_proxies(conn: Connection, pool: str, urls: Sequence[str]) -> list[str]:
    """Remove these proxies (their credentials and counts go with them); refused while a job
    holds one. The pool goes too once it has no proxy and no unfinished job asks for it."""
    held = conn.execute(_HELD_SQL, {"pool": pool, "urls": list(urls)}).first()
    if held is not None:
        raise ProxyBusy(
            f"proxy {held.url} of pool {pool!r}: job {held.id} holds it now;"
            " disable it, and remove it once that job has finished"
        )
    removed = _all_found(conn.execute(_REMOVE_SQL, {"pool": pool, "urls": list(urls)}), pool, urls)
    conn.execute(_DROP_EMPTY_POOL_SQL, {"pool": pool})
    return removed


def set_proxies_disabled(
    conn: Connection, pool: str, urls: Sequence[str], disabled: bool
) -> list[str]:
    """Disable (never leased again until enabled) or enable these proxies. Enabling clears
    nothing else: a proxy still banned or cooling stays so until its time passes."""
    rows = conn.execute(_SET_DISABLED_SQL, {"pool": pool, "urls": list(urls), "disabled": disabled})
    return _all_found(rows, pool, urls)


def reset_proxies(conn: Connection, pool: str, urls: Sequence[str] | None) -> list[str]:
    """Forget these proxies' cool-downs, bans and back-off (None: the whole pool's)."""
    rows = conn.execute(_RESET_SQL, {"pool": pool, "urls": None if urls is None else list(urls)})
    if urls is None:
        return [r.url for r in rows]
    return _all_found(rows, pool, urls)


def _all_found(rows: Iterable[Any], pool: str, urls: Sequence[str]) -> list[str]:
    """The URLs a statement touched; NotFound naming the first it did not (the caller's
    transaction then changes nothing)."""
    done = [r.url for r in rows]
    missing = [u for u in urls if u not in done]
    if missing:
        raise NotFound(f"pool {pool!r} has no proxy {missing[0]}")
    return done


def proxy_rows(conn: Connection, pools: Iterable[str]) -> list[ProxyRow]:
    """The planner's view of these pools' proxies."""
    rows = conn.execute(_ROWS_SQL, {"pools": sorted(set(pools))})
    return [
        ProxyRow(
            r.id,
            r.pool,
            r.state,
            r.cooldown_until,
            r.banned_until,
            r.last_used_at,
            r.in_flight,
            r.cap,
        )
        for r in rows
    ]


def lease_identities(
    conn: Connection, leases: Sequence[tuple[int, int | None, str | None]]
) -> None:
    """(job id, proxy id or None, profile or None) of jobs just assigned: the proxy goes on
    the job and is counted, and each gets its lease row."""
    if not leases:
        return
    conn.execute(
        LEASE_SQL,
        {
            "ids": [lease[0] for lease in leases],
            "proxies": [lease[1] for lease in leases],
            "profiles": [lease[2] for lease in leases],
        },
    )


@dataclass(frozen=True)
class LeasedProxy:
    """The proxy an attempt leased: its URL with credentials (never shown: not in repr) and
    the HTTP statuses its pool takes for a block."""

    url: str = field(repr=False)
    block_statuses: tuple[int, ...] = ()


def proxy_for_attempt(conn: Executes, job_id: int, claim: int) -> LeasedProxy | None:
    """The proxy leased to this attempt, credentials included; None when the job holds none
    (or is not this caller's host's, processing under ``claim``). The one read that returns a
    password: hand it to the attempt, never to a log or a row."""
    rows = conn.execute(_FOR_ATTEMPT_SQL, {"job_id": job_id, "claim": claim}).all()
    if not rows:
        return None
    row = rows[0]
    statuses = tuple(row.block_statuses or ())
    if row.username is None:
        return LeasedProxy(str(row.url), statuses)
    scheme, _, address = str(row.url).partition("://")
    user, password = quote(row.username, safe=""), quote(row.password, safe="")
    return LeasedProxy(f"{scheme}://{user}:{password}@{address}", statuses)


def charge_identity(conn: Connection, job_id: int, claim: int, outcome: LeaseOutcome) -> str | None:
    """How this attempt ended for its proxy (and its lease row): a block cools the proxy down
    with a growing back-off and may ban it, an error cools it briefly, a success forgets its
    back-off. Returns the proxy's state after; None when the attempt held no proxy. Call it
    before the statement that moves the job on (it reads the job as processing)."""
    if outcome is LeaseOutcome.LEASED:
        raise ValueError("an attempt ends ok, blocked or error")
    state = conn.execute(
        _CHARGE_SQL, {"job_id": job_id, "claim": claim, "outcome": outcome.value}
    ).scalar()
    return None if state is None else str(state)


def prune_identity_leases(conn: Connection, cutoff: datetime, batch_rows: int) -> int:
    """Delete up to ``batch_rows`` lease rows from before ``cutoff``; returns how many."""
    return conn.execute(PRUNE_LEASES_SQL, {"cutoff": cutoff, "batch": batch_rows}).rowcount


def list_proxies(conn: Connection, pool: str | None = None) -> list[dict[str, Any]]:
    """Every proxy (of ``pool``), without credentials: the URL shows ``***@`` where it has."""
    rows = [dict(r._mapping) for r in conn.execute(_LIST_SQL, {"pool": pool})]
    for row in rows:
        if row.pop("has_credentials"):
            scheme, _, address = row["url"].partition("://")
            row["url"] = f"{scheme}://***@{address}"
    return rows


def list_pools(conn: Connection) -> list[dict[str, Any]]:
    return [dict(r._mapping) for r in conn.execute(_POOLS_SQL)]


def known_pools(conn: Connection, pools: Iterable[str]) -> set[str]:
    return set(conn.execute(_KNOWN_SQL, {"pools": sorted(set(pools))}).scalars())
