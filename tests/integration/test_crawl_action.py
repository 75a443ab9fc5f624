"""The built-in crawl action against the linked test site: what one page returns and which
links it spawns (normalised, on the site, each once, by the crawl's rules)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from scrapefleet.common.actions.spawn import Spawned, validate_spawn
from scrapefleet.common.crawl.action import CrawlParams, crawl
from scrapefleet.common.http.client import HTTPStatusFailure
from scrapefleet.common.ops.commands.crawl_command import CrawlRequest
from tests.e2e.crawl_site import BRANCHING, Site, serve_site
from tests.integration.page_server import serve_pages

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with serve_site() as served:
        yield served


def _crawl(site: Site, path: str, **rules: object) -> Spawned:
    params = CrawlParams.model_validate({"url": site.url(path)} | rules)
    return crawl(params)


def _entries(page: Spawned) -> list[dict[str, Any]]:
    entries = list(page.spawn)
    assert all(isinstance(entry, dict) for entry in entries)
    return [dict(entry) for entry in entries if isinstance(entry, dict)]


def test_a_page_gives_its_title_fields_and_new_links(site: Site) -> None:
    page = _crawl(site, "/p/1/2", fields={"level": r"class=level>(\d+)<", "none": "zzz"})
    assert page.result["status"] == 200
    assert page.result["title"] == "Page 1/2"
    assert page.result["fields"] == {"level": "1", "none": None}
    urls = [entry["payload"]["url"] for entry in _entries(page)]
    children = [site.url(f"/p/2/{2 * BRANCHING + k}") for k in range(BRANCHING)]
    # Children once each despite the fragment and upper-case duplicates; the next page's
    # first child; parent, root, itself; no other site, no mailto.
    assert urls == [
        *children,
        site.url(f"/p/2/{3 * BRANCHING}"),
        site.url("/"),
        site.url("/p/1/2"),
    ]
    for entry in _entries(page):
        assert entry["dedupe_key"] == entry["payload"]["url"]
        assert entry["payload"]["site"] == f"127.0.0.1:{site.port}"
        assert entry["payload"]["fields"]["level"]  # the rules carried on
    assert len(validate_spawn(page.spawn)) == len(urls)  # what the runner will accept


def test_include_and_exclude_choose_the_links(site: Site) -> None:
    page = _crawl(site, "/p/1/0", include=[r"/p/2/"], exclude=[r"/p/2/[1-3]$"])
    urls = [entry["payload"]["url"] for entry in _entries(page)]
    assert urls == [site.url(f"/p/2/{k}") for k in (0, 4, 5, 6)]


def test_a_missing_page_completes_without_links_and_a_busy_one_fails(site: Site) -> None:
    gone = _crawl(site, "/dead/1/0")
    assert (gone.result["status"], list(gone.spawn)) == (404, [])
    with pytest.raises(HTTPStatusFailure, match="HTTP 503"):
        _crawl(site, "/busy")


def test_a_bad_pattern_is_refused_by_the_params() -> None:
    with pytest.raises(ValueError, match=r"not a valid regular expression"):
        CrawlParams.model_validate({"url": "http://127.0.0.1/", "include": ["("]})


def test_a_seed_that_redirects_to_another_site_moves_the_crawl_there() -> None:
    # As `crawl https://python.org/` lands on www.python.org: two sites, one redirect.
    with serve_pages() as bare, serve_pages() as www:
        bare.redirect("/", www.url("/"))
        www.page("/", '<title>WWW</title><a href="/docs/">docs</a><a href="/about">about</a>')
        seed = CrawlRequest(bare.url("/")).payload()
        page = crawl(CrawlParams.model_validate(seed))
        moved = f"127.0.0.1:{www.port}"
        assert page.result["site_moved"] == (
            f"the seed redirected to {moved}: the crawl follows it there"
        )
        entries = _entries(page)
        assert [e["payload"]["url"] for e in entries] == [www.url("/docs/"), www.url("/about")]
        assert {e["payload"]["site"] for e in entries} == {moved}
        assert not any("seed" in e["payload"] for e in entries)  # only the first page moves
        # A later page that redirects off the site does not move the crawl.
        www.redirect("/about", bare.url("/elsewhere"))
        bare.page("/elsewhere", '<a href="/x">x</a>')
        about = crawl(CrawlParams.model_validate(entries[1]["payload"]))
        assert "site_moved" not in about.result
        assert _entries(about) == []
