"""`scrapefleet try`: run one job of an action here and show how it ended (common.ops.try_job).

    scrapefleet try http_get '{"url": "https://example.org/"}'
    scrapefleet try prices --payload '{"url": "..."}' --out /tmp/prices
    scrapefleet try job.json          (one job as `submit` reads it: kind, payload, ...)

The result goes to stdout as JSON, then one line per saved file. Exit 0 when the job
completed; 1 with one line on stderr naming the outcome and why when it did not; 2 for bad
input (an unknown kind, a payload that does not validate, a file that is not one job).
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from scrapefleet.common.error_lines import last_line
from scrapefleet.common.errors import SubmitError
from scrapefleet.common.ops.cli_context import echo
from scrapefleet.common.ops.one_line_errors import one_line_errors
from scrapefleet.common.store import NewJob

if TYPE_CHECKING:  # the runner loads Selenium: not for `scrapefleet --help`
    from scrapefleet.consumer.runner import Outcome

OUT_ROOT = Path("scrapefleet-try")  # under the working directory, one folder per try


@click.command("try")
@click.argument("target")
@click.argument("payload", required=False)
@click.option("--payload", "payload_option", help="the job's payload, a JSON object")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help=f"folder for the screenshot, HTML and network log [default: ./{OUT_ROOT}/KIND-<UTC time>]",
)
@click.pass_context
def try_command(
    click_ctx: click.Context,
    target: str,
    payload: str | None,
    payload_option: str | None,
    out: Path | None,
) -> None:
    """Run one job of KIND (or the job in the file TARGET) on this machine, no database."""
    from scrapefleet.common.actions.registry import load_user_actions
    from scrapefleet.common.ops.try_job import try_job

    ctx = click_ctx.obj
    with one_line_errors():
        settings = ctx.settings
        load_user_actions(settings.actions)
        if payload is not None and payload_option is not None:
            raise SubmitError("payload: given twice (as an argument and as --payload)")
        job = _job_of(target, payload if payload is not None else payload_option)
        if out is None:
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            out = OUT_ROOT / f"{job.kind}-{stamp}"
        report = try_job(job, settings, out)
    outcome = report.outcome
    shown: dict[str, Any] = {"status": outcome.status, "result": outcome.result}
    if outcome.spawn:
        shown["spawn"] = [child.as_json() for child in outcome.spawn]
    echo(json.dumps(shown, indent=2, default=str))
    for part, path in report.artifacts.items():
        echo(f"{part}: {path}")
    for note in report.notes:
        echo(f"note: {note}")
    if outcome.status != "completed":
        echo(f"error: {job.kind} {_why(outcome)} ({report.seconds:.1f} s)", err=True)
        sys.exit(1)
    echo(f"{job.kind} completed in {report.seconds:.1f} s")


def _why(outcome: Outcome) -> str:
    """The outcome in one line: its status, class and the last line of its error."""
    what: str = outcome.status
    if outcome.error_class is not None:
        what += f" ({outcome.error_class.value})"
    detail = outcome.reason or last_line(outcome.error)
    return f"{what}: {detail}" if detail else what


def _job_of(target: str, payload: str | None) -> NewJob:
    """The job named by the command line: KIND and a payload, or a file holding one job."""
    from scrapefleet.common.jobs.submit_file import jobs_in_file, validate_job

    path = Path(target)
    if payload is None and path.suffix in (".json", ".jsonl", ".csv") and path.is_file():
        jobs = jobs_in_file(path)
        if len(jobs) != 1:
            raise SubmitError(f"{path}: holds {len(jobs)} jobs: try runs one")
        return jobs[0]
    fields: dict[str, Any] = {"kind": target, "payload": {}}
    if payload is not None:
        try:
            fields["payload"] = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise SubmitError(f"payload: not JSON: {exc.msg} at column {exc.colno}") from None
    return validate_job(fields)
