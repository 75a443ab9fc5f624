"""`scrapefleet`: the admin CLI (database, jobs, hosts, status, the demo).

Every ScrapefleetError becomes one line on stderr: exit 2 for bad input or settings (nothing
was changed), exit 1 for a database that cannot be reached or a thing that does not exist. A
retry or cancel that moved nothing, or not every job it named, says why and exits 1; one over
BULK_CONFIRM_OVER_JOBS jobs asks first, or exits 2 with no terminal to ask on and no --yes.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable, Iterable
from contextlib import suppress
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from scrapefleet.common import masking, store
from scrapefleet.common.constants import BULK_CONFIRM_OVER_JOBS
from scrapefleet.common.errors import (
    ProbeError,
    SettingsError,
    SubmitError,
)
from scrapefleet.common.lazy_import import lazy_module
from scrapefleet.common.logging_setup import configure_logging
from scrapefleet.common.ops.controls_command import controls
from scrapefleet.common.ops.crawl_command import crawl, crawls
from scrapefleet.common.ops.db_grant_command import db_grant
from scrapefleet.common.ops.one_line_errors import one_line_errors
from scrapefleet.common.ops.profiles_command import profiles
from scrapefleet.common.ops.rate_limits_command import rate_limits
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
from scrapefleet.common.ops.schedules_command import schedules
from scrapefleet.common.ops.try_command import try_command

# Loaded on first use: `scrapefleet --help` needs none of them (common.lazy_import).
if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

    from scrapefleet.common import api, producer_status, progress, queries, settings, submit_file
    from scrapefleet.common import db as database
    from scrapefleet.common import results as job_results
    from scrapefleet.common.api import Client
    from scrapefleet.common.ops import bulk, render, status_report
    from scrapefleet.common.ops.dashboard import reads as dashboard_reads
    from scrapefleet.common.results import ResultFilter
    from scrapefleet.common.settings import Settings
    from scrapefleet.common.store import JobFilter
else:
    api = lazy_module("scrapefleet.common.api")
    database = lazy_module("scrapefleet.common.db")
    producer_status = lazy_module("scrapefleet.common.producer_status")
    progress = lazy_module("scrapefleet.common.progress")
    queries = lazy_module("scrapefleet.common.queries")
    job_results = lazy_module("scrapefleet.common.results")
    settings = lazy_module("scrapefleet.common.settings")
    submit_file = lazy_module("scrapefleet.common.submit_file")
    bulk = lazy_module("scrapefleet.common.ops.bulk")
    render = lazy_module("scrapefleet.common.ops.render")
    status_report = lazy_module("scrapefleet.common.ops.status_report")
    dashboard_reads = lazy_module("scrapefleet.common.ops.dashboard.reads")

F = TypeVar("F", bound=Callable[..., Any])


_one_line_errors = one_line_errors  # common.ops.one_line_errors: one line, exit 1 or 2


class _Context:
    def __init__(self, config: Path | None) -> None:
        self.config = config
        self._settings: Settings | None = None
        self._client: Client | None = None
        self._read_engine: Engine | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = settings.load_settings(self.config)
            configure_logging(self._settings.log_level, self._settings.log_format)
        return self._settings

    def database_url(self) -> str:
        if not self.settings.database_url:
            raise SettingsError("database_url is not set (SCRAPEFLEET_DATABASE_URL or --config)")
        return self.settings.database_url

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        if self._read_engine is not None:
            self._read_engine.dispose()

    def read_engine(self) -> Engine:
        """An engine for a command that only reads: the client's when it exists, else one
        without the client's user actions to load (status starts in a third less CPU)."""
        if self._client is not None:
            return self._client.engine
        if self._read_engine is None:
            self._read_engine = database.make_engine(
                self.database_url(),
                pool_size=1,
                application_name="scrapefleet-cli",
                settings=self.settings,
            )
        return self._read_engine

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = api.Client(self.database_url(), self.settings)
        return self._client


pass_ctx = click.make_pass_decorator(_Context)


