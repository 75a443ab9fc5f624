"""Job rows out, for people and for other programs: JSON lines, CSV, a table for a terminal.

The CLI's ``jobs list`` and ``results export`` (common.ops.cli) are thin wrappers around these;
the rows come from common.results, streamed.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import IO, Any

from scrapefleet.common.errors import SubmitError

FORMATS = ("jsonl", "csv")
_RELATIVE = re.compile(r"(\d+)\s*([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
TABLE_ERROR_CHARS = 60


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """ "2h", "30m", "7d" ago, or an ISO 8601 time (UTC when it names no zone)."""
    value = text.strip()
    relative = _RELATIVE.fullmatch(value)
    if relative:
        seconds = int(relative[1]) * _UNIT_S[relative[2]]
        return (now or datetime.now(UTC)) - timedelta(seconds=seconds)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise SubmitError(
            f"--since {text!r}: not a time: give e.g. 2h, 30m, 7d or 2026-11-23T07:00"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def jsonl_lines(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    for row in rows:
        yield json.dumps({k: _plain(v) for k, v in row.items()}, default=str) + "\n"


def write_jsonl(rows: Iterable[dict[str, Any]], out: IO[str], tick: Callable[[], None]) -> int:
    written = 0
    for line in jsonl_lines(rows):
        out.write(line)
        written += 1
        tick()
    return written


def write_csv(rows: Iterable[dict[str, Any]], out: IO[str], tick: Callable[[], None]) -> int:
    """One row per job; payload and result as JSON text in their cells."""
    from scrapefleet.common.results import COLUMNS  # here: the CLI imports this module at start

    writer = csv.writer(out)
    writer.writerow(COLUMNS)
    written = 0
    for row in rows:
        writer.writerow(
            [
                json.dumps(row[c], default=str)
                if c in ("payload", "result") and row[c] is not None
                else _plain(row[c])
                if row[c] is not None
                else ""
                for c in COLUMNS
            ]
        )
        written += 1
        tick()
    return written


def _first_line(text: str | None) -> str:
    if not text:
        return ""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else ""  # a traceback's last line says what went wrong
    return last if len(last) <= TABLE_ERROR_CHARS else last[: TABLE_ERROR_CHARS - 1] + "…"


def table_lines(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """A fixed-width table for a terminal: newest first, the error's last line cut short."""
    yield f"{'id':>9}  {'status':<10} {'kind':<16} {'host':<14} {'att':>3}  {'when':<19}  error"
    for row in rows:
        when = row["finished_at"] or row["started_at"] or row["created_at"]
        yield (
            f"{row['id']:>9}  {row['status']:<10} {row['kind'][:16]:<16}"
            f" {(row['host'] or '-')[:14]:<14} {row['attempts']:>3}"
            f"  {when:%Y-%m-%d %H:%M:%S}  {_first_line(row['last_error'])}"
        )
