"""A renderer killed from outside is the host's fault; a page that crashes its renderer is the
page's (consumer.browser.actions.renderer_deaths), on the real stack through the consumer's own
runner."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from scrapefleet.common.actions.registry import register
from scrapefleet.consumer.browser.actions.selenium_actions import navigate
from scrapefleet.consumer.browser.sessions.session_pool import SessionPool
from scrapefleet.consumer.browser.stack.browser_stack import StackWebDriver, session_profile_dir
from scrapefleet.consumer.browser.stack.processes import processes_naming
from scrapefleet.consumer.runner import Outcome
from tests.browser.job_browser_helpers import job_pool, run  # noqa: F401
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.timeout(90)]


@register("test_crash_own_renderer", needs_browser=True)
def _crash_own_renderer(driver: Any, _params: Any) -> dict[str, Any]:
    navigate(driver, "chrome://crash")  # what a page that crashes its renderer comes to
    return {}


@pytest.fixture
def served() -> Iterator[tuple[str, threading.Event]]:
    """A page that says when the browser has asked for it."""
    asked = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            body = b"<!doctype html><title>Waiting</title><p>never the awaited element</p>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            asked.set()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", asked
    finally:
        server.shutdown()
        server.server_close()


def _renderers(driver: StackWebDriver) -> list[int]:
    profile = session_profile_dir(driver)
    assert profile is not None
    pids = []
    for proc in processes_naming(profile):
        with contextlib.suppress(Exception):
            line = proc.cmdline()
            if "--type=renderer" in line and "--extension-process" not in line:
                pids.append(proc.pid)
    return pids


def test_a_renderer_killed_mid_page_is_released_as_the_hosts_fault(
    job_pool: SessionPool,  # noqa: F811
    served: tuple[str, threading.Event],
) -> None:
    url, asked = served
    outcome: list[Outcome] = []
    payload = {"url": url, "wait_for": "#never", "wait_timeout_s": scaled(20)}
    worker = threading.Thread(target=lambda: outcome.append(run(job_pool, "fetch_page", payload)))
    worker.start()
    assert asked.wait(scaled(20)), "the page was never asked for"
    driver = next(slot.driver for slot in job_pool._slots if slot.driver is not None)
    wait_for(lambda: _renderers(driver), scaled(10), "the page's renderer")
    for pid in _renderers(driver):  # what an operator's kill or the OOM killer does
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    worker.join(scaled(30))
    assert outcome, "the job never returned"
    (ended,) = outcome
    assert ended.status == "released", ended
    assert not ended.by_page, "a renderer killed from outside was charged to the page"
    assert "killed by SIGKILL" in (ended.error or "")


def test_a_page_that_crashes_its_renderer_stays_the_pages_fault(
    job_pool: SessionPool,  # noqa: F811
) -> None:
    ended = run(job_pool, "test_crash_own_renderer", {})
    assert ended.status == "failed", ended
    assert "RendererCrashed" in (ended.error or "")
