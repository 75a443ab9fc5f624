"""robots.txt rules and their per-consumer cache, as pure values: what an answer means, the
lifetime, the bound on sites, one read per site however many threads ask."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from scrapefleet.common.crawl.robots import (
    ALLOW_ALL,
    RobotsCache,
    RobotsRules,
    RobotsUnreachable,
    product_token,
    robots_url,
    rules_from_answer,
)

RULES = b"User-agent: scrapefleet\nDisallow: /private\nCrawl-delay: 2\nSitemap: /map.xml\n"


def test_an_answer_means_rules_none_or_unknown() -> None:
    rules = rules_from_answer("http://a.test/robots.txt", 200, RULES)
    assert not rules.allows("http://a.test/private/1", "scrapefleet/0.1 (+mailto:x@a.test)")
    assert rules.allows("http://a.test/public", "scrapefleet/0.1")
    assert rules.allows("http://a.test/private/1", "OtherBot")
    assert rules.crawl_delay("scrapefleet/0.1") == 2.0
    assert rules_from_answer("u", 404, b"").allows("http://a.test/x", "any")
    for status in (500, 503, None):
        with pytest.raises(RobotsUnreachable):
            rules_from_answer("u", status, b"")


@pytest.mark.parametrize(
    ("page", "robots"),
    [
        ("http://A.test:8080/x/y?q#f", "http://A.test:8080/robots.txt"),
        ("https://user:pw@b.test/", "https://b.test/robots.txt"),
    ],
)
def test_the_robots_url_is_the_sites_root(page: str, robots: str) -> None:
    assert robots_url(page) == robots


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_rules_are_kept_for_their_lifetime_and_for_a_bounded_number_of_sites() -> None:
    clock = _Clock()
    cache = RobotsCache(ttl_s=60, max_sites=2, clock=clock)
    reads: list[str] = []

    def read(url: str) -> RobotsRules:
        reads.append(url)
        return ALLOW_ALL

    cache.rules("http://a.test/1", read)
    cache.rules("http://a.test/2", read)
    assert reads == ["http://a.test/robots.txt"]
    clock.now = 60
    cache.rules("http://a.test/3", read)  # expired: read again
    cache.rules("http://b.test/", read)
    cache.rules("http://c.test/", read)  # a.test, the least recently used, is dropped
    cache.rules("http://a.test/4", read)
    assert reads[1:] == [f"http://{s}.test/robots.txt" for s in "abca"]


def test_a_failed_read_is_not_kept() -> None:
    cache = RobotsCache()

    def fail(url: str) -> RobotsRules:
        raise RobotsUnreachable(url)

    with pytest.raises(RobotsUnreachable):
        cache.rules("http://a.test/", fail)
    assert cache.rules("http://a.test/", lambda _url: ALLOW_ALL) is ALLOW_ALL


def test_one_read_per_site_however_many_threads_ask() -> None:
    cache = RobotsCache()
    started = threading.Event()
    reads = 0

    def slow_read(url: str) -> RobotsRules:
        nonlocal reads
        reads += 1
        started.set()
        threading.Event().wait(0.2)  # the others arrive while this read is under way
        return ALLOW_ALL

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: cache.rules("http://a.test/", slow_read), range(8)))
    assert reads == 1


@pytest.mark.parametrize(
    ("user_agent", "token"),
    [
        ("scrapefleet/0.1 (+https://ops.example.org/bot)", "scrapefleet"),
        ("scrapefleet", "scrapefleet"),
        ("My_Bot-2/1.0", "My_Bot-2"),
        ("Mozilla/5.0 (X11; Linux x86_64) Chrome/120", "Mozilla"),
        ("42bot/1", "42bot"),
    ],
)
def test_the_product_token_is_the_user_agents_first_name(user_agent: str, token: str) -> None:
    assert product_token(user_agent) == token
