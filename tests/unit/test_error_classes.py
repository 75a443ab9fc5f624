"""Error classes: what an exception says about the next attempt (classify, Retry-After, the next
try's time), how fetch_page knows a block page, and how the runner reports each class."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from scrapefleet.common.actions.bounded_regex import compile_pattern
from scrapefleet.common.actions.error_classes import (
    ErrorClass,
    HttpStatusError,
    classify,
    next_try_at,
    parse_retry_after,
    reason_of,
    retry_after_of,
)
from scrapefleet.common.actions.registry import Blocked, Permanent, RateLimited, register
from scrapefleet.common.errors import SettingsError, SubmitError
from scrapefleet.common.http.client import HTTPStatusFailure, InvalidRequestUrl
from scrapefleet.common.settings import load_settings
from scrapefleet.common.store import ClaimedJob
from scrapefleet.consumer.browser.actions.block_detection import BlockRules, block_reason
from scrapefleet.consumer.browser.actions.selenium_actions import HttpError, InvalidArgument
from scrapefleet.consumer.runner import run_job

pytestmark = pytest.mark.timeout(30)

NOW = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)
HOUR = 3600.0


# -- classify ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (RuntimeError("anything"), ErrorClass.TRANSIENT),
        (TimeoutError("slow"), ErrorClass.TRANSIENT),
        (Permanent("gone for good"), ErrorClass.PERMANENT),
        (RateLimited("slow down", retry_after_s=3), ErrorClass.RATE_LIMITED),
        (Blocked("captcha"), ErrorClass.BLOCKED),
        (HttpStatusError("HTTP 404", 404), ErrorClass.PERMANENT),
        (HttpStatusError("HTTP 410", 410), ErrorClass.PERMANENT),
        (HttpStatusError("HTTP 429", 429), ErrorClass.RATE_LIMITED),
        (HttpStatusError("HTTP 503", 503), ErrorClass.RATE_LIMITED),
        (HttpStatusError("HTTP 500", 500), ErrorClass.TRANSIENT),
        (HttpStatusError("HTTP 403", 403), ErrorClass.TRANSIENT),
        (HttpStatusError("no status"), ErrorClass.TRANSIENT),
        (HttpError("loading: HTTP 404", 404), ErrorClass.PERMANENT),
        (HTTPStatusFailure("HTTP 429", 429, 3.0), ErrorClass.RATE_LIMITED),
        (InvalidRequestUrl("bad url"), ErrorClass.PERMANENT),
        (InvalidArgument("invalid argument"), ErrorClass.PERMANENT),
        (SubmitError("payload.url: required"), ErrorClass.PERMANENT),
    ],
)
def test_classify_by_type_and_status(exc: BaseException, expected: ErrorClass) -> None:
    assert classify(exc) is expected


def test_a_params_error_is_permanent() -> None:
    class Params(BaseModel):
        url: str

    with pytest.raises(ValidationError) as raised:
        Params.model_validate({})
    assert classify(raised.value) is ErrorClass.PERMANENT


def test_an_explicit_cause_keeps_its_class_and_an_implicit_context_does_not() -> None:
    try:
        try:
            raise Blocked("captcha")
        except Blocked as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert classify(outer) is ErrorClass.BLOCKED
    try:
        try:
            raise Permanent("first")
        except Permanent:
            raise RuntimeError("a bug while handling it") from None
    except RuntimeError as outer:
        assert classify(outer) is ErrorClass.TRANSIENT


def test_the_outermost_classified_error_wins_and_its_wait_is_found_below() -> None:
    inner = RateLimited("slow down", retry_after_s=7)
    outer = RuntimeError("wrapped")
    outer.__cause__ = inner
    assert classify(outer) is ErrorClass.RATE_LIMITED and retry_after_of(outer) == 7
    assert retry_after_of(RuntimeError("plain")) is None
    assert retry_after_of(HttpStatusError("HTTP 429", 429, 2.5)) == 2.5


def test_a_wrapped_block_keeps_its_reason() -> None:
    outer = RuntimeError("the scraper gave up")
    outer.__cause__ = Blocked("captcha on /item/3")
    assert reason_of(outer) == "captcha on /item/3"
    assert reason_of(ValueError("plain")) == "plain" and reason_of(ValueError()) == "ValueError"


def test_a_cause_cycle_ends() -> None:
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__cause__, b.__cause__ = b, a
    assert classify(a) is ErrorClass.TRANSIENT


# -- Retry-After -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("3", 3.0),
        (" 120 ", 120.0),
        ("0", 0.0),
        ("Tue, 24 Nov 2026 12:00:30 GMT", 30.0),
        ("Tuesday, 24-Nov-26 12:01:00 GMT", 60.0),  # RFC 850, still allowed by RFC 9110
        ("Tue Nov 24 12:00:05 2026", 5.0),  # asctime, no zone: UTC
        ("Tue, 24 Nov 2026 11:00:00 GMT", 0.0),  # in the past: go now
        ("999999999", HOUR),  # capped
        ("Fri, 01 Jan 2100 00:00:00 GMT", HOUR),  # capped
        (None, None),
        ("", None),
        ("soon", None),
        ("-5", None),
        ("1.5", None),
        ("1e9", None),
        ("Tue, 99 Nov 2026 12:00:30 GMT", None),
    ],
)
def test_retry_after_seconds_or_date_bounded_and_garbage_ignored(
    header: str | None, expected: float | None
) -> None:
    assert parse_retry_after(header, NOW, cap_s=HOUR) == expected


# -- the next try ------------------------------------------------------------------------------


def _next(error_class: ErrorClass, retry_after_s: float | None, backoff_in_s: float | None) -> Any:
    backoff_at = None if backoff_in_s is None else NOW + timedelta(seconds=backoff_in_s)
    return next_try_at(
        error_class,
        backoff_at=backoff_at,
        now=NOW,
        retry_after_s=retry_after_s,
        retry_after_max_s=HOUR,
    )


def test_transient_waits_the_backoff_and_permanent_never_retries() -> None:
    assert _next(ErrorClass.TRANSIENT, None, 5) == NOW + timedelta(seconds=5)
    assert _next(ErrorClass.TRANSIENT, 60, 5) == NOW + timedelta(seconds=5)
    assert _next(ErrorClass.PERMANENT, None, 5) is None
    assert _next(ErrorClass.TRANSIENT, None, None) is None  # out of attempts


def test_rate_limited_waits_the_retry_after_capped_else_the_backoff() -> None:
    assert _next(ErrorClass.RATE_LIMITED, 3, 0.1) == NOW + timedelta(seconds=3)
    assert _next(ErrorClass.RATE_LIMITED, 1, 5) == NOW + timedelta(seconds=1)
    assert _next(ErrorClass.RATE_LIMITED, 10 * HOUR, 5) == NOW + timedelta(seconds=HOUR)
    assert _next(ErrorClass.RATE_LIMITED, None, 5) == NOW + timedelta(seconds=5)
    assert _next(ErrorClass.RATE_LIMITED, float("nan"), 5) == NOW + timedelta(seconds=5)
    assert _next(ErrorClass.RATE_LIMITED, 3, None) is None  # out of attempts


# -- block pages -------------------------------------------------------------------------------


def test_a_block_page_by_status_selector_or_title() -> None:
    rules = BlockRules(
        statuses=frozenset({403}),
        selector="#captcha",
        title_pattern=compile_pattern(r"(?i)access denied", "block_title_pattern"),
    )
    assert "HTTP 403" in (block_reason(rules, status=403, title="", selector_matched=False) or "")
    assert "#captcha" in (block_reason(rules, status=200, title="", selector_matched=True) or "")
    reason = block_reason(rules, status=200, title="Access Denied - shop", selector_matched=False)
    assert reason is not None and "title" in reason
    assert block_reason(rules, status=200, title="Prices", selector_matched=False) is None
    assert block_reason(rules, status=None, title=None, selector_matched=False) is None


def test_no_rules_no_block() -> None:
    rules = BlockRules()
    assert not rules.reads_page
    assert block_reason(rules, status=403, title="Access denied", selector_matched=True) is None


def test_block_rules_come_from_validated_settings() -> None:
    settings = load_settings(
        None,
        block_statuses="403, 429",
        block_selector="#blocked-marker",
        block_title_pattern="Access denied|captcha",
    )
    rules = BlockRules.from_settings(settings)
    assert rules.statuses == {403, 429} and rules.selector == "#blocked-marker"
    assert rules.reads_page and rules.title_pattern is not None
    assert rules.title_pattern.search("Please solve the captcha")


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("block_statuses", "403,999", "block_statuses"),
        ("block_statuses", "forbidden", "block_statuses"),
        ("block_title_pattern", "(unclosed", "block_title_pattern"),
        ("block_selector", "a\nb", "block_selector"),
        ("max_blocks_per_job", 0, "max_blocks_per_job"),
        ("retry_after_max_s", -1, "retry_after_max_s"),
    ],
)
def test_bad_error_class_settings_are_refused_by_name(name: str, value: Any, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings(None, **{name: value})


# -- the runner --------------------------------------------------------------------------------


class _Params(BaseModel):
    retry_after_s: float | None = None


@register("test_error_classes_blocked", _Params)
def _blocked(params: _Params) -> dict[str, Any]:
    raise Blocked("captcha on the page")


@register("test_error_classes_permanent", _Params)
def _permanent(params: _Params) -> dict[str, Any]:
    raise Permanent("no such product")


@register("test_error_classes_rate_limited", _Params)
def _rate_limited(params: _Params) -> dict[str, Any]:
    raise RateLimited("slow down", retry_after_s=params.retry_after_s)


@register("test_error_classes_plain_failure", _Params)
def _plain_failure(params: _Params) -> dict[str, Any]:
    raise ValueError("no price")


def _run(kind: str, payload: dict[str, Any] | None = None) -> Any:
    job = ClaimedJob(
        id=1, kind=kind, payload=payload or {}, attempt=1, max_attempts=3, lock_key=None
    )
    return run_job(job)


def test_the_runner_reports_each_class() -> None:
    blocked = _run("test_error_classes_blocked")
    assert blocked.status == "blocked" and blocked.error_class is ErrorClass.BLOCKED
    assert blocked.reason == "captcha on the page" and "Blocked" in (blocked.error or "")

    permanent = _run("test_error_classes_permanent")
    assert permanent.status == "failed" and permanent.error_class is ErrorClass.PERMANENT
    assert not permanent.retryable

    limited = _run("test_error_classes_rate_limited", {"retry_after_s": 3})
    assert limited.status == "failed" and limited.error_class is ErrorClass.RATE_LIMITED
    assert limited.retryable and limited.retry_after_s == 3

    plain = _run("test_error_classes_plain_failure")
    assert plain.error_class is ErrorClass.TRANSIENT and plain.retryable


def test_a_job_that_cannot_run_here_is_permanent() -> None:
    unknown = _run("test_error_classes_no_such_kind")
    assert unknown.error_class is ErrorClass.PERMANENT and not unknown.retryable
    bad_params = _run("test_error_classes_permanent", {"retry_after_s": "soon"})
    assert bad_params.error_class is ErrorClass.PERMANENT and not bad_params.retryable
