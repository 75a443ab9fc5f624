"""The ``crawl_browser`` action: a crawl's page loaded in the job's own browser context, so its
links are read after the page's scripts ran (the DOM, not the HTML the server sent). Params and
the rules a crawl carries on are common.crawl_action's; so is what it returns and spawns."""

from __future__ import annotations

from typing import Any

from scrapefleet.common.actions import register
from scrapefleet.common.crawl_action import (
    BROWSER_CRAWL_KIND,
    BrowserCrawlParams,
    crawled_page,
    must_retry,
)
from scrapefleet.common.spawn import Spawned
from scrapefleet.consumer.selenium_actions import (
    HttpError,
    read_page,
    translated_errors,
    wait_for_selector,
)


@register(BROWSER_CRAWL_KIND, BrowserCrawlParams, needs_browser=True)
def crawl_browser(driver: Any, params: BrowserCrawlParams) -> Spawned:
    with translated_errors(f"loading {params.url}"):
        driver.get(params.url)
    page = read_page(driver, {}, params.url)
    status = page["status"] if isinstance(page["status"], int) else None
    if must_retry(status):
        raise HttpError(f"loading {params.url}: HTTP {status}")
    if params.wait_for and (status or 200) < 400:
        wait_for_selector(driver, params.wait_for, params.wait_timeout_s)
    with translated_errors(f"reading {params.url}"):
        html = driver.page_source
        final_url = driver.current_url
    return crawled_page(
        params,
        BROWSER_CRAWL_KIND,
        final_url=final_url,
        status=status,
        title=page["title"],
        html=html,
    )
