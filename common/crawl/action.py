"""The built-in ``crawl`` action: fetch one page over HTTP, return what it says, and spawn one
``crawl`` job per link of the crawl's site not seen before.

Its params are ``http_get``'s (proxy, headers, cookies, user agent, timeout) plus the crawl's
rules, which every child carries on: ``site`` (the seed's host[:port]; set by ``scrapefleet
crawl``, else the page's own; moved by the seed's redirect to another site, the payload's
``seed``), ``same_site``, ``same_domain`` (any host of the site's registrable domain),
``include`` / ``exclude`` (regular expressions searched in the normalised link), ``fields``
(name -> a CSS, XPath or regex spec, or a plain regular expression searched in the page's HTML:
common.actions.page_fields) and ``max_links`` (children per page).

A status of 429 or 500 and above fails the attempt (it is retried, the server may recover);
any other status completes the job with that status and, for an error page, no links, since
a page that is gone is gone next time too. ``fail_on_status`` true fails every status >= 400.
The child's payload ``url`` is the normalised link and its dedupe key, so the crawl fetches it
once whatever spelling the links use (common.crawl.links).

Each page first asks its site's robots.txt (common.crawl.robots; read once per site per consumer and
kept ROBOTS_TTL_S) whether the job's User-Agent may fetch it: a disallowed page completes as
skipped, with the reason and no request for it; disallowed links are not spawned (counted in
``links_disallowed``). ``ignore_robots`` (carried on) or the setting ``crawl_obey_robots`` off
lift it. A page reports its site's Crawl-delay (``crawl_delay_s``), which the producer keeps.

A job with ``sitemap`` true reads its URL as a sitemap, a sitemap index or a robots.txt
(common.crawl.sitemaps) and spawns the sitemaps (as sitemap jobs) or the pages it lists.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from scrapefleet.common.actions.browser_params import validate_web_url
from scrapefleet.common.actions.builtin import HttpGetParams, fetch_page, job_proxy, job_user_agent
from scrapefleet.common.actions.page_budget import page_budget
from scrapefleet.common.actions.page_fields import PageFields, read_fields
from scrapefleet.common.actions.registry import register
from scrapefleet.common.actions.spawn import MAX_SPAWN_PER_ATTEMPT, Spawned
from scrapefleet.common.constants import ROBOTS_MAX_BYTES
from scrapefleet.common.crawl.links import (
    MAX_LINK_CHARS,
    LinkRules,
    compile_patterns,
    extract_links,
    normalise_url,
    registrable_domain,
    site_of,
    unique,
)
from scrapefleet.common.crawl.robots import (
    ALLOW_ALL,
    RobotsRules,
    robots_agent,
    robots_skip,
    robots_url,
    rules_from_answer,
    site_rules,
)
from scrapefleet.common.crawl.sitemaps import SitemapKind, SitemapList, read_sitemap
from scrapefleet.common.errors import ScrapefleetError

CRAWL_KIND = "crawl"
BROWSER_CRAWL_KIND = "crawl_browser"
RETRY_STATUSES = frozenset({429})  # and every status >= 500
HTML_TYPES = ("text/html", "application/xhtml+xml")

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from scrapefleet.common.http.client import Fetched
    from scrapefleet.common.settings import Settings


class CrawlRules(BaseModel):
    """What every page's job of a crawl carries on to its children."""

    site: str | None = Field(default=None, description="host[:port] the crawl stays on")
    same_site: bool = True
    same_domain: bool = Field(
        default=False, description="stay on any host of the site's registrable domain"
    )
    seed: bool = Field(
        default=False,
        description="the crawl's first page: a redirect to another site moves the crawl there",
    )
    include: list[str] = Field(default_factory=list, description="regexes; one must match")
    exclude: list[str] = Field(default_factory=list, description="regexes; none may match")
    fields: PageFields = Field(
        default_factory=dict, description="name -> spec (common.actions.page_fields)"
    )
    max_links: int = Field(default=MAX_SPAWN_PER_ATTEMPT, ge=0, le=MAX_SPAWN_PER_ATTEMPT)
    ignore_robots: bool = Field(default=False, description="fetch what robots.txt disallows")
    sitemap: bool = Field(
        default=False, description="the URL is a sitemap, sitemap index or robots.txt to start from"
    )

    @field_validator("include", "exclude")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        compile_patterns(value, "patterns")
        return value

    def page_url(self) -> str:
        raise NotImplementedError  # the params model's url

    def crawl_site(self) -> str:
        url = self.page_url()
        return self.site or site_of(normalise_url(url) or url)

    def rules(self) -> LinkRules:
        by_domain = self.same_site and self.same_domain
        return LinkRules(
            site=self.crawl_site() if self.same_site and not by_domain else None,
            include=compile_patterns(self.include, "include"),
            exclude=compile_patterns(self.exclude, "exclude"),
            domain=registrable_domain(self.crawl_site()) if by_domain else None,
        )


