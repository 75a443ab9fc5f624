"""How far along the fleet is, read from the views of migrations 0009, 0022 and 0036, and said
in one line.

    progress: 1,234 left (pending 1,000, queued 100, running 134; 12 waiting for a retry);
    45.2/min over 5 min, 52.0/min over 1 h; ETA 27m; oldest pending waits 3m12s

An ETA is given only while jobs complete and all that is left can run (migration 0036): with
work left and the producer down, or nothing completed in the last 5 minutes, the line says
"stalled" and why, never a number that grows at every look; with jobs an operator paused, or of
a kind no active host runs, assignment paused or no host active, it says "no ETA" and why. The
ETA is never less than a rate-limited key's pending jobs at its per-minute limit. Reads only;
the rendering is a pure function of the view's row and of whether the producer is up.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy.engine import Connection

from scrapefleet.common.store.sql_text import statement

PROGRESS_SQL = statement("SELECT * FROM progress")
# The view's oldest_pending_age alone, for the producer's metrics: the whole view also weighs
# what holds work back (migration 0036), which a gauge refreshed every few seconds never needs.
OLDEST_PENDING_AGE_SQL = statement(
    """
SELECT now() - min(created_at) FROM jobs
WHERE status = {job.pending} AND (not_before IS NULL OR not_before <= now())
"""
)
# The first rows of each outcome view, by the view's name.
OUTCOME_VIEW_SQL = {
    "host_outcomes": statement("SELECT * FROM host_outcomes LIMIT :n"),
    "kind_outcomes": statement("SELECT * FROM kind_outcomes LIMIT :n"),
    "failure_groups": statement("SELECT * FROM failure_groups LIMIT :n"),
}


def read_progress(conn: Connection) -> dict[str, Any]:
    return dict(conn.execute(PROGRESS_SQL).one()._mapping)


def oldest_pending_age(conn: Connection) -> timedelta | None:
    """How long the oldest pending job due now has waited (None: none is)."""
    value = conn.execute(OLDEST_PENDING_AGE_SQL).scalar_one()
    return value if isinstance(value, timedelta) else None


def read_rows(conn: Connection, view: str, limit: int = 20) -> list[dict[str, Any]]:
    """The first ``limit`` rows of one of the outcome views."""
    if view not in OUTCOME_VIEW_SQL:
        raise ValueError(f"not an outcome view: {view}")
    rows = conn.execute(OUTCOME_VIEW_SQL[view], {"n": limit})
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


# The view's reasons (migration 0036) that mean nothing moves at all: "stalled"; any other
# reason means the fleet may be working but this work cannot finish: "no ETA".
PRODUCER_DOWN = "the producer is down, nothing is assigned"
NOTHING_COMPLETED = "nothing completed in the last 5 min"


def stalled_reason(row: dict[str, Any], producer_up: bool) -> str | None:
    """Why no ETA can be given while work remains, or None when it can (or nothing is left).
    Whether the producer is up is the caller's judgement (common.reads.producer_status); the
    rest is the view's ``no_eta_reason``."""
    if int(row["remaining"]) == 0:
        return None
    if not producer_up:
        return PRODUCER_DOWN
    reason = row.get("no_eta_reason")
    if reason in (None, NOTHING_COMPLETED, PRODUCER_DOWN):
        # The producer as judged above stands over the view's read of it (the same rule, a
        # moment apart); with it up, no ETA means nothing completed lately.
        if row["eta"] is not None:
            return None
        last = row.get("last_completed_at")
        since = f" (last at {last:%H:%M:%S %Z})" if last is not None else ""
        return f"{NOTHING_COMPLETED}{since}"
    return str(reason)


def _no_eta(reason: str) -> str:
    stalled = reason.startswith((PRODUCER_DOWN, NOTHING_COMPLETED))
    return f"{'stalled' if stalled else 'no ETA'}: {reason}"


def render_progress(row: dict[str, Any], producer_up: bool) -> str:
    remaining = int(row["remaining"])
    rates = (
        f"{row['completed_per_min_5m']}/min over 5 min, {row['completed_per_min_60m']}/min over 1 h"
    )
    if remaining == 0:
        return f"progress: nothing left; {rates}"
    parts = f"pending {row['pending']:,}, queued {row['queued']:,}, running {row['processing']:,}"
    if row["waiting_retry"]:
        parts += f"; {row['waiting_retry']:,} waiting for a retry"
    stalled = stalled_reason(row, producer_up)
    eta = _no_eta(stalled) if stalled else f"ETA {short_duration(row['eta'])}"
    oldest = (
        f"; oldest pending waits {short_duration(row['oldest_pending_age'])}"
        if row["oldest_pending_age"] is not None
        else ""
    )
    return f"progress: {remaining:,} left ({parts}); {rates}; {eta}{oldest}"


def progress_json(row: dict[str, Any], producer_up: bool) -> dict[str, Any]:
    """The row with its intervals in seconds and why it is stalled (None: it is not), for
    `status --json` and scripts."""
    document = dict(row)
    document["stalled_reason"] = stalled_reason(row, producer_up)
    for key in ("eta", "oldest_pending_age"):
        value = document.pop(key)
        document[f"{key}_s"] = None if value is None else round(value.total_seconds(), 1)
    for key in ("completed_per_min_5m", "completed_per_min_60m"):
        document[key] = float(document[key])
    return document
