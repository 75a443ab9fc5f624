"""`scrapefleet rate-limits`: which sites the fleet is holding back, and how hard.

    scrapefleet rate-limits            keys with a limit, a slow-down or a pause
    scrapefleet rate-limits --all      every key with work (in flight, pending, started lately)
    scrapefleet rate-limits --json     the same rows as JSON, one object each

The rows are the ``rate_limits`` view's (docs/how-to/rate-limits.md): paused keys first, then
the most slowed, then the most pending. Reading only: the limits are settings, the back-off is the
producer's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import click

from scrapefleet.common.ops.cli_context import echo
from scrapefleet.common.ops.one_line_errors import one_line_errors

MAX_ROWS = 10_000


def _limit(value: int | None) -> str:
    return "-" if value is None else str(value)


def held_by(row: dict[str, Any], now: datetime) -> str:
    """What holds the key back now, in words: an operator's pause (who, why), a site's pause
    and its time left, a slow-down factor, or its limits being full."""
    if row.get("operator_paused"):
        said = ": ".join(str(x) for x in (row.get("paused_by"), row.get("pause_reason")) if x)
        return "paused by an operator" + (f" ({said})" if said else "")
    paused = row["paused_until"]  # the view shows only a pause that has not ended
    if paused is not None:
        left = max(1, int((paused - now).total_seconds()))
        return f"paused {left} s more (Retry-After)"
    parts = []
    concurrency, per_minute = row["concurrency_limit"], row["per_minute_limit"]
    # The factor scales limits: a key with none is only ever paused, never slowed.
    if row["factor"] < 1 and (concurrency is not None or per_minute is not None):
        parts.append(f"slowed to {row['factor']:.3g}x after push-back")
    if concurrency is not None and row["in_flight"] >= concurrency * row["factor"]:
        parts.append("at its concurrency")
    if per_minute is not None and row["started_last_minute"] >= per_minute * row["factor"]:
        parts.append("at its per-minute limit")
    return ", ".join(parts) or "-"


def rate_key_lines(rows: list[dict[str, Any]], now: datetime) -> Iterator[str]:
    width = max([24, *(len(r["key"]) for r in rows)])
    yield (
        f"{'key':<{width}} {'in flight':>9} {'last min':>8} {'pending':>8}"
        f" {'conc.':>5} {'/min':>5}  held back by"
    )
    for row in rows:
        yield (
            f"{row['key']:<{width}} {row['in_flight']:>9} {row['started_last_minute']:>8}"
            f" {row['pending']:>8} {_limit(row['concurrency_limit']):>5}"
            f" {_limit(row['per_minute_limit']):>5}  {held_by(row, now)}"
        )


def rate_key_json(row: dict[str, Any]) -> dict[str, Any]:
    paused = row["paused_until"]
    return {**row, "paused_until": paused.isoformat() if paused is not None else None}


@click.command("rate-limits")
@click.option("--all", "every_key", is_flag=True, help="every key with work, limited or not")
@click.option("--json", "as_json", is_flag=True, help="JSON lines, one key each")
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_ROWS),
    default=200,
    show_default=True,
    help="at most this many keys",
)
@click.pass_obj
def rate_limits(obj: Any, every_key: bool, as_json: bool, limit: int) -> None:
    """Sites (rate keys) the fleet holds back: limits, slow-downs after push-back, pauses."""
    from scrapefleet.common.clock import utcnow
    from scrapefleet.common.db.engines import wrapped_errors
    from scrapefleet.common.reads import queries

    with one_line_errors(), wrapped_errors(), obj.read_engine().connect() as conn:
        rows = queries.rate_keys(conn, every_key=every_key, limit=limit)
    if as_json:
        for row in rows:
            echo(json.dumps(rate_key_json(row)))
        return
    if not rows:
        which = "has work" if every_key else "is limited, slowed or paused"
        echo(f"no rate key {which}")
        return
    for line in rate_key_lines(rows, utcnow()):
        echo(line)
