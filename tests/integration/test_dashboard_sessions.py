"""An anonymous client cannot log the operators out of the dashboard: the real server
(waitress on 127.0.0.1), real HTTP over one keep-alive connection per client.

Every cookie-less ``GET /login`` used to make a server-side session; the store keeps a bounded
number and, full, drops those nearest their idle deadline: the operator's among them.
"""

from __future__ import annotations

import http.client
import re
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.cookies import SimpleCookie
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from scrapefleet.common.ops.dashboard.app import create_app
from scrapefleet.common.ops.dashboard.logins import COOKIE_NAME
from scrapefleet.common.ops.dashboard.server import DashboardServer
from tests.integration.producer_helpers import producer_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TOKEN = "dashboard-sessions-token-0123456789"
ANONYMOUS_REQUESTS = 20_000
FLOOD_CONNECTIONS = 4


class Client:
    """One keep-alive connection with its own cookie jar (the cookies a browser would keep)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.cookies: dict[str, str] = {}

    def request(
        self, method: str, path: str, form: dict[str, str] | None = None, keep: bool = True
    ) -> tuple[int, str, dict[str, str]]:
        headers = {"Host": f"127.0.0.1:{self.port}"}
        if keep and self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        body = None
        if form is not None:
            body = urllib.parse.urlencode(form)
            headers["Content-Type"] = "application/x-www-form-urlencoded"
            headers["Origin"] = f"http://127.0.0.1:{self.port}"
            headers["Sec-Fetch-Site"] = "same-origin"
        self.conn.request(method, path, body=body, headers=headers)
        answer = self.conn.getresponse()
        text = answer.read().decode()
        if keep:
            for line in answer.headers.get_all("Set-Cookie") or []:
                for name, morsel in SimpleCookie(line).items():
                    if morsel.value == "" or "1970" in (morsel["expires"] or ""):
                        self.cookies.pop(name, None)
                    else:
                        self.cookies[name] = morsel.value
        return answer.status, text, dict(answer.headers)


@pytest.fixture
def server(engine: Engine, database_url: str, tmp_path: Path) -> Iterator[DashboardServer]:
    settings = producer_settings(
        database_url, tmp_path, dashboard_token=TOKEN, dashboard_read_needs_token=True
    )
    app = create_app(settings, engine)
    dashboard = DashboardServer(app, "127.0.0.1", 0).start()
    dashboard.app = app  # type: ignore[attr-defined]
    try:
        yield dashboard
    finally:
        dashboard.close()


def log_in(client: Client) -> None:
    status, page, _ = client.request("GET", "/login")
    assert status == 200
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert csrf, page
    status, _, headers = client.request(
        "POST", "/control/token", {"token": TOKEN, "csrf_token": csrf[1], "next": "/"}
    )
    assert status == 303 and headers["Location"].endswith("/"), (status, headers)
    assert COOKIE_NAME in client.cookies


def test_the_operators_session_survives_a_flood_of_anonymous_requests(
    server: DashboardServer,
) -> None:
    operator = Client(server.port)
    log_in(operator)
    assert operator.request("GET", "/")[0] == 200

    def flood(count: int) -> list[int]:
        stranger = Client(server.port)
        statuses = []
        for n in range(count):
            # Cookie-less each time, as a flood would be; every other one asks to "lock" as
            # well (no browser headers: the one control that needs no token).
            if n % 2:
                statuses.append(stranger.request("GET", "/login", keep=False)[0])
            else:
                statuses.append(stranger.request("POST", "/control/token/forget", keep=False)[0])
        return statuses

    # A few connections at once: the server's threads overlap, the test takes less time.
    with ThreadPoolExecutor(FLOOD_CONNECTIONS) as pool:
        answers = pool.map(flood, [ANONYMOUS_REQUESTS // FLOOD_CONNECTIONS] * FLOOD_CONNECTIONS)
        statuses = [status for some in answers for status in some]
    assert len(statuses) == ANONYMOUS_REQUESTS and set(statuses) <= {200, 303}

    status, page, headers = operator.request("GET", "/")
    assert status == 200, ("the operator was logged out", status, headers.get("Location"))
    assert "lock-button" in page
    sessions = server.app.session_interface.store  # type: ignore[attr-defined]
    assert len(sessions) == 1, "only the operator's session is kept on the server"


def test_the_login_form_is_still_csrf_safe(server: DashboardServer) -> None:
    browser = Client(server.port)
    status, page, _ = browser.request("GET", "/login")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert status == 200 and csrf
    # Another client's form token, or none, or this one's token with another client's cookie.
    other = Client(server.port)
    _, other_page, _ = other.request("GET", "/login")
    other_csrf = re.search(r'name="csrf_token" value="([^"]+)"', other_page)
    assert other_csrf and other_csrf[1] != csrf[1]
    for token in ("", other_csrf[1], "guessed"):
        status, text, _ = browser.request(
            "POST", "/control/token", {"token": TOKEN, "csrf_token": token, "next": "/"}
        )
        assert status == 403 and "reload the page" in text, token
    assert browser.request("GET", "/")[0] == 303, "still not logged in"
    # A forged form cookie is not one the dashboard signed: a fresh start, refused too.
    browser.cookies = {k: v[:-4] + "AAAA" for k, v in browser.cookies.items()}
    status, _, _ = browser.request(
        "POST", "/control/token", {"token": TOKEN, "csrf_token": csrf[1], "next": "/"}
    )
    assert status == 403
    log_in(browser)
    assert browser.request("GET", "/")[0] == 200
