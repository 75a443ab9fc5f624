"""Fixtures of the real browser stack. Skips only when the stack is not installed."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver

from scrapefleet.common.errors import StackError
from scrapefleet.common.settings import Settings, load_settings
from scrapefleet.consumer.browser.stack.browser_stack import BrowserStack, StackWebDriver
from scrapefleet.consumer.browser.stack.host_needs import find_grid_jar
from tests.browser.site import LocalSite
from tests.waiting import scaled

HERE = Path(__file__).parent
# A local headless Chromium for the dashboard's pages (no Grid: the dashboard is not a job).
DASHBOARD_CHROME_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--window-size=1280,1000",
)
DASHBOARD_PAGE_LOAD_S = 10.0


def missing_parts() -> list[str]:
    defaults = load_settings()
    missing = [
        f"{name} ({path})"
        for name, path in (
            ("chromium", defaults.chromium_binary),
            ("chromedriver", defaults.chromedriver_binary),
            ("Xvfb", defaults.xvfb_binary),
            ("java", defaults.java_binary),
        )
        if not path.exists()
    ]
    try:
        find_grid_jar(defaults.grid_jar)
    except StackError:
        missing.append("the selenium-server-4 jar")
    return missing


def pytest_report_header() -> str | None:
    missing = missing_parts()
    return f"browser tests SKIPPED: missing {', '.join(missing)}" if missing else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    missing = missing_parts()
    reason = (
        f"browser stack not installed: missing {', '.join(missing)}; run .ci/install-browser.sh"
    )
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.browser)
            if missing:
                item.add_marker(pytest.mark.skip(reason=reason))


def stack_settings(artifacts_dir: Path) -> Settings:
    # Short timeouts: the hang test waits out a page load, so keep it small.
    return load_settings(
        artifacts_dir=artifacts_dir,
        page_load_timeout_s=3.0,
        script_timeout_s=3.0,
        stack_start_timeout_s=45.0,
        stack_stop_timeout_s=6.0,
        session_create_timeout_s=30.0,
        grid_session_timeout_s=30,
        screen_width_px=1024,
        screen_height_px=700,
    )


@pytest.fixture(scope="session")
def site() -> Iterator[LocalSite]:
    with LocalSite() as running:
        yield running


@pytest.fixture(scope="session")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return stack_settings(tmp_path_factory.mktemp("artifacts"))


@pytest.fixture(scope="session")
def stack(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserStack]:
    """One stack shared by the tests that do not restart or kill it (a start is ~2-3 s)."""
    shared = BrowserStack(settings, "shared", 3, tmp_path_factory.mktemp("shared-stack"))
    with shared:
        yield shared


POOL_STACK_CAPACITY = 6  # above the pools' sizes: the Grid's own cap must not hide a leak


@pytest.fixture(scope="session")
def pool_stack(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrowserStack]:
    """One stack shared by the session pool tests that do not restart it."""
    shared = BrowserStack(
        settings, "pools", POOL_STACK_CAPACITY, tmp_path_factory.mktemp("pool-stack")
    )
    with shared:
        yield shared


def grid_status(stack: BrowserStack) -> dict[str, Any]:
    with stack.grid_open("/status", timeout=5) as response:
        status: dict[str, Any] = json.load(response)["value"]
    return status


def grid_session_ids(stack: BrowserStack) -> set[str]:
    """The sessions the Grid's node holds now, from its own /status."""
    return {
        str(slot["session"]["sessionId"])
        for node in grid_status(stack)["nodes"]
        for slot in node["slots"]
        if slot.get("session")
    }


@pytest.fixture
def driver(stack: BrowserStack) -> Iterator[StackWebDriver]:
    session = stack.new_driver()
    try:
        yield session
    finally:
        with contextlib.suppress(Exception):
            session.quit()


@pytest.fixture
def own_stack_dir(tmp_path: Path) -> Iterator[Path]:
    work = tmp_path / "stack"
    yield work
    shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def dashboard_browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    """One local Chromium per module of dashboard tests, with a profile of its own."""
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in DASHBOARD_CHROME_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    try:
        driver.set_page_load_timeout(scaled(DASHBOARD_PAGE_LOAD_S))
        yield driver
    finally:
        driver.quit()
