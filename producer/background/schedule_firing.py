"""Firing schedules: the leading producer's background job (producer.background.background_jobs)
submits the jobs of every schedule whose next slot has come.

Each schedule fires in its own transaction: the slot claimed (its next_run_at moved on), the
run recorded under its (schedule, slot) key and its jobs inserted, or none of it
(common.store.operating.schedules says why two producers never both fire a slot). The plan of a fire
(which slot, missed ones, the next slot) is common.jobs.recurrence.plan_fire's, from ``now``: the
caller's clock, so that tests drive a week in a second.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.engine import Connection, Engine

from scrapefleet.common import store
from scrapefleet.common.db.engines import transaction
from scrapefleet.common.error_lines import first_line
from scrapefleet.common.jobs.recurrence import CatchUp, Overlap, RunOutcome, plan_fire, slots_of
from scrapefleet.common.store.operating.schedules import DueSchedule

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fired:
    name: str
    slot: datetime
    outcome: RunOutcome
    job_ids: tuple[int, ...] = ()
    missed: int = 0


def fire_due(
    engine: Engine, now: datetime, fired_by: str, default_max_attempts: int
) -> list[Fired]:
    """Fire every schedule due at ``now``; what this producer fired (a slot another producer
    fired first is not in it). A schedule that fails is logged and left for the next round."""
    with transaction(engine) as conn:
        due = store.due_schedules(conn, now)
    fired: list[Fired] = []
    for schedule in due:
        try:
            with transaction(engine) as conn:
                run = fire_one(conn, schedule, now, fired_by, default_max_attempts)
        except Exception as exc:
            log.warning(
                "schedule %r: not fired, next round retries: %s", schedule.name, first_line(exc)
            )
            continue
        if run is not None:
            fired.append(run)
            log.info(
                "schedule %r: slot %s %s (%d jobs, %d missed slots)",
                run.name,
                run.slot.isoformat(),
                run.outcome,
                len(run.job_ids),
                run.missed,
            )
    return fired


def fire_one(
    conn: Connection,
    schedule: DueSchedule,
    now: datetime,
    fired_by: str,
    default_max_attempts: int,
) -> Fired | None:
    """In the caller's transaction: claim the schedule's due slot and run it, or None when it
    is not due or another producer claimed it first."""
    slots = slots_of(schedule.cron, schedule.timezone, schedule.every_s, schedule.created_at)
    plan = plan_fire(slots, schedule.next_run_at, now, CatchUp(schedule.catch_up))
    if plan is None or not store.claim_slot(conn, schedule.id, plan.expected, plan.next_run_at):
        return None
    if not plan.fire:
        outcome = RunOutcome.SKIPPED_MISSED
    elif Overlap(schedule.overlap) is Overlap.SKIP and store.last_run_unfinished(conn, schedule.id):
        outcome = RunOutcome.SKIPPED_OVERLAP
    else:
        outcome = RunOutcome.FIRED
    ids = store.record_run(
        conn,
        schedule.id,
        plan.slot,
        outcome=outcome,
        fired_at=now,
        fired_by=fired_by,
        missed=plan.missed,
        jobs=schedule.jobs if outcome is RunOutcome.FIRED else (),
        default_max_attempts=default_max_attempts,
    )
    if ids is None:
        return None
    return Fired(schedule.name, plan.slot, outcome, tuple(ids), plan.missed)
