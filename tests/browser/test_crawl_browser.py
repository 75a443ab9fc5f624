"""The crawl_browser action in the real browser stack: a page's links as the DOM has them after
its scripts ran, normalised and filtered by the crawl's rules as the HTTP crawl does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from scrapefleet.common.actions.registry import get_action
from scrapefleet.common.actions.spawn import Spawned
from scrapefleet.common.crawl.action import BrowserCrawlParams, CrawlParams, crawl
from scrapefleet.consumer.browser.actions.crawl_browser import crawl_browser
from scrapefleet.consumer.browser.actions.selenium_actions import HttpError
from scrapefleet.consumer.browser.stack.browser_stack import StackWebDriver
from tests.e2e.crawl_site import Site, serve_site
from tests.integration.page_server import serve_pages

pytestmark = [pytest.mark.browser, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def crawl_site() -> Iterator[Site]:
    with serve_site() as served:
        yield served


def _urls(page: Spawned) -> list[str]:
    return [entry["payload"]["url"] for entry in page.spawn if isinstance(entry, dict)]


def _in_browser(driver: StackWebDriver, url: str, **rules: Any) -> Spawned:
    return crawl_browser(driver, BrowserCrawlParams.model_validate({"url": url} | rules))


def test_the_browser_crawl_is_a_browser_action() -> None:
    assert get_action("crawl_browser").needs_browser
    assert not get_action("crawl").needs_browser


def test_links_a_script_adds_are_found_in_the_browser_only(
    driver: StackWebDriver, crawl_site: Site
) -> None:
    page = _in_browser(driver, crawl_site.url("/js"))
    assert page.result["title"] == "Scripted"
    assert page.result["status"] == 200
    assert _urls(page) == [crawl_site.url("/p/1/0")]
    assert [e["kind"] for e in page.spawn if isinstance(e, dict)] == ["crawl_browser"]
    over_http = crawl(CrawlParams.model_validate({"url": crawl_site.url("/js")}))
    assert _urls(over_http) == []


def test_the_same_links_as_over_http(driver: StackWebDriver, crawl_site: Site) -> None:
    rules = {"include": ["/p/2/"], "fields": {"level": r"class=\"?level\"?>(\d+)<"}}
    in_browser = _in_browser(driver, crawl_site.url("/p/1/2"), **rules)
    over_http = crawl(CrawlParams.model_validate({"url": crawl_site.url("/p/1/2")} | rules))
    assert _urls(in_browser) == _urls(over_http) != []
    assert in_browser.result["fields"] == {"level": "1"}


def test_error_pages(driver: StackWebDriver, crawl_site: Site) -> None:
    gone = _in_browser(driver, crawl_site.url("/dead/1/0"))
    assert (gone.result["status"], list(gone.spawn)) == (404, [])
    with pytest.raises(HttpError, match="HTTP 503"):
        _in_browser(driver, crawl_site.url("/busy"))


def test_a_windows_1252_pages_queries_in_its_charset_as_over_http(driver: StackWebDriver) -> None:
    with serve_pages() as site:
        body = b'<title>1252</title><a href="/s?q=\xe9">e</a><a href="/s?q=&#20013;">z</a>'
        site.page("/", body, ctype="text/html; charset=windows-1252")
        over_http = crawl(CrawlParams.model_validate({"url": site.url("/")}))
        in_browser = _in_browser(driver, site.url("/"))
    assert (
        _urls(in_browser)
        == _urls(over_http)
        == [
            site.url("/s?q=%E9"),
            site.url("/s?q=%26%2320013%3B"),
        ]
    )
