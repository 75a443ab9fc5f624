"""The ``crawl_browser`` action: a crawl's page loaded in the job's own browser context, so its
links are read after the page's scripts ran (the DOM, not the HTML the server sent). Params and
the rules a crawl carries on are common.crawl.action's; so is what it returns and spawns."""

from __future__ import annotations

from typing import Any

from scrapefleet.common.actions.registry import register
from scrapefleet.common.actions.spawn import Spawned
from scrapefleet.common.crawl.action import (
    BROWSER_CRAWL_KIND,
    BrowserCrawlParams,
    crawled_page,
    delay_of,
    must_retry,
    robots_agent,
    robots_filter,
    robots_skip,
    site_robots,
    skipped_page,
)
from scrapefleet.common.settings import load_settings
from scrapefleet.consumer.browser.actions.selenium_actions import (
    HttpError,
    read_page,
    translated_errors,
    wait_for_selector,
)


@register(BROWSER_CRAWL_KIND, BrowserCrawlParams, needs_browser=True)
def crawl_browser(driver: Any, params: BrowserCrawlParams) -> Spawned:
    # robots.txt is read over HTTP with the host's http_* settings, and matched on the product
    # token of the browser's User-Agent when one is set, else of the product's (Chromium's
    # names no crawler), or on crawl_robots_token.
    settings = load_settings()
    user_agent = settings.browser_user_agent or settings.http_agent()
    host_proxy = settings.http_proxy.get_secret_value() if settings.http_proxy else None
    robots = site_robots(params, settings, user_agent=user_agent, proxy=host_proxy)
    agent = robots_agent(user_agent, settings.crawl_robots_token)
    if reason := robots_skip(robots, params.url, agent):
        return skipped_page(params, reason)
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
        # The charset the browser decoded the page with: its links' queries are sent in it.
        encoding = str(driver.execute_script("return document.characterSet") or "utf-8")
    return crawled_page(
        params,
        BROWSER_CRAWL_KIND,
        final_url=final_url,
        status=status,
        title=page["title"],
        html=html,
        encoding=encoding,
        allowed=robots_filter(robots, agent, params.url),
        **delay_of(robots, agent),
    )
