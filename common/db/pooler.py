"""Connections through PgBouncer in transaction pooling (``database_pooler = "pgbouncer"``).

Such a pooler lends a server connection for one transaction at a time, so nothing may outlive
a transaction: no prepared statements (psycopg 3 prepares a statement it has run five times,
and the next transaction may land on a server connection that never saw it), no session
settings sent at start-up (PgBouncer refuses the ``options`` parameter, or drops it when told
to ignore it), no session-level advisory lock, no LISTEN (a NOTIFY would reach whichever
client next borrows that server connection, or none). Transaction-scoped state is fine:
``set_config(..., true)``, ``CREATE TEMP TABLE ... ON COMMIT DROP`` and ``pg_notify`` in a
transaction all end with it.

What each side does about it: a consumer's work (claim, heartbeat, outcomes) goes through the
pooler with the engine below; its one LISTEN connection goes straight to PostgreSQL when
``listen_database_url`` names the server, else it relies on its claim poll. The producer holds
the leader lock and LISTENs on its own connections, so it refuses a pooler: give it the
direct URL.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import URL

from scrapefleet.common.errors import SettingsError
from scrapefleet.common.settings import Settings

PGBOUNCER = "pgbouncer"
# psycopg 3: never prepare a statement server-side.
POOLED_CONNECT_ARGS: dict[str, Any] = {"prepare_threshold": None}


def uses_pooler(settings: Settings) -> bool:
    return settings.database_pooler == PGBOUNCER


def pooled_connect_args(settings: Settings) -> dict[str, Any]:
    """Extra psycopg connect arguments for an engine on ``database_url``."""
    return dict(POOLED_CONNECT_ARGS) if uses_pooler(settings) else {}


def listen_url(settings: Settings, engine_url: URL) -> str | URL | None:
    """Where a consumer LISTENs: nowhere (None) when it polls (``consumer_wakeup``), else
    ``listen_database_url`` if set, else the engine's own server, or nowhere when that is a
    transaction pooler."""
    if settings.consumer_wakeup == "poll":
        return None
    if settings.listen_database_url:
        return settings.listen_database_url
    if uses_pooler(settings):
        return None
    return engine_url


def check_listen_url(settings: Settings) -> None:
    """A LISTEN through the pooler itself would wait, silently, for NOTIFYs that never come;
    a LISTEN address for a consumer that polls would never be used."""
    if settings.consumer_wakeup == "poll" and settings.listen_database_url:
        raise SettingsError(
            "invalid setting listen_database_url: consumer_wakeup is poll, which opens no"
            " LISTEN connection; unset one of them"
        )
    listen = settings.listen_database_url
    if uses_pooler(settings) and listen is not None and listen == settings.database_url:
        raise SettingsError(
            "invalid setting listen_database_url: it is database_url, the pooler; give"
            " PostgreSQL's own address, or leave it unset to poll"
        )


def require_direct(settings: Settings, program: str) -> None:
    """For a daemon that needs a session of its own (the producer's leader lock and LISTENs)."""
    if uses_pooler(settings):
        raise SettingsError(
            f"invalid setting database_pooler: {program} needs a direct connection (a"
            " session-level advisory lock, LISTEN); give it PostgreSQL's own database_url and"
            " database_pooler = none"
        )
