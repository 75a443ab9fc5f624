"""Schedules as `scrapefleet schedules` shows them (the schedules view, the runs of one), and
what a pause or a manual run reads of a schedule's definition. Reads only (common.store.
schedules changes them)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from scrapefleet.common.errors import NotFound
from scrapefleet.common.store.sql_text import statement

LIST_SQL = statement(
    """
SELECT name, cron, every_s, timezone, paused, next_run_at, last_slot, last_outcome,
  last_lag_s, last_jobs, last_completed, last_failed, last_unfinished
FROM schedules ORDER BY name
"""
)
SHOW_SQL = statement("SELECT * FROM schedules WHERE name = :name")
RUNS_SQL = statement(
    """
SELECT r.slot, r.fired_at, r.outcome, r.missed, r.fired_by, cardinality(r.job_ids) AS jobs
FROM schedule_runs r JOIN schedule_defs d ON d.id = r.schedule_id
WHERE d.name = :name ORDER BY r.slot DESC LIMIT :limit
"""
)
# What a resume needs to find the next slot, and a manual run to submit.
SLOTS_SQL = statement(
    "SELECT cron, timezone, every_s, created_at FROM schedule_defs WHERE name = :name"
)
JOBS_SQL = statement("SELECT id, jobs FROM schedule_defs WHERE name = :name")


def schedule_rows(conn: Connection) -> list[dict[str, Any]]:
    """Every schedule, by name."""
    return [dict(r) for r in conn.execute(LIST_SQL).mappings()]


def schedule(conn: Connection, name: str, runs: int) -> dict[str, Any]:
    """The schedules view's row of ``name`` and its last ``runs`` runs (``runs``); NotFound
    when there is no such schedule."""
    row = conn.execute(SHOW_SQL, {"name": name}).mappings().one_or_none()
    if row is None:
        raise NotFound(f"no schedule {name!r}")
    shown = dict(row)
    params = {"name": name, "limit": runs}
    shown["runs"] = [dict(r) for r in conn.execute(RUNS_SQL, params).mappings()]
    return shown


def schedule_slots(conn: Connection, name: str) -> sa.Row[Any]:
    """``name``'s cron, timezone, every_s and created_at; NotFound when there is none."""
    row = conn.execute(SLOTS_SQL, {"name": name}).first()
    if row is None:
        raise NotFound(f"no schedule {name!r}")
    return row


def schedule_jobs(conn: Connection, name: str) -> sa.Row[Any]:
    """``name``'s id and jobs; NotFound when there is none."""
    row = conn.execute(JOBS_SQL, {"name": name}).first()
    if row is None:
        raise NotFound(f"no schedule {name!r}")
    return row
