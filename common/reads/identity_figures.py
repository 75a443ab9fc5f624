"""The identities' figures for the metrics (common.runtime.metrics): per proxy pool, the proxies
by state and the last hour's leases and blocks; per profile, the same for the few profiles
blocked most (bounded: a fleet of ten thousand profiles exports ``limit`` series, not all).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection

from scrapefleet.common.store.sql_text import statement

POOL_FIGURES_SQL = statement(
    """
SELECT pool, state, count(*) AS proxies, sum(jobs_last_hour) AS leases,
  sum(blocks_last_hour) AS blocks
FROM identity_health WHERE kind = 'proxy'
GROUP BY pool, state ORDER BY pool, state
"""
)
PROFILE_FIGURES_SQL = statement(
    """
SELECT identity AS profile, jobs_last_hour AS leases, blocks_last_hour AS blocks
FROM identity_health WHERE kind = 'profile' AND jobs_last_hour > 0
ORDER BY blocks_last_hour DESC, ban_rate_hour DESC, identity LIMIT :limit
"""
)


def pool_figures(conn: Connection) -> dict[str, dict[str, Any]]:
    """pool -> {"states": {state: proxies}, "leases": n, "blocks": n} over the last hour."""
    pools: dict[str, dict[str, Any]] = {}
    for row in conn.execute(POOL_FIGURES_SQL):
        pool = pools.setdefault(row.pool, {"states": {}, "leases": 0, "blocks": 0})
        pool["states"][row.state] = int(row.proxies)
        pool["leases"] += int(row.leases)
        pool["blocks"] += int(row.blocks)
    return pools


def profile_figures(conn: Connection, limit: int) -> dict[str, tuple[int, int]]:
    """profile -> (leases, blocks) over the last hour, for the ``limit`` profiles blocked most."""
    rows = conn.execute(PROFILE_FIGURES_SQL, {"limit": limit})
    return {r.profile: (int(r.leases), int(r.blocks)) for r in rows}
