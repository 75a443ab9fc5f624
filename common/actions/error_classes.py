"""What kind of failure an attempt was, and what that means for the next one.

- ``transient``: anything not known to be otherwise (a timeout, a crash, a 500): retried with
  backoff while attempts are left;
- ``permanent``: trying again cannot help (HTTP 404 or 410, an invalid URL, params that do not
  validate): the job fails at once, whatever attempts are left;
- ``rate_limited``: the site asked us to slow down (HTTP 429 or 503): the next attempt waits
  for its ``Retry-After`` when it gave one (capped), else the usual backoff;
- ``blocked``: the site refused this scraper (a block page, a captcha): the job goes back to
  pending without using an attempt, a bounded number of times (``max_blocks_per_job``), and
  the producer is told which host was blocked.

An action says which by raising ``Permanent``, ``RateLimited`` or ``Blocked`` (re-exported by
scrapefleet.common.actions.registry); an exception carrying an HTTP status (``HttpStatusError``) is
classified by its status. ``classify`` follows explicit causes (``raise X from Blocked(...)``),
so wrapping a classified error keeps its class. Everything here is pure: no I/O, ``now`` given.
"""

from __future__ import annotations

import enum
import math
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

from pydantic import ValidationError

from scrapefleet.common.errors import ScrapefleetError, SubmitError

__all__ = [
    "Blocked",
    "ClassifiedError",
    "ErrorClass",
    "HttpStatusError",
    "Permanent",
    "RateLimited",
    "class_of_status",
    "classify",
    "next_try_at",
    "parse_retry_after",
    "reason_of",
    "retry_after_of",
]

PERMANENT_STATUSES = frozenset({404, 410})
RATE_LIMITED_STATUSES = frozenset({429, 503})
MAX_CAUSES = 16  # how far down an exception's causes classify looks


class ErrorClass(enum.StrEnum):
    TRANSIENT = "transient"
    PERMANENT = "permanent"
    RATE_LIMITED = "rate_limited"
    BLOCKED = "blocked"


ERROR_CLASSES = tuple(c.value for c in ErrorClass)  # the database's check constraint


class ClassifiedError(ScrapefleetError):
    """An error that knows its class. Raise one of the subclasses below."""

    error_class: ErrorClass = ErrorClass.TRANSIENT


class Permanent(ClassifiedError):
    """Trying again cannot help: the job fails now, whatever attempts it has left."""

    error_class = ErrorClass.PERMANENT


class RateLimited(ClassifiedError):
    """The site asked us to slow down. ``retry_after_s``: how long it asked us to wait (the
    next attempt waits at least that, capped by ``retry_after_max_s``); None -> backoff."""

    error_class = ErrorClass.RATE_LIMITED

    def __init__(self, reason: str = "rate limited", retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s


class Blocked(ClassifiedError):
    """The site refused this scraper: the job goes back to pending without using an attempt
    (at most ``max_blocks_per_job`` times, then it fails) and another host is preferred."""

    error_class = ErrorClass.BLOCKED

    def __init__(self, reason: str = "blocked") -> None:
        super().__init__(reason)
        self.reason = reason


class HttpStatusError(ClassifiedError):
    """An HTTP error status, classified by it: 404/410 permanent, 429/503 rate limited (with
    the response's Retry-After, already parsed), any other (or none given) transient."""

    def __init__(
        self, message: str, status: int | None = None, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s
        self.error_class = class_of_status(status) or ErrorClass.TRANSIENT


def class_of_status(status: int | None) -> ErrorClass | None:
    """The class an HTTP status says by itself; None for a status that says nothing."""
    if status in PERMANENT_STATUSES:
        return ErrorClass.PERMANENT
    if status in RATE_LIMITED_STATUSES:
        return ErrorClass.RATE_LIMITED
    return None


def _causes(exc: BaseException) -> list[BaseException]:
    """The exception and its explicit causes (``raise ... from``), outermost first."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(chain) < MAX_CAUSES and current not in chain:
        chain.append(current)
        current = current.__cause__
    return chain


def classify(exc: BaseException) -> ErrorClass:
    """The class of a failed attempt's exception: the first classified error among it and its
    causes; a params error (SubmitError, a pydantic ValidationError) is permanent; anything
    else transient."""
    for each in _causes(exc):
        if isinstance(each, ClassifiedError):
            return ErrorClass(each.error_class)
        if isinstance(each, SubmitError | ValidationError):
            return ErrorClass.PERMANENT
    return ErrorClass.TRANSIENT


def reason_of(exc: BaseException) -> str:
    """What the classified error behind ``exc`` said (the exception's own words otherwise)."""
    for each in _causes(exc):
        if isinstance(each, ClassifiedError):
            return str(each) or type(each).__name__
    return str(exc) or type(exc).__name__


def retry_after_of(exc: BaseException) -> float | None:
    """The wait a rate-limited exception (or one of its causes) asked for, if any."""
    for each in _causes(exc):
        if isinstance(each, RateLimited | HttpStatusError) and each.retry_after_s is not None:
            return each.retry_after_s
    return None


def parse_retry_after(value: str | None, now: datetime, *, cap_s: float) -> float | None:
    """A ``Retry-After`` header as seconds to wait from ``now``: delay-seconds ("120") or an
    HTTP-date ("Wed, 21 Oct 2026 07:28:00 GMT"; one in the past -> 0). At most ``cap_s``: a
    site cannot park a job for a year. None for no header or one that is neither."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        seconds = float(text)
    else:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:  # "-0000": UTC by RFC 5322
            when = when.replace(tzinfo=UTC)
        seconds = max(0.0, (when - now).total_seconds())
    return min(seconds, cap_s)


def next_try_at(
    error_class: ErrorClass,
    *,
    backoff_at: datetime | None,
    now: datetime,
    retry_after_s: float | None,
    retry_after_max_s: float,
) -> datetime | None:
    """When a failed attempt's job runs again; None -> it fails now. ``backoff_at`` is the
    usual retry time (common.actions.retry.retry_at: None when attempts are exhausted). A permanent
    error never retries; a rate-limited one with a Retry-After waits exactly that (capped) in
    place of the backoff; a blocked one is not a failure and never reaches here."""
    if error_class is ErrorClass.PERMANENT or backoff_at is None:
        return None
    if error_class is ErrorClass.RATE_LIMITED and retry_after_s is not None:
        if not math.isfinite(retry_after_s) or retry_after_s < 0:
            return backoff_at
        return now + timedelta(seconds=min(retry_after_s, retry_after_max_s))
    return backoff_at
