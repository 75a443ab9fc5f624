"""A blocked attempt: the site refused this scraper (common.actions.error_classes), not the job.

Like a release (store.releases), the job goes back to pending and the attempt is given back;
its own count, ``blocks``, is bounded instead: the attempt that reaches ``max_blocks`` ends the
job failed, class ``blocked``. The host it was blocked on is kept in ``blocked_on_host`` so the
producer can prefer another host next time, and the job's profile (if any) cools down in the
same transaction (store.profiles), as does its leased proxy (store.proxies: the producer then
leases it another).
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.engine import Connection

from scrapefleet.common.actions.error_classes import ErrorClass
from scrapefleet.common.identities.proxy_pools import LeaseOutcome
from scrapefleet.common.store.events import set_audit_message
from scrapefleet.common.store.identity_pools.profiles import cool_profile_after_block
from scrapefleet.common.store.identity_pools.proxies import charge_identity
from scrapefleet.common.store.records import bounded_error
from scrapefleet.common.store.sql_text import statement

__all__ = ["BLOCKED_SQL", "release_blocked"]

REASON_MAX_CHARS = 500  # of the audit message: a page's words are not ours to store whole

# ``blocks + 1 >= :max_blocks`` (the four CASEs' condition): this block is the last one
# allowed, and the job ends failed. ``:error_class`` is ErrorClass.BLOCKED.
BLOCKED_SQL = statement(
    """
WITH ended AS (
  UPDATE jobs SET
    status = CASE WHEN blocks + 1 >= :max_blocks THEN {job.failed} ELSE {job.pending} END,
    host = CASE WHEN blocks + 1 >= :max_blocks THEN host END,
    finished_at = CASE WHEN blocks + 1 >= :max_blocks THEN now() END,
    last_error = CASE WHEN blocks + 1 >= :max_blocks
      THEN :error || ' (blocked ' || (blocks + 1) || ' times)' ELSE :error END,
    artifacts = coalesce(CAST(:artifacts AS jsonb), artifacts),
    error_class = :error_class, blocked_on_host = :host,
    attempts = greatest(attempts - 1, 0), blocks = blocks + 1,
    not_before = NULL, started_at = NULL, queued_at = NULL
  WHERE id = :id AND status = {job.processing} AND claims = :claim AND host = :host
  RETURNING status
)
SELECT status FROM ended
"""
)


def release_blocked(
    conn: Connection,
    host: str,
    job_id: int,
    claim: int,
    reason: str,
    *,
    max_blocks: int,
    profile_cooldown_s: float,
    profile_max_cooldown_s: float | None = None,
    error: str | None = None,
    artifacts: dict[str, Any] | None = None,
) -> str | None:
    """processing -> pending, the attempt given back, ``blocks`` + 1 and the host remembered;
    failed once the job was blocked ``max_blocks`` times. ``error`` (the traceback; else the
    reason) becomes ``last_error``. The job's profile cools down for ``profile_cooldown_s``,
    doubled per block in a row up to ``profile_max_cooldown_s``.
    Returns the new status, or None if the attempt (its ``claim``) was no longer ours."""
    reason = reason[:REASON_MAX_CHARS]
    # The proxy the attempt leased, if any, takes the block (a cool-down that grows, a ban past
    # its pool's threshold), read while the job is still this attempt's.
    proxy_state = charge_identity(conn, job_id, claim, LeaseOutcome.BLOCKED)
    if proxy_state is not None:
        reason = f"{reason} (its proxy is {proxy_state} now)"[:REASON_MAX_CHARS]
    set_audit_message(conn, f"blocked: {reason}")
    params = {
        "id": job_id,
        "claim": claim,
        "host": host,
        "max_blocks": max_blocks,
        "error": bounded_error(error or f"Blocked: {reason}"),
        "artifacts": json.dumps(artifacts) if artifacts is not None else None,
        "error_class": ErrorClass.BLOCKED.value,
    }
    status = conn.execute(BLOCKED_SQL, params).scalar()
    set_audit_message(conn, "")  # the next change in this transaction says its own
    if status is None:
        return None
    cool_profile_after_block(conn, job_id, profile_cooldown_s, profile_max_cooldown_s)
    return str(status)
