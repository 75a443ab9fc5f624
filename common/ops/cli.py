"""`scrapefleet`: the admin CLI (database, jobs, hosts, status, the demo).

Every ScrapefleetError becomes one line on stderr: exit 2 for bad input or settings (nothing
was changed), exit 1 for a database that cannot be reached or a thing that does not exist. A
retry or cancel that moved nothing, or not every job it named, says why and exits 1; one over
BULK_CONFIRM_OVER_JOBS jobs asks first, or exits 2 with no terminal to ask on and no --yes.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections import Counter
from contextlib import suppress
from pathlib import Path
from typing import Any

import click

from scrapefleet.common import masking, store, tracing
from scrapefleet.common.errors import (
    ProbeError,
    SettingsError,
    SubmitError,
)
from scrapefleet.common.ops.cli_context import CliContext, echo, fail, pass_ctx
from scrapefleet.common.ops.commands.controls_command import controls
from scrapefleet.common.ops.commands.crawl_command import crawl, crawls
from scrapefleet.common.ops.commands.db_grant_command import db_grant
from scrapefleet.common.ops.commands.jobs_command import jobs, results
from scrapefleet.common.ops.commands.profiles_command import profiles
from scrapefleet.common.ops.commands.proxies_command import proxies
from scrapefleet.common.ops.commands.rate_limits_command import rate_limits
from scrapefleet.common.ops.commands.schedules_command import schedules
from scrapefleet.common.ops.commands.try_command import try_command
from scrapefleet.common.ops.one_line_errors import one_line_errors
from scrapefleet.common.ops.results_out import (
    jsonl_lines,
)

# The database layer, pydantic and the settings are imported inside the commands that use them:
# `scrapefleet --help` needs none of them (tests/unit/test_store_statuses.py checks it).


@click.group()
@click.option("--config", type=click.Path(path_type=Path), help="TOML settings file")
@click.version_option(package_name="scrapefleet", prog_name="scrapefleet")
@click.pass_context
def cli(ctx: click.Context, config: Path | None) -> None:
    """scrapefleet: schedule scraping jobs over a fleet of Selenium hosts."""
    # Settings (and the logging they configure) load on a command's first use: a subcommand's
    # --help runs this callback too, and needs neither.
    ctx.obj = CliContext(config)
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
def db_upgrade(ctx: CliContext) -> None:
    """Create or migrate the schema to the latest version."""
    from scrapefleet.common.db.migrate import current_revision, upgrade

    with one_line_errors():
        url = ctx.database_url()
        upgrade(url)
        echo(f"database at revision {current_revision(url)}")


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
@click.option(
    "--traceparent",
    envvar="TRACEPARENT",
    help=(
        "the W3C trace context the jobs' traces are children of (default: $TRACEPARENT); a"
        " line's own traceparent wins; a malformed one is ignored with a warning"
    ),
)
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(0, 7 * 86400, min_open=True),
    help="then wait up to SECONDS for them to finish, and count how they ended (exit 1 if some"
    " are unfinished by then)",
)
@pass_ctx
def submit(
    ctx: CliContext,
    file: Any,
    fmt: str | None,
    host: str | None,
    traceparent: str | None,
    wait_s: float | None,
) -> None:
    """Submit the jobs in FILE (JSON lines or CSV; '-' for stdin) in one transaction.

    A bad line stops everything: its number and field are printed, exit 2, nothing inserted.
    With --host the job ids are printed too (`jobs show ID` follows one).
    """
    from scrapefleet.common.jobs import submit_file

    with one_line_errors():
        client = ctx.client  # settings and user actions first: they validate the lines
        name = getattr(file, "name", None)
        fmt = submit_file.detect_format(name if isinstance(name, str) else None, fmt)
        shown = name if isinstance(name, str) and name not in ("-", "<stdin>") else "stdin"
        jobs = submit_file.read_jobs(file, fmt, shown)
        if traceparent is not None and (given := tracing.submit_traceparent(traceparent)):
            jobs = [j if j.traceparent else dataclasses.replace(j, traceparent=given) for j in jobs]
        with click.progressbar(length=len(jobs), label="inserting", file=sys.stderr) as bar:
            result = client.submit_many(jobs, progress=bar.update, host=host)
        skipped = f", {result.skipped_duplicates} skipped (dedupe key in use)"
        echo(f"submitted {len(result.ids)} jobs{skipped if result.skipped_duplicates else ''}")
        if host is not None:
            echo(f"pinned to host {host}: {' '.join(map(str, result.ids))}")
        if wait_s is not None:
            ended = client.wait(result.ids, wait_s, poll_s=0.5)
            counts = Counter(ended.values())
            echo("; ".join(f"{n} {status}" for status, n in sorted(counts.items())))
            if unfinished := sum(n for s, n in counts.items() if s not in store.FINISHED):
                fail(f"{unfinished} job(s) unfinished after {wait_s:g} s", 1)


# ---------------------------------------------------------------- status


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@pass_ctx
def status(ctx: CliContext, as_json: bool) -> None:
    """The producer (up, or down since when; the pause), jobs per status, load per host.

    Exits 0 when the fleet can finish its work, 3 when the producer is down, 4 when work is
    pending and no host is active (or no active host runs its kind), 5 when an operator holds
    work (a paused key, kind or crawl, or assignment paused)."""
    from scrapefleet.common.db import engines as database
    from scrapefleet.common.ops import fleet_status as status_report

    with one_line_errors(), database.wrapped_errors(), ctx.read_engine().connect() as conn:
        fleet_status = status_report.read_fleet_status(conn)
    echo(fleet_status.json() if as_json else fleet_status.text())
    # Exit codes (status_report.StatusVerdict): 0 healthy, 3 producer down, 4 work pending and
    # no host active to run it, 5 work held by an operator. The output is complete either way.
    sys.exit(int(fleet_status.verdict))


@cli.command()
@click.option("--limit", type=click.IntRange(1), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="JSON lines (every column) instead")
@pass_ctx
def failures(ctx: CliContext, limit: int, as_json: bool) -> None:
    """Failed jobs of 7 days grouped by cause (kind, error class, error with URLs and numbers
    masked, status codes kept), largest first, each with an example job. None is exit 1."""
    from scrapefleet.common.db import engines as database
    from scrapefleet.common.ops import render
    from scrapefleet.common.reads import progress

    with one_line_errors(), database.wrapped_errors(), ctx.read_engine().connect() as conn:
        groups = progress.read_rows(conn, "failure_groups", limit)
    # The example is the error's last line as raised: a proxy URL's password may be in it.
    groups = [{**g, "example_error": masking.mask_text(g["example_error"])} for g in groups]
    if not groups:
        fail("no job failed in the last 7 days", 1)
    for line in jsonl_lines(groups) if as_json else render.failure_group_lines(groups):
        echo(line.rstrip("\n"))


cli.add_command(jobs)
cli.add_command(results)


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
    ctx: CliContext, name: str, capacity: int | None, ssh_user: str | None, **ssh: Any
) -> None:
    """Add a host (or update its settings)."""
    from scrapefleet.common.db import engines as database

    with one_line_errors():
        _check_host_name(name)
        user = ssh_user or ctx.settings.ssh_user
        spec = store.HostSpec(
            name=name, capacity=capacity or ctx.settings.capacity, ssh_user=user, **ssh
        )
        with database.transaction(ctx.client.engine) as conn:
            created = store.add_host(conn, spec)
    echo(f"host {name} {'added' if created else 'updated'} (capacity {spec.capacity})")


def _check_host_name(name: str) -> None:
    """A host's name becomes a database role's, a status file's and a log field: the same
    rule as every host name in the settings (letters, digits, '-', dot-separated labels)."""
    from scrapefleet.common.setting_groups.operator_settings import HOST_NAME

    if not HOST_NAME.fullmatch(name):
        shown = name if len(name) <= 80 else f"{name[:80]}..."
        raise SubmitError(
            f"host name {shown!r} ({len(name)} characters): letters, digits and '-' in labels"
            " separated by dots, at most 253 characters"
        )


@hosts.command("check")
@click.argument("name")
@pass_ctx
def hosts_check(ctx: CliContext, name: str) -> None:
    """Probe NAME once, as the producer does, and print its status document or why the probe
    failed (exit 1). Changes nothing in the database."""
    from scrapefleet.common.db import engines as database
    from scrapefleet.common.reads import queries
    from scrapefleet.producer.probes.routing_probe import RoutingProbe, probe_target

    # The probe logs a failure as a warning; here the reason is printed once, below.
    for noisy in ("scrapefleet.producer", "paramiko"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    with one_line_errors():
        with database.wrapped_errors(), ctx.client.engine.connect() as conn:
            target = probe_target(queries.host(conn, name), ctx.settings)
        probe = RoutingProbe(ctx.settings)
        try:
            result = probe.probe_all([target])[name]
        finally:
            probe.close()
    if isinstance(result, ProbeError):
        where = f"{target.user}@{target.address}:{target.port}" if target.address else "local"
        echo(f"error: probe of {name} ({where}) failed: {result}", err=True)
        sys.exit(1)
    echo(result.to_json())


@hosts.command("list")
@pass_ctx
def hosts_list(ctx: CliContext) -> None:
    """Every host with its state and load."""
    from scrapefleet.common.db import engines as database
    from scrapefleet.common.ops import render
    from scrapefleet.common.reads import queries

    with one_line_errors(), database.wrapped_errors(), ctx.client.engine.connect() as conn:
        rows = queries.host_load(conn)
    echo(render.render_status({}, rows).split("\n", 1)[1])


@hosts.command("drain")
@click.argument("name")
@pass_ctx
def hosts_drain(ctx: CliContext, name: str) -> None:
    """Stop giving NAME work; its queued jobs go to other hosts, running ones finish."""
    from scrapefleet.common.db import engines as database

    with one_line_errors(), database.transaction(ctx.client.engine) as conn:
        requeued = store.drain_host(conn, name)
    echo(f"host {name} draining; {len(requeued)} queued job(s) handed back")


@hosts.command("enable")
@click.argument("name")
@pass_ctx
def hosts_enable(ctx: CliContext, name: str) -> None:
    """Let NAME take work again (drained or disabled; an offline host is refused: it comes
    back when its consumer answers the producer's probes)."""
    from scrapefleet.common.db import engines as database

    with one_line_errors(), database.transaction(ctx.client.engine) as conn:
        changed = store.enable_host(conn, name)
    if not changed:
        fail(f"host {name} is already active: nothing changed", 1)
    echo(f"host {name} active")


@hosts.command("remove")
@click.argument("name")
@pass_ctx
def hosts_remove(ctx: CliContext, name: str) -> None:
    """Remove NAME (it must run nothing: drain it first)."""
    from scrapefleet.common.db import engines as database

    with one_line_errors(), database.transaction(ctx.client.engine) as conn:
        store.remove_host(conn, name)
    echo(f"host {name} removed")


# ---------------------------------------------------------------- profiles, rate limits

cli.add_command(profiles)
cli.add_command(proxies)
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
def dashboard(ctx: CliContext, port: int | None, address: str | None, allow_remote: bool) -> None:
    """Serve the web dashboard: queue, throughput, hosts, failures, controls.

    Controls need the dashboard_token setting; without it the dashboard is read-only.
    """
    from scrapefleet.common.ops.dashboard.app import create_app
    from scrapefleet.common.ops.dashboard.server import DashboardServer, is_loopback_address

    with one_line_errors():
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
        echo(f"dashboard on {server.url}/ ({mode}); Ctrl-C stops it", err=True)
        with suppress(KeyboardInterrupt):
            server.serve_forever()


# ---------------------------------------------------------------- fleet


@cli.group()
def fleet() -> None:
    """Fleet-wide switches."""


@fleet.command("pause")
@click.option("--reason", help="shown on the dashboard")
@pass_ctx
def fleet_pause(ctx: CliContext, reason: str | None) -> None:
    """Stop assigning new jobs anywhere (running ones finish); the producer sees it next cycle."""
    from scrapefleet.common.db import engines as database

    with one_line_errors(), database.transaction(ctx.client.engine) as conn:
        changed = store.set_assignment_paused(conn, True, "cli", reason)
    if not changed:
        fail(
            "assignment is already paused: nothing changed (`scrapefleet status` says since when)",
            1,
        )
    echo("assignment paused")


@fleet.command("resume")
@pass_ctx
def fleet_resume(ctx: CliContext) -> None:
    """Assign jobs again."""
    from scrapefleet.common.db import engines as database

    with one_line_errors(), database.transaction(ctx.client.engine) as conn:
        changed = store.set_assignment_paused(conn, False, "cli", None)
    if not changed:
        fail("assignment is not paused: nothing to resume", 1)
    echo("assignment resumed")


# ---------------------------------------------------------------- demo


@cli.command()
@click.option(
    "--jobs", "job_count", type=click.IntRange(1, 100_000), default=300, show_default=True
)
@click.option("--hosts", "host_count", type=click.IntRange(1, 10), default=2, show_default=True)
@click.option("--keep-db", is_flag=True, help="leave the embedded database running afterwards")
@pass_ctx
def demo(ctx: CliContext, job_count: int, host_count: int, keep_db: bool) -> None:
    """A producer and consumer hosts process a batch of http_get jobs end to end.

    With no database_url set, an embedded PostgreSQL (pgserver) is started for it.
    """
    from scrapefleet.common.local.demo import run_demo

    with one_line_errors():
        sys.exit(
            run_demo(ctx.settings, job_count=job_count, host_count=host_count, keep_db=keep_db)
        )


def main() -> None:
    cli(prog_name="scrapefleet")


if __name__ == "__main__":
    main()
