"""The dashboard's forgery defences, with the real server (waitress on 127.0.0.1) and a real
headless Chromium (selenium's local Chrome driver, as test_dashboard.py does).

The attacker is a page served from ANOTHER PORT of 127.0.0.1: to the browser it is the same
site as the dashboard, so the dashboard's SameSite=Strict cookie goes along with its forged
form. The dashboard must refuse it (nothing changes in PostgreSQL) while the same control from
its own page works.
"""

from __future__ import annotations

import http.server
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from html import escape
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait
from sqlalchemy.engine import Engine

from scrapefleet.common.ops.dashboard.app import create_app
from scrapefleet.common.ops.dashboard.logins import COOKIE_NAME
from scrapefleet.common.ops.dashboard.server import DashboardServer
from scrapefleet.common.reads import queries
from scrapefleet.common.settings import Settings
from scrapefleet.common.store import NewJob
from tests.browser.page_waits import wait_for_text
from tests.integration.producer_helpers import add_hosts, producer_settings, submit
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.timeout(60)]

TOKEN = "dashboard-security-token-0123456789"
WAIT_S = 10.0


class AttackerSite:
    """Serves one auto-submitting form per path on its own 127.0.0.1 port, and records the
    Cookie headers the browser sends it."""

    def __init__(self, forms: dict[str, tuple[str, dict[str, str]]]) -> None:
        self.cookies: list[str] = []
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.cookies.append(self.headers.get("Cookie", ""))
                if self.path not in forms:
                    self.send_error(404)
                    return
                action, fields = forms[self.path]
                inputs = "".join(
                    f'<input type="hidden" name="{escape(k)}" value="{escape(v)}">'
                    for k, v in fields.items()
                )
                body = (
                    f'<!doctype html><form method="post" action="{escape(action)}">{inputs}'
                    "</form><script>document.forms[0].submit()</script>"
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> AttackerSite:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


@pytest.fixture(scope="module")
def browser(dashboard_browser: WebDriver) -> WebDriver:
    return dashboard_browser


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return producer_settings(database_url, tmp_path, dashboard_token=TOKEN)


def serve(settings: Settings, engine: Engine) -> DashboardServer:
    return DashboardServer(create_app(settings, engine), "127.0.0.1", 0).start()


@pytest.fixture
def dashboard(settings: Settings, engine: Engine, browser: WebDriver) -> Iterator[str]:
    server = serve(settings, engine)
    browser.delete_all_cookies()
    try:
        yield server.url
    finally:
        server.close()


def unlock(browser: WebDriver, dashboard: str) -> None:
    browser.get(dashboard + "/")
    browser.find_element(By.ID, "token-input").send_keys(TOKEN)
    browser.find_element(By.ID, "unlock-button").click()
    wait_for_text(browser, ".notice", "controls unlocked")


def paused(engine: Engine) -> bool:
    with engine.connect() as conn:
        return queries.fleet_control(conn).assignment_paused


def host_state(engine: Engine, name: str) -> str:
    with engine.connect() as conn:
        state: str = conn.execute(
            sa.text("SELECT state FROM hosts WHERE name = :name"), {"name": name}
        ).scalar_one()
    return state


def job_status(engine: Engine, job_id: int) -> str:
    with engine.connect() as conn:
        status: str = conn.execute(
            sa.text("SELECT status FROM jobs WHERE id = :id"), {"id": job_id}
        ).scalar_one()
    return status


# ---------------------------------------------------------------- tests


def test_a_form_from_another_port_is_refused_and_the_own_page_works(
    browser: WebDriver, dashboard: str, engine: Engine
) -> None:
    add_hosts(engine, {"h1": 3})
    (job_id,) = submit(engine, [NewJob("noop", {})])
    unlock(browser, dashboard)
    page = browser.page_source
    # Even a page that somehow knew the session's form token is refused: the origin decides.
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert csrf, "the dashboard's forms carry a form token"
    forged = {"csrf_token": csrf[1], "next": "/"}
    attacks = {
        "/pause": (dashboard + "/control/assignment", {"action": "pause", **forged}),
        "/drain": (dashboard + "/control/hosts/h1", {"action": "drain", **forged}),
        "/cancel": (dashboard + "/control/jobs", {"action": "cancel", "ids": str(job_id)}),
    }
    with AttackerSite(attacks) as attacker:
        for path in attacks:
            browser.get(attacker.url + path)
            WebDriverWait(browser, scaled(WAIT_S)).until(
                lambda d: (
                    d.current_url.startswith(dashboard + "/")
                    and d.execute_script("return document.readyState") == "complete"
                ),
                "the forged POST's answer",
            )
            assert browser.find_element(By.TAG_NAME, "h1").text == "403", path
            assert "own pages" in browser.find_element(By.ID, "message").text
        # The browser did hand the dashboard's cookie to the other port: only a session id.
        assert any(COOKIE_NAME in cookie for cookie in attacker.cookies)
        assert not any(TOKEN in cookie for cookie in attacker.cookies)

    assert not paused(engine)
    assert host_state(engine, "h1") == "active"
    assert job_status(engine, job_id) == "pending"

    # The same controls from the dashboard's own pages, in the same browser session.
    browser.get(dashboard + "/")
    browser.find_element(By.ID, "pause-button").click()
    wait_for_text(browser, "#paused-banner", "paused")
    wait_for(lambda: paused(engine), WAIT_S, "assignment paused in PostgreSQL")
    browser.find_element(By.ID, "drain-h1").click()
    wait_for_text(browser, ".notice", "draining")
    assert host_state(engine, "h1") == "draining"
    browser.get(f"{dashboard}/jobs/{job_id}")
    browser.find_element(By.ID, "cancel-button").click()
    wait_for_text(browser, "#job-status", "cancelled")
    assert job_status(engine, job_id) == "cancelled"


def test_next_cannot_leave_the_dashboard(browser: WebDriver, dashboard: str) -> None:
    unlock(browser, dashboard)
    for target in ("/\t/evil.example/", "//evil.example/", "/\\evil.example/"):
        browser.get(dashboard + "/")
        browser.execute_script(
            "document.querySelector('#lock-button').form.elements['next'].value = arguments[0]",
            target,
        )
        browser.find_element(By.ID, "lock-button").click()
        wait_for_text(browser, ".notice", "token forgotten")
        assert browser.current_url == dashboard + "/", target
        unlock(browser, dashboard)


def test_a_restart_ends_every_session(
    browser: WebDriver, settings: Settings, engine: Engine
) -> None:
    first = serve(settings, engine)
    browser.delete_all_cookies()
    try:
        unlock(browser, first.url)
    finally:
        first.close()
    # The same address and port, as after a restart: the page's form is stale, and refused.
    second = DashboardServer(create_app(settings, engine), "127.0.0.1", first.port).start()
    try:
        browser.find_element(By.ID, "pause-button").click()
        assert "reload the page" in wait_for_text(browser, "#message", "session")
        assert not paused(engine)
        browser.get(second.url + "/")
        assert browser.find_elements(By.ID, "unlock-button"), "locked again after the restart"
    finally:
        second.close()


def test_reading_needs_the_token_when_configured(
    browser: WebDriver, settings: Settings, engine: Engine
) -> None:
    (job_id,) = submit(engine, [NewJob("noop", {})])
    private = settings.model_copy(update={"dashboard_read_needs_token": True})
    server = serve(private, engine)
    browser.delete_all_cookies()
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            # Not following the redirect: a script without the token sees a 303 to /login.
            opener = urllib.request.build_opener(NoRedirect)
            opener.open(f"{server.url}/jobs/{job_id}", timeout=scaled(5))
        assert refused.value.code == 303
        assert refused.value.headers["Location"].startswith("/login?next=")
        bearer = urllib.request.Request(
            f"{server.url}/jobs/{job_id}", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        with urllib.request.urlopen(bearer, timeout=scaled(5)) as answer:
            assert f"Job {job_id}".encode() in answer.read()

        browser.get(f"{server.url}/jobs/{job_id}")
        WebDriverWait(browser, scaled(WAIT_S)).until(lambda d: "/login" in d.current_url)
        assert not browser.find_elements(By.ID, "job-status")
        browser.find_element(By.ID, "login-token").send_keys(TOKEN)
        browser.find_element(By.ID, "login-button").click()
        assert wait_for_text(browser, "#job-status", "pending")
        assert browser.current_url == f"{server.url}/jobs/{job_id}"
    finally:
        server.close()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def test_scripts_post_with_the_token_and_without_a_cookie(dashboard: str, engine: Engine) -> None:
    add_hosts(engine, {"h1": 3})
    data = urllib.parse.urlencode({"action": "drain"}).encode()
    request = urllib.request.Request(
        dashboard + "/control/hosts/h1", data=data, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=scaled(5)) as answer:
        assert answer.status == 200
    assert host_state(engine, "h1") == "draining"