@click.group()
@click.option("--config", type=click.Path(path_type=Path), help="TOML settings file")
@click.version_option(package_name="scrapefleet", prog_name="scrapefleet")
@click.pass_context
def cli(ctx: click.Context, config: Path | None) -> None:
    """scrapefleet: schedule scraping jobs over a fleet of Selenium hosts."""
    # Settings (and the logging they configure) load on a command's first use: a subcommand's
    # --help runs this callback too, and needs neither.
    ctx.obj = _Context(config)
    ctx.call_on_close(ctx.obj.close)


# ---------------------------------------------------------------- db


@cli.group()
def db() -> None:
    """Database schema."""


db.add_command(db_grant)
cli.add_command(crawl)
cli.add_command(crawls)
cli.add_command(try_command)
cli.add_command(schedules)


@db.command("upgrade")
@pass_ctx
def db_upgrade(ctx: _Context) -> None:
    """Create or migrate the schema to the latest version."""
    from scrapefleet.common.migrate import current_revision, upgrade

    with _one_line_errors():
        url = ctx.database_url()
        upgrade(url)
        click.echo(f"database at revision {current_revision(url)}")


# ---------------------------------------------------------------- submit


@cli.command()
@click.argument("file", type=click.File("rb"), default="-")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "csv"]), help="default: by extension")
@click.option(
    "--host",
    help=(
        "pin the jobs to this host: queued there at once, run by its consumer only, waiting"
        " for it whenever it hands them back (a canary)"
    ),
)
@pass_ctx
def submit(ctx: _Context, file: Any, fmt: str | None, host: str | None) -> None:
    """Submit the jobs in FILE (JSON lines or CSV; '-' for stdin) in one transaction.

    A bad line stops everything: its number and field are printed, exit 2, nothing inserted.
    With --host the job ids are printed too (`jobs show ID` follows one).
    """
    with _one_line_errors():
        client = ctx.client  # settings and user actions first: they validate the lines
        name = getattr(file, "name", None)
        fmt = submit_file.detect_format(name if isinstance(name, str) else None, fmt)
        shown = name if isinstance(name, str) and name not in ("-", "<stdin>") else "stdin"
        jobs = submit_file.read_jobs(file, fmt, shown)
        with click.progressbar(length=len(jobs), label="inserting", file=sys.stderr) as bar:
            result = client.submit_many(jobs, progress=bar.update, host=host)
        skipped = f", {result.skipped_duplicates} skipped (dedupe key in use)"
        click.echo(
            f"submitted {len(result.ids)} jobs{skipped if result.skipped_duplicates else ''}"
        )
        if host is not None:
            click.echo(f"pinned to host {host}: {' '.join(map(str, result.ids))}")


# ---------------------------------------------------------------- status


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@pass_ctx
def status(ctx: _Context, as_json: bool) -> None:
    """The producer (up, or down since when; the pause), jobs per status, load per host.

    Exits 0 when the fleet can make progress, 3 when the producer is down, 4 when work is
    pending and no host is active."""
    with _one_line_errors(), database.wrapped_errors(), ctx.read_engine().connect() as conn:
        fleet_status = status_report.read_fleet_status(conn)
    click.echo(fleet_status.json() if as_json else fleet_status.text())
    # Exit codes (status_report.StatusVerdict): 0 healthy, 3 producer down, 4 work pending and
    # no host active. The output is complete either way.
    sys.exit(int(fleet_status.verdict))


@cli.command()
@click.option("--limit", type=click.IntRange(1), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="JSON lines (every column) instead")
@pass_ctx
def failures(ctx: _Context, limit: int, as_json: bool) -> None:
    """Failed jobs of 7 days grouped by cause (kind, error class, error with URLs and numbers
    masked, status codes kept), largest first, each with an example job. None is exit 1."""
    with _one_line_errors(), database.wrapped_errors(), ctx.read_engine().connect() as conn:
        groups = progress.read_rows(conn, "failure_groups", limit)
    # The example is the error's last line as raised: a proxy URL's password may be in it.
    groups = [{**g, "example_error": masking.mask_text(g["example_error"])} for g in groups]
    if not groups:
        _fail("no job failed in the last 7 days", 1)
    for line in jsonl_lines(groups) if as_json else render.failure_group_lines(groups):
        click.echo(line.rstrip("\n"))


