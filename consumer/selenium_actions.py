"""Built-in browser actions: ``fetch_page`` and ``screenshot``.

Each gets a fresh Remote WebDriver session from the host's Grid (the runner creates and
always quits it). Selenium's exceptions are translated here, where they enter:

- the page's fault (timeout, missing selector, HTTP error, crashed renderer) -> ActionError,
  a job failure that uses an attempt;
- the stack's fault (Grid gone, session lost) -> StackError, which sends the job back to
  pending without using an attempt and gets the stack restarted.

Importing this module needs only the selenium package, never a browser. Their params models
live in scrapefleet.common.browser_params, so that submitting needs no Selenium.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from selenium.common.exceptions import (
    InvalidSelectorException,
    TimeoutException,
    WebDriverException,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from scrapefleet.common.actions import register
from scrapefleet.common.browser_params import FetchPageParams, FieldSpec, ScreenshotParams
from scrapefleet.common.errors import ScrapefleetError, StackError
from scrapefleet.consumer.artifacts import full_page_png


class ActionError(ScrapefleetError):
    """The page or the params made the action fail: a job failure, retried by policy."""


class PageLoadTimeout(ActionError):
    pass


class SelectorNotFound(ActionError):
    pass


class HttpError(ActionError):
    pass


class RendererCrashed(ActionError):
    pass


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
        raise PageLoadTimeout(f"{what}: timed out ({_first_line(exc)})") from exc
    except InvalidSelectorException as exc:
        raise ActionError(f"{what}: invalid CSS selector ({_first_line(exc)})") from exc
    except WebDriverException as exc:
        message = (exc.msg or str(exc)).lower()
        if any(hint in message for hint in _CRASH_HINTS):
            raise RendererCrashed(f"{what}: the page crashed the renderer") from exc
        if any(hint in message for hint in _LOST_SESSION_HINTS):
            raise StackError(f"{what}: browser session lost ({_first_line(exc)})") from exc
        raise ActionError(f"{what}: {_first_line(exc)}") from exc
    except (OSError, ConnectionError) as exc:
        raise StackError(f"{what}: Grid unreachable ({exc!r})") from exc
    except Exception as exc:
        if type(exc).__module__.startswith("urllib3"):  # MaxRetryError, ProtocolError, ...
            raise StackError(f"{what}: Grid unreachable ({exc!r})") from exc
        raise


def _first_line(exc: WebDriverException) -> str:
    text = (exc.msg or str(exc) or type(exc).__name__).strip()
    return text.splitlines()[0]


def navigate(driver: Any, url: str, *, allow_http_errors: bool = False) -> None:
    """Load url; a page-load timeout, a crash or an HTTP error status raises ActionError."""
    with translated_errors(f"loading {url}"):
        driver.get(url)
        status = driver.execute_script(_STATUS_JS)
    if not allow_http_errors and isinstance(status, int) and status >= 400:
        raise HttpError(f"loading {url}: HTTP {status}")


def wait_for_selector(driver: Any, selector: str, timeout_s: float) -> None:
    condition = expected_conditions.presence_of_element_located((By.CSS_SELECTOR, selector))
    with translated_errors(f"waiting for {selector!r}"):
        try:
            WebDriverWait(driver, timeout_s).until(condition)
        except TimeoutException:
            raise SelectorNotFound(
                f"selector {selector!r} not found on {driver.current_url} within {timeout_s:g} s"
            ) from None


def _read(element: Any, spec: FieldSpec) -> str | None:
    if spec.attr is None:
        text: str = element.text
        return text
    value: str | None = element.get_attribute(spec.attr)
    return value


def extract_fields(driver: Any, fields: dict[str, FieldSpec]) -> dict[str, Any]:
    """Each field's text or attribute; None (or []) when its selector matches nothing."""
    values: dict[str, Any] = {}
    for name, spec in fields.items():
        with translated_errors(f"field {name!r} ({spec.css!r})"):
            elements = driver.find_elements(By.CSS_SELECTOR, spec.css)
            if spec.all:
                values[name] = [_read(e, spec) for e in elements]
            else:
                values[name] = _read(elements[0], spec) if elements else None
    return values


@register("fetch_page", FetchPageParams, needs_browser=True)
def fetch_page(driver: Any, params: FetchPageParams) -> dict[str, Any]:
    navigate(driver, params.url, allow_http_errors=params.allow_http_errors)
    if params.wait_for:
        wait_for_selector(driver, params.wait_for, params.wait_timeout_s)
    fields = extract_fields(driver, params.fields)
    with translated_errors(f"reading {params.url}"):
        return {"title": driver.title, "final_url": driver.current_url, "fields": fields}


def _png_size(png: bytes) -> tuple[int, int]:
    """Width and height from the PNG's IHDR chunk."""
    width, height = struct.unpack(">II", png[16:24])
    return int(width), int(height)


def _default_screenshot_dir() -> Path:
    from scrapefleet.common.settings import (
        load_settings,  # read at run time: the consumer's settings
    )

    return load_settings().artifacts_dir / "screenshots"


@register("screenshot", ScreenshotParams, needs_browser=True)
def screenshot(driver: Any, params: ScreenshotParams) -> dict[str, Any]:
    navigate(driver, params.url)
    if params.wait_for:
        wait_for_selector(driver, params.wait_for, params.wait_timeout_s)
    with translated_errors(f"screenshot of {params.url}"):
        png = full_page_png(driver) if params.full_page else driver.get_screenshot_as_png()
        title, final_url = driver.title, driver.current_url
    folder = params.output_dir or _default_screenshot_dir()
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
