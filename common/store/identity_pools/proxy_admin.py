"""Proxy pools, the operator's commands (`scrapefleet proxies`): add proxies (a pool is made by
its first), change a pool's settings, disable, enable, reset and remove proxies, list them.

A password given is stored in ``proxy_credentials`` only, and no read here returns it: the
lists show ``scheme://***@host:port`` where a proxy has credentials. A command naming a proxy
the pool does not have raises NotFound, and the caller's transaction then changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy.engine import Connection

from scrapefleet.common.errors import NotFound, ScrapefleetError
from scrapefleet.common.identities.proxy_pools import ProxyEntry
from scrapefleet.common.store.identity_pools.proxies import known_pools
from scrapefleet.common.store.sql_text import statement

__all__ = [
    "ADD_PROXY_SQL",
    "NO_CHANGE",
    "POOL_SETTINGS",
    "ProxyBusy",
    "add_proxies",
    "list_pools",
    "list_proxies",
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
    "session_max_uses",
)


class ProxyBusy(ScrapefleetError):
    """An operator's removal of a proxy a job holds now."""


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
  session_max_uses = coalesce(:session_max_uses, session_max_uses),
  block_statuses = coalesce(CAST(:block_statuses AS integer[]), block_statuses),
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
  error_cooldown_s, block_statuses, next_pool, escalate_after_blocks, session_max_uses,
  (SELECT count(*) FROM proxies p WHERE p.pool = pp.name) AS proxies
FROM proxy_pools pp ORDER BY name
"""
)


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
    block_statuses: Sequence[int] | None = None,
) -> None:
    """Change a pool's settings (None: unchanged), its next pool (None: no tier above it) and
    the HTTP statuses that mean its proxy was blocked (None: unchanged); NotFound if there is
    no such pool, or no such next pool."""
    params: dict[str, Any] = {name: settings.get(name) for name in POOL_SETTINGS}
    params["block_statuses"] = None if block_statuses is None else list(block_statuses)
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
