"""What a crawl reads from a page served over real HTTP on 127.0.0.1: one key per page
whatever spelling its links use, its text decoded as a browser decodes it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from scrapefleet.common.actions.bounded_regex import PatternTimeout
from scrapefleet.common.actions.builtin import HttpGetParams, http_get
from scrapefleet.common.actions.error_classes import ErrorClass, classify
from scrapefleet.common.actions.page_budget import ExtractionTimeout
from scrapefleet.common.actions.spawn import Spawned
from scrapefleet.common.constants import PAGE_EXTRACTION_S, REGEX_TIMEOUT_S
from scrapefleet.common.crawl.action import CrawlParams, crawl
from tests.integration.page_server import PageSite, serve_pages
from tests.waiting import scaled

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


FIELDS_PAGE = """<!doctype html><title>Shop</title>
<div class=item data-sku=A1><h2>Lamp <b>blue</b></h2><span class=price>EUR 12.50</span>
  <a href="/items/a1">more</a></div>
<div class=item data-sku=B2><h2>Desk</h2><span class=price>EUR 99</span>
  <a href="items/b2">more</a><script>var no = "text";</script></div>"""


def test_fields_in_css_xpath_and_regex_one_language_for_crawl_and_http_get(
    site: PageSite,
) -> None:
    site.page("/shop/", FIELDS_PAGE)
    fields = {
        "name": {"css": "div.item h2"},
        "skus": {"css": "div.item", "attr": "data-sku", "all": True},
        "prices": {"xpath": "//span[@class='price']", "re": r"([\d.]+)", "all": True},
        "links": {"css": "div.item a", "attr": "href", "all": True},
        "count": {"xpath": "count(//div[@class='item'])"},
        "desk": {"xpath": "//div[@data-sku='B2']", "re": r"EUR (\d+)"},
        "title": r"<title>(\w+)<",  # today's form: a regex over the page's HTML
        "none": {"css": "table td"},
    }
    expected = {
        "name": "Lamp blue",
        "skus": ["A1", "B2"],
        "prices": ["12.50", "99"],
        "links": [site.url("/items/a1"), site.url("/shop/items/b2")],
        "count": "2.0",
        "desk": "99",
        "title": "Shop",
        "none": None,
    }
    assert _crawl(site, "/shop/", fields=fields).result["fields"] == expected
    got = http_get(HttpGetParams.model_validate({"url": site.url("/shop/"), "fields": fields}))
    assert got["fields"] == expected


def test_a_bad_selector_is_refused_naming_the_field() -> None:
    for spec, message in (
        ({"css": "div["}, "invalid CSS selector"),
        ({"xpath": "//div["}, "invalid XPath"),
        ({"re": "("}, "not a valid regular expression"),
        ({"css": "a", "xpath": "//a"}, "not both"),
    ):
        with pytest.raises(ValueError, match=message) as caught:
            CrawlParams.model_validate({"url": "http://127.0.0.1/", "fields": {"bad": spec}})
        assert "bad" in str(caught.value) and "fields" in str(caught.value)


class _Ticker:
    """A thread that ticks every 50 ms, as the consumer's heartbeat thread does every few
    seconds: the widest gap between its ticks says how long the GIL was held from it."""

    def __init__(self) -> None:
        self.ticks: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.ticks.append(time.monotonic())
            self._stop.wait(0.05)

    def __enter__(self) -> _Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.ticks.append(time.monotonic())

    def widest_gap(self) -> float:
        return max(b - a for a, b in zip(self.ticks, self.ticks[1:], strict=False))


def test_a_hostile_pattern_fails_the_attempt_within_its_bound_and_never_stalls_the_host(
    site: PageSite,
) -> None:
    # One pattern that backtracks exponentially on this page's text: minutes with `re`.
    site.page("/", "<title>T</title><p>" + "x" * 60 + "</p>")
    hostile = {"bad": {"css": "p", "re": r"(x|xx)+y"}}
    with _Ticker() as ticker:
        started = time.monotonic()
        with pytest.raises(PatternTimeout, match=r"field 'bad': the pattern .* ran past 1 s"):
            _crawl(site, "/", fields=hostile)
        took = time.monotonic() - started
    assert took < scaled(REGEX_TIMEOUT_S + 2)
    assert ticker.widest_gap() < scaled(0.5)  # the other threads ran all along
    assert classify(PatternTimeout("x")) == ErrorClass.PERMANENT


def test_the_issues_hostile_link_and_include_pattern_are_cheap(site: PageSite) -> None:
    # Python's `re` takes seconds on these with the GIL held (heartbeats stall with it); a
    # link past 2,048 characters (a crawl key's bound) is not followed, the page still is.
    too_long = "/list?" + "&".join(f"p{i}=?" for i in range(400))
    hostile = "/" + "?" * 2000  # 2.7 s of `re` on its own, the GIL held
    links = "".join(f'<a href="{h}">x</a>' for h in (too_long, hostile, f"/list?{'?' * 9}sort=1"))
    site.page("/", f"<title>T</title>{links}")
    with _Ticker() as ticker:
        page = _crawl(site, "/", include=[r".*\?.*sort="])
    assert ticker.widest_gap() < scaled(0.5)
    assert _keys(page) == [site.url(f"/list?{'?' * 9}sort=1")]
    assert page.result["links_found"] == 2


def test_a_query_is_encoded_in_the_pages_charset_as_browsers_send_it(site: PageSite) -> None:
    # A windows-1252 page: the path is UTF-8 (as ever), the query the page's own charset; a
    # character the charset lacks becomes a character reference, percent-encoded (WHATWG URL).
    hrefs = b'<a href="/caf\xe9?q=\xe9">1</a><a href="/s?q=&#20013;&amp;r=\x80">2</a>'
    site.page("/", b"<title>1252</title>" + hrefs, ctype="text/html; charset=windows-1252")
    assert _keys(_crawl(site, "/")) == [
        site.url("/caf%C3%A9?q=%E9"),
        site.url("/s?q=%26%2320013%3B&r=%80"),
    ]
    site.page("/u", '<a href="/s?q=é">u</a>', ctype="text/html; charset=utf-8")
    assert _keys(_crawl(site, "/u")) == [site.url("/s?q=%C3%A9")]


def _hostile_links(count: int) -> str:
    # Each link a long run of "?" that _HOSTILE_INCLUDE backtracks over: about 30 ms a link on
    # a quiet machine (30 s for the page), far below a pattern's own 1 s bound, so that only the
    # page's budget can stop it, on a machine several times faster too.
    return "".join(f'<a href="/l{i}?{"?" * 1900}">l</a>' for i in range(count))


_HOSTILE_INCLUDE = r".*\?.*\?.*\?.*sort="


def test_a_pages_patterns_together_are_bounded_in_time(site: PageSite) -> None:
    site.page("/", "<title>Hostile</title>" + _hostile_links(1000))
    started = time.monotonic()
    with pytest.raises(ExtractionTimeout) as out_of_time:
        _crawl(site, "/", include=[_HOSTILE_INCLUDE])
    took = time.monotonic() - started
    assert str(out_of_time.value).startswith(
        f"include: the page's links and fields took more than {PAGE_EXTRACTION_S:g} s"
    )
    assert classify(out_of_time.value) is ErrorClass.PERMANENT
    assert took < scaled(PAGE_EXTRACTION_S + 3), took  # not the ~30 s all 1,000 links take


def test_a_cubic_selector_is_bounded_in_time_naming_its_field(site: PageSite) -> None:
    # 54 KB: cubic, about 19 s unbounded on a quiet machine (5.6 s at 2,400 elements, too
    # close to the budget to prove it)
    site.page("/", "<title>Divs</title>" + "<div>item</div>" * 3600)
    fields = {"fine": {"css": "title"}, "cubic": {"css": "div ~ div ~ div", "all": True}}
    started = time.monotonic()
    with pytest.raises(ExtractionTimeout, match=r"^field 'cubic': the page's links and fields"):
        http_get(HttpGetParams.model_validate({"url": site.url("/"), "fields": fields}))
    assert time.monotonic() - started < scaled(PAGE_EXTRACTION_S + 3)
    with pytest.raises(ExtractionTimeout, match=r"^field 'cubic'"):
        _crawl(site, "/", fields=fields)
