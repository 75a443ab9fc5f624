"""The browser options model: what submit refuses (naming the field), how the host's defaults
and a job's own combine, and the pure parts of applying them and logging requests."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from scrapefleet.common.actions.registry import get_action, register
from scrapefleet.common.browser.options import NO_OPTIONS, BrowserOptions
from scrapefleet.common.errors import SubmitError
from scrapefleet.common.settings import load_settings
from scrapefleet.common.store import ClaimedJob
from scrapefleet.consumer.browser.actions.job_setup import (
    blocked_url_patterns,
    host_defaults,
    proxy_config,
)
from scrapefleet.consumer.browser.actions.network_log import NetworkLog
from scrapefleet.consumer.runner import run_job

URL = "https://shop.example/item/7"


@register("test_options_user_action", needs_browser=True)
def _user_action(driver: Any, params: Any) -> dict[str, Any]:
    return {"ran": True, "payload": params.model_dump()}


def _refusal(browser: Any, kind: str = "fetch_page", **payload: Any) -> str:
    action = get_action(kind)
    with pytest.raises(SubmitError) as raised:
        action.validate({"url": URL, **payload, "browser": browser})
    return str(raised.value)


@pytest.mark.parametrize(
    ("browser", "field"),
    [
        ({"user_agnet": "x"}, "payload.browser.user_agnet: Extra inputs are not permitted"),
        ({"proxy": "ftp://proxy.example:21"}, "payload.browser.proxy: scheme must be"),
        ({"proxy": "socks4://proxy.example:1080"}, "payload.browser.proxy: scheme must be"),
        ({"proxy": "socks5://u:p@proxy.example:1080"}, "payload.browser.proxy: a socks5 proxy"),
        ({"proxy": "http://proxy.example:3128/path"}, "payload.browser.proxy: must be scheme"),
        ({"cookies": [{"value": "v"}]}, "payload.browser.cookies.0.name: Field required"),
        ({"cookies": [{"name": "", "value": "v"}]}, "payload.browser.cookies.0.name: String"),
        ({"cookies": [{"name": "a b"}]}, "payload.browser.cookies.0.name: must be a cookie"),
        ({"cookies": [{"name": "a", "value": "x;y"}]}, "payload.browser.cookies.0.value"),
        ({"headers": {"Host": "evil"}}, "payload.browser.headers: 'Host' cannot be set"),
        ({"timezone": "Mars/Olympus"}, "payload.browser.timezone: must be an IANA"),
        ({"timezone": "../etc/passwd"}, "payload.browser.timezone: must be an IANA"),
        ({"locale": "german!"}, "payload.browser.locale: must be a BCP 47"),
        ({"window": {"width": 10, "height": 600}}, "payload.browser.window.width"),
        ({"block": ["scripts"]}, "payload.browser.block.0: Input should be"),
        ("plain", "payload.browser: Input should be a valid dictionary"),
    ],
)
def test_bad_options_are_refused_naming_the_field(browser: Any, field: str) -> None:
    assert _refusal(browser).startswith(field)


def test_every_browser_action_takes_options_and_its_params_never_see_them() -> None:
    for kind in ("fetch_page", "screenshot"):
        params = get_action(kind).validate({"url": URL, "browser": {"user_agent": "x"}})
        assert not hasattr(params, "browser")
    action = get_action("test_options_user_action")
    params = action.validate({"query": "q", "browser": {"locale": "fr-FR"}})
    assert params.model_dump() == {"query": "q"}
    assert action.browser_options_of({"browser": {"locale": "fr-FR"}}).locale == "fr-FR"
    with pytest.raises(SubmitError, match=r"payload\.browser\.locale"):
        action.validate({"browser": {"locale": "??"}})


def test_a_plain_action_takes_no_browser_options() -> None:
    with pytest.raises(SubmitError, match=r"payload\.browser"):
        get_action("http_get").validate({"url": URL, "browser": {"user_agent": "x"}})


def test_a_cookie_without_domain_takes_the_urls_host_or_is_refused() -> None:
    options = get_action("fetch_page").browser_options_of(
        {"url": URL, "browser": {"cookies": [{"name": "sid", "value": "1"}]}}
    )
    assert options.cookies[0].domain == "shop.example"
    user_action = get_action("test_options_user_action")
    with pytest.raises(SubmitError) as raised:
        user_action.validate({"browser": {"cookies": [{"name": "sid"}]}})
    message = str(raised.value)
    assert message.startswith("payload.browser.cookies.0.domain: required")
    assert get_action("test_options_user_action").validate(
        {"browser": {"cookies": [{"name": "sid", "domain": ".example.com"}]}}
    )


def test_the_jobs_own_options_win_over_the_hosts_and_headers_merge() -> None:
    host = BrowserOptions(
        user_agent="host/1", locale="en-GB", headers={"X-Host": "1", "X-Team": "host"}
    )
    job = BrowserOptions.model_validate({"locale": "de-DE", "headers": {"x-team": "job"}})
    merged = job.over(host)
    assert (merged.user_agent, merged.locale) == ("host/1", "de-DE")
    assert merged.headers == {"X-Host": "1", "x-team": "job"}
    assert NO_OPTIONS.over(NO_OPTIONS).empty and not merged.empty
    assert BrowserOptions.model_validate({"block": ["media", "images", "media"]}).block == [
        "images",
        "media",
    ]


def test_host_defaults_come_from_the_browser_settings() -> None:
    settings = load_settings(
        browser_user_agent="fleet/2",
        browser_proxy="http://u:p@proxy.example:3128",
        browser_timezone="Europe/Berlin",
        browser_block=["fonts"],
    )
    defaults = host_defaults(settings)
    assert defaults.user_agent == "fleet/2" and defaults.proxy == "http://u:p@proxy.example:3128"
    assert (defaults.timezone, defaults.block, defaults.locale) == (
        "Europe/Berlin",
        ["fonts"],
        None,
    )
    assert host_defaults(load_settings()).empty


def test_proxy_configs_for_each_scheme() -> None:
    assert proxy_config("http://u:p@proxy.example:3128") == {
        "proxyType": "manual",
        "httpProxy": "proxy.example:3128",
        "sslProxy": "proxy.example:3128",
    }
    assert proxy_config("socks5://proxy.example") == {
        "proxyType": "manual",
        "socksProxy": "proxy.example:1080",
        "socksVersion": 5,
    }
    tls = proxy_config("https://proxy.example:8443")
    assert tls["httpProxy"] == tls["sslProxy"] == "https://proxy.example:8443"


def test_blocked_patterns_cover_each_type_with_and_without_a_query() -> None:
    patterns = blocked_url_patterns(["images", "fonts"])
    assert {"*.png", "*.png?*", "*.woff2", "*.woff2?*"} <= set(patterns)
    assert not any(p.endswith((".mp4", ".mp4?*")) for p in patterns)


def _response(request_id: str, url: str, status: int, **extra: Any) -> dict[str, Any]:
    return {
        "request": {"request": request_id, "url": url, "method": "GET", "timings": {}},
        "response": {"status": status, "headers": [{"name": "CF-Ray", "value": {"value": "r"}}]},
        "navigation": extra.get("navigation"),
        "timestamp": 1,
    }


def test_the_network_log_is_bounded_and_merges_a_failure_into_its_response() -> None:
    log = NetworkLog(max_entries=2)
    log.record("network.responseCompleted", _response("1", "http://a/x.js", 404))
    log.record("network.fetchError", {"request": {"request": "1", "url": "http://a/x.js"}})
    log.record("network.responseCompleted", _response("2", "http://a/", 200, navigation="n"))
    log.record("network.responseCompleted", _response("3", "http://a/y", 200))
    first, document = log.entries()
    assert (first["status"], first["headers"], first["error"]) == (
        404,
        {"cf-ray": "r"},
        "failed before a response (no reason given)",
    )
    assert log.dropped == 1
    assert log.document("http://a/#top", wait_s=0) == document
    assert NetworkLog().document("http://a/", wait_s=0) is None


def test_a_failure_capture_waits_for_a_response_event_still_on_its_way() -> None:
    """Selenium hands each event to a thread of its own: the 404's may come after the job."""
    log = NetworkLog()
    late = threading.Timer(
        0.1, log.record, ("network.responseCompleted", _response("1", "http://a/x.js", 404))
    )
    late.start()
    log.settle(quiet_s=0.3, most_s=5.0)
    assert [e["status"] for e in log.entries()] == [404]


