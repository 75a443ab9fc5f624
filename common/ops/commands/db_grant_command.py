"""The click command `scrapefleet db grant` (the work is in common.ops.db_grant).

Run it as a superuser (postgres) against the fleet's database, after `db upgrade`:

    scrapefleet db grant --url postgresql://postgres@/scrapefleet
    scrapefleet db grant --url ... --consumer host1 --password-env HOST1_DB_PASSWORD
    scrapefleet db grant --url ... --drop-consumer host1

A consumer's password comes from a file (--password-file), an environment variable
(--password-env) or, at a terminal, a prompt; without any of them an existing role keeps its
password and a new one gets none (it cannot log in until it is given one).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from scrapefleet.common.constants import CONSUMER_CONNECTION_LIMIT
from scrapefleet.common.error_lines import first_line
from scrapefleet.common.errors import DatabaseUnavailable, ScrapefleetError, SettingsError


def read_password(file: Path | None, env: str | None, prompt_for: str | None) -> str | None:
    """The password from the first source given; None when none is (and no terminal)."""
    if file is not None and env is not None:
        raise SettingsError("--password-file and --password-env: give one of them")
    if file is not None:
        try:
            password = file.read_text().rstrip("\r\n")
        except OSError as exc:
            raise SettingsError(f"--password-file {file}: {exc.strerror}") from None
    elif env is not None:
        password = os.environ.get(env, "")
        if not password:
            raise SettingsError(f"--password-env {env}: the variable is not set or empty")
    elif prompt_for is not None and sys.stdin.isatty():
        password = click.prompt(
            f"password for {prompt_for}", hide_input=True, confirmation_prompt=True
        )
    else:
        return None
    if not password:
        raise SettingsError("the password is empty")
    return password


@click.command("grant")
@click.option("--url", help="an admin's database URL (a superuser); default: database_url")
@click.option("--prefix", default="scrapefleet", show_default=True, help="of the roles' names")
@click.option("--owner", help="owner role's name; default: PREFIX_owner")
@click.option("--producer", help="producer role's name (an existing login may be it)")
@click.option("--reporting", help="read-only role's name; default: PREFIX_reporting")
@click.option("--consumer", "consumer", metavar="HOST", help="create/update HOST's login role")
@click.option("--drop-consumer", "drop", metavar="HOST", multiple=True, help="remove HOST's role")
@click.option("--password-file", type=click.Path(path_type=Path), help="the consumer's password")
@click.option("--password-env", metavar="VAR", help="environment variable holding it")
@click.option(
    "--connection-limit",
    type=click.IntRange(1, 10_000),
    default=CONSUMER_CONNECTION_LIMIT,
    show_default=True,
    help="sessions a consumer's role may hold at once",
)
@click.option("--quiet", is_flag=True, help="print only the summary")
@click.pass_obj
def db_grant(
    obj: Any,
    url: str | None,
    prefix: str,
    owner: str | None,
    producer: str | None,
    reporting: str | None,
    consumer: str | None,
    drop: tuple[str, ...],
    password_file: Path | None,
    password_env: str | None,
    connection_limit: int,
    quiet: bool,
) -> None:
    """Create or update the database roles by duty and their grants (idempotent)."""
    # Here, not at the top: the admin CLI loads this module to list its commands.
    from scrapefleet.common.db.engines import make_engine
    from scrapefleet.common.ops.db_grant import GrantRequest, apply, role_names

    try:
        names = role_names(prefix, owner=owner, producer=producer, reporting=reporting)
        consumers: dict[str, str | None] = {}
        if consumer is not None:
            who = names.consumer(consumer)
            consumers[consumer] = read_password(password_file, password_env, who)
        elif password_file is not None or password_env is not None:
            raise SettingsError("--password-file/--password-env: only with --consumer")
        if consumer is not None and consumer in drop:
            raise SettingsError(f"--consumer and --drop-consumer both name {consumer!r}")
        engine = make_engine(url or obj.database_url(), pool_size=1)
        try:
            request = GrantRequest(names, consumers, tuple(drop), connection_limit)
            result = apply(engine, request)
        finally:
            engine.dispose()
    except ScrapefleetError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1 if isinstance(exc, DatabaseUnavailable) else 2)
    except Exception as exc:  # a refused statement (not a superuser, a role in use elsewhere)
        click.echo(f"error: db grant changed nothing: {first_line(exc)}", err=True)
        sys.exit(1)
    if not quiet:
        for statement in result.statements:
            click.echo(f"{statement};")
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    summary = "changed" if result.changed else "unchanged"
    summary += f": owner {names.owner}, producer {names.producer}, reporting {names.reporting}"
    if consumer is not None:
        summary += f", consumer {names.consumer(consumer)}"
    if drop:
        summary += f"; dropped {', '.join(names.consumer(h, existing=True) for h in drop)}"
    click.echo(summary)
