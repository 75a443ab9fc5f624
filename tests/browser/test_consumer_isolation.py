"""Jobs on one consumer host share warm browsers, never state: each job's cookies and storage
are gone for the next job on the same session; ``isolation: "session"`` gets a browser of its
own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy.engine import Engine

from scrapefleet.common.actions import register
from scrapefleet.common.store import NewJob
from scrapefleet.consumer.selenium_actions import navigate
from tests.browser.consumer_helpers import (
    consumer_settings,
    consumer_thread,
    finished,
    queue_jobs,
    rows,
)
from tests.browser.site import LocalSite
from tests.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


class TracesParams(BaseModel):
    url: str
    mark: str


@register("test_leave_traces", TracesParams, needs_browser=True)
def leave_traces(driver: Any, params: TracesParams) -> dict[str, Any]:
    """What the page shows of earlier jobs, then traces of this one for the next to find."""
    navigate(driver, params.url)
    found = {
        "session": driver.session_id,
        "cookies": sorted(c["name"] for c in driver.get_cookies()),
        "stored": driver.execute_script("return localStorage.getItem('mark')"),
    }
    driver.add_cookie({"name": f"visited-{params.mark}", "value": "1"})
    driver.execute_script("localStorage.setItem('mark', arguments[0])", params.mark)
    # Read back: the job's own traces are there, so the next job's clean slate is no accident.
    found["own_cookies"] = sorted(c["name"] for c in driver.get_cookies())
    found["own_stored"] = driver.execute_script("return localStorage.getItem('mark')")
    return found


def run_one(engine: Engine, url: str, mark: str, **extra: Any) -> dict[str, Any]:
    [job] = queue_jobs(
        engine, [NewJob("test_leave_traces", {"url": url, "mark": mark, **extra}, max_attempts=1)]
    )
    wait_for(lambda: finished(engine, [job]), 120, f"job {mark}")
    [row] = rows(engine, "SELECT status, result, last_error FROM jobs WHERE id = :id", id=job)
    assert row.status == "completed", row.last_error
    result: dict[str, Any] = row.result
    return result


def test_jobs_on_one_warm_session_never_see_each_others_cookies_or_storage(
    engine: Engine, database_url: str, tmp_path: Path, site: LocalSite
) -> None:
    settings = consumer_settings(tmp_path, database_url, capacity=1, restart_every=0)
    url = site.url("/plain")
    with consumer_thread(settings, database_url):
        first = run_one(engine, url, "a")
        second = run_one(engine, url, "b")
        own = run_one(engine, url, "c", isolation="session")
        after = run_one(engine, url, "d")

    assert first["own_cookies"] == ["visited-a"] and first["own_stored"] == "a"
    assert second["session"] == first["session"]  # the same warm browser...
    assert second["cookies"] == [] and second["stored"] is None  # ...and nothing of job a
    assert second["own_cookies"] == ["visited-b"]
    assert own["session"] != first["session"]  # a browser of its own
    assert own["cookies"] == [] and own["stored"] is None
    assert after["cookies"] == [] and after["stored"] is None
