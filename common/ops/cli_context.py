"""The admin CLI's shared context: its settings, client and read engine, opened on first use."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from scrapefleet.common import masking
from scrapefleet.common.errors import SettingsError
from scrapefleet.common.runtime.logging_setup import configure_logging

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from scrapefleet.common.api import Client
    from scrapefleet.common.settings import Settings

# The database layer, pydantic and the settings are imported inside the commands that use them:
# `scrapefleet --help` needs none of them (tests/unit/test_store_statuses.py checks it).


class CliContext:
    """What every command of the admin CLI shares: its settings, loaded on first use, and the
    database client or read engine it opened."""

    def __init__(self, config: Path | None) -> None:
        self.config = config
        self._settings: Settings | None = None
        self._client: Client | None = None
        self._read_engine: Engine | None = None

    @property
    def settings(self) -> Settings:
        from scrapefleet.common.settings import load_settings

        if self._settings is None:
            self._settings = load_settings(self.config)
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
        from scrapefleet.common.db import engines as database

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
        from scrapefleet.common import api

        if self._client is None:
            self._client = api.Client(self.database_url(), self.settings)
        return self._client


pass_ctx = click.make_pass_decorator(CliContext)


def echo(text: object = "", err: bool = False) -> None:
    """``click.echo`` for every line a command prints: what a host or a page wrote (an error,
    an event, an artifact, a title) has its control characters spelled out, never obeyed by
    the operator's terminal. The CLI's own text has none but newlines."""
    click.echo(masking.terminal_text(str(text)), err=err)


def fail(message: str, code: int) -> NoReturn:
    echo(f"error: {message}", err=True)
    sys.exit(code)
