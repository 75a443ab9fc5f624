"""A crawl obeys the site's robots.txt (real HTTP on 127.0.0.1): a disallowed page is skipped
with the reason, not fetched; disallowed links are not followed; the file is read once per
site; ``ignore_robots`` and the setting turn it off; a site that cannot say fails the attempt.
The User-Agent names the product and the operator's contact."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from scrapefleet.common.actions.builtin import HttpGetParams, http_get
from scrapefleet.common.actions.spawn import Spawned
from scrapefleet.common.crawl.action import CrawlParams, crawl
from scrapefleet.common.crawl.robots import RobotsUnreachable
from tests.integration.page_server import PageSite, serve_pages

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]

ROBOTS = """\
User-agent: scrapefleet
Disallow: /private
Allow: /private/open
Crawl-delay: 1.5

User-agent: *
Disallow: /
"""


@pytest.fixture
def site() -> Iterator[PageSite]:
    with serve_pages() as served:
        served.page("/robots.txt", ROBOTS, ctype="text/plain")
        links = "".join(f'<a href="{p}">{p}</a>' for p in ("/a", "/private/x", "/private/open"))
        served.page("/", f"<title>Home</title>{links}")
        served.page("/private/x", "<title>Secret</title>")
        yield served


def _crawl(site: PageSite, path: str, **rules: Any) -> Spawned:
    return crawl(CrawlParams.model_validate({"url": site.url(path)} | rules))


def _urls(page: Spawned) -> list[str]:
    return [entry["payload"]["url"] for entry in page.spawn if isinstance(entry, dict)]


def test_disallowed_links_are_not_followed_and_robots_is_read_once(site: PageSite) -> None:
    home = _crawl(site, "/")
    assert _urls(home) == [site.url("/a"), site.url("/private/open")]
    assert home.result["links_disallowed"] == 1
    assert home.result["crawl_delay_s"] == 1.5  # the producer spaces the site's pages by it
    _crawl(site, "/a")
    _crawl(site, "/private/open")
    assert site.hits["/robots.txt"] == 1


def test_a_disallowed_page_is_skipped_with_the_reason_unfetched(site: PageSite) -> None:
    page = _crawl(site, "/private/x")
    assert page.result["skipped"] == (
        f"disallowed by {site.url('/robots.txt')} for this user agent"
    )
    assert list(page.spawn) == []
    assert site.hits["/private/x"] == 0


def test_robots_are_matched_against_the_user_agent_sent(site: PageSite) -> None:
    page = _crawl(site, "/a", user_agent="OtherBot/1.0")  # the "*" group: nothing allowed
    assert "skipped" in page.result
    assert site.hits["/a"] == 0


def test_ignore_robots_fetches_it_all(site: PageSite) -> None:
    page = _crawl(site, "/private/x", ignore_robots=True)
    assert page.result["title"] == "Secret"
    assert site.hits["/robots.txt"] == 0
    assert _crawl(site, "/", ignore_robots=True).result["links_disallowed"] == 0


def test_the_setting_turns_it_off(site: PageSite, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRAPEFLEET_CRAWL_OBEY_ROBOTS", "false")
    assert _crawl(site, "/private/x").result["title"] == "Secret"


def test_no_robots_txt_allows_everything() -> None:
    with serve_pages() as bare:
        bare.page("/", '<title>Bare</title><a href="/x">x</a>')
        page = _crawl(bare, "/")
        assert (page.result["title"], _urls(page)) == ("Bare", [bare.url("/x")])
        assert bare.hits["/robots.txt"] == 1


def test_a_robots_txt_that_cannot_answer_fails_the_attempt() -> None:
    with serve_pages() as broken:
        broken.page("/robots.txt", "down", status=503, ctype="text/plain")
        broken.page("/", "<title>Up</title>")
        with pytest.raises(RobotsUnreachable, match="HTTP 503"):
            _crawl(broken, "/")
        assert broken.hits["/"] == 0


def test_the_user_agent_names_the_contact(site: PageSite, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRAPEFLEET_HTTP_CONTACT_URL", "https://ops.example.org/bot")
    _crawl(site, "/")
    assert set(site.user_agents) == {"scrapefleet/0.1 (+https://ops.example.org/bot)"}


def test_http_get_obeys_robots_when_asked(site: PageSite) -> None:
    asked = http_get(HttpGetParams(url=site.url("/private/x"), obey_robots=True))
    assert asked["skipped"] == f"disallowed by {site.url('/robots.txt')} for this user agent"
    assert site.hits["/private/x"] == 0
    assert http_get(HttpGetParams(url=site.url("/private/x")))["title"] == "Secret"  # default


CONTACT_ROBOTS = """\
User-agent: *
Disallow: /private/

User-agent: {group}
{rule}
"""


@pytest.mark.parametrize(
    ("group", "rule", "path", "fetched"),
    [
        ("example", "Allow: /", "/private/x", False),  # a word of the contact's host
        ("bot", "Disallow: /", "/a", True),  # a word of the contact's path
        ("ops", "Disallow: /", "/a", True),
        ("scrapefleet", "Disallow: /", "/a", False),  # the product token is the name
    ],
)
def test_groups_are_matched_on_the_product_token_not_the_contact_url(
    monkeypatch: pytest.MonkeyPatch, group: str, rule: str, path: str, fetched: bool
) -> None:
    monkeypatch.setenv("SCRAPEFLEET_HTTP_CONTACT_URL", "https://ops.example.org/bot")
    with serve_pages() as served:
        served.page(
            "/robots.txt", CONTACT_ROBOTS.format(group=group, rule=rule), ctype="text/plain"
        )
        served.page("/a", "<title>A</title>")
        served.page("/private/x", "<title>Secret</title>")
        page = _crawl(served, path)
        assert ("skipped" not in page.result) is fetched, page.result
        assert served.hits[path] == int(fetched)


def test_the_robots_token_can_be_set(site: PageSite, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRAPEFLEET_CRAWL_ROBOTS_TOKEN", "otherbot")  # the "*" group here
    assert "skipped" in _crawl(site, "/a").result
    assert site.hits["/a"] == 0
