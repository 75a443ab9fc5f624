"""Job rows out, for people and for other programs: JSON lines, a JSON array, CSV (payload and
result as JSON cells, or the result flattened into a column per key), a table for a terminal.

A CSV cell that a spreadsheet would run as a formula (text starting with ``=``, ``+``, ``-``,
``@``, a tab or a carriage return) is written with a leading ``'``: a page's title is data,
never a formula (OWASP's advice for CSV injection).

The CLI's ``jobs list`` and ``results export`` (common.ops.cli) are thin wrappers around these;
the rows come from common.reads.results, streamed.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import PurePath
from typing import IO, Any

from scrapefleet.common.error_lines import last_line
from scrapefleet.common.errors import SubmitError

FORMATS = ("jsonl", "json", "csv")
# A file's extension -> its format; any other name (and stdout) gets JSON lines.
FORMAT_OF_SUFFIX = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv"}
MAX_FLAT_COLUMNS = 200  # result.* columns of a flattened CSV, the first keys met
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
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


def export_format(output: str | None, fmt: str | None) -> str:
    """``fmt`` if given, else the one the file's extension names, else JSON lines."""
    if fmt is not None:
        return fmt
    suffix = "" if output is None else PurePath(output).suffix.lower()
    return FORMAT_OF_SUFFIX.get(suffix, "jsonl")


def write_json(rows: Iterable[dict[str, Any]], out: IO[str], tick: Callable[[], None]) -> int:
    """One JSON array, a row per line, streamed."""
    written = 0
    out.write("[")
    for line in jsonl_lines(rows):
        out.write(("\n" if written == 0 else ",\n") + line.rstrip("\n"))
        written += 1
        tick()
    out.write("\n]\n" if written else "]\n")
    return written


def flat_result(result: Any, prefix: str = "result") -> dict[str, Any]:
    """A result's keys as ``result.a.b`` columns: objects flattened, lists as JSON text."""
    if not isinstance(result, dict):
        return {} if result is None else {prefix: result}
    flat: dict[str, Any] = {}
    for key, value in result.items():
        flat |= (
            flat_result(value, f"{prefix}.{key}")
            if isinstance(value, dict)
            else {f"{prefix}.{key}": value}
        )
    return flat


def flat_columns(rows: Iterable[dict[str, Any]]) -> list[str]:
    """The ``result.*`` columns the rows' results have, in the order first met (at most
    MAX_FLAT_COLUMNS)."""
    columns: dict[str, None] = {}
    for row in rows:
        for key in flat_result(row.get("result")):
            if len(columns) < MAX_FLAT_COLUMNS:
                columns.setdefault(key)
    return list(columns)


def csv_cell(value: Any) -> Any:
    """A value as a CSV cell: "" for None, JSON text for lists and objects, a time in ISO
    8601; text a spreadsheet would run as a formula gets a leading ``'``."""
    if value is None:
        return ""
    if isinstance(value, dict | list):
        value = json.dumps(value, default=str)
    value = _plain(value)
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


def write_csv(
    rows: Iterable[dict[str, Any]],
    out: IO[str],
    tick: Callable[[], None],
    result_columns: list[str] | None = None,
) -> int:
    """One row per job; payload and result as JSON text in their cells, or, with
    ``result_columns``, the result's keys one column each (flat_result) instead of ``result``."""
    from scrapefleet.common.reads.results import (
        COLUMNS,  # here: the CLI imports this module at start
    )

    columns = list(COLUMNS)
    if result_columns is not None:
        columns = [c for c in COLUMNS if c != "result"] + result_columns
    writer = csv.writer(out)
    writer.writerow(columns)
    written = 0
    for row in rows:
        cells = row | flat_result(row.get("result")) if result_columns is not None else row
        writer.writerow([csv_cell(_json_cell(c, cells.get(c))) for c in columns])
        written += 1
        tick()
    return written


def _json_cell(column: str, value: Any) -> Any:
    """payload and result are JSON in their cells, whatever JSON value they hold."""
    if column in ("payload", "result") and value is not None:
        return json.dumps(value, default=str)
    return value


def _error_line(text: str | None) -> str:
    last = last_line(text)  # a traceback's last line says what went wrong
    return last if len(last) <= TABLE_ERROR_CHARS else last[: TABLE_ERROR_CHARS - 1] + "…"


def table_lines(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """A fixed-width table for a terminal: newest first, the error's last line cut short."""
    yield f"{'id':>9}  {'status':<10} {'kind':<16} {'host':<14} {'att':>3}  {'when':<19}  error"
    for row in rows:
        when = row["finished_at"] or row["started_at"] or row["created_at"]
        yield (
            f"{row['id']:>9}  {row['status']:<10} {row['kind'][:16]:<16}"
            f" {(row['host'] or '-')[:14]:<14} {row['attempts']:>3}"
            f"  {when:%Y-%m-%d %H:%M:%S}  {_error_line(row['last_error'])}"
        )
