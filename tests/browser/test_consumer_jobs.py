"""Browser jobs through a real Consumer and its own stack: results, failures and artifacts."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from scrapefleet.common.runtime.metrics import CONSUMER_REGISTRY
from scrapefleet.common.store import NewJob
from tests.browser.consumer_helpers import (
    consumer_settings,
    consumer_thread,
    fetch,
    finished,
    queue_jobs,
    rows,
)
from tests.browser.site import LocalSite
from tests.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


def test_pages_that_load_fail_hang_and_crash(
    engine: Engine, database_url: str, tmp_path: Path, site: LocalSite
) -> None:
    # The hang is cut by the daemon's hard job timeout (30 s, roomy: on a loaded 2-core
    # machine a session alone can take 20 s): the page would hold for 120 s, and the page-load
    # timeout and the Grid's own command timeout (its session timeout) are longer still, so
    # only the killed browser can free the job's thread.
    settings = consumer_settings(
        tmp_path,
        database_url,
        capacity=5,
        job_timeout_s=30.0,
        page_load_timeout_s=150.0,
        grid_session_timeout_s=150,
    )
    jobs = {
        "loads": fetch(
            site.url("/item"),
            wait_for="#late",
            fields={
                "name": {"css": "h1.name"},
                "currency": {"css": ".price", "attr": "data-currency"},
            },
        ),
        "http_500": fetch(site.url("/error")),
        "no_selector": fetch(site.url("/plain"), wait_for="#never", wait_timeout_s=1),
        "crash": NewJob("test_crash_renderer", {"url": site.url("/plain")}, max_attempts=1),
        "hang": fetch(site.url("/hang")),
    }
    with consumer_thread(settings, database_url) as consumer:
        ids = dict(zip(jobs, queue_jobs(engine, list(jobs.values())), strict=True))
        wait_for(lambda: finished(engine, list(ids.values())), 240, "every job to finish")
        # The hung job's browser was killed, so its thread returned (long before the site lets
        # the page go, at 120 s): no slot held.
        wait_for(lambda: consumer.stuck == 0, 30, "the hung job's thread to return")

        # The metrics endpoint's browser-memory gauge reads the live stack (once it is up
        # again: the hung and crashed jobs' faults may have restarted it).
        def browser_memory() -> float:
            value = CONSUMER_REGISTRY.get_sample_value(
                "scrapefleet_browser_memory_bytes", {"host": consumer.host}
            )
            return value or 0.0

        wait_for(lambda: browser_memory() > 50 * 2**20, 60, "the browser memory gauge")

    by_name = {
        name: rows(engine, "SELECT * FROM jobs WHERE id = :id", id=job_id)[0]
        for name, job_id in ids.items()
    }
    loads = by_name.pop("loads")
    assert loads.status == "completed", loads.last_error
    assert loads.result["title"] == "Widget 42"
    assert loads.result["fields"] == {"name": "Widget", "currency": "EUR"}

    hang = by_name.pop("hang")
    assert hang.status == "failed" and "TimeoutError" in hang.last_error

    expected_errors = {
        "http_500": "HttpError",
        "no_selector": "SelectorNotFound",
        "crash": "RendererCrashed",
    }
    for name, row in by_name.items():
        assert row.status == "failed", name
        assert expected_errors[name] in row.last_error, (name, row.last_error)
        artifacts = row.artifacts
        folder = settings.artifacts_dir / str(row.id)
        assert artifacts["traceback"] == str(folder / "attempt-1.txt"), name
        assert expected_errors[name] in Path(artifacts["traceback"]).read_text()
        if name == "crash":  # nothing left to photograph: noted, not a second error
            assert artifacts["screenshot"] is None and artifacts["notes"], artifacts
            continue
        assert Path(artifacts["screenshot"]).read_bytes().startswith(b"\x89PNG"), name
        assert Path(artifacts["html"]).read_text().strip(), name
        assert artifacts["screenshot"] == str(folder / "attempt-1.png")

    # What an operator reads at a psql prompt.
    failures = rows(engine, "SELECT job_id, screenshot, html, traceback_file FROM recent_failures")
    listed = {r.job_id: r for r in failures}
    assert listed[ids["http_500"]].screenshot == by_name["http_500"].artifacts["screenshot"]
