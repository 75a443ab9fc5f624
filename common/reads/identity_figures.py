"""The identities' figures for the metrics (common.runtime.metrics): per proxy pool, the proxies
by state and the last hour's leases and blocks; per profile, the same for the few profiles
blocked most (bounded: a fleet of ten thousand profiles exports ``limit`` series, not all).
The same counts as the identity_health view's, read from its tables for the last hour only.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection

from scrapefleet.common.store.sql_text import statement

# Read each refresh: the proxies themselves (a small table) and the last hour's leases only
# (the day's, which identity_health also counts, would cost every refresh a day of rows).
POOL_STATES_SQL = statement(
    """
SELECT pool, CASE WHEN state = 'disabled' THEN 'disabled'
    WHEN banned_until > now() THEN 'banned'
    WHEN cooldown_until > now() THEN 'cooling' ELSE 'ready' END AS state,
  count(*) AS proxies
FROM proxies GROUP BY 1, 2 ORDER BY 1, 2
"""
)
POOL_LEASES_SQL = statement(
    """
SELECT p.pool, count(*) AS leases, count(*) FILTER (WHERE l.outcome = 'blocked') AS blocks
FROM identity_leases l JOIN proxies p ON p.id = l.proxy_id
WHERE l.at > now() - interval '1 hour'
GROUP BY p.pool
"""
)
PROFILE_FIGURES_SQL = statement(
    """
SELECT profile, count(*) AS leases, count(*) FILTER (WHERE outcome = 'blocked') AS blocks
FROM identity_leases
WHERE at > now() - interval '1 hour' AND profile IS NOT NULL
GROUP BY profile
ORDER BY blocks DESC, profile LIMIT :limit
"""
)


def pool_figures(conn: Connection) -> dict[str, dict[str, Any]]:
    """pool -> {"states": {state: proxies}, "leases": n, "blocks": n} over the last hour."""
    pools: dict[str, dict[str, Any]] = {}
    for row in conn.execute(POOL_STATES_SQL):
        pool = pools.setdefault(row.pool, {"states": {}, "leases": 0, "blocks": 0})
        pool["states"][row.state] = int(row.proxies)
    for row in conn.execute(POOL_LEASES_SQL):
        if row.pool in pools:
            pools[row.pool].update(leases=int(row.leases), blocks=int(row.blocks))
    return pools


def profile_figures(conn: Connection, limit: int) -> dict[str, tuple[int, int]]:
    """profile -> (leases, blocks) over the last hour, for the ``limit`` profiles blocked most."""
    rows = conn.execute(PROFILE_FIGURES_SQL, {"limit": limit})
    return {r.profile: (int(r.leases), int(r.blocks)) for r in rows}
