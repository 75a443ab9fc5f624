"""What a crawl reads from a page served over real HTTP on 127.0.0.1: one key per page
whatever spelling its links use, its text decoded as a browser decodes it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from scrapefleet.common.builtin_actions import HttpGetParams, http_get
from scrapefleet.common.crawl_action import CrawlParams, crawl
from scrapefleet.common.spawn import Spawned
from tests.integration.page_server import PageSite, serve_pages

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


@pytest.fixture
def site() -> Iterator[PageSite]:
    with serve_pages() as served:
        yield served


def _crawl(site: PageSite, path: str, **rules: Any) -> Spawned:
    return crawl(CrawlParams.model_validate({"url": site.url(path)} | rules))


def _keys(page: Spawned) -> list[str]:
    return [entry["dedupe_key"] for entry in page.spawn if isinstance(entry, dict)]


def test_every_spelling_of_a_link_is_one_job(site: PageSite) -> None:
    hrefs = [
        "/a/../b/./c",
        "/b/c",
        "b/c",
        "/x/%2e%2e/b/c#part",
        "/caf%c3%a9",
        "/caf%C3%A9",
        "/café",
        f"http://127.0.0.1:{site.port}/%7euser",
        "/~user",
    ]
    site.page("/", "<title>Links</title>" + "".join(f'<a href="{h}">l</a>' for h in hrefs))
    assert _keys(_crawl(site, "/")) == [
        site.url("/b/c"),
        site.url("/caf%C3%A9"),
        site.url("/~user"),
    ]


def test_a_windows_1252_page_served_as_latin1_has_the_title_browsers_show(
    site: PageSite,
) -> None:
    body = b'<title>\x93Quoted\x94 \x80 5</title><a href="/caf\xe9">x</a>'
    site.page("/", body, ctype="text/html; charset=iso-8859-1")
    page = _crawl(site, "/", fields={"word": r"(Quoted\S)"})
    assert page.result["title"] == "\u201cQuoted\u201d \u20ac 5"
    assert page.result["fields"] == {"word": "Quoted\u201d"}
    assert _keys(page) == [site.url("/caf%C3%A9")]  # the link's é, decoded right
    fetched = http_get(HttpGetParams(url=site.url("/")))
    assert fetched["title"] == "\u201cQuoted\u201d \u20ac 5"
