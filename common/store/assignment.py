"""The producer's assignment: pending jobs read under row locks, then moved to their hosts.

(The producer's other job writes, its rescue of silent attempts and its requeue of unavailable
hosts' jobs, hand jobs back: they are in releases.)
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from scrapefleet.common.constants import CHANNEL_ASSIGNED
from scrapefleet.common.store.records import PendingJob
from scrapefleet.common.store.statuses import IN_FLIGHT, JobStatus, sql_list

__all__ = [
    "ASSIGN_SQL",
    "LOCK_PENDING_NO_BROWSER_SQL",
    "LOCK_PENDING_SQL",
    "assign_jobs",
    "lock_pending_jobs",
]

# The hot statement, named so that a test can EXPLAIN exactly what runs. Jobs whose lock key is
# held by a queued or processing job are left out: they cannot be assigned now, and reading
# them would let a large batch sharing one busy key fill the whole scan window and starve every
# other pending job. The NOT EXISTS probes the unique partial index on in-flight lock keys.
_PENDING = (
    "SELECT id, lock_key, needs_browser FROM jobs"
    f" WHERE status = '{JobStatus.PENDING}'{{browser}}"
    " AND (not_before IS NULL OR not_before <= now())"
    "   AND (lock_key IS NULL OR NOT EXISTS ("
    "     SELECT 1 FROM jobs AS held WHERE held.lock_key = jobs.lock_key"
    f"     AND held.status IN {sql_list(IN_FLIGHT)}))"
    " ORDER BY priority DESC, id LIMIT :limit FOR UPDATE SKIP LOCKED"
)
LOCK_PENDING_SQL = sa.text(_PENDING.format(browser=""))
# When no host can take a browser job now, browser jobs are left out by the statement itself,
# on a partial index of their own, so a backlog of them is never read, cycle after cycle, only
# to be skipped by the planner while the other jobs wait behind it.
LOCK_PENDING_NO_BROWSER_SQL = sa.text(_PENDING.format(browser=" AND NOT needs_browser"))

ASSIGN_SQL = sa.text(
    f"UPDATE jobs SET status = '{JobStatus.QUEUED}', host = a.host, queued_at = now()"
    " FROM unnest(CAST(:ids AS bigint[]), CAST(:hosts AS text[])) AS a(id, host)"
    f" WHERE jobs.id = a.id AND jobs.status = '{JobStatus.PENDING}'"
    " RETURNING jobs.id, jobs.host"
)
NOTIFY_HOST_SQL = sa.text("SELECT pg_notify(:channel, :host)")


def lock_pending_jobs(conn: Connection, limit: int, *, browser_ok: bool = True) -> list[PendingJob]:
    """The highest-priority, oldest pending jobs that may run now (not_before passed, lock key
    free), row-locked for this transaction; rows another transaction holds are skipped, not
    waited for. ``browser_ok=False`` leaves browser jobs out (no host can take one now)."""
    statement = LOCK_PENDING_SQL if browser_ok else LOCK_PENDING_NO_BROWSER_SQL
    rows = conn.execute(statement, {"limit": limit})
    return [PendingJob(r.id, r.lock_key, r.needs_browser) for r in rows]


def assign_jobs(conn: Connection, assignments: Sequence[tuple[int, str]]) -> list[tuple[int, str]]:
    """pending -> queued on the planned host, then NOTIFY each host that got work."""
    if not assignments:
        return []
    rows = conn.execute(
        ASSIGN_SQL,
        {"ids": [a[0] for a in assignments], "hosts": [a[1] for a in assignments]},
    ).all()
    for host in sorted({r.host for r in rows}):
        conn.execute(NOTIFY_HOST_SQL, {"channel": CHANNEL_ASSIGNED, "host": host})
    return [(r.id, r.host) for r in rows]
