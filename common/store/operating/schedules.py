"""Schedules (recurring submissions): added, paused, resumed and removed by an operator; their
slots claimed and recorded by the firing producer (producer.background.schedule_firing).

A slot is fired once whoever fires it, by two guards in the firing transaction:

1. ``CLAIM_SLOT_SQL`` moves ``next_run_at`` from the slot the producer read to the next one,
   only if it still holds that slot (and the schedule is not paused). A second producer's
   UPDATE waits on the row lock, then finds the value moved and changes nothing.
2. ``RECORD_RUN_SQL`` inserts the run keyed (schedule, slot) with ON CONFLICT DO NOTHING: a slot
   already recorded (however it got there) is never run again.

The jobs are inserted in the same transaction (store.submit.insert_jobs), so a producer that
dies before its commit leaves the slot unclaimed, and the next leader fires it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection

from scrapefleet.common.errors import NotFound, SubmitError
from scrapefleet.common.store.operating.submit import insert_jobs
from scrapefleet.common.store.records import NewJob
from scrapefleet.common.store.sql_text import statement

__all__ = [
    "ADD_SCHEDULE_SQL",
    "CLAIM_SLOT_SQL",
    "RECORD_RUN_SQL",
    "DueSchedule",
    "ScheduleSpec",
    "add_schedule",
    "claim_slot",
    "due_schedules",
    "jobs_of",
    "last_run_unfinished",
    "record_run",
    "remove_schedule",
    "set_schedule_paused",
]

ADD_SCHEDULE_SQL = statement(
    """
INSERT INTO schedule_defs
  (name, cron, every_s, timezone, jobs, catch_up, overlap, next_run_at, created_at)
VALUES (:name, :cron, :every_s, :timezone, CAST(:jobs AS jsonb), :catch_up, :overlap,
  :next_run_at, :created_at)
ON CONFLICT (name) DO NOTHING
RETURNING id
"""
)
# A slot is claimed by moving next_run_at on from the value read: one producer wins it.
CLAIM_SLOT_SQL = statement(
    """
UPDATE schedule_defs SET next_run_at = :next_run_at, updated_at = now()
WHERE id = :id AND next_run_at = :expected AND NOT paused
RETURNING id
"""
)
RECORD_RUN_SQL = statement(
    """
INSERT INTO schedule_runs (schedule_id, slot, fired_at, outcome, missed, fired_by)
VALUES (:id, :slot, :fired_at, :outcome, :missed, :fired_by)
ON CONFLICT (schedule_id, slot) DO NOTHING
RETURNING schedule_id
"""
)
SET_RUN_JOBS_SQL = statement(
    """
UPDATE schedule_runs SET job_ids = :job_ids WHERE schedule_id = :id AND slot = :slot
"""
)
SET_PAUSED_SQL = statement(
    """
UPDATE schedule_defs SET paused = :paused, updated_at = now(),
  next_run_at = coalesce(:next_run_at, next_run_at)
WHERE name = :name AND paused IS DISTINCT FROM :paused
RETURNING id
"""
)
REMOVE_SQL = statement("DELETE FROM schedule_defs WHERE name = :name RETURNING id")

# Reads.
DUE_SQL = statement(
    """
SELECT id, name, cron, every_s, timezone, jobs, catch_up, overlap, next_run_at, created_at
FROM schedule_defs
WHERE NOT paused AND next_run_at <= :now
ORDER BY next_run_at, id
"""
)
# The last run that submitted jobs: any of them not finished yet?
LAST_RUN_UNFINISHED_SQL = statement(
    """
