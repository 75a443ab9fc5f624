"""A job's browser options, on the real stack: what the server and a proxy receive, what the
page's JavaScript sees, what is never requested, and that nothing passes to the next job."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scrapefleet.common.browser.options import BrowserOptions
from scrapefleet.consumer.browser.sessions.session_pool import SessionPool
from tests.browser.evidence_site import EvidenceSite
from tests.browser.job_browser_helpers import evidence_site, job_pool, run  # noqa: F401
from tests.browser.recording_proxy import RecordingProxy

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

UA = "scrapefleet-test/1.0 (options)"
PROBE = {"probe": {"css": "#probe"}}


def _fetch(pool: SessionPool, url: str, **browser: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {"url": url, "fields": PROBE}
    if browser:
        payload["browser"] = browser
    outcome = run(pool, "fetch_page", payload)
    assert outcome.status == "completed", outcome.error
    assert outcome.result is not None
    return outcome.result


def _probe(result: dict[str, Any]) -> dict[str, Any]:
    seen: dict[str, Any] = json.loads(result["fields"]["probe"])
    return seen


def test_user_agent_headers_and_cookies_reach_the_server_and_not_the_next_job(
    job_pool: SessionPool,  # noqa: F811
    evidence_site: EvidenceSite,  # noqa: F811
) -> None:
    evidence_site.clear()
    result = _fetch(
        job_pool,
        evidence_site.url("/page"),
        user_agent=UA,
        headers={"X-Team": "prices"},
        cookies=[{"name": "session", "value": "abc123"}],
    )
    assert _probe(result)["ua"] == UA
    assert "session=abc123" in _probe(result)["cookie"]
    for path in ("/page", "/style.css", "/pixel.png"):  # subresources too
        (request,) = evidence_site.seen(path)
        assert request.header("User-Agent") == UA
        assert request.header("X-Team") == "prices"
        assert request.header("Cookie") == "session=abc123"

    evidence_site.clear()
    _fetch(job_pool, evidence_site.url("/page"))
    (plain,) = evidence_site.seen("/page")
    assert plain.header("User-Agent") != UA
    assert plain.header("X-Team") is None and plain.header("Cookie") is None


def test_locale_timezone_and_window_are_what_the_page_sees(
    job_pool: SessionPool,  # noqa: F811
    evidence_site: EvidenceSite,  # noqa: F811
) -> None:
    evidence_site.clear()
    result = _fetch(
        job_pool,
        evidence_site.url("/page"),
        locale="de-DE",
        timezone="Asia/Tokyo",
        window={"width": 640, "height": 480},
    )
    seen = _probe(result)
    assert seen["language"] == "de-DE"
    assert seen["tz"] == "Asia/Tokyo"
    assert (seen["width"], seen["height"]) == (640, 480)
    (request,) = evidence_site.seen("/page")
    assert (request.header("Accept-Language") or "").startswith("de-DE")


def test_blocked_images_are_never_requested(
    job_pool: SessionPool,  # noqa: F811
    evidence_site: EvidenceSite,  # noqa: F811
) -> None:
    evidence_site.clear()
    _fetch(job_pool, evidence_site.url("/page"), block=["images"])
    assert evidence_site.seen("/page") and evidence_site.seen("/style.css")
    assert evidence_site.seen("/pixel.png") == []


def test_host_defaults_apply_and_the_jobs_own_win(
    job_pool: SessionPool,  # noqa: F811
    evidence_site: EvidenceSite,  # noqa: F811
) -> None:
    defaults = BrowserOptions(
        user_agent="host-default/1", headers={"X-Host": "h1"}, block=["images"]
    )
    evidence_site.clear()
    payload = {"url": evidence_site.url("/page"), "browser": {"headers": {"X-Team": "t"}}}
    outcome = run(job_pool, "fetch_page", payload, defaults=defaults)
    assert outcome.status == "completed", outcome.error
    (request,) = evidence_site.seen("/page")
    assert request.header("User-Agent") == "host-default/1"
    assert (request.header("X-Host"), request.header("X-Team")) == ("h1", "t")
    assert evidence_site.seen("/pixel.png") == []


@pytest.mark.parametrize("credentials", [None, ("scraper", "s3cret")], ids=["open", "auth"])
def test_a_proxy_sees_the_jobs_requests_with_its_user_agent_and_headers(
    job_pool: SessionPool,  # noqa: F811
    evidence_site: EvidenceSite,  # noqa: F811
    credentials: tuple[str, str] | None,
) -> None:
    username, password = credentials or (None, None)
    with RecordingProxy(username, password) as proxy:
        # Named, not 127.0.0.1: Chromium sends no loopback address through a proxy, and the
        # proxy resolves *.test to 127.0.0.1.
        url = evidence_site.url("/page", host="shop.test")
        result = _fetch(job_pool, url, proxy=proxy.url(), user_agent=UA, headers={"X-Via": "p"})
        assert result["title"] == "Evidence" and result["status"] == 200
        for path in ("/page", "/pixel.png"):
            (request,) = proxy.requests_to(path)
            assert request.header("User-Agent") == UA
            assert request.header("X-Via") == "p"
        if credentials:
            assert proxy.challenged >= 1  # answered, then sent unasked
            assert all(s.header("Proxy-Authorization") for s in proxy.seen)

        before = len(proxy.seen)
        evidence_site.clear()
        _fetch(job_pool, evidence_site.url("/page"))  # the next job: direct, no proxy
        assert evidence_site.seen("/page") and len(proxy.seen) == before


def test_options_apply_in_a_browser_of_the_jobs_own(
    job_pool: SessionPool,  # noqa: F811
    evidence_site: EvidenceSite,  # noqa: F811
) -> None:
    evidence_site.clear()
    payload = {
        "url": evidence_site.url("/page"),
        "fields": PROBE,
        "isolation": "session",
        "browser": {"user_agent": UA, "timezone": "America/Sao_Paulo"},
    }
    outcome = run(job_pool, "fetch_page", payload)
    assert outcome.status == "completed", outcome.error
    assert outcome.result is not None
    assert _probe(outcome.result)["tz"] == "America/Sao_Paulo"
    assert outcome.result["headers"]["cf-ray"]  # its requests are logged there too
    (request,) = evidence_site.seen("/page")
    assert request.header("User-Agent") == UA
