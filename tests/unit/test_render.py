"""`scrapefleet status` says why browser jobs wait: which hosts' stacks fail, and when none can
take them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from scrapefleet.common.ops.render import render_status


def _host(name: str, browser: str | None, **extra: Any) -> dict[str, Any]:
    row = {"host": name, "state": "active", "running": 0, "queued": 0, "capacity": 6}
    return row | {"completed_last_hour": 0, "browser": browser} | extra


def test_a_failing_stack_and_stranded_browser_jobs_are_named() -> None:
    retry = datetime(2026, 11, 23, 8, 30, tzinfo=UTC)
    hosts = [
        _host("h1", "failing", browser_reason="no Selenium jar", browser_retry_at=retry),
        _host("h2", "absent"),
    ]
    text = render_status({"pending": 3}, hosts, pending_browser=3)
    assert "h1: browser failing: no Selenium jar, next try 08:30:00 UTC" in text
    assert "3 browser job(s) pending: no active host can run browser jobs now" in text


def test_nothing_alarming_while_a_host_takes_browser_jobs() -> None:
    text = render_status({"pending": 3}, [_host("h1", "idle"), _host("h2", "failing")], 3)
    assert "no active host can run browser jobs" not in text
    assert "h2: browser failing: ?" in text


def test_a_host_that_cannot_keep_up_says_so_in_one_line_and_in_its_browser_cell() -> None:
    why = "taking 2 of 6 browser jobs: CPU pressure 91% in 8 of the last 10 samples"
    hosts = [
        _host("h1", "ready", browser_limit=2, browser_limit_reason=why),
        _host("h2", "ready", browser_limit=6, browser_limit_reason=None),
    ]
    lines = render_status({"pending": 3}, hosts).splitlines()
    [h1_row] = [line for line in lines if line.startswith("h1 ")]
    [h2_row] = [line for line in lines if line.startswith("h2 ")]
    assert h1_row.rstrip().endswith("ready 2/6") and h2_row.rstrip().endswith("ready")
    assert f"h1: {why}" in lines
    assert not any(line.startswith("h2:") for line in lines)


def test_an_http_only_fleet_says_nothing_of_browser_limits() -> None:
    """The HTTP-only demo printed "taking 2 of 6 browser jobs" for hosts that never started a
    browser: the starting limit of an idle stack says nothing while no browser job waits."""
    why = "taking 2 of 6 browser jobs: starting at one browser job per core (2)"
    hosts = [_host(h, state, browser_limit=2, browser_limit_reason=why)
             for h, state in (("h1", "idle"), ("h2", "absent"))]  # fmt: skip
    text = render_status({"pending": 0}, hosts)
    assert "taking" not in text and "2/6" not in text
    waiting = render_status({"pending": 3}, hosts[:1], pending_browser=3)
    assert f"h1: {why}" in waiting and "idle 2/6" in waiting
