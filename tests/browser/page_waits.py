"""Waiting on what a page shows, while it may be navigating."""

from __future__ import annotations

from typing import Any

from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from tests.waiting import scaled

WAIT_S = 10.0


def wait_for_text(browser: WebDriver, css: str, text: str, timeout_s: float = WAIT_S) -> str:
    """The text of the first element matching ``css`` once it contains ``text``. An element
    found on a page that then navigates away goes stale: it is looked for again."""

    def found(driver: Any) -> str | bool:
        try:
            elements = driver.find_elements(By.CSS_SELECTOR, css)
            return elements[0].text if elements and text in elements[0].text else False
        except WebDriverException as exc:
            # chromedriver's word for an element of a document being replaced, at times,
            # instead of a stale element reference: the same thing, looked for again.
            if "does not belong to the document" in str(exc):
                return False
            raise

    wait = WebDriverWait(
        browser, scaled(timeout_s), ignored_exceptions=(StaleElementReferenceException,)
    )
    result: str = wait.until(found, f"{text!r} in {css}")
    return result
