"""How far along the fleet is, read from the views of migration 0009, and said in one line.

    progress: 1,234 left (pending 1,000, queued 100, running 134; 12 waiting for a retry);
    45.2/min over 5 min, 52.0/min over 1 h; ETA 27m; oldest pending waits 3m12s

Reads only; the rendering is a pure function of the view's row.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection


def read_progress(conn: Connection) -> dict[str, Any]:
    return dict(conn.execute(sa.text("SELECT * FROM progress")).one()._mapping)


def read_rows(conn: Connection, view: str, limit: int = 20) -> list[dict[str, Any]]:
    """The first ``limit`` rows of one of the outcome views."""
    if view not in ("host_outcomes", "kind_outcomes", "failure_groups"):
        raise ValueError(f"not an outcome view: {view}")
    rows = conn.execute(sa.text(f"SELECT * FROM {view} LIMIT :n"), {"n": limit})
    return [dict(r._mapping) for r in rows]


def short_duration(value: timedelta | None) -> str:
    """3m12s, 27m, 2h05m, 3d04h: what a person reads at a glance."""
    if value is None:
        return "unknown"
    seconds = max(int(value.total_seconds()), 0)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s" if minutes < 10 else f"{minutes}m"
    return f"{secs}s"


def render_progress(row: dict[str, Any]) -> str:
    remaining = int(row["remaining"])
    rates = (
        f"{row['completed_per_min_5m']}/min over 5 min, {row['completed_per_min_60m']}/min over 1 h"
    )
    if remaining == 0:
        return f"progress: nothing left; {rates}"
    parts = f"pending {row['pending']:,}, queued {row['queued']:,}, running {row['processing']:,}"
    if row["waiting_retry"]:
        parts += f"; {row['waiting_retry']:,} waiting for a retry"
    eta = (
        f"ETA {short_duration(row['eta'])}"
        if row["eta"] is not None
        else "ETA unknown: nothing completed in the last hour"
    )
    oldest = (
        f"; oldest pending waits {short_duration(row['oldest_pending_age'])}"
        if row["oldest_pending_age"] is not None
        else ""
    )
    return f"progress: {remaining:,} left ({parts}); {rates}; {eta}{oldest}"


def progress_json(row: dict[str, Any]) -> dict[str, Any]:
    """The row with its intervals in seconds, for `status --json` and scripts."""
    document = dict(row)
    for key in ("eta", "oldest_pending_age"):
        value = document.pop(key)
        document[f"{key}_s"] = None if value is None else round(value.total_seconds(), 1)
    for key in ("completed_per_min_5m", "completed_per_min_60m"):
        document[key] = float(document[key])
    return document