def test_the_network_log_cuts_long_values_and_caps_its_size() -> None:
    log = NetworkLog(max_chars=4500)
    long_value = {"name": "x-long", "value": {"value": "v" * 5000}}
    params = _response("1", "http://a/" + "p" * 5000, 200)
    params["response"]["headers"].append(long_value)
    log.record("network.responseCompleted", params)
    (entry,) = log.entries()
    assert len(entry["url"]) < 2100 and len(entry["headers"]["x-long"]) < 1100
    for n in range(10):
        log.record("network.responseCompleted", _response(str(n + 2), "http://a/", 200))
    assert len(log.as_json()) < 4500 + 500 and log.dropped > 0


class _NoBidiDriver:
    caps: dict[str, Any] = {}


def _lease(_isolation: str) -> contextlib.AbstractContextManager[Any]:
    @contextlib.contextmanager
    def lease() -> Iterator[Any]:
        yield _NoBidiDriver()

    return lease()


def test_options_on_a_session_without_bidi_release_the_job_and_none_run_it() -> None:
    def job(payload: dict[str, Any]) -> ClaimedJob:
        return ClaimedJob(7, "test_options_user_action", payload, 1, 3, None, True)

    asked = run_job(job({"browser": {"user_agent": "x"}}), lease=_lease)
    assert asked.status == "released" and "BiDi" in (asked.error or "")
    plain = run_job(job({}), lease=_lease)
    assert plain.status == "completed", plain.error
