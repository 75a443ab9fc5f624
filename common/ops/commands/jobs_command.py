"""`scrapefleet jobs` and `scrapefleet results`: show, list, retry, cancel and stop jobs, and
export their results."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import click

from scrapefleet.common import masking, store
from scrapefleet.common.constants import BULK_CONFIRM_OVER_JOBS
from scrapefleet.common.ops.cli_context import CliContext, echo, fail, pass_ctx
from scrapefleet.common.ops.one_line_errors import one_line_errors
from scrapefleet.common.ops.results_out import (
    FORMATS,
    export_format,
    flat_columns,
    jsonl_lines,
    parse_since,
    table_lines,
    write_csv,
    write_json,
    write_jsonl,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from scrapefleet.common.reads.results import ResultFilter
    from scrapefleet.common.store import JobFilter

# The database layer, pydantic and the settings are imported inside the commands that use them:
# `scrapefleet --help` needs none of them (tests/unit/test_store_statuses.py checks it).

F = TypeVar("F", bound=Callable[..., Any])


# ---------------------------------------------------------------- jobs


@click.group()
def jobs() -> None:
    """Inspect, retry and cancel jobs."""


@jobs.command("show")
@click.argument("job_id", type=int)
@pass_ctx
def jobs_show(ctx: CliContext, job_id: int) -> None:
    """A job's row, its audit trail and its failure artifacts."""
    from scrapefleet.common.db import engines as database
    from scrapefleet.common.ops import render
    from scrapefleet.common.ops.dashboard import page_reads as dashboard_reads
    from scrapefleet.common.reads import kind_waits, producer_status, queries

    with one_line_errors(), database.wrapped_errors(), ctx.client.engine.connect() as conn:
        row = queries.job(conn, job_id)
        events = queries.job_events(conn, job_id)
        webhooks = dashboard_reads.webhook_deliveries(conn, job_id)
        secret_set = (
            producer_status.read_producer_status(conn).webhook_secret_set if webhooks else None
        )
        waiting = kind_waits.job_wait_reason(conn, row)
    row = masking.mask_job_row(row)  # a proxy password or a cookie is never shown back
    # The column is the host the job last left (the role policy's), so beside a job on another
    # host now, "last_host" read as the host before the last one: say what it is.
    row = {("previous_host" if k == "last_host" else k): v for k, v in row.items()}
    error = row.pop("last_error")
    artifacts = row.pop("artifacts") or {}
    one_line = functools.partial(masking.terminal_text, keep_newlines=False)
    for key, value in row.items():
        shown = json.dumps(value, default=str) if isinstance(value, dict | list) else value
        echo(f"{key:>13}: {one_line(str(shown))}")
    if waiting:
        echo(f"{'':>13}  {waiting}")
    echo("\nhistory:")
    for e in events:
        message = f"  ({one_line(masking.mask_text(e['message']))})" if e["message"] else ""
        if e.get("error_class"):
            message = f"  [{e['error_class']}]{message}"
        moved = f"{e['from_status'] or '-':>10} -> {e['to_status']:<10}"
        echo(f"  {e['at']:%Y-%m-%d %H:%M:%S.%f}  {moved} {e['host'] or ''}{message}")
    if artifacts:
        echo("\nartifacts:")
        for key, value in artifacts.items():
            echo(f"  {one_line(str(key))}: {one_line(masking.mask_text(str(value)))}")
    if webhooks:
        echo("\nwebhooks:")
        for w in webhooks:
            url = masking.mask_url(w["url"])
            echo(f"  {w['status']} -> {url}: {render.render_delivery(w, secret_set)}")
    if error:
        echo(f"\nlast error:\n{error}")


def _filter_options(func: F) -> F:
    func = click.argument("ids", nargs=-1, type=int)(func)
    func = click.option("--kind", help="every job of this kind")(func)
    func = click.option("--host", help="every job on this host")(func)
    func = click.option(
        "--yes",
        "-y",
        is_flag=True,
        help=f"act on more than {BULK_CONFIRM_OVER_JOBS} jobs unasked",
    )(func)
    return click.option("--dry-run", is_flag=True, help="only count the jobs it would move")(func)


def _why_nothing(
    conn: Connection,
    action: str,
    which: JobFilter,
    by_status: dict[str, int],
    include_cancelled: bool,
) -> str:
    from scrapefleet.common.ops import bulk
    from scrapefleet.common.reads import queries

    if which.ids and not (which.kind or which.host):
        found = queries.job_statuses(conn, which.ids)
        why = bulk.unmoved_ids(action, which.ids, [], found, include_cancelled=include_cancelled)
        return why or f"nothing to {action}"
    known = queries.host_exists(conn, which.host) if which.host else True
    return bulk.nothing_matched(
        action, which, by_status, include_cancelled=include_cancelled, host_known=known
    )