class CrawlParams(HttpGetParams, CrawlRules):
    fail_on_status: bool = False  # True: every status >= 400 fails, as with http_get

    @field_validator("obey_robots")
    @classmethod
    def _crawls_obey(cls, value: bool) -> bool:
        if value:  # http_get's switch: a crawl obeys robots.txt unless told to ignore it
            raise ValueError("crawls obey robots.txt already (ignore_robots turns it off)")
        return value

    def page_url(self) -> str:
        return self.url


class BrowserCrawlParams(CrawlRules):
    """A crawl's page loaded in the host's browser (its links after scripts ran)."""

    model_config = ConfigDict(extra="forbid")

    url: str
    wait_for: str | None = Field(default=None, min_length=1, description="CSS selector")
    wait_timeout_s: float = Field(default=10.0, gt=0, le=300)

    _url = field_validator("url")(validate_web_url)

    @field_validator("sitemap")
    @classmethod
    def _pages_only(cls, value: bool) -> bool:
        if value:
            raise ValueError("sitemaps are read over HTTP: start them as crawl jobs")
        return value

    def page_url(self) -> str:
        return self.url


def child_jobs(
    params: CrawlRules,
    links: list[str],
    kind: str,
    allowed: Callable[[str], bool],
    *,
    sitemaps: bool = False,
) -> tuple[list[dict[str, Any]], int]:
    """One job per kept link that ``allowed`` (robots.txt) lets the crawl fetch, carrying the
    crawl's rules on; and how many kept links ``allowed`` refused. ``sitemaps``: the links are
    sitemaps, kept by the site rule alone (include/exclude are about pages)."""
    rules = params.rules()
    carried = params.model_dump(exclude_defaults=True, exclude={"sitemap", "seed"})
    carried |= {"site": params.crawl_site()} | ({"sitemap": True} if sitemaps else {})
    if sitemaps:
        kept = [link for link in links if rules.in_scope(link)]
        permitted = kept
    else:
        kept = [link for link in links if rules.keeps(link)]
        permitted = [link for link in kept if allowed(link)]
    return [
        {"kind": kind, "payload": carried | {"url": link}, "dedupe_key": link}
        for link in permitted[: params.max_links]
    ], len(kept) - len(permitted)


def crawled_page(
    params: CrawlRules,
    kind: str,
    *,
    final_url: str,
    status: int | None,
    title: str | None,
    html: str,
    encoding: str = "utf-8",
    allowed: Callable[[str], bool] = lambda _url: True,
    **extra: Any,
) -> Spawned:
    """What a crawl job returns for a fetched page: its result, and one child per new link
    (none from an error page). The seed that redirected to another site moves the crawl's
    site there (``site_moved``): ``crawl https://python.org/`` crawls www.python.org."""
    ok = html and (status or 200) < 400
    moved = seed_redirect(params, final_url)
    if moved is not None:
        params = params.model_copy(update={"site": moved})
        extra["site_moved"] = f"the seed redirected to {moved}: the crawl follows it there"
        log.info("crawl of %s: %s", params.page_url(), extra["site_moved"])
    with page_budget():  # the links the patterns keep and the fields, together
        links = extract_links(html, final_url, encoding) if ok else []
        children, disallowed = child_jobs(params, links, kind, allowed)
        fields = read_fields(html, final_url, params.fields)
    result = {
        "url": params.page_url(),
        "final_url": final_url,
        "status": status,
        "title": title,
        "fields": fields,
        "links_found": len(links),
        "links_followed": len(children),  # offered to the crawl; seen ones are dropped there
        "links_disallowed": disallowed,  # by the site's robots.txt
        **extra,
    }
    return Spawned(result, children)


def seed_redirect(params: CrawlRules, final_url: str) -> str | None:
    """The site a crawl moves to when its seed redirected off the crawl's site, or None."""
    if not params.seed or not params.same_site:
        return None
    landed = normalise_url(final_url)
    if landed is None:
        return None
    site = site_of(landed)
    if site == params.crawl_site():
        return None
    if params.same_domain and registrable_domain(site) == registrable_domain(params.crawl_site()):
        return None  # still within the crawl's domain
    return site


def sitemap_page(
    params: CrawlParams, fetched: Fetched, max_bytes: int, allowed: Callable[[str], bool]
) -> Spawned:
    """What a crawl's sitemap job returns: the sitemaps it lists (each a sitemap job) or the
    pages (each a page job of the crawl), by the crawl's rules; none from an error page."""
    listed = SitemapList(SitemapKind.EMPTY, [])
    if fetched.status < 400 and fetched.decoded:
        listed = read_sitemap(params.url, fetched.body, max_bytes)
    urls = unique(
        u
        for u in (normalise_url(loc) for loc in listed.urls if len(loc) <= MAX_LINK_CHARS)
        if u is not None and len(u) <= MAX_LINK_CHARS
    )
    with page_budget():
        children, disallowed = child_jobs(
            params, urls, CRAWL_KIND, allowed, sitemaps=listed.lists_sitemaps
        )
    result = {
        "url": params.url,
        "final_url": fetched.final_url,
        "status": fetched.status,
        "sitemap": listed.kind.value,
        "urls_found": len(urls),
        "links_followed": len(children),
        "links_disallowed": disallowed,
        "bytes": len(fetched.body),
        "truncated": fetched.truncated or listed.truncated,
    }
    return Spawned(result, children)


