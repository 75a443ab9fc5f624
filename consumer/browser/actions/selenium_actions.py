"""Built-in browser actions: ``fetch_page`` and ``screenshot``.

Each gets a Remote WebDriver whose current window is its job's own (a fresh user context in a
warm session, or a session of its own: consumer.browser.sessions.session_pool); an action never
quits it. Selenium's exceptions are translated here, where they enter:

- the page's fault (timeout, missing selector, HTTP error, crashed renderer) -> ActionError,
  a job failure that uses an attempt; its class (common.actions.error_classes) comes from the HTTP
  status (404/410 permanent, 429/503 rate limited with the document's Retry-After) or, for an
  argument the browser refused (an invalid URL), is permanent;
- a block page (the host's block rules: consumer.browser.actions.block_detection) -> Blocked, which
  sends the job back to pending without using an attempt;
- the stack's fault (Grid gone, session lost) -> StackError, which sends the job back to
  pending without using an attempt and gets the stack restarted.

A screenshot without an ``output_dir`` goes into the consumer's own folder (its
``artifacts_dir``/screenshots), which the runner sets for the job's thread (``screenshots_into``)
as it sets the block rules: an action's signature stays ``(driver, params)``, and no action reads
the settings of the environment it happens to run in.

Importing this module needs only the selenium package, never a browser. Their params models
live in scrapefleet.common.actions.browser_params, so that submitting needs no Selenium.
"""

from __future__ import annotations

