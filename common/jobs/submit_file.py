"""Parse a file of jobs (JSON lines or CSV) into validated NewJobs, or fail naming line and field.

JSON lines: one object per line, keys as in ``JobLine``; blank lines are skipped.
CSV: a header row; columns ``kind``, ``priority``, ``max_attempts``, ``not_before``,
``dedupe_key``, ``lock_key``, ``rate_key``, ``callback_url``, ``payload`` (a JSON object), and
``payload.<name>`` columns for flat params (``payload.url``), whose cells are parsed as JSON
when they can be (so 3 is a number and true a boolean) and kept as text otherwise.
Empty cells mean "not given".
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from scrapefleet.common import tracing
from scrapefleet.common.actions.registry import (
    MAX_ATTEMPTS_LIMIT,
    PRIORITY_MAX,
    PRIORITY_MIN,
    get_action,
)
from scrapefleet.common.errors import SubmitError
from scrapefleet.common.jobs.rate_limits import check_rate_key
from scrapefleet.common.store import NewJob


class JobLine(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: str = Field(min_length=1)
    payload: dict[str, Any] = Field(default_factory=dict)
    # None: the action's default (common.actions.registry.register), else 0 / the settings'
    # max_attempts.
    priority: int | None = Field(default=None, ge=PRIORITY_MIN, le=PRIORITY_MAX)
    max_attempts: int | None = Field(default=None, ge=1, le=MAX_ATTEMPTS_LIMIT)
    not_before: datetime | None = None
    dedupe_key: str | None = Field(default=None, min_length=1)
    lock_key: str | None = Field(default=None, min_length=1)
    rate_key: str | None = None
    callback_url: str | None = Field(default=None, max_length=2000)
    # Its trace (common.tracing): any value is taken, a malformed one ignored with a warning.
    traceparent: Any = None

    @field_validator("callback_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        # The producer POSTs here; anything but http(s) (file:, ftp:, a typo) is refused now,
        # not discovered at delivery time.
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        return value

    @field_validator("rate_key")
    @classmethod
    def _rate_key(cls, value: str | None) -> str | None:
        return None if value is None else check_rate_key(value)

    @field_validator("not_before")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("needs a timezone, e.g. 2026-11-22T08:00:00+00:00")
        if value is not None and not 2000 < value.year < 3000:
            # The database keeps a job's times within these years (jobs_not_before_sane).
            raise ValueError("must be between the years 2000 and 3000")
        return value


def validate_job(fields: dict[str, Any]) -> NewJob:
    """One job's fields -> NewJob; SubmitError names the field (payload fields as payload.x)."""
    _refuse_nul(fields, "")
    try:
        line = JobLine.model_validate(fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "line"
        if err["type"] == "extra_forbidden":
            raise SubmitError(f"field {where!r}: unknown field") from None
        raise SubmitError(f"field {where!r}: {err['msg']}") from None
    action = get_action(line.kind)  # UnknownAction names the kind
    action.validate(line.payload)
    proxy_pool = action.proxy_pool_of(line.payload)
    proxy_session = action.proxy_session_of(line.payload)
    fields = line.model_dump()
    # The job's own fields win; then the action's defaults (register(...)).
    fields["priority"] = _first(line.priority, action.priority, 0)
    fields["max_attempts"] = _first(line.max_attempts, action.max_attempts)
    fields["rate_key"] = _first(line.rate_key, action.rate_key)
    fields["traceparent"] = tracing.submit_traceparent(line.traceparent)
    return NewJob(
        **fields,
        needs_browser=action.needs_browser,
        proxy_pool=proxy_pool,
        proxy_session=proxy_session,
    )


def _refuse_nul(value: Any, where: str) -> None:
    """PostgreSQL stores no NUL character in text or jsonb: refused here, naming the field,
    rather than as a driver's traceback at insert time."""
    if isinstance(value, str):
        if "\x00" in value:
            raise SubmitError(
                f"field {where or 'line'!r}: contains a NUL character (\\u0000),"
                " which the database cannot store"
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            name = f"{where}.{key}" if where else str(key)
            if isinstance(key, str) and "\x00" in key:
                shown = name.replace("\x00", "\\u0000")
                raise SubmitError(
                    f"field {shown!r}: its name contains a NUL character (\\u0000),"
                    " which the database cannot store"
                )
            _refuse_nul(item, name)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _refuse_nul(item, f"{where}[{index}]")


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def jobs_in_file(path: Path) -> list[NewJob]:
    """The jobs of a job file as `try` and `schedules add` read it: one JSON object however it
    is laid out, JSON lines, or CSV (by its name); SubmitError names the file and line."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SubmitError(f"{path}: {exc.strerror or exc}") from None
    try:
        whole = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        whole = None
    if isinstance(whole, dict):
        return [validate_job(whole)]
    try:
        return read_jobs(raw.splitlines(keepends=True), detect_format(path.name, None), str(path))
    except SubmitError as exc:
        raise SubmitError(f"{path}: {exc}") from None


def read_jobs(raw: Iterable[bytes], fmt: str, name: str = "the file") -> list[NewJob]:
    """Every job of a file read as bytes (UTF-8; a byte-order mark is allowed). A file that is
    not UTF-8, or holds no job at all, raises SubmitError: submitting nothing is never what was
    meant, and a traceback is no answer."""
    seen = _Seen()
    jobs = list(parse_jobs(decoded_lines(raw, seen), fmt))
    if not jobs:
        if not seen.bytes:
            raise SubmitError(f"{name} is empty: no jobs to submit")
        what = "only a header" if fmt == "csv" else "only blank lines"
        raise SubmitError(f"no jobs in {name} ({what})")
    return jobs


class _Seen:
    bytes = 0


def decoded_lines(raw: Iterable[bytes], seen: _Seen | None = None) -> Iterator[str]:
    """The lines of ``raw`` as text, or SubmitError naming the first line that is not UTF-8."""
    for number, line in enumerate(raw, start=1):
        if seen is not None:
            seen.bytes += len(line)
        try:
            # utf-8-sig on the first line: spreadsheets often save a byte-order mark there.
            yield line.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            raise SubmitError(
                f"line {number}: not UTF-8 text (byte 0x{line[exc.start]:02x} at column"
                f" {exc.start + 1}): save the file as UTF-8"
            ) from None


def parse_jobs(stream: Iterable[str], fmt: str) -> Iterator[NewJob]:
    """Yield jobs; the first bad line raises SubmitError('line N: ...')."""
    rows = _json_lines(stream) if fmt == "jsonl" else _csv_rows(stream)
    for number, fields in rows:
        try:
            yield validate_job(fields)
        except SubmitError as exc:
            raise SubmitError(f"line {number}: {exc}") from None
        except RecursionError:
            raise SubmitError(f"line {number}: {TOO_DEEP}") from None


TOO_DEEP = "nested too deeply"


def _loads(text: str) -> Any:
    """json.loads, with a document nested past Python's recursion limit as a JSONDecodeError
    (one line naming the line, not a traceback)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError(TOO_DEEP, text, 0) from None


def _json_lines(stream: Iterable[str]) -> Iterable[tuple[int, dict[str, Any]]]:
    for number, text in enumerate(stream, start=1):
        if not text.strip():
            continue
        try:
            fields = _loads(text)
        except json.JSONDecodeError as exc:
            raise SubmitError(f"line {number}: not JSON: {exc.msg} at column {exc.colno}") from None
        if not isinstance(fields, dict):
            raise SubmitError(f"line {number}: not a JSON object")
        yield number, fields


def _csv_rows(stream: Iterable[str]) -> Iterable[tuple[int, dict[str, Any]]]:
    reader = csv.DictReader(stream)
    if not reader.fieldnames:
        return  # an empty file: read_jobs says so
    if "kind" not in reader.fieldnames:
        raise SubmitError("line 1: CSV header must have a 'kind' column")
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:  # a cell over csv.field_size_limit(), say
            # line_num counts the lines read whole: the record that failed starts after them.
            raise SubmitError(f"line {reader.line_num + 1}: not CSV: {exc}") from None
        number = reader.line_num
        if None in row:
            raise SubmitError(f"line {number}: more cells than header columns")
        fields: dict[str, Any] = {}
        payload: dict[str, Any] = {}
        for column, cell in row.items():
            if cell is None or cell == "":
                continue
            if column.startswith("payload."):
                payload[column.removeprefix("payload.")] = _cell_value(cell)
            elif column == "payload":
                try:
                    fields["payload"] = _loads(cell)
                except json.JSONDecodeError as exc:
                    raise SubmitError(
                        f"line {number}: field 'payload': not JSON: {exc.msg}"
                    ) from None
            else:
                fields[column] = cell
        if payload:
            fields["payload"] = {**fields.get("payload", {}), **payload}
        yield number, fields


def _cell_value(cell: str) -> Any:
    try:
        return json.loads(cell)
    except (json.JSONDecodeError, RecursionError):
        return cell


def detect_format(filename: str | None, explicit: str | None) -> str:
    if explicit:
        return explicit
    if filename and filename.lower().endswith(".csv"):
        return "csv"
    return "jsonl"
