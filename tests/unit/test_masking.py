"""Secrets out of what is shown (common.masking), and the two writers that use it without a
caller asking: every log line, and the network log a failed attempt saves as an artifact."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from scrapefleet.common import masking
from scrapefleet.common.masking import (
    MASK,
    digest,
    mask_cookie_header,
    mask_document,
    mask_headers,
    mask_text,
    mask_url,
)
from scrapefleet.common.runtime.logging_setup import JsonFormatter, KeyValueFormatter
from scrapefleet.consumer.browser.actions.artifacts import capture_failure
from scrapefleet.consumer.browser.actions.network_log import NetworkLog

pytestmark = pytest.mark.timeout(10)


def test_a_url_loses_its_userinfo_and_its_token_values() -> None:
    assert mask_url("http://bob:hunter2@proxy:3128") == "http://***@proxy:3128"
    assert (
        mask_url("https://a.test/p?page=2&access_token=zz&api_key=k#id_token=t")
        == "https://a.test/p?page=2&access_token=***&api_key=***#id_token=***"
    )
    assert mask_url("https://a.test/p?q=shoes&key=K1") == "https://a.test/p?q=shoes&key=***"
    assert mask_url("not a url") == "not a url"
    assert mask_url("https://a.test/?token=v", digest) == f"https://a.test/?token={digest('v')}"


def test_free_text_masks_urls_and_credentials_but_not_prose() -> None:
    text = (
        "ProxyError: http://bob:hunter2@p:3128 refused\n"
        "sent Authorization: Basic Ym9iOmh1bnRlcjI= and Bearer eyJhbGciOiJIUzI1NiJ9.x"
    )
    shown = mask_text(text)
    for secret in ("hunter2", "Ym9iOmh1bnRlcjI=", "eyJhbGciOiJIUzI1NiJ9"):
        assert secret not in shown
    assert "http://***@p:3128" in shown
    assert mask_text("Basic authentication failed on page 2") == (
        "Basic authentication failed on page 2"
    )


def test_cookie_headers_keep_names_and_attributes_not_values() -> None:
    joined = "sid=abc123; Path=/; Expires=Wed, 21 Oct 2026 07:28:00 GMT; HttpOnly, theme=dark"
    assert mask_cookie_header(joined) == (
        "sid=***; Path=/; Expires=Wed, 21 Oct 2026 07:28:00 GMT; HttpOnly, theme=***"
    )
    assert mask_cookie_header("a=1; b=2") == "a=***; b=***"


def test_credential_headers_are_hidden_by_name() -> None:
    headers = {
        "Authorization": "Bearer x",
        "X-API-Key": "k",
        "X-Auth-Token": "t",
        "x-session-id": "s",
        "Accept": "text/html",
        "Access-Control-Allow-Credentials": "true",
        "Location": "https://u:p@a.test/?token=1",
    }
    assert mask_headers(headers) == {
        "Authorization": MASK,
        "X-API-Key": MASK,
        "X-Auth-Token": MASK,
        "x-session-id": MASK,
        "Accept": "text/html",
        "Access-Control-Allow-Credentials": "true",
        "Location": "https://***@a.test/?token=***",
    }


def test_a_payload_is_masked_at_any_depth_and_left_as_it_was() -> None:
    payload: dict[str, Any] = {
        "url": "https://a.test/?q=1",
        "proxy": "http://u:pw@p:1",
        "browser": {
            "proxy": "http://u:pw@p:1",
            "headers": {"Authorization": "x", "Accept": "y"},
            "cookies": [{"name": "s", "value": "v", "domain": "a.test"}],
        },
        "cookies": {"s": "v"},
        "login": {"user": "bob", "password": "pw"},
        "max_pages": 3,
    }
    before = json.dumps(payload)
    assert mask_document(payload) == {
        "url": "https://a.test/?q=1",
        "proxy": "http://***@p:1",
        "browser": {
            "proxy": "http://***@p:1",
            "headers": {"Authorization": MASK, "Accept": "y"},
            "cookies": [{"name": "s", "value": MASK, "domain": "a.test"}],
        },
        "cookies": {"s": MASK},
        "login": {"user": "bob", "password": MASK},
        "max_pages": 3,
    }
    assert json.dumps(payload) == before


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_log_lines_mask_urls_and_tracebacks(log_format: str) -> None:
    output = io.StringIO()
    handler = logging.StreamHandler(output)
    handler.setFormatter(JsonFormatter() if log_format == "json" else KeyValueFormatter())
    log = logging.getLogger(f"scrapefleet.test_masking.{log_format}")
    log.propagate = False
    log.addHandler(handler)
    log.warning("proxy http://bob:hunter2@p:3128 refused")
    try:
        raise ConnectionError("https://a.test/?token=t0k3n unreachable")
    except ConnectionError:
        log.exception("fetch failed")
    text = output.getvalue()
    assert "hunter2" not in text and "t0k3n" not in text
    assert "http://***@p:3128" in text and "token=***" in text


def _response(url: str, headers: dict[str, str]) -> dict[str, Any]:
    return {
        "request": {"request": "1", "url": url, "method": "GET", "timings": {}},
        "response": {
            "status": 200,
            "headers": [{"name": k, "value": {"value": v}} for k, v in headers.items()],
        },
        "navigation": "n",
        "timestamp": 1,
    }


def test_a_saved_network_log_hashes_cookies_and_strips_url_credentials() -> None:
    log = NetworkLog()
    url = "https://bob:hunter2@a.test/home?session_token=t0k3n&page=1"
    headers = {
        "Set-Cookie": "sid=s3cr3tsid; Path=/; HttpOnly",
        "Authorization": "Bearer b34r3r",
        "CF-Ray": "r1",
    }
    log.record("network.responseCompleted", _response(url, headers))
    saved = log.as_json()
    for secret in ("hunter2", "t0k3n", "s3cr3tsid", "b34r3r"):
        assert secret not in saved
    (entry,) = json.loads(saved)["requests"]
    assert entry["url"] == f"https://***@a.test/home?session_token={digest('t0k3n')}&page=1"
    assert entry["headers"] == {
        "set-cookie": f"sid={digest('s3cr3tsid')}; Path=/; HttpOnly",
        "authorization": digest("Bearer b34r3r"),
        "cf-ray": "r1",
    }
    # fetch_page still finds its document by the URL the page really had
    assert log.document(url, wait_s=0) is not None


def test_a_saved_traceback_masks_the_urls_in_it(tmp_path: Path) -> None:
    trace = "Traceback...\nProxyError: http://bob:hunter2@p:3128 refused"
    saved = capture_failure(None, tmp_path, job_id=7, attempt=1, traceback_text=trace)
    text = Path(saved["traceback"]).read_text()
    assert "hunter2" not in text and "http://***@p:3128" in text


def test_control_characters_are_spelled_out_for_a_terminal() -> None:
    hostile = "no price\x1b[2J\x1b]0;owned\x07\x9b31m\u202e\x00\x7f\rall good\n\tnext"
    shown = masking.terminal_text(hostile)
    assert shown == (
        "no price\\x1b[2J\\x1b]0;owned\\x07\\x9b31m\\u202e\\x00\\x7f\\rall good\n\tnext"
    )
    assert masking.terminal_text("a\nb\tc", keep_newlines=False) == "a\\nb\\tc"
    assert masking.terminal_text("prix: 12 €, naïve, 日本") == "prix: 12 €, naïve, 日本"


def test_cookie_and_authorization_headers_quoted_in_text_are_masked() -> None:
    text = (
        "Cookie: sid=abc123; theme=dark\n"
        "{'Set-Cookie': 'sid=zz9; Path=/; HttpOnly'}\n"
        'Authorization: Digest username="bob", response="6629fae49393"\n'
        "Proxy-Authorization: Basic dXNlcjpwYXNz\n"
        "no cookie: the site refused, 5 cookies=5 saved"
    )
    assert masking.mask_text(text) == (
        "Cookie: sid=***; theme=***\n"
        "{'Set-Cookie': 'sid=***; Path=/; HttpOnly'}\n"
        "Authorization: ***\n"
        "Proxy-Authorization: ***\n"
        "no cookie: the site refused, 5 cookies=5 saved"
    )
