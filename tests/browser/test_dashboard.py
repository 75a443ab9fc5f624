"""The dashboard driven in a real headless Chromium (selenium's local Chrome driver).

The dashboard runs in a thread on 127.0.0.1 against the test database; a real Producer decides
whether pause works. Screenshots of the main pages are saved under the test's temporary
directory, or to docs/screenshots/ for the docs when SCRAPEFLEET_DOCS_SCREENSHOTS=1.
"""

from __future__ import annotations

import json
import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.ops.dashboard.app import create_app
from scrapefleet.common.ops.dashboard.server import DashboardServer
from scrapefleet.common.settings import Settings
from scrapefleet.common.store import NewJob
from scrapefleet.producer.producer_daemon import Producer
from tests.browser.page_waits import wait_for_text
from tests.integration.producer_helpers import (
    add_hosts,
    producer_settings,
    publish_status,
    submit,
)

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.timeout(30)]

TOKEN = "dashboard-test-token-0123456789"
DOCS_SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
SCREENSHOTS = (
    DOCS_SCREENSHOTS
    if os.environ.get("SCRAPEFLEET_DOCS_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / f"scrapefleet-dashboard-screenshots-{os.getpid()}"
)
WAIT_S = 10.0


@pytest.fixture(scope="module")
def browser(dashboard_browser: WebDriver) -> WebDriver:
    return dashboard_browser


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return producer_settings(
        database_url, tmp_path, dashboard_token=TOKEN, artifacts_dir=tmp_path / "artifacts"
    )


@pytest.fixture
def dashboard(settings: Settings, engine: Engine, browser: WebDriver) -> Iterator[str]:
    server = DashboardServer(create_app(settings, engine), "127.0.0.1", 0).start()
    browser.delete_all_cookies()
    try:
        yield server.url
    finally:
        server.close()


def save_screenshot(browser: WebDriver, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(SCREENSHOTS / f"{name}.png"))


def seed_failed_job(engine: Engine, settings: Settings, browser: WebDriver) -> int:
    """A failed browser job with real artifacts: a Chromium screenshot, its HTML, a traceback."""
    (job_id,) = submit(engine, [NewJob("noop", {})])
    folder = settings.artifacts_dir / str(job_id)
    folder.mkdir(parents=True)
    browser.get("data:text/html,<h1 style='color:red'>Out of stock</h1><p>price missing</p>")
    (folder / "attempt-1.png").write_bytes(browser.get_screenshot_as_png())
    (folder / "attempt-1.html").write_text(browser.page_source)
    error = 'Traceback (most recent call last):\n  ...\nNoSuchElementException: ".price"\n'
    (folder / "attempt-1.txt").write_text(error)
    artifacts = {
        "screenshot": str(folder / "attempt-1.png"),
        "html": str(folder / "attempt-1.html"),
        "traceback": str(folder / "attempt-1.txt"),
        "notes": [],
    }
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE jobs SET status = 'failed', host = 'h1', attempts = 3, max_attempts = 3,"
                " last_error = :error, artifacts = CAST(:artifacts AS jsonb),"
                " finished_at = now() WHERE id = :id"
            ),
            {"id": job_id, "error": error, "artifacts": json.dumps(artifacts)},
        )
    return job_id


def seed_fleet(engine: Engine, settings: Settings) -> None:
    add_hosts(engine, {"h1": 4, "h2": 6})
    publish_status(settings.state_dir, "h1")
    publish_status(settings.state_dir, "h2")
    done = submit(engine, [NewJob("noop", {}) for _ in range(30)])
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE jobs SET status = 'completed', host = 'h1', attempts = 1,"
                " finished_at = now() - make_interval(mins => ((id * 7) % 600)::int)"
                " WHERE id = ANY(:ids)"
            ),
            {"ids": done},
        )
        store.drain_host(conn, "h2")


def post(url: str, fields: dict[str, str]) -> int:
    data = urllib.parse.urlencode(fields).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def unlock(browser: WebDriver, dashboard: str) -> None:
    browser.get(dashboard + "/")
    browser.find_element(By.ID, "token-input").send_keys(TOKEN)
    browser.find_element(By.ID, "unlock-button").click()
    wait_for_text(browser, ".notice", "controls unlocked")


# ---------------------------------------------------------------- tests


def test_pages_load_and_are_captured(
    browser: WebDriver, dashboard: str, engine: Engine, settings: Settings
) -> None:
    seed_fleet(engine, settings)
    failed = seed_failed_job(engine, settings, browser)
    submit(engine, [NewJob("http_get", {"url": "http://127.0.0.1:9/"}) for _ in range(3)])

    browser.get(dashboard + "/")
    assert browser.find_element(By.ID, "count-completed").text == "30"
    assert browser.find_element(By.ID, "count-pending").text == "3"
    assert "draining" in browser.find_element(By.ID, "host-h2").text
    assert "4" in browser.find_element(By.ID, "host-h1").text
    assert "30 completed" in browser.find_element(By.ID, "chart-day").text
    assert browser.find_elements(By.CSS_SELECTOR, "#chart-hour svg rect")
    assert browser.find_element(By.ID, f"failure-{failed}").is_displayed()
    save_screenshot(browser, "dashboard-overview")

    browser.find_element(By.LINK_TEXT, str(failed)).click()
    wait_for_text(browser, "h1", f"Job {failed}")
    history = browser.find_element(By.ID, "history").text
    assert "pending" in history and "failed" in history
    assert "NoSuchElementException" in browser.find_element(By.ID, "error").text
    save_screenshot(browser, "dashboard-job")

    browser.get(dashboard + "/jobs?status=completed&host=h1")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#results tr")) == 31  # header + 30
    save_screenshot(browser, "dashboard-search")


