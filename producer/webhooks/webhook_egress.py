"""Which addresses a webhook may be sent to: the fleet's address policy
(common/http/address_policy.py) under the producer's ``webhook_allow_networks``.

A job's submitter picks its callback_url, so without a policy the producer would POST wherever
it is told. Every address a delivery's host resolves to is checked, and the POST then goes to
a checked address (producer/webhooks/webhook_http.py), so a second DNS answer cannot switch it
afterwards.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from scrapefleet.common.http.address_policy import (
    IPAddress,
    Network,
    classify,
    embedded_ipv4,
    is_allowed,
    parse_networks,
)
from scrapefleet.common.http.address_policy import first_refusal as _first_refusal
from scrapefleet.common.http.address_policy import refusal as _refusal

__all__ = [
    "ALLOW_SETTING",
    "IPAddress",
    "Network",
    "classify",
    "embedded_ipv4",
    "first_refusal",
    "is_allowed",
    "parse_networks",
    "refusal",
]

ALLOW_SETTING = "webhook_allow_networks"


def refusal(address: IPAddress, allowed: Sequence[Network], host: str | None = None) -> str | None:
    """None when a webhook may be sent to ``address``; otherwise the one-line reason kept as
    the delivery's last error. ``host`` is the URL's host name when it is not the address."""
    return _refusal(address, allowed, host, ALLOW_SETTING)


def first_refusal(
    addresses: Iterable[IPAddress], allowed: Sequence[Network], host: str | None = None
) -> str | None:
    """The reason to refuse when any of ``addresses`` is refused: a host whose answers mix
    public and internal addresses is refused whole, not sent to whichever connects first."""
    return _first_refusal(addresses, allowed, host, ALLOW_SETTING)
