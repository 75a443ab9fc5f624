"""Why a pending job waits for its kind: no active host runs it.

Each consumer reports the kinds it can run (common.status.document ``kinds``; the producer stores
them in ``hosts.kinds``, NULL when a host does not say, which reads as "runs any kind"). The
planner places a job only on an active host that runs its kind, so a job of a kind that only a
drained or offline host runs stays pending; this says so, in one line, to `jobs show`, `status`
and the dashboard:

    waiting: no active host runs kind 'prices' (scraper-2 is draining)

``wait_reason`` is pure; the reads below feed it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection

from scrapefleet.common.reads.pool_waits import pool_wait
from scrapefleet.common.store.sql_text import statement
from scrapefleet.common.store.statuses import HostState

NAMED_HOSTS = 3  # hosts named in a reason; more are "and N more"
MAX_WAITING_KINDS = 20  # kinds listed by `status`


@dataclass(frozen=True)
class HostKinds:
    name: str
    state: str
    kinds: Collection[str] | None  # None: not reported, runs any kind


def wait_reason(kind: str, hosts: Sequence[HostKinds]) -> str | None:
    """Why a pending job of ``kind`` cannot be placed for its kind, or None when an active host
    runs it (or none of the hosts says what it runs: nothing is known to be missing)."""
    if not any(h.kinds is not None for h in hosts):
        return None
    if any(h.state == HostState.ACTIVE and (h.kinds is None or kind in h.kinds) for h in hosts):
        return None
    runners = [h for h in hosts if h.kinds is not None and kind in h.kinds]
    if not runners:
        return f"waiting: no host runs kind {kind!r}"
    named = ", ".join(f"{h.name} is {h.state}" for h in runners[:NAMED_HOSTS])
    more = f" and {len(runners) - NAMED_HOSTS} more" if len(runners) > NAMED_HOSTS else ""
    return f"waiting: no active host runs kind {kind!r} ({named}{more})"


HOST_KINDS_SQL = statement("SELECT name, state, kinds FROM hosts ORDER BY name")
# Pending kinds no active host runs, with their counts; nothing at all to read while no host
# reports its kinds (the first EXISTS), and a handful of host rows per pending row otherwise.
# ``:limit``: MAX_WAITING_KINDS.
WAITING_KINDS_SQL = statement(
    """
SELECT j.kind, count(*) AS jobs
FROM jobs j
WHERE j.status = {job.pending} AND EXISTS (SELECT 1 FROM hosts WHERE kinds IS NOT NULL)
  AND NOT EXISTS (
    SELECT 1 FROM hosts h WHERE h.state = {host.active}
    AND (h.kinds IS NULL OR jsonb_exists(h.kinds, j.kind))
  )
GROUP BY j.kind
ORDER BY j.kind LIMIT :limit
"""
)


def read_host_kinds(conn: Connection) -> list[HostKinds]:
    return [
        HostKinds(r.name, r.state, None if r.kinds is None else frozenset(r.kinds))
        for r in conn.execute(HOST_KINDS_SQL)
    ]


def job_wait_reason(conn: Connection, job: dict[str, Any]) -> str | None:
    """For a pending job's row: why its kind, or its proxy pool (common.reads.pool_waits),
    keeps it waiting, if one does."""
    if job.get("status") != "pending":
        return None
    reason = wait_reason(str(job["kind"]), read_host_kinds(conn))
    if reason is None and job.get("proxy_pool"):
        reason = pool_wait(conn, str(job["proxy_pool"]))
    return reason


def waiting_kinds(conn: Connection) -> list[dict[str, Any]]:
    """Pending kinds no active host runs: kind, jobs, reason (at most MAX_WAITING_KINDS)."""
    rows = conn.execute(WAITING_KINDS_SQL, {"limit": MAX_WAITING_KINDS}).all()
    if not rows:
        return []
    hosts = read_host_kinds(conn)
    return [
        {"kind": r.kind, "jobs": r.jobs, "reason": wait_reason(r.kind, hosts)}
        for r in rows
        if wait_reason(r.kind, hosts) is not None
    ]
