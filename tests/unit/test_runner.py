"""consumer.runner: every way one job can end, with no database and no browser."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel
from selenium.common.exceptions import TimeoutException as SeleniumTimeout

from scrapefleet.common.actions.registry import register
from scrapefleet.common.browser.options import BrowserOptions
from scrapefleet.common.errors import StackError, SubmitError
from scrapefleet.common.jobs.submit_file import validate_job
from scrapefleet.common.store import ClaimedJob
from scrapefleet.consumer.browser.actions.selenium_actions import (
    PageLoadTimeout,
    SelectorNotFound,
    translated_errors,
)
from scrapefleet.consumer.runner import run_job


def _job(kind: str, payload: Any = None, attempt: int = 1) -> ClaimedJob:
    return ClaimedJob(
        id=7, kind=kind, payload=payload or {}, attempt=attempt, max_attempts=3, lock_key=None
    )


class _Params(BaseModel):
    value: int = 0


@register("test_runner_plain", _Params)
def _plain(params: _Params) -> dict[str, Any]:
    return {"double": params.value * 2}


@register("test_runner_raises", _Params)
def _raises(params: _Params) -> dict[str, Any]:
    raise ValueError(f"bad value {params.value}")


@register("test_runner_not_json", _Params)
def _not_json(params: _Params) -> dict[str, Any]:
    return {"when": object()}


@register("test_runner_not_dict", _Params)
def _not_dict(params: _Params) -> Any:
    return [1, 2]


@register("test_runner_stack", _Params)
def _stack(params: _Params) -> dict[str, Any]:
    raise StackError("grid gone")


@register("test_runner_browser", _Params, needs_browser=True)
def _browser(driver: Any, params: _Params) -> dict[str, Any]:
    driver.visited.append(params.value)
    if params.value < 0:
        raise RuntimeError("page broke")
    return {"visited": params.value}


class _FakeDriver:
    def __init__(self) -> None:
        self.visited: list[int] = []
        self.quit_calls = 0

    def quit(self) -> None:
        self.quit_calls += 1


def test_completed_with_result() -> None:
    outcome = run_job(_job("test_runner_plain", {"value": 21}))
    assert outcome.status == "completed" and outcome.result == {"double": 42}


def test_builtin_noop_completes() -> None:
    assert run_job(_job("noop")).result == {"ok": True}


def test_exception_is_failed_with_full_traceback() -> None:
    outcome = run_job(_job("test_runner_raises", {"value": 3}))
    assert outcome.status == "failed" and outcome.retryable
    assert outcome.error is not None
    assert outcome.error.startswith("Traceback (most recent call last):")
    assert "in _raises" in outcome.error
    assert outcome.error.rstrip().endswith("ValueError: bad value 3")


def test_unknown_kind_fails_without_retry() -> None:
    outcome = run_job(_job("no_such_kind"))
    assert outcome.status == "failed" and not outcome.retryable
    assert "no_such_kind" in (outcome.error or "")


def test_params_that_do_not_validate_fail_without_retry() -> None:
    outcome = run_job(_job("test_runner_plain", {"value": "not a number"}))
    assert outcome.status == "failed" and not outcome.retryable
    assert "payload.value" in (outcome.error or "")
    outcome = run_job(_job("noop", {"unexpected": 1}))
    assert outcome.status == "failed" and "payload.unexpected" in (outcome.error or "")


def test_result_must_be_a_json_object() -> None:
    for kind in ("test_runner_not_json", "test_runner_not_dict"):
        outcome = run_job(_job(kind))
        assert outcome.status == "failed" and not outcome.retryable, kind


def test_stack_error_releases_the_job() -> None:
    outcome = run_job(_job("test_runner_stack"))
    assert outcome.status == "released" and "grid gone" in (outcome.error or "")
    assert not outcome.by_page  # no page ran: the host's fault, never bounded


@register("test_runner_browser_died", _Params, needs_browser=True)
def _browser_died(driver: Any, params: _Params) -> dict[str, Any]:
    if params.value:  # Grid answered too late
        raise StackError("grid did not answer") from TimeoutError("read timed out")
    raise StackError("chrome not reachable")


def test_a_browser_that_dies_under_the_page_is_the_pages_release_unless_it_timed_out() -> None:
    """Only a browser dying while the page ran counts against the job's bounded releases; a
    timeout is a slow or starved host, and no session at all is the host's own fault."""
    died = run_job(_job("test_runner_browser_died"), driver_factory=_FakeDriver)
    assert died.status == "released" and died.by_page and not died.slow
    slow = run_job(_job("test_runner_browser_died", {"value": 1}), driver_factory=_FakeDriver)
    assert slow.status == "released" and slow.slow and not slow.by_page


@register("test_runner_grid_gone", _Params, needs_browser=True)
def _grid_gone(driver: Any, params: _Params) -> dict[str, Any]:
    with translated_errors("loading a page"):
        raise ConnectionRefusedError(111, "Connection refused")


def test_a_grid_that_stops_answering_under_the_page_is_never_the_pages_release() -> None:
    gone = run_job(_job("test_runner_grid_gone"), driver_factory=_FakeDriver)
    assert gone.status == "released" and "Grid unreachable" in (gone.error or "")
    assert not gone.by_page  # a page cannot kill the Grid's JVM: the host's fault


def test_browser_action_without_factory_is_a_clear_error() -> None:
    outcome = run_job(_job("test_runner_browser"))
    assert outcome.status == "failed" and not outcome.retryable
    assert "needs a browser" in (outcome.error or "")