# ---------------------------------------------------------------- jobs


@cli.group()
def jobs() -> None:
    """Inspect, retry and cancel jobs."""


@jobs.command("show")
@click.argument("job_id", type=int)
@pass_ctx
def jobs_show(ctx: _Context, job_id: int) -> None:
    """A job's row, its audit trail and its failure artifacts."""
    with _one_line_errors(), database.wrapped_errors(), ctx.client.engine.connect() as conn:
        row = queries.job(conn, job_id)
        events = queries.job_events(conn, job_id)
        webhooks = dashboard_reads.webhook_deliveries(conn, job_id)
        secret_set = (
            producer_status.read_producer_status(conn).webhook_secret_set if webhooks else None
        )
    row = masking.mask_job_row(row)  # a proxy password or a cookie is never shown back
    error = row.pop("last_error")
    artifacts = row.pop("artifacts") or {}
    for key, value in row.items():
        shown = json.dumps(value, default=str) if isinstance(value, dict | list) else value
        click.echo(f"{key:>13}: {shown}")
    click.echo("\nhistory:")
    for e in events:
        message = f"  ({masking.mask_text(e['message'])})" if e["message"] else ""
        if e.get("error_class"):
            message = f"  [{e['error_class']}]{message}"
        moved = f"{e['from_status'] or '-':>10} -> {e['to_status']:<10}"
        click.echo(f"  {e['at']:%Y-%m-%d %H:%M:%S.%f}  {moved} {e['host'] or ''}{message}")
    if artifacts:
        click.echo("\nartifacts:")
        for key, value in artifacts.items():
            click.echo(f"  {key}: {value}")
    if webhooks:
        click.echo("\nwebhooks:")
        for w in webhooks:
            url = masking.mask_url(w["url"])
            click.echo(f"  {w['status']} -> {url}: {render.render_delivery(w, secret_set)}")
    if error:
        click.echo(f"\nlast error:\n{error}")


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


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def _why_nothing(
    conn: Connection,
    action: str,
    which: JobFilter,
    by_status: dict[str, int],
    include_cancelled: bool,
) -> str:
    if which.ids and not (which.kind or which.host):
        found = queries.job_statuses(conn, which.ids)
        why = bulk.unmoved_ids(action, which.ids, [], found, include_cancelled=include_cancelled)
        return why or f"nothing to {action}"
    known = queries.host_exists(conn, which.host) if which.host else True
    return bulk.nothing_matched(
        action, which, by_status, include_cancelled=include_cancelled, host_known=known
    )


def _bulk(
    ctx: _Context,
    action: str,
    which: JobFilter,
    *,
    yes: bool,
    dry_run: bool,
    include_cancelled: bool = False,
) -> None:
    """Count, confirm when many, act, and say why whatever did not move did not (exit 1)."""
    past = bulk.PAST[action]
    with _one_line_errors():
        which.params()  # no filter at all is refused before anything is read
        engine = ctx.client.engine
        statuses = bulk.movable(action, include_cancelled)
        with database.wrapped_errors(), engine.connect() as conn:
            by_status = queries.jobs_matching_by_status(conn, which)
            count = bulk.would_move(by_status, statuses)
            if count == 0:
                _fail(_why_nothing(conn, action, which, by_status, include_cancelled), 1)
        interactive = sys.stdin.isatty()
        go = bulk.decide(count, yes=yes, dry_run=dry_run, interactive=interactive)
        if go is bulk.Go.COUNT_ONLY:
            click.echo(f"would {action} {count:,} job(s) ({bulk.describe(which)})")
            return
        if go is bulk.Go.REFUSE:
            _fail(
                f"this would {action} {count:,} jobs ({bulk.describe(which)}): pass --yes to"
                " confirm, or --dry-run to only count",
                2,
            )
        if go is bulk.Go.ASK and not click.confirm(
            f"{action} {count:,} job(s) ({bulk.describe(which)})?", default=False, err=True
        ):
            _fail(f"nothing {past}: not confirmed", 1)
        with database.transaction(engine) as conn:
            if action == bulk.RETRY:
                moved = store.retry_jobs(conn, which, include_cancelled=include_cancelled)
            else:
                moved = store.cancel_jobs(conn, which)
            moved_set = set(moved)
            unmoved = [i for i in which.ids if i not in moved_set]
            found = queries.job_statuses(conn, unmoved) if unmoved else {}
    if not moved:  # what the count saw changed meanwhile (a claim, another operator)
        _fail(f"nothing {past}: the {count:,} job(s) counted changed before they could be", 1)
    click.echo(f"{past} {len(moved):,} job(s)")
    if which.ids:
        why = bulk.unmoved_ids(action, which.ids, moved, found, include_cancelled=include_cancelled)
        if why:
            _fail(why, 1)


