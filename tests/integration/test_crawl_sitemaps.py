"""A crawl started from a site's sitemaps over real HTTP on 127.0.0.1: robots.txt names the
index, the index a plain and a gzip sitemap, those the pages; each level is one crawl job whose
children are the next, by the crawl's rules and robots.txt."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from typing import Any

import pytest

from scrapefleet.common.actions.spawn import Spawned
from scrapefleet.common.crawl.action import BrowserCrawlParams, CrawlParams, crawl
from tests.integration.page_server import PageSite, serve_pages

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def _urlset(urls: list[str]) -> str:
    entries = "".join(f"<url><loc>{u}</loc></url>" for u in urls)
    return f'<?xml version="1.0" encoding="UTF-8"?><urlset {NS}>{entries}</urlset>'


@pytest.fixture
def site() -> Iterator[PageSite]:
    with serve_pages() as s:
        s.page(
            "/robots.txt", f"User-agent: *\nDisallow: /drafts/\nSitemap: {s.url('/index.xml')}\n"
        )
        maps = [s.url("/docs.xml"), s.url("/blog.xml.gz"), "http://other.test/sitemap.xml"]
        entries = "".join(f"<sitemap><loc>{u}</loc></sitemap>" for u in maps)
        s.page("/index.xml", f"<sitemapindex {NS}>{entries}</sitemapindex>", ctype="text/xml")
        docs = [s.url("/docs/a"), s.url("/docs/a#top"), s.url("/drafts/x"), "http://other.test/p"]
        s.page("/docs.xml", _urlset(docs), ctype="application/xml")
        blog = gzip.compress(_urlset([s.url("/blog/1"), s.url("/shop/1")]).encode())
        s.page("/blog.xml.gz", blog, ctype="application/gzip")
        s.page("/docs/a", "<title>Doc A</title>")
        yield s


def _run(payload: dict[str, Any]) -> Spawned:
    return crawl(CrawlParams.model_validate(payload))


def _children(page: Spawned) -> list[dict[str, Any]]:
    return [dict(entry["payload"]) for entry in page.spawn if isinstance(entry, dict)]


def test_a_crawl_starts_from_the_sitemaps_robots_txt_names(site: PageSite) -> None:
    root = _run({"url": site.url("/robots.txt"), "sitemap": True, "exclude": ["/shop/"]})
    assert root.result["sitemap"] == "robots"
    (index_job,) = _children(root)
    assert (index_job["url"], index_job["sitemap"]) == (site.url("/index.xml"), True)

    index = _run(index_job)
    assert index.result["sitemap"] == "index"
    maps = _children(index)
    assert [m["url"] for m in maps] == [site.url("/docs.xml"), site.url("/blog.xml.gz")]

    pages = [page for m in maps for page in _children(_run(m))]
    # On the site, once, not disallowed by robots.txt, not excluded; pages, not sitemaps.
    assert [p["url"] for p in pages] == [site.url("/docs/a"), site.url("/blog/1")]
    assert all("sitemap" not in p and p["exclude"] == ["/shop/"] for p in pages)
    assert _run(pages[0]).result["title"] == "Doc A"
    assert site.hits["/robots.txt"] == 1  # read once: as the seed, and as the rules


def test_a_missing_sitemap_lists_nothing(site: PageSite) -> None:
    gone = _run({"url": site.url("/nowhere.xml"), "sitemap": True})
    assert (gone.result["status"], gone.result["sitemap"], list(gone.spawn)) == (404, "empty", [])


def test_a_browser_crawl_is_no_sitemap() -> None:
    with pytest.raises(ValueError, match="sitemaps are read over HTTP"):
        BrowserCrawlParams.model_validate({"url": "http://a.test/s.xml", "sitemap": True})