WITH last_run AS (
  SELECT job_ids FROM schedule_runs WHERE schedule_id = :id AND cardinality(job_ids) > 0
  ORDER BY slot DESC LIMIT 1
)
SELECT EXISTS (
  SELECT 1 FROM last_run, jobs
  WHERE jobs.id = ANY (last_run.job_ids) AND jobs.status IN {unfinished}
)
"""
)
EXISTS_SQL = statement("SELECT id FROM schedule_defs WHERE name = :name")


@dataclass(frozen=True)
class ScheduleSpec:
    name: str
    cron: str | None  # None: an interval schedule (every_s)
    timezone: str
    jobs: tuple[NewJob, ...]  # validated at add (common.jobs.submit_file): fired as they are
    catch_up: str = "once"
    overlap: str = "allow"
    every_s: float | None = None  # slots every this many seconds from its creation


@dataclass(frozen=True)
class DueSchedule:
    id: int
    name: str
    cron: str | None
    every_s: float | None
    timezone: str
    jobs: tuple[NewJob, ...]
    catch_up: str
    overlap: str
    next_run_at: datetime
    created_at: datetime  # an interval's anchor


def _jobs_json(jobs: Sequence[NewJob]) -> str:
    rows = [asdict(job) for job in jobs]
    for row in rows:  # a recurring job starts when it fires: add refuses a not_before
        row.pop("not_before", None)
    return json.dumps(rows)


NEW_JOB_FIELDS = frozenset(f.name for f in fields(NewJob))


def jobs_of(stored: list[dict[str, Any]]) -> tuple[NewJob, ...]:
    """The stored jobs as the NewJobs they were validated as (no action lookup: the producer
    need not have every team's package installed to submit their jobs). Fields another
    version of scrapefleet stored and this one does not know are left out; missing ones take
    their defaults."""
    return tuple(NewJob(**{k: v for k, v in row.items() if k in NEW_JOB_FIELDS}) for row in stored)


def add_schedule(
    conn: Connection, spec: ScheduleSpec, next_run_at: datetime, created_at: datetime
) -> int:
    """Insert the schedule (``created_at``: an interval's anchor); SubmitError when its name is
    taken (nothing is changed)."""
    row = conn.execute(
        ADD_SCHEDULE_SQL,
        {
            "name": spec.name,
            "cron": spec.cron,
            "every_s": spec.every_s,
            "timezone": spec.timezone,
            "jobs": _jobs_json(spec.jobs),
            "catch_up": spec.catch_up,
            "overlap": spec.overlap,
            "next_run_at": next_run_at,
            "created_at": created_at,
        },
    ).first()
    if row is None:
        raise SubmitError(f"schedule {spec.name!r} exists: remove it first, or pick another name")
    return int(row[0])


def due_schedules(conn: Connection, now: datetime) -> list[DueSchedule]:
    rows = conn.execute(DUE_SQL, {"now": now}).mappings().all()
    return [DueSchedule(**{**row, "jobs": jobs_of(row["jobs"])}) for row in rows]


def claim_slot(
    conn: Connection, schedule_id: int, expected: datetime, next_run_at: datetime
) -> bool:
    """Move the schedule's next slot from ``expected`` to ``next_run_at``; False when another
    producer already did (or it was paused or removed meanwhile)."""
    params = {"id": schedule_id, "expected": expected, "next_run_at": next_run_at}
    return conn.execute(CLAIM_SLOT_SQL, params).first() is not None


def record_run(
    conn: Connection,
    schedule_id: int,
    slot: datetime,
    *,
    outcome: str,
    fired_at: datetime,
    fired_by: str,
    missed: int = 0,
    jobs: Sequence[NewJob] = (),
    default_max_attempts: int = 1,
) -> list[int] | None:
    """Record the run of ``slot`` and insert its jobs; None (nothing inserted) when the slot has
    a run already. Returns the new jobs' ids."""
    params = {
        "id": schedule_id,
        "slot": slot,
        "fired_at": fired_at,
        "outcome": outcome,
        "missed": missed,
        "fired_by": fired_by,
    }
    if conn.execute(RECORD_RUN_SQL, params).first() is None:
        return None
    if not jobs:
        return []
    ids = insert_jobs(conn, jobs, default_max_attempts=default_max_attempts).ids
    conn.execute(SET_RUN_JOBS_SQL, {"id": schedule_id, "slot": slot, "job_ids": ids})
    return ids


def last_run_unfinished(conn: Connection, schedule_id: int) -> bool:
    return bool(conn.execute(LAST_RUN_UNFINISHED_SQL, {"id": schedule_id}).scalar())


def set_schedule_paused(
    conn: Connection, name: str, paused: bool, next_run_at: datetime | None = None
) -> bool:
    """Pause or resume (from ``next_run_at``: the slots while paused are not owed); False when
    it already was; NotFound when there is no such schedule."""
    params = {"name": name, "paused": paused, "next_run_at": next_run_at}
    if conn.execute(SET_PAUSED_SQL, params).first() is not None:
        return True
    if conn.execute(EXISTS_SQL, {"name": name}).first() is None:
        raise NotFound(f"no schedule {name!r}")
    return False


def remove_schedule(conn: Connection, name: str) -> None:
    """Remove the schedule and its runs (its jobs stay); NotFound when there is none."""
    if conn.execute(REMOVE_SQL, {"name": name}).first() is None:
        raise NotFound(f"no schedule {name!r}")
