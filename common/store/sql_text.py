"""SQL statements as whole, named texts: what a reviewer reads is what PostgreSQL runs.

A statement is written out in full, multi-line, as a module constant beside the function that
runs it, with ``:name`` for its parameters (bound by SQLAlchemy) and ``{job.processing}``,
``{host.active}`` or ``{profile.cooling}`` for a status, a host state or a profile's state:
those are taken from the enums (common.store.statuses, common.browser.profile_names) when the
module loads, quoted, so a renamed status cannot leave a statement behind, and an unknown one
stops the import. ``{in_flight}`` is the list of the statuses a job holds its host and lock key
in, ``{unfinished}`` the list of those a job is not done in. Nothing else is substituted (any
other value is a bound parameter): a statement pasted into psql with its placeholders filled in
by hand is the statement that runs.
"""

from __future__ import annotations

import re

import sqlalchemy as sa

from scrapefleet.common.browser.profile_names import ProfileState
from scrapefleet.common.store.statuses import (
    IN_FLIGHT,
    UNFINISHED,
    HostState,
    JobStatus,
    sql_list,
)

_PLACEHOLDER = re.compile(r"\{([a-z_]+(?:\.[a-z_]+)?)\}")
_VALUES: dict[str, str] = {
    **{f"job.{s.value}": f"'{s.value}'" for s in JobStatus},
    **{f"host.{s.value}": f"'{s.value}'" for s in HostState},
    **{f"profile.{s.value}": f"'{s.value}'" for s in ProfileState},
    "in_flight": sql_list(IN_FLIGHT),
    "unfinished": sql_list(UNFINISHED),
}


def fill(text: str) -> str:
    """``text`` with its status placeholders replaced; KeyError names an unknown one."""

    def value(match: re.Match[str]) -> str:
        try:
            return _VALUES[match.group(1)]
        except KeyError:
            raise KeyError(f"unknown status placeholder {{{match.group(1)}}} in SQL") from None

    return _PLACEHOLDER.sub(value, text)


def statement(text: str) -> sa.TextClause:
    """A named statement, ready to execute (the text as written, its outer blank lines off)."""
    return sa.text(fill(text.strip()))
