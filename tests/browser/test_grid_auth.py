"""The Grid answers only the consumer: basic auth with credentials new at every start, known to
the consumer and the Grid's own 0600 config file, never in a command line or the Grid's log.

On the shared real stack (Xvfb, Grid, Chromium): a local client without the credentials, or
with wrong ones, is refused; the consumer's sessions still run pages."""

from __future__ import annotations

import base64
import json
import stat
import urllib.error
import urllib.request
from typing import Any

import psutil
import pytest

from scrapefleet.consumer.browser.sessions.session_operations import quit_driver
from scrapefleet.consumer.browser.stack.browser_stack import BrowserStack
from tests.browser.site import LocalSite

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
NEW_SESSION = json.dumps({"capabilities": {"alwaysMatch": {"browserName": "chrome"}}}).encode()


def _status_without(stack: BrowserStack, path: str, **request: Any) -> int:
    try:
        with _DIRECT.open(urllib.request.Request(f"{stack.grid_url}{path}", **request), timeout=10):
            return 200
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_grid_refuses_whoever_lacks_the_consumers_credentials(
    stack: BrowserStack, site: LocalSite
) -> None:
    post = {"data": NEW_SESSION, "method": "POST", "headers": {"Content-Type": "application/json"}}
    assert _status_without(stack, "/status") == 401
    assert _status_without(stack, "/session", **post) == 401
    guessed = base64.b64encode(b"sf-0000000000000000:guess").decode()
    wrong = {**post, "headers": {**post["headers"], "Authorization": f"Basic {guessed}"}}
    assert _status_without(stack, "/session", **wrong) == 401
    with stack.grid_open("/status") as answer:  # the consumer's own probe
        assert json.load(answer)["value"]["ready"] is True

    driver = stack.new_driver()  # a job's session, its commands authenticated
    try:
        driver.get(site.url("/item"))
        assert driver.title
    finally:
        quit_driver(driver)

    config = stack.config_path
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    password = next(
        line.split('"')[1]
        for line in config.read_text().splitlines()
        if line.startswith("password")
    )
    assert len(password) >= 40
    grid = psutil.Process(stack.grid_pid)
    assert not any(password in part for part in grid.cmdline())
    assert password not in stack.grid_log.read_text(errors="replace")
