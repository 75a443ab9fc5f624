"""robots.txt for crawls: read once per site and kept a while in each consumer, parsed with
Protego (the parser Scrapy and Crawlee use), asked whether the job's User-Agent may fetch a URL.

Groups are matched on the crawler's product token (RFC 9309 2.2.1), not on the whole
User-Agent: the User-Agent carries the operator's contact URL, and a group named after a word of
it (``bot``, ``example``) would otherwise apply to the fleet.

What a site's answer means (RFC 9309): a 2xx body is the rules (cut to ROBOTS_MAX_BYTES);
a 4xx means there are none (everything allowed); a 5xx or no answer at all means the site
cannot say, so the attempt fails and is retried later rather than crawling blind. Only
answers are kept: ROBOTS_TTL_S per site, at most ROBOTS_CACHE_SITES sites, the least recently
used dropped first.

The cache is per consumer process, not in the database: a consumer host is not trusted, and a
robots.txt one host wrote into a shared cache would steer every other host's crawls.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from protego import Protego

from scrapefleet.common.constants import (
    MAX_CRAWL_DELAY_S,
    ROBOTS_CACHE_SITES,
    ROBOTS_MAX_BYTES,
    ROBOTS_TIMEOUT_S,
    ROBOTS_TTL_S,
)
from scrapefleet.common.errors import ScrapefleetError

if TYPE_CHECKING:
    from scrapefleet.common.http.job_egress import Egress

__all__ = [
    "ALLOW_ALL",
    "RobotsCache",
    "RobotsRules",
    "RobotsUnreachable",
    "product_token",
    "robots_agent",
    "robots_skip",
    "robots_url",
    "rules_from_answer",
    "site_rules",
]


# The User-Agent's first product's name (RFC 9110 10.1.5: product = token ["/" version]).
_PRODUCT = re.compile(r"[^\s/();]+")


def product_token(user_agent: str) -> str:
    """The name robots.txt groups are matched on: the User-Agent's first product's name
    (``scrapefleet`` of ``scrapefleet/0.1 (+https://ops.example.org/bot)``)."""
    name = _PRODUCT.match(user_agent.strip())
    return name[0] if name else user_agent.strip()


class RobotsUnreachable(ScrapefleetError, RuntimeError):
    """The site's robots.txt answered 5xx or not at all: its rules are unknown for now."""


@dataclass(frozen=True)
class RobotsRules:
    """One site's rules; ``parsed`` None: everything allowed (no robots.txt)."""

    parsed: Protego | None

    def allows(self, url: str, user_agent: str) -> bool:
        """Whether ``user_agent`` (a User-Agent or its product token) may fetch ``url``."""
        if self.parsed is None:
            return True
        return bool(self.parsed.can_fetch(url, product_token(user_agent)))

    def crawl_delay(self, user_agent: str) -> float | None:
        """Seconds between two requests the site asks of this user agent (``Crawl-delay``, or
        ``Request-rate``'s seconds per request, whichever is longer), at most
        MAX_CRAWL_DELAY_S; None when it asks nothing."""
        if self.parsed is None:
            return None
        token = product_token(user_agent)
        delays = []
        if (delay := self.parsed.crawl_delay(token)) is not None:
            delays.append(float(delay))
        rate = self.parsed.request_rate(token)
        if rate is not None and rate.requests > 0:
            delays.append(rate.seconds / rate.requests)
        return min(max(delays), MAX_CRAWL_DELAY_S) if delays else None

    def sitemaps(self) -> list[str]:
        return [] if self.parsed is None else list(self.parsed.sitemaps)


ALLOW_ALL = RobotsRules(None)


def robots_url(page_url: str) -> str:
    """Where the robots.txt that governs ``page_url`` is: its scheme, host and port's root."""
    parts = urlsplit(page_url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], "/robots.txt", "", ""))


