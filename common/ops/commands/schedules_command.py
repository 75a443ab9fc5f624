"""`scrapefleet schedules`: recurring submissions (common.jobs.recurrence), fired by the leading
producer (producer.background.schedule_firing).

    scrapefleet schedules add prices-daily --cron '0 7 * * *' --tz Europe/Paris --job job.json
    scrapefleet schedules list | show NAME | pause NAME | resume NAME | run NAME | rm NAME

``add`` validates everything before writing anything: the name, the cron and the zone, and
every job of the file against the actions installed here (an unknown kind or a bad payload is
one line naming the file and line). ``run`` submits the schedule's jobs now, as a run of its
own beside the slots.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import click

from scrapefleet.common.ops.cli_context import echo
from scrapefleet.common.ops.one_line_errors import one_line_errors

RUNS_SHOWN = 10


@click.group()
def schedules() -> None:
    """Recurring submissions, fired by the leading producer."""


@schedules.command("add")
@click.argument("name")
@click.option("--cron", help="5 fields: minute hour day-of-month month weekday")
@click.option("--every", help="or an interval from now: 30m, 6h, 1h30m, 1d")
@click.option("--tz", "timezone", default="UTC", show_default=True, help="IANA time zone")
@click.option(
    "--job",
    "job_file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="the jobs to submit at each run: one JSON object, JSON lines or CSV",
)
@click.option(
    "--catch-up",
    type=click.Choice(["once", "skip"]),
    default="once",
    show_default=True,
    help="after downtime: run once for the slots missed, or skip them",
)
@click.option(
    "--overlap",
    type=click.Choice(["allow", "skip"]),
    default="allow",
    show_default=True,
    help="skip: no run while a job of the last one is unfinished",
)
@click.pass_obj
def add(
    ctx: Any,
    name: str,
    cron: str | None,
    every: str | None,
    timezone: str,
    job_file: Path,
    catch_up: str,
    overlap: str,
) -> None:
    """Add a schedule NAME."""
    from scrapefleet.common import store
    from scrapefleet.common.db.engines import transaction
    from scrapefleet.common.errors import SubmitError
    from scrapefleet.common.jobs.recurrence import check_name, parse_cron, slots_of
    from scrapefleet.common.jobs.submit_file import jobs_in_file
    from scrapefleet.common.ops.commands.profiles_command import parse_duration

    with one_line_errors():
        check_name(name)
        if (cron is None) == (every is None):
            raise SubmitError("give --cron or --every (one of them)")
        every_s = None if every is None else parse_duration(every, "--every")
        expression = None if cron is None else parse_cron(cron, timezone).expression
        now = datetime.now(UTC)
        slots = slots_of(expression, timezone, every_s, now)
        client = ctx.client  # the actions installed here validate the jobs
        jobs = jobs_in_file(job_file)
        _refuse_not_before(jobs, job_file)
        next_run_at = slots.next_after(now)
        spec = store.ScheduleSpec(
            name, expression, timezone, tuple(jobs), catch_up, overlap, every_s
        )
        with transaction(client.engine) as conn:
            store.add_schedule(conn, spec, next_run_at, now)
    when = f"at {expression!r} ({timezone})" if expression else f"every {every}"
    local = next_run_at.astimezone(ZoneInfo(timezone))
    echo(f"schedule {name!r}: {len(jobs)} job(s) {when}; next run {local.isoformat()}")


def _refuse_not_before(jobs: list[Any], path: Path) -> None:
    from scrapefleet.common.errors import SubmitError

    for number, job in enumerate(jobs, 1):
        if job.not_before is not None:
            raise SubmitError(
                f"{path}: job {number}: field 'not_before': a scheduled job starts at its run"
            )


@schedules.command("list")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per schedule")
@click.pass_obj
def list_schedules(ctx: Any, as_json: bool) -> None:
    """Every schedule: next run, last run and how its jobs ended."""
    from scrapefleet.common.reads.schedule_rows import schedule_rows

    with one_line_errors(), ctx.read_engine().connect() as conn:
        rows = schedule_rows(conn)
    if as_json:
        for row in rows:
            echo(json.dumps(row, default=str))
        return
    if not rows:
        echo("no schedules (scrapefleet schedules add NAME --cron ... --job FILE)")
        return
    echo(
        f"{'name':<24} {'cron':<16} {'zone':<16} {'state':<7} {'next run':<26}"
        f" {'last slot':<26} {'outcome':<16} jobs ok/failed/left"
    )
    for row in rows:
        last_jobs = (
            f"{row['last_jobs']} {row['last_completed']}/{row['last_failed']}"
            f"/{row['last_unfinished']}"
        )
        echo(
            f"{row['name']:<24} {_slots_text(row):<16} {row['timezone']:<16}"
            f" {'paused' if row['paused'] else 'active':<7} {_when(row['next_run_at']):<26}"
            f" {_when(row['last_slot']):<26} {row['last_outcome'] or '-':<16} {last_jobs}"
        )


@schedules.command("show")
@click.argument("name")
@click.pass_obj
def show(ctx: Any, name: str) -> None:
    """One schedule as JSON: its fields, its last run, and its last runs."""
    from scrapefleet.common.reads.schedule_rows import schedule

    with one_line_errors(), ctx.read_engine().connect() as conn:
        shown = schedule(conn, name, RUNS_SHOWN)
    # The schedule's jobs as every job is shown: proxy passwords, cookies, tokens masked.
    from scrapefleet.common.masking import mask_document

    echo(json.dumps(mask_document(shown), indent=2, default=str))


@schedules.command("pause")
@click.argument("name")
@click.pass_obj
def pause(ctx: Any, name: str) -> None:
    """Fire no run of NAME until it is resumed."""
    _set_paused(ctx, name, True)


@schedules.command("resume")
@click.argument("name")
@click.pass_obj
def resume(ctx: Any, name: str) -> None:
    """Fire NAME again, from its next slot after now (none owed for the pause)."""
    _set_paused(ctx, name, False)


def _set_paused(ctx: Any, name: str, paused: bool) -> None:
    from scrapefleet.common import store
    from scrapefleet.common.db.engines import transaction
    from scrapefleet.common.jobs.recurrence import slots_of
    from scrapefleet.common.reads.schedule_rows import schedule_slots

    with one_line_errors(), transaction(ctx.read_engine()) as conn:
        next_run_at = None
        if not paused:
            row = schedule_slots(conn, name)
            slots = slots_of(row.cron, row.timezone, row.every_s, row.created_at)
            next_run_at = slots.next_after(datetime.now(UTC))
        changed = store.set_schedule_paused(conn, name, paused, next_run_at)
    word = "paused" if paused else "resumed"
    echo(f"schedule {name!r} {word}" if changed else f"schedule {name!r} already {word}")


@schedules.command("rm")
@click.argument("name")
@click.pass_obj
def remove(ctx: Any, name: str) -> None:
    """Remove NAME and its runs' records (the jobs it submitted stay)."""
    from scrapefleet.common import store
    from scrapefleet.common.db.engines import transaction

    with one_line_errors(), transaction(ctx.read_engine()) as conn:
        store.remove_schedule(conn, name)
    echo(f"schedule {name!r} removed")


@schedules.command("run")
@click.argument("name")
@click.pass_obj
def run_now(ctx: Any, name: str) -> None:
    """Submit NAME's jobs now, as a run of its own (its slots are unchanged)."""
    from scrapefleet.common import store
    from scrapefleet.common.db.engines import transaction
    from scrapefleet.common.jobs.recurrence import RunOutcome
    from scrapefleet.common.reads.schedule_rows import schedule_jobs

    now = datetime.now(UTC)
    with one_line_errors(), transaction(ctx.read_engine()) as conn:
        row = schedule_jobs(conn, name)
        ids = store.record_run(
            conn,
            row.id,
            now,
            outcome=RunOutcome.MANUAL,
            fired_at=now,
            fired_by="scrapefleet schedules run",
            jobs=store.jobs_of(row.jobs),
            default_max_attempts=ctx.settings.max_attempts,
        )
    echo(f"schedule {name!r}: submitted {len(ids or [])} job(s): {ids}")


def _slots_text(row: dict[str, Any]) -> str:
    return str(row["cron"]) if row["cron"] is not None else f"every {row['every_s']:g} s"


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
