"""Jobs on one consumer host share warm browsers, never state: at every isolation level but
``shared``, the cookies, localStorage, sessionStorage and IndexedDB records one job writes (also
from its page's pagehide handler, as it leaves) are invisible to the next job on the same slot.
What each level keeps differs: ``cleared`` the slot's tab and the HTTP cache, ``context`` the
browser, ``session`` nothing. ``shared`` keeps everything, as one person browsing, and a job of
another level after it on the same slot still finds nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy.engine import Engine

from scrapefleet.common.actions.registry import register
from scrapefleet.common.browser.isolation import ISOLATION_VALUES
from scrapefleet.common.store import NewJob
from scrapefleet.consumer.browser.actions.selenium_actions import navigate
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

# Every kind of state a page can leave, read in one script (IndexedDB answers asynchronously).
_READ_JS = """
const done = arguments[arguments.length - 1];
const found = {
  cookies: document.cookie,
  local: Object.keys(localStorage).sort(),
  session: Object.keys(sessionStorage).sort(),
};
indexedDB.databases().then((dbs) => {
  found.indexeddb = dbs.map((db) => db.name).sort();
  done(found);
}, () => done(found));
"""
_WRITE_JS = """
const [mark, done] = [arguments[0], arguments[arguments.length - 1]];
document.cookie = `cookie-${mark}=1; max-age=3600`;
localStorage.setItem(`local-${mark}`, "1");
sessionStorage.setItem(`session-${mark}`, "1");
// Written as the page leaves, after the job has returned: the clearing must come after it.
addEventListener("pagehide", () => {
  localStorage.setItem(`late-${mark}`, "1");
  document.cookie = `late-${mark}=1; max-age=3600`;
});
const opened = indexedDB.open(`db-${mark}`, 1);
opened.onupgradeneeded = () => opened.result.createObjectStore("records");
opened.onsuccess = () => {
  const tx = opened.result.transaction("records", "readwrite");
  tx.objectStore("records").put("1", mark);
  tx.oncomplete = () => { opened.result.close(); done(true); };
};
opened.onerror = () => done(false);
"""


class TracesParams(BaseModel):
    url: str
    mark: str
    isolation: str | None = None
    then: str | None = None  # a second page, on another origin, to leave traces on too


@register("test_leave_traces", TracesParams, needs_browser=True)
def leave_traces(driver: Any, params: TracesParams) -> dict[str, Any]:
    """What the page shows of earlier jobs, then traces of this one for the next to find."""
    navigate(driver, params.url)
    driver.set_script_timeout(10)
    found: dict[str, Any] = {
        "session": driver.session_id,
        "tab": driver.current_window_handle,
        "before": driver.execute_async_script(_READ_JS),
    }
    assert driver.execute_async_script(_WRITE_JS, params.mark) is True
    # Read back: the job's own traces are there, so the next job's clean slate is no accident.
    found["own"] = driver.execute_async_script(_READ_JS)
    if params.then:
        navigate(driver, params.then)
        assert driver.execute_async_script(_WRITE_JS, params.mark) is True
    return found


NOTHING = {"cookies": "", "local": [], "session": [], "indexeddb": []}


def run_one(
    engine: Engine, url: str, mark: str, isolation: str, then: str | None = None
) -> dict[str, Any]:
    payload = {"url": url, "mark": mark, "isolation": isolation, "then": then}
    [job] = queue_jobs(engine, [NewJob("test_leave_traces", payload, max_attempts=1)])
    wait_for(lambda: finished(engine, [job]), 120, f"job {mark}")
    [row] = rows(engine, "SELECT status, result, last_error FROM jobs WHERE id = :id", id=job)
    assert row.status == "completed", row.last_error
    result: dict[str, Any] = row.result
    return result


@pytest.mark.parametrize("isolation", [i for i in ISOLATION_VALUES if i != "shared"])
def test_a_job_sees_nothing_the_job_before_it_stored_on_the_same_slot(
    engine: Engine, database_url: str, tmp_path: Path, site: LocalSite, isolation: str
) -> None:
    settings = consumer_settings(tmp_path, database_url, capacity=1, restart_every=0)
    url = site.url("/cached")  # the same page every time: the origin's storage is what is read
    hits_before = site.cached_hits  # the site serves the whole module
    with consumer_thread(settings, database_url):
        jobs = [run_one(engine, url, mark, isolation) for mark in ("a", "b", "c")]
    hits = site.cached_hits - hits_before

    first = jobs[0]
    assert first["own"] == {
        "cookies": "cookie-a=1",
        "local": ["local-a"],
        "session": ["session-a"],
        "indexeddb": ["db-a"],
    }
    for job in jobs:
        assert job["before"] == NOTHING, f"{isolation}: a job saw an earlier job's state"
    tabs = {job["tab"] for job in jobs}
    sessions = {job["session"] for job in jobs}
    if isolation == "cleared":
        # Cleared in place, not replaced: the same tab, and the HTTP cache kept the page.
        assert len(tabs) == 1 and len(sessions) == 1
        assert hits == 1
    elif isolation == "context":
        assert len(tabs) == 3 and len(sessions) == 1  # a fresh context in the warm browser
        assert hits == 3
    else:
        assert len(sessions) == 3


def test_shared_jobs_keep_everything_and_a_cleared_job_after_them_finds_nothing(
    engine: Engine, database_url: str, tmp_path: Path, site: LocalSite
) -> None:
    settings = consumer_settings(tmp_path, database_url, capacity=1, restart_every=0)
    url = site.url("/cached")
    hits_before = site.cached_hits
    with consumer_thread(settings, database_url):
        first = run_one(engine, url, "a", "shared")
        second = run_one(engine, url, "b", "shared")
        cleared = run_one(engine, url, "c", "cleared")
    hits = site.cached_hits - hits_before

    assert first["before"] == NOTHING
    # Nothing cleared: the same tab, and every trace of the job before it (sessionStorage too:
    # the same tab), the HTTP cache kept the page.
    assert second["tab"] == first["tab"] and second["session"] == first["session"]
    kept = second["before"]
    assert "cookie-a=1" in kept["cookies"] and "late-a=1" in kept["cookies"]
    assert kept["local"] == ["late-a", "local-a"] and kept["session"] == ["session-a"]
    assert kept["indexeddb"] == ["db-a"]
    # A job of another level gets a fresh user context on that slot: nothing of either, an
    # empty HTTP cache (the page fetched twice in all: once by the shared jobs, once by it).
    assert cleared["before"] == NOTHING and cleared["tab"] != second["tab"]
    assert hits == 2
    assert cleared["session"] == first["session"]


def test_a_cleared_job_on_two_origins_gets_a_fresh_context(
    engine: Engine, database_url: str, tmp_path: Path, site: LocalSite
) -> None:
    """sessionStorage of an origin the tab no longer shows cannot be cleared in place: the
    slot of a job that went from one origin to another gets a fresh context instead, and the
    jobs after it find nothing on either origin."""
    settings = consumer_settings(tmp_path, database_url, capacity=1, restart_every=0)
    here = site.url("/plain")
    elsewhere = here.replace("127.0.0.1", "localhost")
    with consumer_thread(settings, database_url):
        both = run_one(engine, here, "a", "cleared", then=elsewhere)
        back_here = run_one(engine, here, "b", "cleared")
        there = run_one(engine, elsewhere, "c", "cleared")

    assert back_here["before"] == NOTHING and there["before"] == NOTHING
    assert back_here["tab"] != both["tab"]  # replaced, not cleared in place
    assert there["tab"] == back_here["tab"]  # b stayed on one origin: cleared in place
    assert {both["session"], back_here["session"], there["session"]} == {both["session"]}


class FramesParams(BaseModel):
    url: str
    inner: str  # framed inside a frame of the page's own origin


@register("test_nested_frame", FramesParams, needs_browser=True)
def nested_frame(driver: Any, params: FramesParams) -> dict[str, Any]:
    navigate(driver, params.url)
    # A frame of the page's own origin holding a frame of another origin, whose sessionStorage
    # lives in this tab and could not be cleared from the page's origin.
    driver.execute_script(
        "const outer = document.createElement('iframe');"
        "outer.src = arguments[0];"
        "outer.onload = () => {"
        "  const inner = outer.contentDocument.createElement('iframe');"
        "  inner.src = arguments[1];"
        "  outer.contentDocument.body.appendChild(inner);"
        "};"
        "document.body.appendChild(outer);",
        params.url,
        params.inner,
    )
    wait_for(
        lambda: driver.execute_script(
            "const f = document.querySelector('iframe');"
            "return !!(f && f.contentWindow.location.origin === location.origin"
            "  && f.contentWindow.frames.length === 1);"
        ),
        10,
        "the nested frame",
    )
    return {"tab": driver.current_window_handle}


def test_a_cleared_job_whose_page_framed_another_origin_deeper_down_gets_a_fresh_context(
    engine: Engine, database_url: str, tmp_path: Path, site: LocalSite
) -> None:
    settings = consumer_settings(tmp_path, database_url, capacity=1, restart_every=0)
    here = site.url("/plain")
    elsewhere = here.replace("127.0.0.1", "localhost")
    with consumer_thread(settings, database_url):
        [framed] = queue_jobs(
            engine, [NewJob("test_nested_frame", {"url": here, "inner": elsewhere})]
        )
        wait_for(lambda: finished(engine, [framed]), 120, "the framing job")
        after = run_one(engine, here, "b", "cleared")
    [row] = rows(engine, "SELECT status, result FROM jobs WHERE id = :id", id=framed)
    assert row.status == "completed"
    assert after["before"] == NOTHING
    assert after["tab"] != row.result["tab"]  # replaced, not cleared in place
