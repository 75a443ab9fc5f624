"""The dashboard's pure security decisions (where "next" may go, where a POST comes from,
loopback addresses, the session store) and its refusals, through Flask's test client: every
request here is refused before anything would reach the database."""

from __future__ import annotations

import re

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from flask.testing import FlaskClient

from scrapefleet.common.errors import SettingsError
from scrapefleet.common.ops.cli import cli
from scrapefleet.common.ops.dashboard.app import create_app
from scrapefleet.common.ops.dashboard.logins import COOKIE_NAME, FORM_COOKIE_NAME, SessionStore
from scrapefleet.common.ops.dashboard.security import (
    Verdict,
    host_allowed,
    is_loopback_literal,
    local_next,
    origin_verdict,
)
from scrapefleet.common.settings import Settings, load_settings

pytestmark = pytest.mark.timeout(10)

TOKEN = "unit-test-dashboard-token-0123"
OWN = "http://127.0.0.1:8080/"


@pytest.mark.parametrize(
    "target",
    ["/", "/?", "/jobs?status=failed&host=h1", "/jobs/42", "/prefix/jobs?kind=a%2Fb", "/é"],
)
def test_local_paths_are_kept(target: str) -> None:
    assert local_next(target, "/default") == target


@pytest.mark.parametrize(
    "target",
    [
        None,
        "",
        "//evil.example/",
        "/\\evil.example/",
        "\\\\evil.example",
        "/\t/evil.example/",
        "/\n/evil.example/",
        "/\r\n/evil.example",
        " /jobs",
        "/jobs ",
        "/\x00/evil",
        "/\u200b/evil.example",  # zero-width space: a format character
        "/\u00a0/evil.example",  # no-break space
        "/\u2028/evil.example",  # line separator
        "https://evil.example/",
        "http:/evil.example",
        "javascript:alert(1)",
        "evil.example",
        "jobs/1",
        "/" + "a" * 3000,
    ],
)
def test_anything_but_a_local_path_goes_to_the_default(target: str | None) -> None:
    assert local_next(target, "/default") == "/default"


@pytest.mark.parametrize(
    ("origin", "fetch_site", "verdict"),
    [
        (None, "same-origin", Verdict.SAME_ORIGIN),
        ("http://127.0.0.1:8080", "same-origin", Verdict.SAME_ORIGIN),
        ("http://127.0.0.1:8080", "Same-Origin", Verdict.SAME_ORIGIN),
        # Another port of the same host is "same-site" for the browser: refused.
        ("http://127.0.0.1:9999", "same-site", Verdict.CROSS),
        ("http://127.0.0.1:8080", "same-site", Verdict.CROSS),  # the header is what counts
        ("https://evil.example", "cross-site", Verdict.CROSS),
        (None, "none", Verdict.CROSS),
        (None, "bogus", Verdict.CROSS),
        # Origin only: scheme, host and port must all be ours.
        ("http://127.0.0.1:8080", None, Verdict.SAME_ORIGIN),
        ("HTTP://127.0.0.1:8080", None, Verdict.SAME_ORIGIN),
        ("http://127.0.0.1:9999", None, Verdict.CROSS),
        ("https://127.0.0.1:8080", None, Verdict.CROSS),
        ("http://localhost:8080", None, Verdict.CROSS),
        ("http://127.0.0.1", None, Verdict.CROSS),
        ("http://127.0.0.1:8080.evil.example", None, Verdict.CROSS),
        ("null", None, Verdict.CROSS),
        ("", None, Verdict.NO_BROWSER),
        (None, None, Verdict.NO_BROWSER),
        (None, "", Verdict.NO_BROWSER),
    ],
)
def test_origin_verdict(origin: str | None, fetch_site: str | None, verdict: Verdict) -> None:
    assert origin_verdict(origin, fetch_site, OWN) is verdict


