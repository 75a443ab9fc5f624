"""The live controls as `scrapefleet controls` lists them, and their audited changes. Reads
only (common.store.operating.controls changes them)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from scrapefleet.common.store.sql_text import statement

LIST_SQL = statement(
    """
SELECT scope, name, paused, concurrency, per_minute, changed_by, changed_at, reason
FROM live_controls ORDER BY scope, name
"""
)
HISTORY_SQL = statement(
    """
SELECT at, changed_by, scope, name, change, before, after, reason FROM control_changes
ORDER BY id DESC LIMIT :limit
"""
)


def control_rows(conn: Connection) -> list[dict[str, Any]]:
    """Every live control, by scope and name."""
    return [dict(r._mapping) for r in conn.execute(LIST_SQL)]


def control_changes(conn: Connection, limit: int) -> list[sa.Row[Any]]:
    """The last ``limit`` changes, newest first."""
    return list(conn.execute(HISTORY_SQL, {"limit": limit}).all())
