"""Validation of what a visitor types: job ids and search fields. Pure; errors are messages."""

from __future__ import annotations

from collections.abc import Mapping

from scrapefleet.common.actions.error_classes import ERROR_CLASSES
from scrapefleet.common.db.schema_base import JOB_STATUSES
from scrapefleet.common.errors import SubmitError
from scrapefleet.common.ops.dashboard.job_sorts import DEFAULT_SORT, SORTS, BadCursor, parse_cursor
from scrapefleet.common.ops.dashboard.page_reads import JobSearch
from scrapefleet.common.ops.results_out import parse_since

MAX_BIGINT = 2**63 - 1
MAX_TEXT = 200  # longest kind or host name searched for


class BadInput(ValueError):
    """Shown to the visitor as it is, with status 400."""


def parse_job_id(text: str | None) -> int:
    value = (text or "").strip().lstrip("#")
    if not value.isdigit() or not value.isascii():
        raise BadInput(f"job id must be a whole number, not {text!r}")
    number = int(value)
    if not 1 <= number <= MAX_BIGINT:
        raise BadInput(f"job id {value} is out of range")
    return number


def _text_field(name: str, value: str | None) -> str | None:
    value = (value or "").strip()
    if not value:
        return None
    if len(value) > MAX_TEXT:
        raise BadInput(f"{name} is longer than {MAX_TEXT} characters")
    if not value.isprintable():
        raise BadInput(f"{name} contains control characters")
    return value


def parse_search(args: Mapping[str, str]) -> JobSearch:
    """The search form's fields: id, kind, status, host, error_class, crawl, was_on (a host the
    job ran on at any attempt) with rescued (only those rescued from it), since (2h, 7d or a
    time), the order (``sort``, a name in job_sorts.SORTS) and the page (``after``: the cursor
    of the last row of the page before); all optional."""
    raw_id = (args.get("id") or "").strip()
    raw_crawl = (args.get("crawl") or "").strip()
    status = _text_field("status", args.get("status"))
    if status is not None and status not in JOB_STATUSES:
        raise BadInput(f"status must be one of {', '.join(JOB_STATUSES)}, not {status!r}")
    error_class = _text_field("error_class", args.get("error_class"))
    if error_class is not None and error_class not in ERROR_CLASSES:
        raise BadInput(
            f"error class must be one of {', '.join(ERROR_CLASSES)}, not {error_class!r}"
        )
    raw_since = _text_field("since", args.get("since"))
    sort_name = (args.get("sort") or "").strip() or DEFAULT_SORT
    if sort_name not in SORTS:
        raise BadInput(f"sort must be one of {', '.join(SORTS)}, not {sort_name[:MAX_TEXT]!r}")
    was_on = _text_field("was_on", args.get("was_on"))
    rescued = (args.get("rescued") or "").strip() in ("1", "on", "true")
    if rescued and was_on is None:
        raise BadInput("rescued needs the host they were rescued from in was_on")
    raw_after = (args.get("after") or "").strip()[: MAX_TEXT + 1]
    try:
        since = parse_since(raw_since) if raw_since else None
        after = parse_cursor(SORTS[sort_name], raw_after) if raw_after else {}
    except SubmitError as exc:
        raise BadInput(str(exc).replace("--since", "since")) from None
    except BadCursor as exc:
        raise BadInput(str(exc)) from None
    return JobSearch(
        job_id=parse_job_id(raw_id) if raw_id else None,
        kind=_text_field("kind", args.get("kind")),
        status=status,
        host=_text_field("host", args.get("host")),
        error_class=error_class,
        crawl=parse_job_id(raw_crawl) if raw_crawl else None,
        was_on=was_on,
        rescued=rescued,
        since=since,
        sort=sort_name,
        after=after,
    )


def parse_job_ids(values: list[str]) -> list[int]:
    """The hidden ``ids`` fields of a bulk control."""
    if not values:
        raise BadInput("no jobs selected")
    return [parse_job_id(v) for v in values]


def parse_after_id(text: str | None) -> int | None:
    """An id-keyed list's page (``after``: the last id of the page before); None: the first."""
    return None if not (text or "").strip() else parse_job_id(text)


def parse_after_name(text: str | None) -> str | None:
    """A name-keyed list's page (``after``: the last name of the page before)."""
    return _text_field("after", text)
