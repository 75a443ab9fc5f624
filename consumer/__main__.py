"""``scrapefleet-consumer``: run the consumer daemon of this host, or print its status.

    scrapefleet-consumer [run] [--host NAME] [--register] [--capacity N] [--config FILE]
                         [--until-idle]
    scrapefleet-consumer status --json [--host NAME] [--config FILE]

Exit codes: 0 done (a first SIGTERM/SIGINT drains, a second one stops cold; both exit 0), 1
database unreachable at start, no status, a host that was never added (without --register), or
a thread of the daemon that died (logged by name), 2 invalid setting.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import click

from scrapefleet.common import tracing
from scrapefleet.common.errors import DatabaseUnavailable, ProbeError, SettingsError
from scrapefleet.common.settings import Settings, load_settings
from scrapefleet.common.status.document import parse_status, read_status_text, status_path

log = logging.getLogger("scrapefleet.consumer")


def _fail(message: str, code: int) -> None:
    click.echo(f"scrapefleet-consumer: {message}", err=True)
    sys.exit(code)


def _settings(config: Path | None, **overrides: Any) -> Settings:
    try:
        return load_settings(config, **{k: v for k, v in overrides.items() if v is not None})
    except SettingsError as exc:
        _fail(str(exc), 2)
        raise  # unreachable; for the type checker


def _host_name(option: str | None, settings: Settings) -> str:
    return option or settings.host_name or socket.gethostname()


config_option = click.option(
    "--config", type=click.Path(path_type=Path), default=None, help="TOML settings file."
)
host_option = click.option("--host", "host", default=None, help="Host name (default: hostname).")


capacity_option = click.option(
    "--capacity", type=int, default=None, help="Slots of a newly registered host."
)
until_idle_option = click.option(
    "--until-idle", is_flag=True, help="Exit once nothing is left to do here."
)
# Without it a host must exist (`scrapefleet hosts add`): a typo in --host must not enrol a new
# host that the producer then gives work.
register_option = click.option(
    "--register", is_flag=True, help="Add the host if it does not exist yet."
)


@click.group(invoke_without_command=True)
@host_option
@capacity_option
@config_option
@until_idle_option
@register_option
@click.pass_context
def cli(
    ctx: click.Context,
    host: str | None,
    capacity: int | None,
    config: Path | None,
    until_idle: bool,
    register: bool,
) -> None:
    """Consumer daemon of a scrapefleet host; with no command, ``run``."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(
            run,
            host=host,
            capacity=capacity,
            config=config,
            until_idle=until_idle,
            register=register,
        )


@cli.command()
@host_option
@capacity_option
@config_option
@until_idle_option
@register_option
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics on this port (overrides metrics_port; 0 = off).",
)
def run(
    host: str | None,
    capacity: int | None,
    config: Path | None,
    until_idle: bool,
    register: bool = False,
    metrics_port: int | None = None,
) -> None:
    """Claim and run this host's jobs until SIGTERM (the default command)."""
    from scrapefleet.common.runtime.logging_setup import configure_logging

    settings = _settings(config, capacity=capacity, metrics_port=metrics_port)
    configure_logging(settings.log_level, settings.log_format)
    tracing.start("scrapefleet-consumer", keep_query=settings.trace_full_urls)
    if not settings.database_url:
        _fail("invalid setting database_url (SCRAPEFLEET_DATABASE_URL): not set", 2)
    assert settings.database_url is not None
    name = _host_name(host, settings)
    # Imported here, not at the top: `status` (a host still on the older forced command runs
    # it once per probe over SSH) would pay for SQLAlchemy + psycopg at every start.
    from scrapefleet.common.db.engines import check_reachable, make_engine
    from scrapefleet.common.db.pooler import check_listen_url

    try:
        check_listen_url(settings)
    except SettingsError as exc:
        _fail(str(exc), 2)
    # The heartbeat, and the main loop's and the recorder's rarer writes; workers never use it.
    # Claims and completions go through a connection of their own (consumer.serving).
    engine = make_engine(
        settings.database_url,
        pool_size=2,
        application_name=f"scrapefleet-consumer {name}",
        settings=settings,
    )
    from scrapefleet.common.runtime.lifecycle import StopSignals
    from scrapefleet.common.runtime.metrics import CONSUMER_REGISTRY, serve_metrics
    from scrapefleet.consumer.daemon import Consumer  # after settings: a bad setting exits fast

    try:  # loads the user actions: a module that does not import stops it here, in one line
        consumer = Consumer(settings, engine, name, drain_timeout_s=settings.drain_timeout_s)
    except SettingsError as exc:
        engine.dispose()
        _fail(str(exc), 2)
        raise  # unreachable; for the type checker
    try:
        metrics_server = serve_metrics(
            settings.metrics_address, settings.metrics_port, CONSUMER_REGISTRY
        )
    except OSError as exc:
        _fail(f"cannot serve metrics on port {settings.metrics_port}: {exc.strerror}", 2)
    try:
        with StopSignals(consumer.lifecycle):
            check_reachable(engine)
            if not register:
                _require_host(engine, name)
            code = consumer.run(until_idle=until_idle)
    except DatabaseUnavailable as exc:
        _fail(str(exc), 1)
    except SettingsError as exc:
        _fail(str(exc), 2)
    finally:
        engine.dispose()
        if metrics_server is not None:
            metrics_server.close()
    logging.shutdown()
    if consumer.running:
        # A job thread stuck in an action, or let go by a cold stop, cannot be killed, and
        # Python would wait for it at exit.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _require_host(engine: Any, name: str) -> None:
    from scrapefleet.common.db.engines import wrapped_errors
    from scrapefleet.common.reads import queries

    with wrapped_errors(), engine.connect() as conn:
        exists = queries.host_exists(conn, name)
    if not exists:
        _fail(
            f"no host named {name!r}: add it with `scrapefleet hosts add {name}`, or pass"
            " --register to add it now",
            1,
        )


@cli.command()
@click.option("--json", "as_json", is_flag=True, required=True, help="Print the JSON document.")
@host_option
@config_option
def status(as_json: bool, host: str | None, config: Path | None) -> None:
    """Print this host's status document, as the producer's probes read it."""
    settings = _settings(config)
    name = _host_name(host, settings)
    path = status_path(settings.state_dir, name)
    try:
        text = read_status_text(settings.state_dir, name)  # a regular file, size-capped
        document = parse_status(text)  # print only a document the probe can use
    except OSError as exc:
        _fail(f"no status for host {name!r} at {path}: {exc.strerror}", 1)
    except ProbeError as exc:
        _fail(f"bad status for host {name!r} at {path}: {exc}", 1)
    # The daemon rewrites the file every heartbeat: an old one is a consumer that died or hung,
    # and its last words (say "active, 0 running") must not draw new jobs. Judged here, on the
    # host's own clock, so clock skew between producer and host cannot fake it.
    age_s = time.time() - document.updated_at
    if age_s > settings.local_state_stale_s:
        _fail(f"status of host {name!r} is {age_s:.1f} s old: consumer not running?", 1)
    click.echo(text)


def main() -> None:
    cli()


if __name__ == "__main__":  # python -m scrapefleet.consumer
    main()
