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