def test_default_ports_match_an_origin_without_one() -> None:
    assert origin_verdict("https://dash.example", None, "https://dash.example:443/") is (
        Verdict.SAME_ORIGIN
    )
    assert origin_verdict("http://[::1]:8080", None, "http://[::1]:8080/") is Verdict.SAME_ORIGIN
    assert origin_verdict("http://[::1]:8081", None, "http://[::1]:8080/") is Verdict.CROSS


def test_loopback_literals() -> None:
    for address in ("127.0.0.1", "127.9.9.9", "::1", "[::1]", "localhost", "LOCALHOST"):
        assert is_loopback_literal(address) is True, address
    for address in ("0.0.0.0", "::", "10.0.0.1", "192.168.1.2", "::ffff:10.0.0.1"):
        assert is_loopback_literal(address) is False, address
    assert is_loopback_literal("dash.example") is None


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("127.0.0.1:8080", True),
        ("localhost:8080", True),
        ("LOCALHOST.", True),
        ("[::1]:8080", True),
        ("10.0.0.7", True),
        ("dash.example:443", True),  # listed
        ("evil.example:8080", False),  # a rebinding page's own name
        ("dash.example.evil.example", False),
        ("", False),
        (None, False),
    ],
)
def test_host_names_a_rebinding_page_cannot_use(host: str | None, allowed: bool) -> None:
    assert host_allowed(host, {"dash.example"}) is allowed


def test_sessions_expire_when_idle_and_stay_bounded() -> None:
    now = [0.0]
    store = SessionStore(idle_s=60, max_sessions=3, clock=lambda: now[0])
    first = store.put(None, {"csrf": "a"})
    assert len(first) >= 40 and store.get(first) == {"csrf": "a"}
    now[0] = 50
    store.put(first, {"csrf": "a"})  # a request pushes the deadline on
    now[0] = 100
    assert store.get(first) == {"csrf": "a"}
    now[0] = 200
    assert store.get(first) is None
    ids = [store.put(None, {"n": n}) for n in range(5)]
    assert len(store) == 3
    assert [store.get(sid) for sid in ids[-3:]] == [{"n": 2}, {"n": 3}, {"n": 4}]
    store.delete(ids[-1])
    assert store.get(ids[-1]) is None


# -- the Flask app's refusals --------------------------------------------------------------


def _settings(**values: object) -> Settings:
    return Settings(database_url="postgresql://nobody@127.0.0.1:1/none", **values)


def _client(**values: object) -> FlaskClient:
    engine = sa.create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
    return create_app(_settings(dashboard_token=TOKEN, **values), engine).test_client()


def _csrf(client: FlaskClient) -> str:
    page = client.get("/login").get_data(as_text=True)
    match = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert match, page
    return match[1]


