"""A browser on this machine without a Grid or a display: one headless Chromium driven by the
host's own chromedriver, with the flags, window size and BiDi of a consumer's sessions
(consumer.browser.stack.browser_stack), for trying one job locally (`scrapefleet try`).

Headless rather than Xvfb: a developer's machine may have no X server, and a page renders the
same for a scraper's purposes (measured ~10% faster too: DESIGN.md).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service

from scrapefleet.common.error_lines import first_line
from scrapefleet.common.errors import StackError
from scrapefleet.consumer.browser.stack.grid_driver import CHROME_ARGS
from scrapefleet.consumer.browser.stack.run_as import needs_no_sandbox


def local_chrome_options(settings: Any, user_data_dir: Path) -> webdriver.ChromeOptions:
    options = webdriver.ChromeOptions()
    options.binary_location = str(settings.chromium_binary)
    for arg in CHROME_ARGS:
        options.add_argument(arg)
    options.add_argument("--headless=new")
    options.add_argument(f"--user-data-dir={user_data_dir}")
    if needs_no_sandbox(settings.chromium_sandbox, os.geteuid()):
        options.add_argument("--no-sandbox")
    options.add_argument(f"--window-size={settings.screen_width_px},{settings.screen_height_px}")
    options.enable_bidi = True  # the network log and browser options speak BiDi
    return options


def start_local_chrome(settings: Any, user_data_dir: Path) -> webdriver.Chrome:
    """A new headless Chromium session; StackError names the binary it could not start."""
    # websocket-client logs every BiDi connection at INFO: noise on a terminal's stderr.
    logging.getLogger("websocket").setLevel(logging.WARNING)
    for binary in (settings.chromium_binary, settings.chromedriver_binary):
        if not Path(binary).exists():
            raise StackError(
                f"no browser here: {binary} does not exist (apt install chromium"
                " chromium-driver, or set chromium_binary / chromedriver_binary)"
            )
    try:
        driver = webdriver.Chrome(
            options=local_chrome_options(settings, user_data_dir),
            service=Service(str(settings.chromedriver_binary)),
        )
    except WebDriverException as exc:
        raise StackError(f"could not start Chromium: {first_line(exc)}") from exc
    driver.set_page_load_timeout(settings.page_load_timeout_s)
    return driver
