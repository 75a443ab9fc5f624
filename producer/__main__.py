"""``scrapefleet-producer``: the producer daemon's command line.

Exit codes: 0 stopped by SIGTERM/SIGINT (the first drains, a second stops cold) or idle
(--until-idle); 1 database unreachable at start; 2 invalid settings. Once running, a lost
database is retried, never an exit.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import click

from scrapefleet.common import tracing
from scrapefleet.common.db.engines import check_reachable, make_engine
from scrapefleet.common.db.pooler import require_direct
from scrapefleet.common.errors import DatabaseUnavailable, SettingsError
from scrapefleet.common.runtime.lifecycle import StopSignals
from scrapefleet.common.runtime.logging_setup import configure_logging
from scrapefleet.common.settings import load_settings
from scrapefleet.producer.producer_daemon import Producer

PROG = "scrapefleet-producer"


@click.command(name=PROG)
@click.option(
    "--config",
    type=click.Path(dir_okay=False, path_type=Path),
    help="TOML settings file (else SCRAPEFLEET_CONFIG; environment variables override it).",
)
@click.option(
    "--until-idle",
    is_flag=True,
    help="Exit once no job is pending, queued or processing (tests, demo).",
)
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    help="Overrides the log_level setting.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    help="Serve Prometheus metrics on this port (overrides metrics_port; 0 = off).",
)
def main(
    config: Path | None, until_idle: bool, log_level: str | None, metrics_port: int | None
) -> None:
    """Assign pending jobs to consumer hosts, one cycle every producer_interval_s and at once
    when a consumer finishes a job. Only one producer assigns at a time; others stand by."""
    overrides: dict[str, object] = {"log_level": log_level.upper()} if log_level else {}
    if metrics_port is not None:
        overrides["metrics_port"] = metrics_port
    try:
        settings = load_settings(config, **overrides)
        if settings.database_url is None:
            raise SettingsError("invalid setting database_url (SCRAPEFLEET_DATABASE_URL): not set")
        require_direct(settings, PROG)
        engine = make_engine(settings.database_url, application_name=PROG, settings=settings)
    except SettingsError as exc:
        click.echo(f"{PROG}: {exc}", err=True)
        sys.exit(2)
    configure_logging(settings.log_level, settings.log_format)
    tracing.start("scrapefleet-producer", keep_query=settings.trace_full_urls)
    try:
        check_reachable(engine)
    except DatabaseUnavailable as exc:
        click.echo(f"{PROG}: {exc}", err=True)
        sys.exit(1)
    producer = Producer(settings, engine)
    with StopSignals(producer.lifecycle):
        code = producer.run(until_idle=until_idle)
    if producer.lifecycle.cold:
        # The abandoned cycle's thread would hold the interpreter's exit; the lock and its
        # transaction end with the process.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":  # python -m scrapefleet.producer
    main()
