"""Proxy pools' pure rules: what a proxy URL may be, how it is stored and shown, why a proxy
cannot be leased, and the wait reason a pool's jobs show."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scrapefleet.common.identities.proxy_pools import (
    parse_proxy,
    parse_proxy_lines,
    payload_proxy_pool,
    pool_wait_reason,
    unavailable,
)

NOW = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)


def test_credentials_are_kept_apart_from_the_url() -> None:
    entry = parse_proxy("http://user%40x:p%3Ass@127.0.0.2:8080")
    assert entry.url == "http://127.0.0.2:8080"
    assert (entry.username, entry.password) == ("user@x", "p:ss")
    assert entry.shown == "http://***@127.0.0.2:8080"
    assert parse_proxy("SOCKS5://10.0.0.1:1080").url == "socks5://10.0.0.1:1080"
    assert parse_proxy("socks5://u:p@10.0.0.1:1080").socks_with_credentials


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("ftp://u:secret@h:21", "scheme"),
        ("http://u:secret@h", "port"),
        ("http://u:secret@h:8080/path", "without a path"),
        ("http://u:secret@:8080", "host"),
    ],
)
def test_a_bad_url_is_refused_without_repeating_it(value: str, words: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_proxy(value)
    assert words in str(refused.value)
    assert "secret" not in str(refused.value)


def test_a_file_names_its_bad_line_and_skips_comments() -> None:
    lines = ["# pool", "", "http://127.0.0.2:8080", "gopher://x:pw@h:1"]
    with pytest.raises(ValueError, match=r"^line 4: scheme"):
        parse_proxy_lines(lines)
    assert len(parse_proxy_lines(lines[:3])) == 1
    with pytest.raises(ValueError, match=r"line 2: .* twice"):
        parse_proxy_lines(["http://a:1@h:1", "http://b:2@h:1"])


def test_times_decide_whether_a_proxy_is_available() -> None:
    later, earlier = NOW + timedelta(seconds=5), NOW - timedelta(seconds=5)
    assert unavailable("ready", None, None, NOW) is None
    assert unavailable("cooling", earlier, None, NOW) is None  # its cool-down has passed
    assert unavailable("ready", later, None, NOW) == "cooling"
    assert unavailable("banned", later, later, NOW) == "banned"
    assert unavailable("disabled", None, None, NOW) == "disabled"


def test_the_wait_reason_counts_why() -> None:
    assert pool_wait_reason("residential", {"cooling": 12, "banned": 3, "total": 15}) == (
        "waiting: pool 'residential' has no ready proxy (12 cooling down, 3 banned)"
    )
    assert pool_wait_reason("dc", {"total": 0}) == "waiting: pool 'dc' has no proxy"


def test_a_payload_names_a_pool_by_a_safe_name() -> None:
    assert payload_proxy_pool({"proxy_pool": "residential"}) == "residential"
    assert payload_proxy_pool({}) is None
    with pytest.raises(ValueError, match="not a pool name"):
        payload_proxy_pool({"proxy_pool": "../x"})


def test_the_metrics_export_each_pool_by_state_and_its_ban_rate() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from scrapefleet.common.runtime.metrics import FleetSnapshot, IdentityFigures, _FleetCollector

    collector = _FleetCollector()
    collector.publish(
        FleetSnapshot(
            proxy_pools={"res": IdentityFigures(40, 30, {"ready": 3, "banned": 2})},
            profiles={"acct-1": IdentityFigures(4, 1)},
        )
    )
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    assert 'scrapefleet_proxy_pool_proxies{pool="res",state="banned"} 2.0' in text
    assert 'scrapefleet_proxy_pool_proxies{pool="res",state="cooling"} 0.0' in text
    assert 'scrapefleet_proxy_pool_ban_rate{pool="res"} 0.75' in text
    assert 'scrapefleet_profile_ban_rate{profile="acct-1"} 0.25' in text