@jobs.command("retry")
@_filter_options
@click.option(
    "--include-cancelled", is_flag=True, help="cancelled jobs too (by default: failed only)"
)
@pass_ctx
def jobs_retry(
    ctx: _Context,
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
    which = store.JobFilter(ids, kind, host)
    _bulk(ctx, bulk.RETRY, which, yes=yes, dry_run=dry_run, include_cancelled=include_cancelled)


@jobs.command("cancel")
@_filter_options
@pass_ctx
def jobs_cancel(
    ctx: _Context,
    ids: tuple[int, ...],
    kind: str | None,
    host: str | None,
    yes: bool,
    dry_run: bool,
) -> None:
    """Pending or queued jobs -> cancelled (running ones finish). Over 100 jobs asks first
    (--yes: don't). Matching nothing, or a named job that cannot be cancelled, is an error
    (exit 1)."""
    _bulk(ctx, bulk.CANCEL, store.JobFilter(ids, kind, host), yes=yes, dry_run=dry_run)


@jobs.command("stop")
@click.argument("ids", nargs=-1, type=int, required=True)
@pass_ctx
def jobs_stop(ctx: _Context, ids: tuple[int, ...]) -> None:
    """Running jobs -> cancelled: each host ends its attempt at its next heartbeat (its browser
    session ended, its result dropped). A named job that is not running is an error (exit 1)."""
    with _one_line_errors(), database.transaction(ctx.client.engine) as conn:
        stopped = store.stop_jobs(conn, list(ids))
        left = [i for i in ids if i not in set(stopped)]
        found = queries.job_statuses(conn, left) if left else {}
    if stopped:
        click.echo(f"stopped {len(stopped):,} job(s): {', '.join(map(str, stopped))}")
    if left:
        _fail(bulk.not_running(left, found), 1)


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
    when = parse_since(since) if since else None
    return job_results.ResultFilter(tuple(statuses), since=when, limit=limit, **others)


@jobs.command("list")
@_result_filter_options
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="JSON lines (every column) instead")
@pass_ctx
def jobs_list(ctx: _Context, limit: int, as_json: bool, **filters: Any) -> None:
    """The newest jobs matching the filters: a table, or JSON lines with --json. Matching
    nothing is an error (exit 1)."""
    with _one_line_errors(), database.wrapped_errors():
        which = _result_filter(limit=limit, **filters)
        rows = [masking.mask_job_row(r) for r in job_results.iter_results(ctx.client.engine, which)]
    if not rows:
        _fail(f"no job matches ({which.describe()})", 1)
    for line in jsonl_lines(rows) if as_json else table_lines(rows):
        click.echo(line.rstrip("\n"))


@cli.group()
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
    ctx: _Context,
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
    with _one_line_errors(), database.wrapped_errors():
        fmt = export_format(str(output) if output else None, fmt)
        if flatten and fmt != "csv":
            _fail(f"--flatten: only for CSV, not {fmt}", 2)
        which = _result_filter(**filters)
        engine = ctx.client.engine
        with engine.connect() as conn:
            total = job_results.count_results(conn, which)
        if total == 0:
            _fail(f"no job matches ({which.describe()})", 1)
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
    click.echo(f"exported {written:,} job(s) ({which.describe()})", err=True)


# ---------------------------------------------------------------- hosts