def skipped_page(params: CrawlRules, reason: str) -> Spawned:
    """What a crawl job returns for a page it must not fetch: the reason, no children."""
    result = {"url": params.page_url(), "status": None, "title": None, "skipped": reason}
    return Spawned(result, [])


def site_robots(
    params: CrawlRules,
    settings: Settings,
    *,
    user_agent: str,
    proxy: str | None,
    read: Callable[[str], RobotsRules] | None = None,
) -> RobotsRules:
    """The robots.txt rules of the page's site (common.crawl.robots.site_rules); every page allowed
    when the crawl or the host's settings say to ignore them."""
    if params.ignore_robots or not settings.crawl_obey_robots:
        return ALLOW_ALL
    from scrapefleet.common.http.job_egress import Egress

    egress = Egress.from_settings(settings)
    return site_rules(
        params.page_url(), user_agent=user_agent, proxy=proxy, egress=egress, read=read
    )


def must_retry(status: int | None) -> bool:
    """A status the server may answer differently soon: the attempt fails and is retried."""
    return status is not None and (status in RETRY_STATUSES or status >= 500)


@register(CRAWL_KIND, CrawlParams)
def crawl(params: CrawlParams) -> Spawned:
    from scrapefleet.common.http import client as http_client
    from scrapefleet.common.http.page_text import decode_page, parse_title
    from scrapefleet.common.settings import load_settings

    settings = load_settings()
    user_agent = job_user_agent(params, settings)
    if params.sitemap:
        return crawled_sitemap(params, settings, user_agent)
    robots = site_robots(params, settings, user_agent=user_agent, proxy=job_proxy(params, settings))
    agent = robots_agent(user_agent, settings.crawl_robots_token)
    if reason := robots_skip(robots, params.url, agent):
        return skipped_page(params, reason)
    fetched = fetch_page(params, settings)
    if must_retry(fetched.status):
        raise http_client.HTTPStatusFailure(f"HTTP {fetched.status} from {params.url}")
    content_type = fetched.headers.get("content-type")
    html, encoding = "", "utf-8"
    if fetched.decoded and (content_type is None or content_type.startswith(HTML_TYPES)):
        html, encoding = decode_page(fetched.body, content_type)
    return crawled_page(
        params,
        CRAWL_KIND,
        final_url=fetched.final_url,
        status=fetched.status,
        title=parse_title(fetched.body, content_type) if html else None,
        html=html,
        encoding=encoding,
        allowed=robots_filter(robots, agent, params.url),
        bytes=len(fetched.body),
        truncated=fetched.truncated,
        **delay_of(robots, agent),
    )


def crawled_sitemap(params: CrawlParams, settings: Settings, user_agent: str) -> Spawned:
    """A crawl's sitemap job. A sitemap is addressed to crawlers: its own URL is not asked
    about, the pages it lists are; a robots.txt fetched as the seed is the site's rules too."""
    from scrapefleet.common.http import client as http_client

    fetched = fetch_page(params, settings)
    if must_retry(fetched.status):
        raise http_client.HTTPStatusFailure(f"HTTP {fetched.status} from {params.url}")
    read = None
    if robots_url(params.url) == params.url:
        read = partial(_rules_from, fetched)
    proxy = job_proxy(params, settings)
    robots = site_robots(params, settings, user_agent=user_agent, proxy=proxy, read=read)
    allowed = partial(_robots_allow, robots, robots_agent(user_agent, settings.crawl_robots_token))
    return sitemap_page(params, fetched, settings.http_max_body_bytes, allowed)


def _rules_from(fetched: Fetched, url: str) -> RobotsRules:
    return rules_from_answer(url, fetched.status, fetched.body[:ROBOTS_MAX_BYTES])


def delay_of(robots: RobotsRules, user_agent: str) -> dict[str, float]:
    """The site's Crawl-delay for the result (the producer spaces the site's jobs by it)."""
    delay = robots.crawl_delay(user_agent)
    return {} if delay is None else {"crawl_delay_s": delay}


def _robots_allow(robots: RobotsRules, user_agent: str, url: str) -> bool:
    return robots.allows(url, user_agent)


def robots_filter(robots: RobotsRules, user_agent: str, page_url: str) -> Callable[[str], bool]:
    """Whether a link may be spawned: by the page's site's robots.txt for a link on that site;
    a link on another site (the seed's redirect, a domain or any-site crawl) is asked of its
    own site's robots.txt when its job runs."""
    own = robots_url(page_url)

    def allowed(url: str) -> bool:
        return robots_url(url) != own or robots.allows(url, user_agent)

    return allowed


def _runs_on_a_consumer(_driver: Any, _params: BaseModel) -> dict[str, Any]:
    raise ScrapefleetError(
        "crawl_browser runs in scrapefleet.consumer"
        " (import scrapefleet.consumer.browser.actions.crawl_browser)"
    )


# Declared here so that submit and spawn validate it; consumer.browser.actions.crawl_browser runs
# it.
register(BROWSER_CRAWL_KIND, BrowserCrawlParams, needs_browser=True)(_runs_on_a_consumer)
