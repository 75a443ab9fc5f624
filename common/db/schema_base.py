"""What every table module of the declared schema builds on: the one MetaData, the timestamp type,
the CHECK helpers, and the statuses as the plain strings the CHECKs and readers use.

The tables are declared by domain (job_tables, host_tables, crawl_tables, schedule_tables,
control_tables) so that each reads on its own; they share these few pieces, and common.db.tables
imports them all so that ``metadata`` holds the whole schema.
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa

from scrapefleet.common.store import statuses

# The statuses as plain strings, from the store's enums (their one spelling).
JOB_STATUSES = tuple(s.value for s in statuses.JobStatus)
UNFINISHED = tuple(s.value for s in statuses.UNFINISHED)
IN_FLIGHT = tuple(s.value for s in statuses.IN_FLIGHT)
HOST_STATES = tuple(s.value for s in statuses.HostState)

metadata = sa.MetaData()
TS = sa.DateTime(timezone=True)


def sane_time(table: str, column: str) -> sa.CheckConstraint:
    """Migration 0017: a time a host or job writes is finite and one a datetime holds (a host's
    'infinity' made every tool reading it crash)."""
    return sa.CheckConstraint(
        f"{column} IS NULL"
        f" OR ({column} > '2000-01-01 00:00+00' AND {column} < '3000-01-01 00:00+00')",
        name=f"{table}_{column}_sane",
    )


def column_in(column: str, values: Iterable[str]) -> sa.TextClause:
    return sa.text(f"{column} IN {statuses.sql_list(values)}")