def test_browser_action_gets_a_driver_and_it_is_always_quit() -> None:
    driver = _FakeDriver()
    outcome = run_job(_job("test_runner_browser", {"value": 5}), driver_factory=lambda: driver)
    assert outcome.result == {"visited": 5} and driver.quit_calls == 1

    captured: list[tuple[Any, int, int, str]] = []

    def capture(drv: Any, job_id: int, attempt: int, error: str) -> dict[str, Any]:
        captured.append((drv, job_id, attempt, error))
        return {"screenshot": "/tmp/x.png"}

    failing = run_job(
        _job("test_runner_browser", {"value": -1}, attempt=2),
        driver_factory=lambda: driver,
        capture_failure=capture,
    )
    assert failing.status == "failed" and failing.artifacts == {"screenshot": "/tmp/x.png"}
    assert captured and captured[0][:3] == (driver, 7, 2)
    assert "RuntimeError: page broke" in captured[0][3]
    assert driver.quit_calls == 2


def test_no_browser_session_releases_the_job() -> None:
    def factory() -> Any:
        raise StackError("no session")

    outcome = run_job(_job("test_runner_browser"), driver_factory=factory)
    assert outcome.status == "released" and "no session" in (outcome.error or "")
    assert not outcome.by_page


def test_capture_that_raises_does_not_hide_the_failure() -> None:
    def capture(*_: Any) -> dict[str, Any]:
        raise OSError("disk full")

    outcome = run_job(
        _job("test_runner_browser", {"value": -1}),
        driver_factory=_FakeDriver,
        capture_failure=capture,
    )
    assert outcome.status == "failed" and "page broke" in (outcome.error or "")
    assert outcome.artifacts is not None and "disk full" in outcome.artifacts["notes"][0]


def recording_lease(asked: list[str]) -> Any:
    """A lease that records the isolation it is asked for."""

    @contextlib.contextmanager
    def lease(isolation: str) -> Iterator[Any]:
        asked.append(isolation)
        yield _FakeDriver()

    return lease


def test_a_browser_jobs_isolation_reaches_the_lease_and_not_the_action() -> None:
    asked: list[str] = []
    lease = recording_lease(asked)

    assert run_job(_job("test_runner_browser", {"value": 1}), lease=lease).status == "completed"
    outcome = run_job(
        _job("test_runner_browser", {"value": 2, "isolation": "session"}), lease=lease
    )
    assert outcome.result == {"visited": 2} and asked == ["cleared", "session"]
    # Options are set on the job's user context: clearing it would leave them for the next job.
    with_options = {"value": 3, "browser": {"locale": "de-DE"}}
    run_job(_job("test_runner_browser", with_options), lease=lease)  # (the fake has no BiDi)
    assert asked[-1] == "context"


def test_an_unknown_isolation_is_refused_at_submit_naming_the_field() -> None:
    with pytest.raises(SubmitError, match=r"payload.isolation: isolation must be one of"):
        validate_job(
            {"kind": "fetch_page", "payload": {"url": "http://x.test/", "isolation": "tab"}}
        )
    job = validate_job(
        {"kind": "fetch_page", "payload": {"url": "http://x.test/", "isolation": "session"}}
    )
    assert job.payload["isolation"] == "session"


@pytest.mark.parametrize(
    "browser", [{"locale": "de-DE"}, {"profile": "acct-7"}, {"profile": ["acct-7", "acct-8"]}]
)
def test_shared_with_browser_options_or_a_profile_is_refused_at_submit_with_the_reason(
    browser: dict[str, Any],
) -> None:
    payload = {"url": "http://x.test/", "isolation": "shared", "browser": browser}
    with pytest.raises(SubmitError, match=r"payload.isolation: isolation 'shared' cannot be"):
        validate_job({"kind": "fetch_page", "payload": payload})
    shared = validate_job(
        {"kind": "fetch_page", "payload": {"url": "http://x.test/", "isolation": "shared"}}
    )
    assert shared.payload["isolation"] == "shared"


def test_a_shared_job_runs_shared_unless_the_host_sets_options_for_every_job() -> None:
    asked: list[str] = []
    lease = recording_lease(asked)

    shared = _job("test_runner_browser", {"value": 1, "isolation": "shared"})
    assert run_job(shared, lease=lease).status == "completed"
    run_job(shared, lease=lease, browser_defaults=BrowserOptions(locale="de-DE"))
    assert asked == ["shared", "context"]


@register("test_runner_page_timeout", _Params, needs_browser=True)
def _page_timeout(driver: Any, params: _Params) -> dict[str, Any]:
    raise PageLoadTimeout("get https://example.org/: timed out (page load)")


@register("test_runner_selector_wait", _Params, needs_browser=True)
def _selector_wait(driver: Any, params: _Params) -> dict[str, Any]:
    try:
        raise SeleniumTimeout("waited 1 s")
    except SeleniumTimeout as exc:
        raise SelectorNotFound("no element matches '#never' within 1 s") from exc


def test_a_selector_the_page_never_shows_fails_even_on_a_starved_host() -> None:
    """The job's own wait ran out: the page's answer, not the host's fault (and a job released
    for it would come back forever)."""
    job = _job("test_runner_selector_wait")
    starved = run_job(job, driver_factory=_FakeDriver, host_starved=lambda: "CPU pressure 90%")
    assert starved.status == "failed" and "SelectorNotFound" in (starved.error or "")


def test_a_page_that_times_out_on_a_starved_host_is_released_not_failed() -> None:
    job = _job("test_runner_page_timeout")
    starved = run_job(job, driver_factory=_FakeDriver, host_starved=lambda: "CPU pressure 90%")
    assert starved.status == "released" and starved.slow and not starved.by_page
    assert "CPU pressure 90%" in (starved.error or "")
    calm = run_job(job, driver_factory=_FakeDriver, host_starved=lambda: None)
    assert calm.status == "failed"  # a page slow on a calm host is the page's
