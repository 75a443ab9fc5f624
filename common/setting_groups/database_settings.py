"""Settings of the database: where it is, how a consumer hears of its work, and what every
connection is given (keepalives, timeouts, TLS), the producer's lock connection included.

common/db/engines.py adds the connection settings to every connection unless the URL names them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator


class DatabaseSettings(BaseModel):
    database_url: str | None = Field(
        default=None, description="PostgreSQL URL; unset -> the demo starts an embedded server"
    )
    database_pooler: Literal["none", "pgbouncer"] = Field(
        default="none",
        description=(
            "`pgbouncer`: `database_url` is a PgBouncer in transaction pooling "
            "(consumers only; docs/how-to/pgbouncer.md): no prepared statements, no"
            " session settings sent"
        ),
    )
    listen_database_url: str | None = Field(
        default=None,
        description=(
            "a direct PostgreSQL URL for the consumer's one LISTEN connection when "
            "`database_url` is a pooler; unset -> no LISTEN: it polls (as "
            '`consumer_wakeup = "poll"`)'
        ),
    )
    consumer_wakeup: Literal["listen", "poll"] = Field(
        default="listen",
        description=(
            "`listen`: a LISTEN connection wakes the consumer when its host gets "
            "work; `poll`: none, it claims every `consumer_poll_s` and soon after "
            "each of its jobs ends. `poll` past a hundred or two hosts: every "
            "listening connection costs the server CPU at each NOTIFY in the "
            "database (docs/how-to/pgbouncer.md)"
        ),
    )

    db_keepalives_idle_s: int = Field(
        default=10,
        ge=1,
        description="TCP keepalive on every connection, both ends: first probe after this idle",
    )
    db_keepalives_interval_s: int = Field(default=5, ge=1, description="between probes")
    db_keepalives_count: int = Field(
        default=3, ge=1, description="unanswered probes before the connection is dead"
    )
    db_tcp_user_timeout_s: float = Field(
        default=30.0,
        ge=0,
        description="both ends: data (or keepalives) unacknowledged this long -> the connection"
        " is dead; 0 = the OS's",
    )
    db_statement_timeout_s: float = Field(
        default=600.0,
        ge=0,
        description="server-side, every session; 0 = the server's setting; migrations: none",
    )
    db_lock_timeout_s: float = Field(
        default=60.0, ge=0, description="server-side; 0 = the server's setting; migrations: none"
    )
    db_idle_in_transaction_timeout_s: float = Field(
        default=300.0,
        ge=0,
        description=(
            "the server ends a session idle this long in a transaction (and frees its row locks)"
        ),
    )
    db_sslmode: (
        Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] | None
    ) = Field(
        default=None,
        description=(
            "libpq sslmode (`require`, `verify-full`, ...); unset -> libpq's "
            "(PGSSLMODE, else prefer)"
        ),
    )
    leader_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="a transaction on the producer's lock connection not answered in this"
        " long ends that connection: the producer steps down",
    )
    leader_idle_timeout_s: float | None = Field(
        default=None,
        ge=0,
        description=(
            "the server ends a producer's lock session idle this long, freeing a "
            "vanished leader's lock even behind a proxy that keeps TCP alive; unset"
            " -> the larger of 60 s and 4 x producer_interval_s; 0 = never"
        ),
    )

    @field_validator("database_url", "listen_database_url")
    @classmethod
    def _postgres_only(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("postgresql", "postgres://")):
            raise ValueError("must be a postgresql:// URL")
        return value