def rules_from_answer(url: str, status: int | None, body: bytes) -> RobotsRules:
    """The rules a site's answer for its robots.txt gives; RobotsUnreachable for 5xx and for
    no answer (``status`` None)."""
    if status is None or status >= 500:
        said = "no answer" if status is None else f"HTTP {status}"
        raise RobotsUnreachable(f"{url}: {said}; its rules are unknown, the page waits")
    if status >= 400:
        return ALLOW_ALL
    if status >= 300:  # a redirect the client did not follow (too many): as if missing
        return ALLOW_ALL
    return RobotsRules(Protego.parse(body.decode("utf-8", "replace")))


class RobotsCache:
    """Each site's rules for ``ttl_s`` seconds, at most ``max_sites`` of them; a site is read
    once however many threads ask for it at the same time."""

    def __init__(
        self,
        *,
        ttl_s: float = ROBOTS_TTL_S,
        max_sites: int = ROBOTS_CACHE_SITES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl_s = ttl_s
        self._max_sites = max_sites
        self._clock = clock
        self._lock = threading.Lock()
        self._rules: OrderedDict[str, tuple[float, RobotsRules]] = OrderedDict()
        self._reading: dict[str, threading.Lock] = {}

    def rules(self, page_url: str, read: Callable[[str], RobotsRules]) -> RobotsRules:
        """The rules for ``page_url``'s site, calling ``read(robots_url)`` when none are kept
        or they are older than the TTL; its exceptions are the caller's."""
        url = robots_url(page_url)
        kept = self._kept(url)
        if kept is not None:
            return kept
        with self._lock:
            site_lock = self._reading.setdefault(url, threading.Lock())
        with site_lock:
            kept = self._kept(url)  # another thread may just have read it
            if kept is not None:
                return kept
            try:
                rules = read(url)
                with self._lock:
                    self._rules[url] = (self._clock(), rules)
                    self._rules.move_to_end(url)
                    while len(self._rules) > self._max_sites:
                        self._rules.popitem(last=False)
            finally:
                with self._lock:
                    self._reading.pop(url, None)
            return rules

    def _kept(self, url: str) -> RobotsRules | None:
        with self._lock:
            entry = self._rules.get(url)
            if entry is None:
                return None
            read_at, rules = entry
            if self._clock() - read_at >= self._ttl_s:
                del self._rules[url]
                return None
            self._rules.move_to_end(url)
            return rules


# This consumer's rules of the sites its jobs visit.
ROBOTS_CACHE = RobotsCache()


def site_rules(
    page_url: str,
    *,
    user_agent: str,
    proxy: str | None,
    egress: Egress,
    read: Callable[[str], RobotsRules] | None = None,
) -> RobotsRules:
    """The rules of ``page_url``'s site, from this consumer's cache or read over HTTP under
    ``egress`` (with ``read`` instead, if given): RobotsUnreachable when the site cannot say,
    EgressRefused when the rule refuses it (the page would be refused too)."""
    from scrapefleet.common.http import client as http_client
    from scrapefleet.common.http.job_egress import EgressRefused

    def fetch(url: str) -> RobotsRules:
        try:
            fetched = http_client.fetch(
                url,
                timeout_s=ROBOTS_TIMEOUT_S,
                max_body_bytes=ROBOTS_MAX_BYTES,
                user_agent=user_agent,
                proxy=proxy,
                egress=egress,
            )
        except EgressRefused:
            raise
        except (TimeoutError, RuntimeError) as exc:
            raise RobotsUnreachable(f"{url}: {exc}; its rules are unknown, the page waits") from exc
        return rules_from_answer(url, fetched.status, fetched.body)

    return ROBOTS_CACHE.rules(page_url, read or fetch)


def robots_agent(user_agent: str, token: str | None) -> str:
    """What the rules are asked about: the setting ``crawl_robots_token`` when set, else the
    product token of the User-Agent sent."""
    return token or product_token(user_agent)


def robots_skip(rules: RobotsRules, url: str, user_agent: str) -> str | None:
    """Why the page is skipped, or None when robots.txt lets this user agent fetch it."""
    if rules.allows(url, user_agent):
        return None
    return f"disallowed by {robots_url(url)} for this user agent"
