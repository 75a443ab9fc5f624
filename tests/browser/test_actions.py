"""fetch_page and screenshot against the local test site, on the shared stack."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from scrapefleet.common.actions import get_action
from scrapefleet.common.errors import SubmitError
from scrapefleet.consumer.browser_stack import BrowserStack, StackWebDriver
from scrapefleet.consumer.selenium_actions import (
    FetchPageParams,
    HttpError,
    PageLoadTimeout,
    RendererCrashed,
    ScreenshotParams,
    SelectorNotFound,
    fetch_page,
    navigate,
    screenshot,
)
from tests.browser.site import LocalSite

pytestmark = [pytest.mark.browser, pytest.mark.timeout(60)]


def test_actions_are_registered_as_browser_actions() -> None:
    for name in ("fetch_page", "screenshot"):
        assert get_action(name).needs_browser


@pytest.mark.parametrize("url", ["file:///etc/passwd", "chrome://crash", "ftp://x/", "http://"])
def test_only_http_urls_are_accepted(url: str) -> None:
    with pytest.raises(SubmitError, match="url"):
        get_action("fetch_page").validate({"url": url})


def test_fetch_page_returns_title_final_url_and_fields(
    driver: StackWebDriver, site: LocalSite
) -> None:
    params = FetchPageParams.model_validate(
        {
            "url": site.url("/redirect"),
            "wait_for": "#late",
            "fields": {
                "name": {"css": "h1.name"},
                "link": {"css": "a.more", "attr": "href"},
                "currency": {"css": ".price", "attr": "data-currency"},
                "colours": {"css": "li", "all": True},
                "late": {"css": "#late"},
                "absent": {"css": ".does-not-exist"},
            },
        }
    )
    result = fetch_page(driver, params)
    assert result["title"] == "Widget 42"
    assert result["final_url"] == site.url("/item")
    assert result["fields"] == {
        "name": "Widget",
        "link": site.url("/next"),
        "currency": "EUR",
        "colours": ["red", "green", "blue"],
        "late": "arrived",
        "absent": None,
    }


def test_missing_awaited_selector_names_it(driver: StackWebDriver, site: LocalSite) -> None:
    params = FetchPageParams(url=site.url("/plain"), wait_for="#never", wait_timeout_s=0.5)
    with pytest.raises(SelectorNotFound, match="'#never'"):
        fetch_page(driver, params)


def test_http_500_is_an_error(driver: StackWebDriver, site: LocalSite) -> None:
    with pytest.raises(HttpError, match="HTTP 500"):
        fetch_page(driver, FetchPageParams(url=site.url("/error")))
    allowed = fetch_page(driver, FetchPageParams(url=site.url("/error"), allow_http_errors=True))
    assert allowed["title"] == "Oops"


def test_hung_page_hits_the_page_load_timeout(
    driver: StackWebDriver, site: LocalSite, stack: BrowserStack
) -> None:
    started = time.monotonic()
    with pytest.raises(PageLoadTimeout):
        fetch_page(driver, FetchPageParams(url=site.url("/hang")))
    assert time.monotonic() - started < stack.settings.page_load_timeout_s + 10


def test_renderer_crash_is_an_error_not_a_hang(
    driver: StackWebDriver, stack: BrowserStack, site: LocalSite
) -> None:
    started = time.monotonic()
    with pytest.raises(RendererCrashed):
        navigate(driver, "chrome://crash")
    assert time.monotonic() - started < 15
    # The crash was one tab's: the stack still serves new sessions.
    other = stack.new_driver()
    try:
        assert fetch_page(other, FetchPageParams(url=site.url("/plain")))["title"] == "Plain"
    finally:
        other.quit()


def test_screenshot_is_full_page(driver: StackWebDriver, site: LocalSite, tmp_path: Path) -> None:
    result = screenshot(driver, ScreenshotParams(url=site.url("/long"), output_dir=tmp_path))
    png = Path(result["path"]).read_bytes()
    assert png.startswith(b"\x89PNG") and result["size_bytes"] == len(png)
    assert result["height"] > 4000 > 700  # beyond the 700 px window
    assert result["width"] > 0 and result["title"] == "Long"