def test_failed_job_screenshot_is_one_click_away(
    browser: WebDriver, dashboard: str, engine: Engine, settings: Settings
) -> None:
    failed = seed_failed_job(engine, settings, browser)
    browser.get(dashboard + "/")
    browser.find_element(By.CSS_SELECTOR, f"#failure-{failed} a.screenshot-link").click()
    WebDriverWait(browser, WAIT_S).until(lambda d: d.current_url.endswith(".png"))
    assert browser.execute_script("return document.contentType") == "image/png"
    width = browser.execute_script("return document.images[0].naturalWidth")
    assert width > 100  # the real screenshot, not a broken image

    browser.get(dashboard + "/")
    browser.find_element(By.CSS_SELECTOR, f"#failure-{failed}").find_element(
        By.LINK_TEXT, "html"
    ).click()
    WebDriverWait(browser, WAIT_S).until(lambda d: d.current_url.endswith(".html"))
    assert browser.execute_script("return document.contentType") == "text/plain"
    assert "Out of stock" in browser.page_source


def test_pause_stops_assignment_until_resumed(
    browser: WebDriver, dashboard: str, engine: Engine, settings: Settings
) -> None:
    add_hosts(engine, {"h1": 3})
    publish_status(settings.state_dir, "h1")
    submit(engine, [NewJob("noop", {}) for _ in range(5)])
    producer = Producer(settings, engine)
    try:
        unlock(browser, dashboard)
        browser.find_element(By.NAME, "reason").send_keys("database maintenance")
        browser.find_element(By.ID, "pause-button").click()
        wait_for_text(browser, "#paused-banner", "database maintenance")
        save_screenshot(browser, "dashboard-paused")

        report = producer.run_cycle()
        assert report.leader and report.error is None
        assert report.assigned == 0

        browser.find_element(By.ID, "resume-button").click()
        wait_for_text(browser, "#assignment-state", "running")
        assert producer.run_cycle().assigned == 3
    finally:
        producer.close()


def test_controls_need_the_token(
    browser: WebDriver, dashboard: str, engine: Engine, settings: Settings
) -> None:
    add_hosts(engine, {"h1": 3})
    # In the browser: the token field left empty.
    browser.get(dashboard + "/")
    browser.find_element(By.ID, "pause-button").click()
    wait_for_text(browser, "h1", "403")
    assert "token" in browser.find_element(By.ID, "message").text
    # Over HTTP: missing and wrong tokens are 403, and nothing changed.
    assert post(dashboard + "/control/assignment", {"action": "pause"}) == 403
    assert post(dashboard + "/control/assignment", {"action": "pause", "token": "x" * 30}) == 403
    assert post(dashboard + "/control/hosts/h1", {"action": "drain", "token": "nope"}) == 403
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT state FROM hosts")).scalar_one() == "active"
        assert not conn.execute(sa.text("SELECT count(*) FROM fleet_control")).scalar_one()
    # The right token works, so the refusals above were about the token.
    assert post(dashboard + "/control/hosts/h1", {"action": "drain", "token": TOKEN}) == 200


def test_read_only_without_a_configured_token(engine: Engine, settings: Settings) -> None:
    read_only = settings.model_copy(update={"dashboard_token": None})
    server = DashboardServer(create_app(read_only, engine), "127.0.0.1", 0).start()
    try:
        with urllib.request.urlopen(server.url + "/", timeout=5) as page:
            assert b"read-only" in page.read()
        assert post(server.url + "/control/assignment", {"action": "pause", "token": TOKEN}) == 403
    finally:
        server.close()


def test_bad_search_shows_a_message(browser: WebDriver, dashboard: str) -> None:
    browser.get(dashboard + "/")
    browser.find_element(By.NAME, "id").send_keys("12; DROP TABLE jobs")
    browser.find_element(By.ID, "search-button").click()
    assert "whole number" in wait_for_text(browser, "#message", "job id")
    for path in ("/jobs/abc", "/jobs?status=bogus", "/jobs?id=99999999999999999999999"):
        browser.get(dashboard + path)
        assert browser.find_element(By.ID, "message").text
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(dashboard + path, timeout=5)
        assert refused.value.code == 400, path
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(dashboard + "/artifacts/../../etc/passwd", timeout=5)
    assert answer.value.code == 404