def _bulk(
    ctx: CliContext,
    action: str,
    which: JobFilter,
    *,
    yes: bool,
    dry_run: bool,
    include_cancelled: bool = False,
) -> None:
    """Count, confirm when many, act, and say why whatever did not move did not (exit 1)."""
    from scrapefleet.common.db import engines as database
    from scrapefleet.common.ops import bulk
    from scrapefleet.common.reads import queries

    past = bulk.PAST[action]
    with one_line_errors():
        which.params()  # no filter at all is refused before anything is read
        engine = ctx.client.engine
        statuses = bulk.movable(action, include_cancelled)
        with database.wrapped_errors(), engine.connect() as conn:
            by_status = queries.jobs_matching_by_status(conn, which)
            count = bulk.would_move(by_status, statuses)
            if count == 0:
                fail(_why_nothing(conn, action, which, by_status, include_cancelled), 1)
        interactive = sys.stdin.isatty()
        go = bulk.decide(count, yes=yes, dry_run=dry_run, interactive=interactive)
        if go is bulk.Go.COUNT_ONLY:
            echo(f"would {action} {count:,} job(s) ({bulk.describe(which)})")
            return
        if go is bulk.Go.REFUSE:
            fail(
                f"this would {action} {count:,} jobs ({bulk.describe(which)}): pass --yes to"
                " confirm, or --dry-run to only count",
                2,
            )
        if go is bulk.Go.ASK and not click.confirm(
            f"{action} {count:,} job(s) ({bulk.describe(which)})?", default=False, err=True
        ):
            fail(f"nothing {past}: not confirmed", 1)
        with database.transaction(engine) as conn:
            if action == bulk.RETRY:
                moved = store.retry_jobs(conn, which, include_cancelled=include_cancelled)
            else:
                moved = store.cancel_jobs(conn, which)
            moved_set = set(moved)
            unmoved = [i for i in which.ids if i not in moved_set]
            found = queries.job_statuses(conn, unmoved) if unmoved else {}
    if not moved:  # what the count saw changed meanwhile (a claim, another operator)
        fail(f"nothing {past}: the {count:,} job(s) counted changed before they could be", 1)
    echo(f"{past} {len(moved):,} job(s)")
    if which.ids:
        why = bulk.unmoved_ids(action, which.ids, moved, found, include_cancelled=include_cancelled)
        if why:
            fail(why, 1)


@jobs.command("retry")
@_filter_options
@click.option(
    "--include-cancelled", is_flag=True, help="cancelled jobs too (by default: failed only)"
)
@pass_ctx
def jobs_retry(
    ctx: CliContext,
    ids: tuple[int, ...],
    kind: str | None,
    host: str | None,
    yes: bool,
    dry_run: bool,
    include_cancelled: bool,
) -> None:
    """Failed jobs -> pending again, with fresh attempts (cancelled ones with
    --include-cancelled). Over 100 jobs asks first (--yes: don't). Matching nothing, or a named
    job that cannot be retried, is an error (exit 1)."""
    from scrapefleet.common.ops import bulk

    which = store.JobFilter(ids, kind, host)
    _bulk(ctx, bulk.RETRY, which, yes=yes, dry_run=dry_run, include_cancelled=include_cancelled)


@jobs.command("cancel")
@_filter_options
@pass_ctx
def jobs_cancel(
    ctx: CliContext,
    ids: tuple[int, ...],
    kind: str | None,
    host: str | None,
    yes: bool,
    dry_run: bool,
) -> None:
    """Pending or queued jobs -> cancelled (running ones finish). Over 100 jobs asks first
    (--yes: don't). Matching nothing, or a named job that cannot be cancelled, is an error
    (exit 1)."""
    from scrapefleet.common.ops import bulk

    _bulk(ctx, bulk.CANCEL, store.JobFilter(ids, kind, host), yes=yes, dry_run=dry_run)


@jobs.command("stop")
@click.argument("ids", nargs=-1, type=int, required=True)
@pass_ctx
def jobs_stop(ctx: CliContext, ids: tuple[int, ...]) -> None:
    """Running jobs -> cancelled: each host ends its attempt at its next heartbeat (its browser
    session ended, its result dropped). A named job that is not running is an error (exit 1)."""
    from scrapefleet.common.db import engines as database
    from scrapefleet.common.ops import bulk
    from scrapefleet.common.reads import queries

    with one_line_errors(), database.transaction(ctx.client.engine) as conn:
        stopped = store.stop_jobs(conn, list(ids))
        left = [i for i in ids if i not in set(stopped)]
        found = queries.job_statuses(conn, left) if left else {}
    if stopped:
        echo(f"stopped {len(stopped):,} job(s): {', '.join(map(str, stopped))}")
    if left:
        fail(bulk.not_running(left, found), 1)


