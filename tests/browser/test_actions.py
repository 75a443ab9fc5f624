"""fetch_page and screenshot against the local test site, on the shared stack."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.command import Command

from scrapefleet.common.actions.registry import get_action
from scrapefleet.common.errors import SubmitError
from scrapefleet.consumer.browser.actions.selenium_actions import (
    ActionError,
    FetchPageParams,
    HttpError,
    PageLoadTimeout,
    RendererCrashed,
    ScreenshotParams,
    SelectorNotFound,
    fetch_page,
    navigate,
    screenshot,
)
from scrapefleet.consumer.browser.stack.browser_stack import BrowserStack, StackWebDriver
from tests.browser.site import LINKS, LocalSite
from tests.waiting import scaled

pytestmark = [pytest.mark.browser, pytest.mark.timeout(60)]


def test_actions_are_registered_as_browser_actions() -> None:
    for name in ("fetch_page", "screenshot"):
        assert get_action(name).needs_browser


@pytest.mark.parametrize("url", ["file:///etc/passwd", "chrome://crash", "ftp://x/", "http://"])
def test_only_http_urls_are_accepted(url: str) -> None:
    with pytest.raises(SubmitError, match="url"):
        get_action("fetch_page").validate({"url": url})


def test_fetch_page_returns_title_final_url_and_fields(
    driver: StackWebDriver, site: LocalSite
) -> None:
    params = FetchPageParams.model_validate(
        {
            "url": site.url("/redirect"),
            "wait_for": "#late",
            "fields": {
                "name": {"css": "h1.name"},
                "link": {"css": "a.more", "attr": "href"},
                "currency": {"css": ".price", "attr": "data-currency"},
                "colours": {"css": "li", "all": True},
                "late": {"css": "#late"},
                "absent": {"css": ".does-not-exist"},
            },
        }
    )
    result = fetch_page(driver, params)
    assert result["title"] == "Widget 42"
    assert result["final_url"] == site.url("/item")
    assert result["fields"] == {
        "name": "Widget",
        "link": site.url("/next"),
        "currency": "EUR",
        "colours": ["red", "green", "blue"],
        "late": "arrived",
        "absent": None,
    }


def test_fetch_page_reads_xpath_and_regex_fields_the_crawl_way(
    driver: StackWebDriver, site: LocalSite
) -> None:
    params = FetchPageParams.model_validate(
        {
            "url": site.url("/item"),
            "wait_for": "#late",
            "fields": {
                "name": {"xpath": "//h1[@class='name']"},
                "colours": {"xpath": "//li", "all": True, "re": "^(g|b)"},
                "first": {"css": "li", "re": "^(\\w)"},
                "title": "<title>(\\w+)",
                "absent": {"xpath": "//table"},
            },
        }
    )
    assert fetch_page(driver, params)["fields"] == {
        "name": "Widget",
        "colours": ["g", "b"],
        "first": "r",
        "title": "Widget",
        "absent": None,
    }


def commands_sent(driver: StackWebDriver, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every WebDriver command the driver sends from now on, by name, in order."""
    sent: list[str] = []
    execute = driver.execute

    def counted(command: str, params: Any = None) -> Any:
        sent.append(command)
        return execute(command, params)

    monkeypatch.setattr(driver, "execute", counted)
    return sent


VARIED_SELECTORS = [
    "#blocks", "#hidden-parent", ".gone", ".ghost", ".faded", ".rel", ".pic", ".box",
    ".unchecked", ".name", ".sel", ".sel option", ".off", ".pre", ".offscreen", ".empty",
    ".nested", ".nested li",
]  # fmt: skip
VARIED_ATTRIBUTES = [
    None, "href", "src", "class", "checked", "selected", "value", "disabled", "style", "alt",
    "type", "id", "readonly", "hidden", "data-missing",
]  # fmt: skip


