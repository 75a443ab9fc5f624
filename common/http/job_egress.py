"""Where a consumer's HTTP jobs may connect, and which hops get what the job carries.

``http_get``, ``crawl`` (and the robots.txt and sitemaps they read) fetch URLs that a job's
submitter wrote and that pages redirect to. A consumer host sits next to things no page should
reach: its Selenium Grid and metrics on loopback, the database, the cloud's metadata endpoint
(169.254.169.254), the private network. So the fleet's address policy
(common/http/address_policy.py, the one the producer's webhooks follow) applies here under
``http_allow_networks``:

- Every address a host name resolves to is checked, at every hop (redirects included), and the
  connection goes to exactly the addresses checked (common.http.pooling_transport resolves,
  checks and connects in one place): a DNS answer that changes between the check and the connect
  (rebinding) is never asked for.
- Through a proxy the proxy resolves the target: the rule then applies to the proxy's own
  address (the host's ``http_proxy`` setting is the operator's and is not checked), and to a
  target given as an IP address or a ``localhost`` name, which no DNS answer changes.
- A job's own headers and cookies go to the job's own site only: the hops whose origin is the
  job URL's (or its upgrade from http to https on the same host), never to a redirect target on
  another origin. The job's cookies are host-only, and Secure when its URL is https.

Pure apart from the resolver the caller passes in.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from scrapefleet.common.actions.error_classes import Permanent
from scrapefleet.common.http.address_policy import IPAddress, Network, first_refusal, parse_networks

if TYPE_CHECKING:
    from scrapefleet.common.settings import Settings

ALLOW_SETTING = "http_allow_networks"
_LOOPBACK = ipaddress.ip_address("127.0.0.1")
_DEFAULT_PORTS = {"http": 80, "https": 443}


class EgressRefused(Permanent, RuntimeError):
    """A request the address policy refuses: the job fails now (its URL will not change)."""


@dataclass(frozen=True)
class Egress:
    """The rule one request follows."""

    allowed: tuple[Network, ...] = ()
    trusted_proxy: str | None = None  # the host's own http_proxy: its address is not checked

    @classmethod
    def from_settings(cls, settings: Settings) -> Egress:
        proxy = settings.http_proxy
        return cls(
            allowed=parse_networks(settings.http_allow_networks),
            trusted_proxy=proxy.get_secret_value() if proxy else None,
        )

    def refusal(self, host: str, addresses: Sequence[IPAddress]) -> str | None:
        """The one-line reason ``host`` (resolved to ``addresses``) is refused, or None."""
        return first_refusal(addresses, self.allowed, host, ALLOW_SETTING)

    def checks_proxy(self, proxy: str) -> bool:
        return proxy != self.trusted_proxy

    def url_refusal(self, url: httpx.URL) -> str | None:
        """Why a URL whose host is an IP address or a ``localhost`` name is refused, before any
        connection (through a proxy nothing else is checked); None for any other name."""
        host = url.host.lower().rstrip(".")
        if host == "localhost" or host.endswith(".localhost"):
            # RFC 6761: always the loopback interface, whoever resolves it.
            return self.refusal(host, [_LOOPBACK])
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return None
        return self.refusal(host, [address])


def same_site(job_url: httpx.URL, hop: httpx.URL) -> bool:
    """True when a hop may carry the job's headers and cookies: the job URL's origin, or the
    upgrade of an http URL to https on the same host and default ports."""
    if hop.host.lower() != job_url.host.lower():
        return False
    job_port = job_url.port or _DEFAULT_PORTS.get(job_url.scheme)
    hop_port = hop.port or _DEFAULT_PORTS.get(hop.scheme)
    if (hop.scheme, hop_port) == (job_url.scheme, job_port):
        return True
    return (job_url.scheme, job_port, hop.scheme, hop_port) == ("http", 80, "https", 443)