def _result_filter_options(func: F) -> F:
    func = click.option(
        "--status", "statuses", multiple=True, help="this status (repeat for more); default: all"
    )(func)
    func = click.option("--kind", help="jobs of this kind")(func)
    func = click.option("--host", help="jobs last run on this host")(func)
    func = click.option(
        "--was-on",
        help="jobs that ran on this host at any attempt, rescued or released ones too",
    )(func)
    func = click.option(
        "--rescued",
        is_flag=True,
        help="with --was-on: only the jobs rescued from that host (its consumer went silent)",
    )(func)
    func = click.option("--profile", help="jobs of this browser profile")(func)
    func = click.option("--crawl", type=int, help="the pages of this crawl (its id)")(func)
    func = click.option(
        "--error-class",  # checked by ResultFilter: the CLI does not import the classes to start
        help="jobs whose last failed attempt had this class: transient, permanent, rate_limited,"
        " blocked",
    )(func)
    return click.option(
        "--since", help="finished (or created) since: 2h, 30m, 7d, or an ISO 8601 time"
    )(func)


def _result_filter(
    statuses: tuple[str, ...], since: str | None, limit: int | None = None, **others: Any
) -> ResultFilter:
    from scrapefleet.common.reads import results as job_results

    when = parse_since(since) if since else None
    return job_results.ResultFilter(tuple(statuses), since=when, limit=limit, **others)


@jobs.command("list")
@_result_filter_options
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="JSON lines (every column) instead")
@pass_ctx
def jobs_list(ctx: CliContext, limit: int, as_json: bool, **filters: Any) -> None:
    """The newest jobs matching the filters: a table, or JSON lines with --json. Matching
    nothing is an error (exit 1)."""
    from scrapefleet.common.db import engines as database
    from scrapefleet.common.reads import results as job_results

    with one_line_errors(), database.wrapped_errors():
        which = _result_filter(limit=limit, **filters)
        rows = [masking.mask_job_row(r) for r in job_results.iter_results(ctx.client.engine, which)]
    if not rows:
        fail(f"no job matches ({which.describe()})", 1)
    for line in jsonl_lines(rows) if as_json else table_lines(rows):
        echo(line.rstrip("\n"))


@click.group()
def results() -> None:
    """Jobs and their results out, for other programs."""


@results.command("export")
@_result_filter_options
@click.option(
    "--format", "fmt", type=click.Choice(FORMATS), help="default: by extension, else jsonl"
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="default: stdout"
)
@click.option("--flatten", is_flag=True, help="CSV: a result.KEY column per result key")
@click.option(
    "--show-secrets",
    is_flag=True,
    help="payloads as stored: proxy passwords, cookies, credential headers and URL tokens"
    " in clear (masked by default)",
)
@pass_ctx
def results_export(
    ctx: CliContext,
    fmt: str | None,
    output: Path | None,
    flatten: bool,
    show_secrets: bool,
    **filters: Any,
) -> None:
    """Every matching job, archived ones too, streamed as JSON lines, a JSON array or CSV
    (payload and result as JSON, or with --flatten a column per result key), the format taken
    from the file's extension (.jsonl, .json, .csv) unless --format says; secrets masked unless
    --show-secrets. A progress bar on a terminal. Matching nothing is an error (exit 1)."""
    from scrapefleet.common.db import engines as database
    from scrapefleet.common.reads import results as job_results

    with one_line_errors(), database.wrapped_errors():
        fmt = export_format(str(output) if output else None, fmt)
        if flatten and fmt != "csv":
            fail(f"--flatten: only for CSV, not {fmt}", 2)
        which = _result_filter(**filters)
        engine = ctx.client.engine
        with engine.connect() as conn:
            total = job_results.count_results(conn, which)
        if total == 0:
            fail(f"no job matches ({which.describe()})", 1)
        write: Callable[[Iterable[dict[str, Any]], IO[str], Callable[[], None]], int]
        if fmt == "csv":
            # The columns first: one more pass over the rows (streamed, nothing kept but keys).
            columns = flat_columns(job_results.iter_results(engine, which)) if flatten else None
            write = functools.partial(write_csv, result_columns=columns)
        else:
            write = write_json if fmt == "json" else write_jsonl
        target = str(output) if output else "-"
        # atomic: a file appears whole or not at all (an export cut short leaves nothing).
        with click.open_file(target, "w", encoding="utf-8", atomic=bool(output)) as out:
            rows = job_results.iter_results(engine, which)
            if not show_secrets:
                rows = map(masking.mask_job_row, rows)
            if sys.stderr.isatty():
                with click.progressbar(length=total, label="exporting", file=sys.stderr) as bar:
                    written = write(rows, out, lambda: bar.update(1))
            else:
                written = write(rows, out, lambda: None)
    echo(f"exported {written:,} job(s) ({which.describe()})", err=True)
