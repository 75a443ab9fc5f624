"""Proxy pools (common.identities.proxy_pools) as the fleet runs them: the producer leases a
proxy to each attempt of a pool's job as it assigns it (and keeps a sticky session's), a
consumer reads the one it leased and says how the attempt ended for it, through the definer
functions of migration 0032 (its role has no grant on these tables). The operator's commands
are in store.proxy_admin.

A proxy's password lives in ``proxy_credentials`` only: never in a job row, and no read here
returns it but ``proxy_for_attempt``, which a consumer calls for the attempt it runs.
Cool-downs and bans are times, not timers: ``state`` is for people, brought back to ``ready``
by the next lease or a reset.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote

from sqlalchemy.engine import Connection

from scrapefleet.common.db.executes import Executes
from scrapefleet.common.identities.proxy_pools import LeaseOutcome
from scrapefleet.common.store.sql_text import statement

__all__ = [
    "LEASE_SQL",
    "PRUNE_LEASES_SQL",
    "LeasedProxy",
    "ProxyRow",
    "SessionRow",
    "StoredSession",
    "charge_identity",
    "keep_session",
    "known_pools",
    "lease_identities",
    "proxy_for_attempt",
    "proxy_rows",
    "prune_identity_leases",
    "session_for_attempt",
    "session_rows",
]


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


@dataclass(frozen=True)
class SessionRow:
    """What the planner reads of a sticky session: its proxy, and whether it goes on (not
    retired by a block, under its pool's session_max_uses)."""

    pool: str
    key: str
    proxy_id: int
    uses: int
    live: bool


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
_SESSIONS_SQL = statement(
    """
SELECT s.pool, s.key, s.proxy_id, s.uses,
  (s.retired_at IS NULL AND s.uses < pp.session_max_uses) AS live
FROM proxy_sessions s JOIN proxy_pools pp ON pp.name = s.pool
JOIN unnest(CAST(:pools AS text[]), CAST(:keys AS text[])) AS w(pool, key)
  ON w.pool = s.pool AND w.key = s.key
"""
)
# The leased proxy goes on each job and is counted; every assignment under a proxy or a
# profile gets its lease row (the ban rates' denominators), and a sticky session its proxy.
# ``counted`` and ``sessions`` are not read: a data-modifying WITH runs to completion whether or
# not anything reads it.
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
), sessions AS (
  -- A sticky session goes on with its proxy while it is live; leased another (its proxy
  -- unusable, the session retired or used up), it starts again there.
  -- One row per session (DISTINCT ON): the planner gives a session's jobs one proxy, and a
  -- second would make the upsert fail the whole assignment.
  INSERT INTO proxy_sessions AS s (pool, key, proxy_id, uses, last_used_at)
  SELECT DISTINCT ON (j.proxy_pool, j.proxy_session) j.proxy_pool, j.proxy_session,
    c.proxy_id, count(*), now()
  FROM chosen c JOIN jobs j ON j.id = c.id
  WHERE c.proxy_id IS NOT NULL AND j.proxy_session IS NOT NULL
  GROUP BY j.proxy_pool, j.proxy_session, c.proxy_id
  ORDER BY j.proxy_pool, j.proxy_session, count(*) DESC, c.proxy_id
  ON CONFLICT (pool, key) DO UPDATE SET
    uses = CASE WHEN s.proxy_id = EXCLUDED.proxy_id AND s.retired_at IS NULL
        AND s.uses < (SELECT session_max_uses FROM proxy_pools WHERE name = s.pool)
      THEN s.uses + EXCLUDED.uses ELSE EXCLUDED.uses END,
    started_at = CASE WHEN s.proxy_id = EXCLUDED.proxy_id AND s.retired_at IS NULL
        AND s.uses < (SELECT session_max_uses FROM proxy_pools WHERE name = s.pool)
      THEN s.started_at ELSE now() END,
    proxy_id = EXCLUDED.proxy_id, retired_at = NULL, last_used_at = now()
)
INSERT INTO identity_leases (job_id, proxy_id, profile)
SELECT id, proxy_id, profile FROM chosen
"""
)
# Retention (producer.background.retention_sweep): lease rows past the cutoff, oldest first, a batch
# a time.
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
_SESSION_FOR_ATTEMPT_SQL = statement(
    "SELECT cookies, user_agent FROM session_for_attempt(:job_id, :claim)"
)
_KEEP_SESSION_SQL = statement(
    "SELECT session_keep(:job_id, :claim, CAST(:cookies AS jsonb), :user_agent)"
)

_KNOWN_SQL = statement("SELECT name FROM proxy_pools WHERE name = ANY(CAST(:pools AS text[]))")


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


def session_rows(
    conn: Connection, wanted: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], SessionRow]:
    """The planner's view of these (pool, key) sessions; one never started has no row."""
    pairs = sorted(set(wanted))
    if not pairs:
        return {}
    rows = conn.execute(
        _SESSIONS_SQL, {"pools": [p for p, _ in pairs], "keys": [k for _, k in pairs]}
    )
    return {(r.pool, r.key): SessionRow(r.pool, r.key, r.proxy_id, r.uses, r.live) for r in rows}


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


def known_pools(conn: Connection, pools: Iterable[str]) -> set[str]:
    return set(conn.execute(_KNOWN_SQL, {"pools": sorted(set(pools))}).scalars())


@dataclass(frozen=True)
class StoredSession:
    """A sticky session's jar as stored (common.http.session_jar: a JSON list of cookies, None
    before its first job kept one) and its user agent. Secrets: not in repr."""

    cookies: Any = field(default=None, repr=False)
    user_agent: str | None = field(default=None, repr=False)


def session_for_attempt(conn: Executes, job_id: int, claim: int) -> StoredSession | None:
    """The jar of the live sticky session this attempt goes out in; None when it is in none
    (or is not this caller's host's, processing under ``claim``)."""
    rows = conn.execute(_SESSION_FOR_ATTEMPT_SQL, {"job_id": job_id, "claim": claim}).all()
    if not rows:
        return None
    return StoredSession(rows[0].cookies, rows[0].user_agent)


def keep_session(
    conn: Connection, job_id: int, claim: int, cookies: list[Any], user_agent: str | None
) -> bool:
    """Store the jar this attempt leaves with its session (while the session is still the one
    it went out in: False otherwise). Call it before the statement that moves the job on."""
    kept = conn.execute(
        _KEEP_SESSION_SQL,
        {
            "job_id": job_id,
            "claim": claim,
            "cookies": json.dumps(cookies),
            "user_agent": user_agent,
        },
    ).scalar()
    return bool(kept)
