"""Why a job of a proxy pool waits, and which pools are in trouble, for people.

    waiting: pool 'residential' has no ready proxy (12 cooling down, 3 banned)
    pool 'residential': 62% of its leases blocked in the last hour (31 of 50)

The producer leases a pool's job a proxy only while one is ready (not disabled, banned or
cooling down) and under its pool's per-proxy cap (producer.assigning.proxy_rules); `jobs show`, the
dashboard's job page and `status` say so in one line (common.identities.pool_wait_reason).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection

from scrapefleet.common.identities.proxy_pools import pool_wait_reason
from scrapefleet.common.store.sql_text import statement

MAX_WAITING_POOLS = 20  # pools listed by `status`
# A pool is in trouble when this share of its last hour's leases ended blocked, once it had
# at least TROUBLE_MIN_LEASES of them (a few blocks of a handful of jobs say little).
TROUBLE_BAN_RATE = 0.5
TROUBLE_MIN_LEASES = 10

# Each pool's proxies by why they cannot take a job now; ``ready`` can.
POOL_COUNTS_SQL = statement(
    """
SELECT pp.name AS pool,
  count(p.id) FILTER (WHERE p.state = 'disabled') AS disabled,
  count(p.id) FILTER (WHERE p.state <> 'disabled' AND p.banned_until > now()) AS banned,
  count(p.id) FILTER (WHERE p.state <> 'disabled'
    AND NOT coalesce(p.banned_until > now(), false) AND p.cooldown_until > now()) AS cooling,
  count(p.id) FILTER (WHERE p.state <> 'disabled'
    AND NOT coalesce(p.banned_until > now(), false)
    AND NOT coalesce(p.cooldown_until > now(), false)
    AND (SELECT count(*) FROM jobs j WHERE j.proxy_id = p.id AND j.status IN {in_flight})
      >= pp.max_jobs_per_proxy) AS busy,
  count(p.id) AS total
FROM proxy_pools pp LEFT JOIN proxies p ON p.pool = pp.name
WHERE pp.name = ANY(CAST(:pools AS text[]))
GROUP BY pp.name
ORDER BY pp.name
"""
)
WAITING_POOL_JOBS_SQL = statement(
    """
SELECT proxy_pool AS pool, count(*) AS jobs FROM jobs
WHERE status = {job.pending} AND proxy_pool IS NOT NULL
GROUP BY proxy_pool ORDER BY proxy_pool LIMIT :limit
"""
)
POOL_BAN_RATES_SQL = statement(
    """
SELECT p.pool, count(*) AS leases, count(*) FILTER (WHERE l.outcome = 'blocked') AS blocks
FROM identity_leases l JOIN proxies p ON p.id = l.proxy_id
WHERE l.at > now() - interval '1 hour'
GROUP BY p.pool ORDER BY p.pool
"""
)


def _reason(counts: dict[str, Any]) -> str | None:
    ready = counts["total"] - sum(counts[k] for k in ("disabled", "banned", "cooling", "busy"))
    return None if ready > 0 else pool_wait_reason(str(counts["pool"]), counts)


def pool_wait(conn: Connection, pool: str) -> str | None:
    """Why a pending job of ``pool`` waits for a proxy now, or None when one is ready."""
    rows = conn.execute(POOL_COUNTS_SQL, {"pools": [pool]}).all()
    if not rows:
        return f"waiting: there is no proxy pool {pool!r}"
    return _reason(dict(rows[0]._mapping))


def waiting_pools(conn: Connection) -> list[dict[str, Any]]:
    """Pools whose pending jobs wait for a proxy: pool, jobs, reason."""
    pending = {
        r.pool: r.jobs for r in conn.execute(WAITING_POOL_JOBS_SQL, {"limit": MAX_WAITING_POOLS})
    }
    if not pending:
        return []
    waiting = []
    for row in conn.execute(POOL_COUNTS_SQL, {"pools": sorted(pending)}):
        reason = _reason(dict(row._mapping))
        if reason is not None:
            waiting.append({"pool": row.pool, "jobs": pending[row.pool], "reason": reason})
    return waiting


def pools_in_trouble(conn: Connection) -> list[str]:
    """One line per pool whose last hour's leases ended blocked at TROUBLE_BAN_RATE or more."""
    lines = []
    for row in conn.execute(POOL_BAN_RATES_SQL):
        if row.leases >= TROUBLE_MIN_LEASES and row.blocks >= TROUBLE_BAN_RATE * row.leases:
            lines.append(
                f"pool {row.pool!r}: {row.blocks / row.leases:.0%} of its leases blocked in"
                f" the last hour ({row.blocks} of {row.leases})"
            )
    return lines