def test_fields_read_as_selenium_reads_them_in_one_script_call(
    driver: StackWebDriver, site: LocalSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    fields = {
        f"{css} {attr}": {"css": css, "attr": attr, "all": True}
        for css in VARIED_SELECTORS
        for attr in VARIED_ATTRIBUTES
    }
    sent = commands_sent(driver, monkeypatch)
    result = fetch_page(
        driver, FetchPageParams.model_validate({"url": site.url("/varied"), "fields": fields})
    )
    assert sent == [Command.GET, Command.W3C_EXECUTE_SCRIPT]  # however many fields
    monkeypatch.undo()
    # The same values as reading element by element through WebDriver, as fetch_page did.
    for name, spec in fields.items():
        elements = driver.find_elements(By.CSS_SELECTOR, spec["css"])
        expected = [
            e.text if spec["attr"] is None else e.get_attribute(spec["attr"]) for e in elements
        ]
        assert result["fields"][name] == expected, name
    assert result["fields"][".pre None"] == ["  indented\n    more"]
    assert result["fields"][".rel href"] == [site.url("/x/y?q=1#h")]  # resolved, as Selenium
    assert result["fields"][".ghost None"] == [""]  # hidden: no text


def test_status_and_timings_of_the_main_document(driver: StackWebDriver, site: LocalSite) -> None:
    result = fetch_page(driver, FetchPageParams(url=site.url("/redirect")))
    assert result["status"] == 200  # the final document's, after the redirect
    timings = result["timings"]
    assert set(timings) == {"ttfb_ms", "dom_content_loaded_ms", "load_ms"}
    assert 0 < timings["ttfb_ms"] <= timings["dom_content_loaded_ms"] <= timings["load_ms"]
    assert timings["load_ms"] < 30_000


@pytest.mark.parametrize(("path", "status"), [("/no-such-page", 404), ("/error", 500)])
def test_http_error_pages_give_their_status_when_allowed(
    driver: StackWebDriver, site: LocalSite, path: str, status: int
) -> None:
    with pytest.raises(HttpError, match=f"HTTP {status}"):
        fetch_page(driver, FetchPageParams(url=site.url(path)))
    params = FetchPageParams(url=site.url(path), allow_http_errors=True)
    result = fetch_page(driver, params)
    assert result["status"] == status and result["final_url"] == site.url(path)
    assert result["timings"]["ttfb_ms"] > 0


def test_every_link_of_a_long_page_in_one_script_call(
    driver: StackWebDriver, site: LocalSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    params = FetchPageParams.model_validate(
        {
            "url": site.url("/links"),
            "fields": {
                "hrefs": {"css": "a.l", "attr": "href", "all": True},
                "texts": {"css": "a.l", "all": True},
                "first": {"css": "a.l"},
            },
        }
    )
    driver.set_page_load_timeout(scaled(30))  # the shared settings' 3 s is for the hang test
    sent = commands_sent(driver, monkeypatch)
    fields = fetch_page(driver, params)["fields"]
    assert sent == [Command.GET, Command.W3C_EXECUTE_SCRIPT]
    assert LINKS >= 2000 and len(fields["hrefs"]) == len(fields["texts"]) == LINKS
    assert fields["hrefs"] == [site.url(f"/page/{n}") for n in range(LINKS)]
    assert fields["texts"][-1] == f"link {LINKS - 1}" and fields["first"] == "link 0"


def test_an_invalid_selector_names_its_field(driver: StackWebDriver, site: LocalSite) -> None:
    params = FetchPageParams.model_validate(
        {"url": site.url("/plain"), "fields": {"ok": {"css": "p"}, "bad": {"css": "p[["}}}
    )
    with pytest.raises(ActionError, match=r"field 'bad' \('p\[\['\): invalid CSS selector"):
        fetch_page(driver, params)


def test_missing_awaited_selector_names_it(driver: StackWebDriver, site: LocalSite) -> None:
    params = FetchPageParams(url=site.url("/plain"), wait_for="#never", wait_timeout_s=0.5)
    with pytest.raises(SelectorNotFound, match="'#never'"):
        fetch_page(driver, params)


def test_http_500_is_an_error(driver: StackWebDriver, site: LocalSite) -> None:
    with pytest.raises(HttpError, match="HTTP 500"):
        fetch_page(driver, FetchPageParams(url=site.url("/error")))
    allowed = fetch_page(driver, FetchPageParams(url=site.url("/error"), allow_http_errors=True))
    assert allowed["title"] == "Oops"


def test_hung_page_hits_the_page_load_timeout(
    driver: StackWebDriver, site: LocalSite, stack: BrowserStack
) -> None:
    started = time.monotonic()
    with pytest.raises(PageLoadTimeout):
        fetch_page(driver, FetchPageParams(url=site.url("/hang")))
    assert time.monotonic() - started < stack.settings.page_load_timeout_s + 10


def test_renderer_crash_is_an_error_not_a_hang(
    driver: StackWebDriver, stack: BrowserStack, site: LocalSite
) -> None:
    started = time.monotonic()
    with pytest.raises(RendererCrashed):
        navigate(driver, "chrome://crash")
    assert time.monotonic() - started < 15
    # The crash was one tab's: the stack still serves new sessions.
    other = stack.new_driver()
    try:
        assert fetch_page(other, FetchPageParams(url=site.url("/plain")))["title"] == "Plain"
    finally:
        other.quit()


def test_screenshot_is_full_page(driver: StackWebDriver, site: LocalSite, tmp_path: Path) -> None:
    result = screenshot(driver, ScreenshotParams(url=site.url("/long"), output_dir=tmp_path))
    png = Path(result["path"]).read_bytes()
    assert png.startswith(b"\x89PNG") and result["size_bytes"] == len(png)
    assert result["height"] > 4000 > 700  # beyond the 700 px window
    assert result["width"] > 0 and result["title"] == "Long"


# Markup whose text a browser lays out: blocks, list items, table cells and rows, paragraphs,
# no-break spaces, a script inside an element, text split across inline elements with spaces.
LAID_OUT = """<!doctype html><title>Layout</title><body>
<div class="item"><h2>Widget</h2><span class="price">$1.50</span></div>
<div class="item"><h2>Gadget</h2>
  <span class="price">$2.75</span> <em>sale</em></div>
<ul class="tags"><li>red</li><li>green</li></ul>
<table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>d</td></tr></table>
<div class="copy"><p>One&nbsp;two  three.</p><p>Four <b>five</b> six.</p></div>
<div class="mixed">before<script>var x;</script><style>p{}</style><div>inner</div>after</div>
</body>"""


def test_element_text_is_the_same_over_http_and_in_the_browser(driver: StackWebDriver) -> None:
    from scrapefleet.common.actions.builtin import HttpGetParams, http_get
    from tests.integration.page_server import serve_pages

    fields = {
        "item": {"css": "div.item"},
        "items": {"css": "div.item", "all": True},
        "tags": {"css": "ul.tags"},
        "table": {"css": "table"},
        "copy": {"css": "div.copy"},
        "mixed": {"css": "div.mixed"},
    }
    with serve_pages() as pages:
        pages.page("/layout", LAID_OUT)
        url = pages.url("/layout")
        over_http = http_get(HttpGetParams.model_validate({"url": url, "fields": fields}))
        params = FetchPageParams.model_validate({"url": url, "fields": fields})
        in_browser = fetch_page(driver, params)
        selenium_table = driver.find_element(By.CSS_SELECTOR, "table").text
    assert in_browser["fields"]["item"] == "Widget\n$1.50"  # Selenium's text, as before
    assert in_browser["fields"]["items"][1] == "Gadget\n$2.75 sale"
    assert in_browser["fields"]["tags"] == "red\ngreen"
    assert in_browser["fields"]["table"] == selenium_table == "a b\nc d"  # cells: a space
    assert over_http["fields"] == in_browser["fields"]
