"""A crawl's start, checked before the database is opened: the seed in its one spelling, the
rules it carries, each bad option named."""

from __future__ import annotations

import pytest

from scrapefleet.common.errors import SubmitError
from scrapefleet.common.ops.commands.crawl_command import CrawlRequest, render_crawl

pytestmark = pytest.mark.timeout(10)


def test_the_seed_is_normalised_and_the_rules_carried() -> None:
    request = CrawlRequest(
        "HTTPS://Example.ORG:443/start#x", include=("/docs/",), fields={"p": r"\$(\d+)"}
    )
    assert request.payload() == {
        "url": "https://example.org/start",
        "site": "example.org",
        "seed": True,  # a redirect of this page moves the crawl's site
        "include": ["/docs/"],
        "fields": {"p": r"\$(\d+)"},
    }
    assert request.kind == "crawl"
    assert CrawlRequest("http://a.test:8080", browser=True, same_site=False).payload() == {
        "url": "http://a.test:8080/",
        "site": "a.test:8080",
        "seed": True,
        "same_site": False,
    }
    assert CrawlRequest("http://www.a.test/", same_domain=True).payload()["same_domain"] is True
    assert CrawlRequest("http://a.test", browser=True).kind == "crawl_browser"


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (CrawlRequest("example.org/"), "url: 'example.org/' is not an http"),
        (CrawlRequest("file:///etc/passwd"), "url: 'file:///etc/passwd' is not an http"),
        (CrawlRequest("http://a.test/", depth=-1), "--depth: -1 is below 0"),
        (CrawlRequest("http://a.test/", max_pages=0), "--max-pages: must be between 1"),
        (CrawlRequest("http://a.test/", include=("[",)), r"--include[0]: not a valid"),
        (CrawlRequest("http://a.test/", fields={"p": "("}), r"--field p[0]: not a valid"),
        (
            CrawlRequest("http://a.test/", fields={"p": {"css": "a["}}),
            "field p.css: invalid CSS",
        ),
        (
            CrawlRequest("http://a.test/", same_site=False, same_domain=True),
            "--same-domain: not with --any-site",
        ),
    ],
)
def test_bad_options_are_named(request_: CrawlRequest, message: str) -> None:
    with pytest.raises(SubmitError) as refused:
        request_.payload()
    assert str(refused.value).startswith(message)


def test_the_report_reads_by_depth() -> None:
    shown = {
        "crawl_id": 4,
        "seed": "http://a.test/",
        "max_depth": 2,
        "max_jobs": 100,
        "jobs": 12,
        "done": 10,
        "pending": 1,
        "failed": 1,
        "cancelled": 0,
        "depth_reached": 2,
        "by_depth": {0: {"completed": 1}, 1: {"completed": 9, "failed": 1}, 2: {"pending": 1}},
    }
    assert render_crawl(shown) == [
        "crawl 4: http://a.test/",
        "  bounds: depth 2, 100 jobs",
        "  pages: 10 done, 1 pending, 1 failed, 0 cancelled (12 job(s) in all)",
        "  depth reached: 2",
        "    depth 0: 1 completed",
        "    depth 1: 9 completed, 1 failed",
        "    depth 2: 1 pending",
    ]
    moved = "the seed redirected to www.a.test: the crawl follows it there"
    assert render_crawl(shown | {"site_moved": moved})[1] == f"  site: {moved}"


def test_css_and_xpath_fields_and_the_robots_switch_are_carried() -> None:
    fields = {"t": {"css": "h1"}, "x": {"xpath": "//p"}}
    payload = CrawlRequest("http://a.test/", fields=fields, obey_robots=False).payload()
    assert payload["fields"] == fields
    assert payload["ignore_robots"] is True


def test_a_crawl_refuses_http_gets_robots_switch() -> None:
    from scrapefleet.common.crawl.action import CrawlParams

    with pytest.raises(ValueError, match=r"crawls obey robots\.txt already"):
        CrawlParams.model_validate({"url": "http://a.test/", "obey_robots": True})