@cli.group()
def hosts() -> None:
    """Add, list, drain, enable and remove consumer hosts."""


@hosts.command("add")
@click.argument("name")
@click.option("--capacity", type=click.IntRange(1, 64), help="default: the capacity setting")
@click.option("--address", help="SSH address; omit for a consumer on this machine")
@click.option("--port", "ssh_port", type=int, default=22, show_default=True)
@click.option("--user", "ssh_user", help="SSH user; default: the ssh_user setting")
@click.option("--key-file", "ssh_key_file", help="private key; default: the ssh_key_file setting")
@click.option("--known-hosts", "known_hosts_file", help="default: the ssh_known_hosts_file setting")
@pass_ctx
def hosts_add(
    ctx: _Context, name: str, capacity: int | None, ssh_user: str | None, **ssh: Any
) -> None:
    """Add a host (or update its settings)."""
    with _one_line_errors():
        _check_host_name(name)
        user = ssh_user or ctx.settings.ssh_user
        spec = store.HostSpec(
            name=name, capacity=capacity or ctx.settings.capacity, ssh_user=user, **ssh
        )
        with database.transaction(ctx.client.engine) as conn:
            created = store.add_host(conn, spec)
    click.echo(f"host {name} {'added' if created else 'updated'} (capacity {spec.capacity})")


def _check_host_name(name: str) -> None:
    """A host's name becomes a database role's, a status file's and a log field: the same
    rule as every host name in the settings (letters, digits, '-', dot-separated labels)."""
    if not settings.HOST_NAME.fullmatch(name):
        shown = name if len(name) <= 80 else f"{name[:80]}..."
        raise SubmitError(
            f"host name {shown!r} ({len(name)} characters): letters, digits and '-' in labels"
            " separated by dots, at most 253 characters"
        )


