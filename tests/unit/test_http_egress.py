"""Which hops of an HTTP job get its headers and cookies, and which URLs are refused before
any connection: pure functions."""

from __future__ import annotations

import httpx
import pytest

from scrapefleet.common.http.address_policy import parse_networks
from scrapefleet.common.http.job_egress import Egress, same_site


@pytest.mark.parametrize(
    ("job", "hop", "same"),
    [
        ("http://shop.test/a", "http://shop.test:80/b", True),
        ("http://shop.test/a", "https://shop.test/b", True),  # the upgrade
        ("https://shop.test/a", "http://shop.test/b", False),  # a downgrade: in clear
        ("http://shop.test/a", "https://shop.test:8443/b", False),
        ("https://shop.test/a", "https://SHOP.test/b", True),
        ("https://shop.test/a", "https://cdn.shop.test/b", False),
        ("https://shop.test/a", "https://shop.test:444/b", False),
        ("https://shop.test/a", "https://evil.test/b", False),
    ],
)
def test_own_site(job: str, hop: str, same: bool) -> None:
    assert same_site(httpx.URL(job), httpx.URL(hop)) is same


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is link-local"),
        ("http://localhost:4444/session", "localhost resolves to 127.0.0.1, which is loopback"),
        ("http://grid.localhost./", "grid.localhost resolves to 127.0.0.1, which is loopback"),
        ("http://[::ffff:10.0.0.1]/", "is private (carries 10.0.0.1)"),
        ("http://example.com/", None),  # a name: checked where it resolves
        ("http://93.184.215.14/", None),
    ],
)
def test_urls_refused_before_connecting(url: str, refused: str | None) -> None:
    reason = Egress().url_refusal(httpx.URL(url))
    assert (reason is None) if refused is None else (reason is not None and refused in reason)


def test_allowed_networks_and_the_hosts_proxy() -> None:
    egress = Egress(parse_networks(["127.0.0.1/32"]), trusted_proxy="http://p:3128")
    assert egress.url_refusal(httpx.URL("http://127.0.0.1:8000/")) is None
    assert egress.url_refusal(httpx.URL("http://127.0.0.2:8000/")) is not None
    assert not egress.checks_proxy("http://p:3128") and egress.checks_proxy("http://q:3128")