def test_cross_origin_posts_are_refused_even_with_the_token() -> None:
    client = _client()
    csrf = _csrf(client)
    form = {"action": "pause", "token": TOKEN, "csrf_token": csrf}
    for headers in (
        {"Sec-Fetch-Site": "same-site", "Origin": "http://localhost:9999"},
        {"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
        {"Origin": "http://localhost:9999"},
        {"Origin": "null"},
    ):
        answer = client.post("/control/assignment", data=form, headers=headers)
        assert answer.status_code == 403, headers
        assert "own pages" in answer.get_data(as_text=True)


def test_a_browser_post_needs_the_session_form_token() -> None:
    client = _client()
    _csrf(client)
    same = {"Sec-Fetch-Site": "same-origin", "Origin": "http://localhost"}
    for form in ({"action": "pause"}, {"action": "pause", "csrf_token": "guessed"}):
        answer = client.post("/control/assignment", data=form, headers=same)
        assert answer.status_code == 403
        assert "reload the page" in answer.get_data(as_text=True)


def test_a_request_without_browser_headers_needs_the_token_itself() -> None:
    client = _client()
    csrf = _csrf(client)
    # The session cookie and form token, without the operator token: refused.
    answer = client.post("/control/assignment", data={"action": "pause", "csrf_token": csrf})
    assert answer.status_code == 403
    assert "must carry the dashboard token" in answer.get_data(as_text=True)
    wrong = {"Authorization": "Bearer " + "x" * 30}
    assert client.post("/control/assignment", data={"action": "x"}, headers=wrong).status_code == (
        403
    )


def test_unlock_renews_the_session_and_the_cookie_holds_no_token() -> None:
    client = _client()
    csrf = _csrf(client)
    # Before a login the form token is in a signed cookie: nothing is kept on the server.
    assert client.get_cookie(COOKIE_NAME) is None
    form_cookie = client.get_cookie(FORM_COOKIE_NAME)
    assert form_cookie is not None and form_cookie.http_only and form_cookie.same_site == "Strict"
    # An id planted beforehand (any port of this host can set our cookie).
    client.set_cookie(COOKIE_NAME, "planted-by-another-port")
    answer = client.post(
        "/control/token",
        data={"token": TOKEN, "csrf_token": csrf, "next": "/\t/evil.example/"},
        headers={"Sec-Fetch-Site": "same-origin"},
    )
    assert answer.status_code == 303
    assert answer.headers["Location"] == "/"
    cookie = client.get_cookie(COOKIE_NAME)
    assert cookie is not None and cookie.value != "planted-by-another-port"
    assert client.get_cookie(FORM_COOKIE_NAME) is None
    assert TOKEN not in cookie.value and cookie.http_only and cookie.same_site == "Strict"
    # The old id (say, planted by a page on another port) is not the unlocked session.
    assert TOKEN not in str(answer.headers)


def test_reading_can_need_the_token() -> None:
    client = _client(dashboard_read_needs_token=True)
    for path in ("/", "/jobs?status=failed", "/jobs/1", "/artifacts/1/attempt-1.png"):
        answer = client.get(path)
        assert answer.status_code == 303, path
        assert answer.headers["Location"].startswith("/login?next="), path
    assert client.get("/login").status_code == 200
    with pytest.raises(SettingsError, match="dashboard_token"):
        create_app(_settings(dashboard_read_needs_token=True), sa.create_engine("sqlite://"))


def test_a_non_loopback_address_needs_allow_remote(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRAPEFLEET_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    for address in ("0.0.0.0", "::", "10.1.2.3"):
        result = CliRunner().invoke(cli, ["dashboard", "--address", address])
        assert result.exit_code == 2, result.output
        assert "--allow-remote" in result.output and "dashboard_allow_remote" in result.output
        assert len(result.output.strip().splitlines()) == 1


def test_forwarded_headers_count_only_behind_configured_proxies() -> None:
    headers = {
        "Origin": "https://dash.example",
        "X-Forwarded-Proto": "https",
        "X-Forwarded-Host": "dash.example",
    }
    form = {"action": "pause", "csrf_token": "guessed"}
    direct = _client().post("/control/assignment", data=form, headers=headers)
    assert direct.status_code == 403 and "own pages" in direct.get_data(as_text=True)
    # Behind one proxy its headers name our origin: the origin check passes, the form token
    # (a guess here) is what refuses.
    proxied = _client(dashboard_proxies=1, dashboard_hosts="dash.example").post(
        "/control/assignment", data=form, headers=headers
    )
    assert proxied.status_code == 403 and "reload the page" in proxied.get_data(as_text=True)


def test_a_page_under_another_host_name_is_refused() -> None:
    client = _client()
    refused = client.get("/login", headers={"Host": "evil.example:8080"})
    assert refused.status_code == 400
    assert refused.mimetype == "text/plain" and "dashboard_hosts" in refused.get_data(as_text=True)
    assert client.get("/login", headers={"Host": "127.0.0.1:8080"}).status_code == 200
    listed = _client(dashboard_hosts="Dash.Example").get("/login", headers={"Host": "dash.example"})
    assert listed.status_code == 200


def test_a_listed_host_must_be_a_bare_name() -> None:
    with pytest.raises(SettingsError, match="dashboard_hosts"):
        load_settings(None, dashboard_hosts="https://dash.example/")
