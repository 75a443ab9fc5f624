"""The trace context of jobs, read only while tracing is on (common.tracing_jobs): the hot
statements (claim, assignment, deliveries) stay as they are, and tracing's cost is these reads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scrapefleet.common.db.executes import Executes
from scrapefleet.common.store.sql_text import statement

TRACES_SQL = statement(
    """
SELECT id, traceparent, trace_link FROM jobs WHERE id = ANY(CAST(:ids AS bigint[]))
"""
)
# When each job became pending last (its insert, a retry's or release's hand-back, or a later
# not_before): the start of its wait, which the assignment span shows.
ASSIGNED_SQL = statement(
    """
SELECT j.id, j.kind, j.rate_key, j.host, j.attempts, j.profile, j.traceparent, j.trace_link,
  greatest(j.not_before, (
    SELECT max(e.at) FROM job_events e WHERE e.job_id = j.id AND e.to_status = {job.pending}
  ), j.created_at) AS pending_since
FROM jobs j WHERE j.id = ANY(CAST(:ids AS bigint[]))
"""
)


def job_traces(conn: Executes, ids: Sequence[int]) -> dict[int, tuple[str | None, str | None]]:
    """job id -> (traceparent, trace_link)."""
    if not ids:
        return {}
    rows = conn.execute(TRACES_SQL, {"ids": list(ids)}).all()
    return {r.id: (r.traceparent, r.trace_link) for r in rows}


def assigned_jobs(conn: Executes, ids: Sequence[int]) -> list[dict[str, Any]]:
    if not ids:
        return []
    return [dict(r._mapping) for r in conn.execute(ASSIGNED_SQL, {"ids": list(ids)}).all()]
