"""The webhook egress policy and signature rotation: pure functions, no I/O."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrapefleet.common.errors import SettingsError
from scrapefleet.common.jobs.webhook_signing import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    sign,
    signature,
    signatures,
    verify,
)
from scrapefleet.common.settings import load_settings
from scrapefleet.producer.webhooks import webhook_http
from scrapefleet.producer.webhooks.webhook_egress import (
    IPAddress,
    classify,
    embedded_ipv4,
    first_refusal,
    is_allowed,
    parse_networks,
    refusal,
)
from tests.waiting import scaled

pytestmark = pytest.mark.timeout(30)


def ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "private (CGNAT)"),
        ("100.127.255.255", "private (CGNAT)"),
        ("169.254.169.254", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("192.0.2.10", "reserved"),
        ("198.18.0.1", "reserved"),
        ("172.32.0.1", None),
        ("100.128.0.1", None),
        ("8.8.8.8", None),
        ("93.184.216.34", None),
    ],
)
def test_ipv4_classification(address: str, kind: str | None) -> None:
    assert classify(ip(address)) == kind


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fe80::1%2", "link-local"),
        ("fc00::1", "private (ULA)"),
        ("fd12:3456:789a::1", "private (ULA)"),
        ("fec0::1", "private (site-local)"),
        ("ff02::1", "multicast"),
        ("2001:db8::1", "reserved"),
        ("100::1", "reserved"),
        ("::7f00:1", "reserved"),  # IPv4-compatible, long deprecated
        ("2606:4700:4700::1111", None),
        ("2a00:1450:4001:80b::200e", None),
    ],
)
def test_ipv6_classification(address: str, kind: str | None) -> None:
    assert classify(ip(address)) == kind


@pytest.mark.parametrize(
    ("address", "inner", "kind"),
    [
        ("::ffff:127.0.0.1", "127.0.0.1", "loopback"),
        ("::ffff:10.0.0.1", "10.0.0.1", "private"),
        ("::ffff:169.254.169.254", "169.254.169.254", "link-local"),
        ("64:ff9b::7f00:1", "127.0.0.1", "loopback"),  # NAT64
        ("2002:c0a8:0101::1", "192.168.1.1", "private"),  # 6to4
        ("::ffff:8.8.8.8", "8.8.8.8", None),
    ],
)
def test_ipv4_inside_ipv6_is_judged_by_the_ipv4_address(
    address: str, inner: str, kind: str | None
) -> None:
    assert embedded_ipv4(ip(address)) == ip(inner)
    found = classify(ip(address))
    if kind is None:
        assert found is None
    else:
        assert found == f"{kind} (carries {inner})"


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_an_ipv4_mapped_address_is_refused_exactly_when_its_ipv4_is(value: int) -> None:
    v4 = ipaddress.IPv4Address(value)
    mapped = ipaddress.IPv6Address(f"::ffff:{v4}")
    assert (classify(v4) is None) == (classify(mapped) is None)
    allowed = parse_networks([f"{v4}/32"])
    assert refusal(v4, allowed) is None and refusal(mapped, allowed) is None


def test_refusal_reason_is_one_clear_line() -> None:
    assert refusal(ip("127.0.0.1"), ()) == (
        "refused: 127.0.0.1 is loopback; add it to webhook_allow_networks to allow"
    )
    assert refusal(ip("10.0.0.7"), (), host="hooks.internal") == (
        "refused: hooks.internal resolves to 10.0.0.7, which is private;"
        " add it to webhook_allow_networks to allow"
    )
    assert refusal(ip("8.8.8.8"), ()) is None


def test_allow_list() -> None:
    loopback = parse_networks(["127.0.0.0/8"])
    assert refusal(ip("127.0.0.1"), loopback) is None
    assert refusal(ip("127.9.9.9"), loopback) is None
    assert is_allowed(ip("::ffff:127.0.0.1"), loopback)
    assert refusal(ip("::1"), loopback) is not None  # IPv6 loopback is a network of its own
    assert refusal(ip("10.0.0.1"), loopback) is not None
    one = parse_networks([" 10.20.0.5 ", "fd00::/8"])
    assert refusal(ip("10.20.0.5"), one) is None and refusal(ip("10.20.0.6"), one) is not None
    assert refusal(ip("fd00::1"), one) is None and refusal(ip("fc00::1"), one) is not None
    with pytest.raises(ValueError, match=r"'10\.0\.0\.0/33' is not an IP address or CIDR"):
        parse_networks(["10.0.0.0/33"])


def test_any_internal_answer_refuses_the_host_whole() -> None:
    answers = [ip("93.184.216.34"), ip("10.0.0.1")]
    assert first_refusal(answers, (), host="mixed.example") == (
        "refused: mixed.example resolves to 10.0.0.1, which is private;"
        " add it to webhook_allow_networks to allow"
    )
    assert first_refusal([ip("93.184.216.34")], ()) is None


def test_settings_check_the_allow_list_and_the_previous_secret() -> None:
    settings = load_settings(webhook_allow_networks=["127.0.0.0/8", "::1"])
    assert settings.webhook_allow_networks == ["127.0.0.0/8", "::1"]
    assert load_settings().webhook_allow_networks == []
    with pytest.raises(SettingsError, match="webhook_allow_networks"):
        load_settings(webhook_allow_networks=["localhost"])
    with pytest.raises(SettingsError, match="webhook_secret_previous"):
        load_settings(webhook_secret_previous="short")
    assert load_settings(webhook_secret_previous="").webhook_secret_previous is None


def test_environment_allow_list_is_a_json_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRAPEFLEET_WEBHOOK_ALLOW_NETWORKS", '["10.20.0.0/16"]')
    assert load_settings().webhook_allow_networks == ["10.20.0.0/16"]


NEW = "n" * 20
OLD = "o" * 20


def test_rotation_signs_with_both_secrets_and_either_verifies() -> None:
    body = b'{"job_id":1}'
    headers = sign(NEW, body, now=1_000_000, previous=OLD)
    timestamp, header = headers[TIMESTAMP_HEADER], headers[SIGNATURE_HEADER]
    assert signatures(header) == [signature(NEW, timestamp, body), signature(OLD, timestamp, body)]

    def check(secret: str | list[str], signed: bytes = body) -> bool:
        return verify(secret, signed, timestamp, header, now=1_000_010)

    assert check(NEW) and check(OLD) and check([OLD, NEW])
    assert not check("x" * 20)
    assert not check(OLD, body + b" ")


def test_without_rotation_the_header_is_one_entry_as_before() -> None:
    headers = sign(NEW, b"{}", now=1_000_000)
    assert headers[SIGNATURE_HEADER] == signature(NEW, headers[TIMESTAMP_HEADER], b"{}")
    assert "," not in headers[SIGNATURE_HEADER]


def test_a_hung_resolver_counts_against_the_deadline() -> None:
    release = threading.Event()

    def hung(host: str, port: int) -> list[IPAddress]:
        release.wait(30)  # ends when the test does: the lookup thread is left behind
        return [ip("8.8.8.8")]

    try:
        started = time.monotonic()
        result = webhook_http.post(
            "http://hooks.example.test/hook", b"{}", {}, timeout_s=0.3, allowed=(), resolve=hung
        )
        elapsed = time.monotonic() - started
    finally:
        release.set()
    assert result.error == "timed out: resolving hooks.example.test took over 0.3 s"
    assert not result.permanent and elapsed < 0.3 + scaled(1.0)


def test_what_cannot_be_posted_fails_without_a_connection() -> None:
    def unresolvable(host: str, port: int) -> list[IPAddress]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    failed = webhook_http.post(
        "http://nowhere.example.test/", b"", {}, timeout_s=1, allowed=(), resolve=unresolvable
    )
    # DNS may recover: an ordinary failure, retried with backoff.
    assert failed.error == "cannot resolve nowhere.example.test: Name or service not known"
    assert not failed.permanent
    literal = webhook_http.post(
        "http://[::ffff:169.254.169.254]/", b"", {}, timeout_s=1, allowed=()
    )
    assert literal.permanent and literal.error is not None
    assert literal.error.startswith("refused: ::ffff:169.254.169.254 is link-local (carries 169.")