import pkgutil
import struct
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from selenium.common.exceptions import (
    InvalidArgumentException,
    InvalidSelectorException,
    TimeoutException,
    WebDriverException,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from scrapefleet.common import tracing
from scrapefleet.common.actions.browser_params import FetchPageParams, FieldSpec, ScreenshotParams
from scrapefleet.common.actions.error_classes import (
    RATE_LIMITED_STATUSES,
    Blocked,
    HttpStatusError,
    Permanent,
    parse_retry_after,
)
from scrapefleet.common.actions.page_budget import page_budget
from scrapefleet.common.actions.page_fields import read_fields, refine
from scrapefleet.common.actions.registry import register
from scrapefleet.common.clock import utcnow
from scrapefleet.common.constants import RETRY_AFTER_LIMIT_S
from scrapefleet.common.error_lines import first_line
from scrapefleet.common.errors import ScrapefleetError, StackError
from scrapefleet.consumer.browser.actions.artifacts import full_page_png
from scrapefleet.consumer.browser.actions.block_detection import (
    NO_RULES,
    BlockRules,
    block_reason,
    block_rules_in_effect,
)
from scrapefleet.consumer.browser.actions.network_log import network_log_of


class ActionError(ScrapefleetError):
    """The page or the params made the action fail: a job failure, retried by policy."""


class PageLoadTimeout(ActionError):
    pass


class SelectorNotFound(ActionError):
    pass


class HttpError(ActionError, HttpStatusError):
    """An HTTP error status of the main document, classified by it."""


class InvalidArgument(ActionError, Permanent):
    """The browser refused an argument (an invalid URL, say): it refuses it next time too."""


class RendererCrashed(ActionError):
    """chromedriver said the tab crashed; ``what`` is what the action was doing (whose fault
    it was is decided later: consumer.browser.actions.renderer_deaths)."""

    def __init__(self, message: str, what: str = "") -> None:
        super().__init__(message)
        self.what = what


class GridUnreachable(StackError):
    """The Grid's process does not answer at all (killed, crashed, its port closed): no page
    does that, so the release is never counted against the job's page."""


_CRASH_HINTS = ("tab crashed", "page crash", "target crashed")
_LOST_SESSION_HINTS = (
    "invalid session id",
    "no such session",
    "chrome not reachable",
    "disconnected",
    "session not created",
    "unable to find session",
)
# PerformanceNavigationTiming.responseStatus: the HTTP status of the main document.
_STATUS_JS = (
    "const e = performance.getEntriesByType('navigation')[0];"
    "return e && e.responseStatus ? e.responseStatus : null;"
)


@contextmanager
def translated_errors(what: str) -> Iterator[None]:
    """Turn Selenium and transport errors into ActionError or StackError."""
    try:
        yield
    except ScrapefleetError:
        raise
    except TimeoutException as exc:
        raise PageLoadTimeout(f"{what}: timed out ({first_line(exc)})") from exc
    except InvalidSelectorException as exc:
        raise ActionError(f"{what}: invalid CSS selector ({first_line(exc)})") from exc
    except InvalidArgumentException as exc:
        raise InvalidArgument(f"{what}: invalid argument ({first_line(exc)})") from exc
    except WebDriverException as exc:
        message = (exc.msg or str(exc)).lower()
        if any(hint in message for hint in _CRASH_HINTS):
            raise RendererCrashed(f"{what}: the page crashed the renderer", what) from exc
        if any(hint in message for hint in _LOST_SESSION_HINTS):
            raise StackError(f"{what}: browser session lost ({first_line(exc)})") from exc
        raise ActionError(f"{what}: {first_line(exc)}") from exc
    except (OSError, ConnectionError) as exc:
        raise GridUnreachable(f"{what}: Grid unreachable ({exc!r})") from exc
    except Exception as exc:
        if type(exc).__module__.startswith("urllib3"):  # MaxRetryError, ProtocolError, ...
            raise GridUnreachable(f"{what}: Grid unreachable ({exc!r})") from exc
        raise


def navigate(driver: Any, url: str, *, allow_http_errors: bool = False) -> int | None:
    """Load url and return the main document's HTTP status (None when the browser does not
    tell); a page-load timeout, a crash or, unless allowed, an error status raises ActionError."""
    with translated_errors(f"loading {url}"), tracing.navigating(url):
        driver.get(url)
        status = driver.execute_script(_STATUS_JS)
    if not allow_http_errors and isinstance(status, int) and status >= 400:
        raise http_error(driver, url, status)
    return status if isinstance(status, int) else None


def http_error(driver: Any, url: str, status: int, final_url: str | None = None) -> HttpError:
    """The error for a main document with an error status; a rate-limited one carries the
    document's Retry-After (from the job's network log, when it keeps one; the consumer's
    ``retry_after_max_s`` caps it when the next try is planned)."""
    retry_after_s = None
    if status in RATE_LIMITED_STATUSES:
        network = network_log_of(driver)
        document = network.document(final_url or url) if network is not None else None
        header = (document or {}).get("headers", {}).get("retry-after")
        retry_after_s = parse_retry_after(header, utcnow(), cap_s=RETRY_AFTER_LIMIT_S)
    return HttpError(f"loading {url}: HTTP {status}", status, retry_after_s)


def wait_for_selector(driver: Any, selector: str, timeout_s: float) -> None:
    condition = expected_conditions.presence_of_element_located((By.CSS_SELECTOR, selector))
    with translated_errors(f"waiting for {selector!r}"):
        try:
            WebDriverWait(driver, timeout_s).until(condition)
        except TimeoutException:
            raise SelectorNotFound(
                f"selector {selector!r} not found on {driver.current_url} within {timeout_s:g} s"
            ) from None


# Everything fetch_page returns from the page, in one script call: the title and URL, the
# main document's HTTP status and timings, and every field. Attributes are Selenium's own
# get_attribute (its getAttribute atom: the property when it is a plain value, so href and src
# come back resolved, else the attribute; boolean attributes "true" or null). Text follows
# Selenium's .text (chromedriver's getVisibleText, which Selenium does not ship) as closely as a
# script can: "" for an element Selenium's isDisplayed atom calls hidden, else its rendered text
# (innerText) with no-break spaces as spaces, blank lines dropped, each line trimmed and its
# runs of spaces and tabs (innerText's between table cells) one space, unless the element keeps
# white space (pre). Unlike Selenium, descendants hidden only by opacity or by lying off the page
# still count. HTTP actions lay out the same text from HTML (page_fields.visible_text).
_READ_PAGE_BODY_JS = r"""
const specs = arguments[0];
const text = (el) => {
  if (!isShown(el)) return "";
  const raw = (el.innerText !== undefined ? el.innerText : el.textContent) || "";
  const space = getComputedStyle(el).whiteSpace;
  const kept = space.startsWith("pre") || space === "break-spaces";
  return raw.replace(/\u00a0/g, " ").split("\n")
    .map((line) => kept ? line.trimEnd() : line.replace(/[ \t]+/g, " ").trim())
    .filter((line) => line.trim() !== "").join("\n");
};
const fields = {};
for (const [name, spec] of Object.entries(specs)) {
  const read = (el) => spec.attr === null ? text(el) : getAttribute(el, spec.attr);
  try {
    if (spec.all) {
      fields[name] = Array.from(document.querySelectorAll(spec.css), read);
    } else {
      const el = document.querySelector(spec.css);
      fields[name] = el === null ? null : read(el);
    }
  } catch (error) {
    if (error instanceof DOMException && error.name === "SyntaxError") {
      return {invalid: {field: name, message: error.message}};
    }
    throw error;
  }
}
const nav = performance.getEntriesByType("navigation")[0];
const ms = (value) => typeof value === "number" && value > 0 ? Math.round(value * 10) / 10 : null;
return {
  title: document.title,
  final_url: location.href,
  status: nav && nav.responseStatus ? nav.responseStatus : null,
  timings: {
    ttfb_ms: nav ? ms(nav.responseStart) : null,
    dom_content_loaded_ms: nav ? ms(nav.domContentLoadedEventEnd) : null,
    load_ms: nav ? ms(nav.loadEventEnd) : null,
  },
  fields: fields,
};
"""


def _selenium_atom(name: str) -> str:
    """A script Selenium ships for its own element commands (one function expression)."""
    data = pkgutil.get_data("selenium.webdriver.remote", name)
    if data is None:
        raise RuntimeError(f"selenium ships no {name}")
    return data.decode()


_READ_PAGE_JS = (
    f"const isShown = {_selenium_atom('isDisplayed.js')};\n"
    f"const getAttribute = {_selenium_atom('getAttribute.js')};\n"
    f"{_READ_PAGE_BODY_JS}"
)


@tracing.traced("scrapefleet.browser.fields")
def read_page(driver: Any, fields: dict[str, FieldSpec], where: str = "the page") -> dict[str, Any]:
    """Title, final URL, HTTP status, timings (ms from the navigation's start) and every
    field's text or attribute (None, or [], when its selector matches nothing), read by one
    script call however many fields and matches there are."""
    in_browser = {name: spec for name, spec in fields.items() if spec.css is not None}
    specs = {name: spec.model_dump() for name, spec in in_browser.items()}
    with translated_errors(f"reading {where}"):
        page: dict[str, Any] = driver.execute_script(_READ_PAGE_JS, specs)
    invalid = page.get("invalid")
    if invalid:
        name = invalid["field"]
        raise ActionError(
            f"field {name!r} ({fields[name].css!r}): invalid CSS selector ({invalid['message']})"
        )
    read = page["fields"]
    with page_budget():  # the regexes and the fields read from the HTML, together
        for name, spec in in_browser.items():
            if spec.re is not None:
                read[name] = refine(spec, name, read[name])
        from_html = {name: spec for name, spec in fields.items() if spec.css is None}
        if from_html:  # XPath and regexes over the HTML: one more call, only when asked
            with translated_errors(f"reading {where}"):
                html = driver.page_source
            read.update(read_fields(html, page["final_url"], from_html))
    page["fields"] = {name: read[name] for name in fields}
    return page


def extract_fields(driver: Any, fields: dict[str, FieldSpec]) -> dict[str, Any]:
    """Each field's text or attribute; None (or []) when its selector matches nothing."""
    fields_read: dict[str, Any] = read_page(driver, fields)["fields"]
    return fields_read


# The block selector rides along in the page's one read, under a name that says where it came
# from should the selector be invalid.
_BLOCK_FIELD = "(setting block_selector)"


def _checked_page(driver: Any, params: FetchPageParams, rules: BlockRules) -> dict[str, Any]:
    """The page read, once it is known to be no block page (else Blocked) and, unless the job
    allows them, no HTTP error (else HttpError)."""
    fields = dict(params.fields)
    if rules.selector is not None:
        fields[_BLOCK_FIELD] = FieldSpec(css=rules.selector)
    page = read_page(driver, fields, params.url)
    marker = page["fields"].pop(_BLOCK_FIELD, None) if rules.selector is not None else None
    status = page["status"]
    reason = block_reason(
        rules, status=status, title=page["title"], selector_matched=marker is not None
    )
    if reason is not None:
        raise Blocked(f"{params.url}: {reason}")
    if not params.allow_http_errors and isinstance(status, int) and status >= 400:
        raise http_error(driver, params.url, status, page["final_url"])
    return page


@register("fetch_page", FetchPageParams, needs_browser=True)
def fetch_page(driver: Any, params: FetchPageParams) -> dict[str, Any]:
    """Two round trips without ``wait_for`` (the load, then one script reading everything);
    with it, the HTTP status is checked before the wait, so an error page fails at once, and a
    wait that times out checks for a block page before it fails. ``headers`` are the main
    document's response headers (names in lower case) from the job's network log; None in a
    session that keeps none."""
    rules = block_rules_in_effect()
    with translated_errors(f"loading {params.url}"), tracing.navigating(params.url):
        driver.get(params.url)
    if params.wait_for:
        with translated_errors(f"loading {params.url}"):
            status = driver.execute_script(_STATUS_JS)
        if isinstance(status, int) and (status >= 400 or status in rules.statuses):
            _checked_page(driver, params, rules)
        try:
            wait_for_selector(driver, params.wait_for, params.wait_timeout_s)
        except SelectorNotFound:
            if rules.reads_page:
                _checked_page(driver, params, rules)
            raise
    page = _checked_page(driver, params, rules)
    status = page["status"]
    network = network_log_of(driver)
    document = network.document(page["final_url"]) if network is not None else None
    return {
        "title": page["title"],
        "final_url": page["final_url"],
        "status": status,
        "headers": document["headers"] if document else None,
        "timings": page["timings"],
        "fields": page["fields"],
    }


def _png_size(png: bytes) -> tuple[int, int]:
    """Width and height from the PNG's IHDR chunk."""
    width, height = struct.unpack(">II", png[16:24])
    return int(width), int(height)


_SCREENSHOTS: ContextVar[Path | None] = ContextVar("scrapefleet_screenshots", default=None)


@contextmanager
def screenshots_into(artifacts_dir: Path | None) -> Iterator[None]:
    """``artifacts_dir``/screenshots for the screenshots that name no folder, in what runs
    inside (the runner wraps a job's action in it, with its consumer's artifacts_dir)."""
    token = _SCREENSHOTS.set(artifacts_dir / "screenshots" if artifacts_dir else None)
    try:
        yield
    finally:
        _SCREENSHOTS.reset(token)


def _screenshot_folder(params: ScreenshotParams) -> Path:
    folder = params.output_dir or _SCREENSHOTS.get()
    if folder is None:
        raise InvalidArgument(
            f"screenshot of {params.url}: no output_dir, and no consumer's artifacts_dir to"
            " put it in (outside a consumer's job, name an output_dir)"
        )
    return folder


def _raise_if_blocked(driver: Any, url: str, rules: BlockRules) -> None:
    """Blocked when the host's block rules say the loaded page is a block page (one script
    round trip; none without rules)."""
    if rules == NO_RULES:
        return
    fields = {_BLOCK_FIELD: FieldSpec(css=rules.selector)} if rules.selector is not None else {}
    page = read_page(driver, fields, url)
    matched = page["fields"].get(_BLOCK_FIELD) is not None
    reason = block_reason(
        rules, status=page["status"], title=page["title"], selector_matched=matched
    )
    if reason is not None:
        raise Blocked(f"{url}: {reason}")


@register("screenshot", ScreenshotParams, needs_browser=True)
def screenshot(driver: Any, params: ScreenshotParams) -> dict[str, Any]:
    """A picture of the page, unless it is a block page (the same rules as ``fetch_page``: a
    captcha's picture is no result) or an HTTP error."""
    rules = block_rules_in_effect()
    folder = _screenshot_folder(params)
    status = navigate(driver, params.url, allow_http_errors=True)
    if status is not None and status >= 400:
        _raise_if_blocked(driver, params.url, rules)
        raise http_error(driver, params.url, status)
    if params.wait_for:
        try:
            wait_for_selector(driver, params.wait_for, params.wait_timeout_s)
        except SelectorNotFound:
            _raise_if_blocked(driver, params.url, rules)
            raise
    _raise_if_blocked(driver, params.url, rules)
    with translated_errors(f"screenshot of {params.url}"):
        png = full_page_png(driver) if params.full_page else driver.get_screenshot_as_png()
        title, final_url = driver.title, driver.current_url
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}.png"
    path.write_bytes(png)
    width, height = _png_size(png)
    return {
        "path": str(path),
        "size_bytes": len(png),
        "width": width,
        "height": height,
        "title": title,
        "final_url": final_url,
    }
