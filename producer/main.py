"""``scrapefleet-producer``: the producer daemon's command line.

Exit codes: 0 stopped by SIGTERM/SIGINT or idle (--until-idle); 1 database unreachable at
start; 2 invalid settings. Once running, a lost database is retried, never an exit.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from common.db import check_reachable, make_engine
from common.errors import DatabaseUnavailable, SettingsError
from common.settings import load_settings
from producer.daemon import Producer

PROG = "scrapefleet-producer"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


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
def main(config: Path | None, until_idle: bool, log_level: str | None) -> None:
    """Assign pending jobs to consumer hosts, one cycle every producer_interval_s and at once
    when a consumer finishes a job. Only one producer assigns at a time; others stand by."""
    overrides = {"log_level": log_level.upper()} if log_level else {}
    try:
        settings = load_settings(config, **overrides)
        if settings.database_url is None:
            raise SettingsError("invalid setting database_url (SCRAPEFLEET_DATABASE_URL): not set")
        engine = make_engine(settings.database_url, application_name=PROG)
    except SettingsError as exc:
        click.echo(f"{PROG}: {exc}", err=True)
        sys.exit(2)
    logging.basicConfig(level=settings.log_level, format=LOG_FORMAT, stream=sys.stderr)
    try:
        check_reachable(engine)
    except DatabaseUnavailable as exc:
        click.echo(f"{PROG}: {exc}", err=True)
        sys.exit(1)
    sys.exit(Producer(settings, engine).run(until_idle=until_idle))