@hosts.command("check")
@click.argument("name")
@pass_ctx
def hosts_check(ctx: _Context, name: str) -> None:
    """Probe NAME once, as the producer does, and print its status document or why the probe
    failed (exit 1). Changes nothing in the database."""
    from scrapefleet.producer.probing import RoutingProbe, probe_target

    # The probe logs a failure as a warning; here the reason is printed once, below.
    for noisy in ("scrapefleet.producer", "paramiko"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    with _one_line_errors():
        with database.wrapped_errors(), ctx.client.engine.connect() as conn:
            target = probe_target(queries.host(conn, name), ctx.settings)
        probe = RoutingProbe(ctx.settings)
        try:
            result = probe.probe_all([target])[name]
        finally:
            probe.close()
    if isinstance(result, ProbeError):
        where = f"{target.user}@{target.address}:{target.port}" if target.address else "local"
        click.echo(f"error: probe of {name} ({where}) failed: {result}", err=True)
        sys.exit(1)
    click.echo(result.to_json())


@hosts.command("list")
@pass_ctx
def hosts_list(ctx: _Context) -> None:
    """Every host with its state and load."""
    with _one_line_errors(), database.wrapped_errors(), ctx.client.engine.connect() as conn:
        rows = queries.host_load(conn)
    click.echo(render.render_status({}, rows).split("\n", 1)[1])


@hosts.command("drain")
@click.argument("name")
@pass_ctx
def hosts_drain(ctx: _Context, name: str) -> None:
    """Stop giving NAME work; its queued jobs go to other hosts, running ones finish."""
    with _one_line_errors(), database.transaction(ctx.client.engine) as conn:
        requeued = store.drain_host(conn, name)
    click.echo(f"host {name} draining; {len(requeued)} queued job(s) handed back")


@hosts.command("enable")
@click.argument("name")
@pass_ctx
def hosts_enable(ctx: _Context, name: str) -> None:
    """Let NAME take work again."""
    with _one_line_errors(), database.transaction(ctx.client.engine) as conn:
        changed = store.enable_host(conn, name)
    if not changed:
        _fail(f"host {name} is already active: nothing changed", 1)
    click.echo(f"host {name} active")


@hosts.command("remove")
@click.argument("name")
@pass_ctx
def hosts_remove(ctx: _Context, name: str) -> None:
    """Remove NAME (it must run nothing: drain it first)."""
    with _one_line_errors(), database.transaction(ctx.client.engine) as conn:
        store.remove_host(conn, name)
    click.echo(f"host {name} removed")


# ---------------------------------------------------------------- profiles, rate limits

cli.add_command(profiles)
cli.add_command(rate_limits)
cli.add_command(controls)


# ---------------------------------------------------------------- dashboard


@cli.command()
@click.option("--port", type=click.IntRange(1, 65535), help="default: setting dashboard_port")
@click.option("--address", help="default: setting dashboard_address (127.0.0.1)")
@click.option(
    "--allow-remote", is_flag=True, help="allow a non-loopback address (dashboard_allow_remote)"
)
@pass_ctx
def dashboard(ctx: _Context, port: int | None, address: str | None, allow_remote: bool) -> None:
    """Serve the web dashboard: queue, throughput, hosts, failures, controls.

    Controls need the dashboard_token setting; without it the dashboard is read-only.
    """
    from scrapefleet.common.ops.dashboard.app import create_app
    from scrapefleet.common.ops.dashboard.server import DashboardServer, is_loopback_address

    with _one_line_errors():
        settings = ctx.settings
        address = address or settings.dashboard_address
        if not (allow_remote or settings.dashboard_allow_remote or is_loopback_address(address)):
            raise SettingsError(
                f"dashboard address {address} is not loopback: put a TLS reverse proxy in front"
                " and pass --allow-remote (or set dashboard_allow_remote)"
            )
        app = create_app(settings, ctx.client.engine)
        try:
            server = DashboardServer(app, address, port or settings.dashboard_port)
        except OSError as exc:
            raise SettingsError(f"cannot listen for the dashboard: {exc.strerror}") from None
        mode = "controls need the token" if settings.dashboard_token else "read-only"
        if settings.dashboard_read_needs_token:
            mode = "every page needs the token"
        click.echo(f"dashboard on {server.url}/ ({mode}); Ctrl-C stops it", err=True)
        with suppress(KeyboardInterrupt):
            server.serve_forever()


# ---------------------------------------------------------------- fleet


@cli.group()
def fleet() -> None:
    """Fleet-wide switches."""


@fleet.command("pause")
@click.option("--reason", help="shown on the dashboard")
@pass_ctx
def fleet_pause(ctx: _Context, reason: str | None) -> None:
    """Stop assigning new jobs anywhere (running ones finish); the producer sees it next cycle."""
    with _one_line_errors(), database.transaction(ctx.client.engine) as conn:
        changed = store.set_assignment_paused(conn, True, "cli", reason)
    if not changed:
        _fail(
            "assignment is already paused: nothing changed (`scrapefleet status` says since when)",
            1,
        )
    click.echo("assignment paused")


@fleet.command("resume")
@pass_ctx
def fleet_resume(ctx: _Context) -> None:
    """Assign jobs again."""
    with _one_line_errors(), database.transaction(ctx.client.engine) as conn:
        changed = store.set_assignment_paused(conn, False, "cli", None)
    if not changed:
        _fail("assignment is not paused: nothing to resume", 1)
    click.echo("assignment resumed")


# ---------------------------------------------------------------- demo


@cli.command()
@click.option(
    "--jobs", "job_count", type=click.IntRange(1, 100_000), default=300, show_default=True
)
@click.option("--hosts", "host_count", type=click.IntRange(1, 10), default=2, show_default=True)
@click.option("--keep-db", is_flag=True, help="leave the embedded database running afterwards")
@pass_ctx
def demo(ctx: _Context, job_count: int, host_count: int, keep_db: bool) -> None:
    """A producer and consumer hosts process a batch of http_get jobs end to end.

    With no database_url set, an embedded PostgreSQL (pgserver) is started for it.
    """
    from scrapefleet.common.local.demo import run_demo

    with _one_line_errors():
        sys.exit(
            run_demo(ctx.settings, job_count=job_count, host_count=host_count, keep_db=keep_db)
        )


def main() -> None:
    cli(prog_name="scrapefleet")


if __name__ == "__main__":
    main()
