"""Which addresses a request may go to: pure functions over ``ipaddress`` values, shared by
every place the fleet connects where someone else picked the address (the producer's webhooks,
producer/webhooks/webhook_egress.py under ``webhook_allow_networks``; the consumers' HTTP jobs,
common/http/job_egress.py under ``http_allow_networks``), and by the settings' own check of
those two lists (``parse_networks``).

A job's submitter picks its callback_url and its page's URL, and a page picks where it
redirects, so without a policy a fleet daemon would connect wherever it is told: its own loopback
services (the database, a Selenium Grid), the cloud metadata endpoint (169.254.169.254), the
private network it sits in. The caller resolves the name, checks every address it resolves to
with these functions, and connects to a checked address (producer/webhooks/webhook_http.py,
common/http/pooling_transport.py), so a second DNS answer cannot switch it afterwards.
Internal ranges are refused unless an operator lists them in the caller's allow setting.

An IPv6 address that carries an IPv4 one (IPv4-mapped ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::``,
6to4 ``2002::``, Teredo) is judged by the IPv4 address inside it too: the kernel or a relay
would deliver it there.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Named first, in this order, so a refusal says what the address is; anything else that IANA
# does not mark as globally reachable is "reserved" (see classify).
_RANGES: tuple[tuple[Network, str], ...] = tuple(
    (ipaddress.ip_network(cidr), kind)
    for cidr, kind in (
        ("0.0.0.0/8", "unspecified"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("10.0.0.0/8", "private"),
        ("172.16.0.0/12", "private"),
        ("192.168.0.0/16", "private"),
        ("100.64.0.0/10", "private (CGNAT)"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),  # with the broadcast address
        ("192.0.0.0/24", "reserved"),
        ("192.0.2.0/24", "reserved"),
        ("198.18.0.0/15", "reserved"),
        ("198.51.100.0/24", "reserved"),
        ("203.0.113.0/24", "reserved"),
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("fe80::/10", "link-local"),
        ("fc00::/7", "private (ULA)"),
        ("fec0::/10", "private (site-local)"),
        ("ff00::/8", "multicast"),
        ("::/8", "reserved"),  # IPv4-compatible and other legacy forms
        ("100::/64", "reserved"),
        ("2001:db8::/32", "reserved"),
        ("64:ff9b:1::/48", "reserved"),  # NAT64 for local use
    )
)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def parse_networks(values: Iterable[str]) -> tuple[Network, ...]:
    """The allow-list as networks; a bare address is a network of one. Raises ValueError
    naming the first value that is not an address or a CIDR network."""
    networks = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{value!r} is not an IP address or CIDR network") from None
    return tuple(networks)


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries, where the network would deliver to it."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    return None


def classify(address: IPAddress) -> str | None:
    """What kind of internal address this is ("loopback", "private", ...), or None when it
    is a public one."""
    inner = embedded_ipv4(address)
    if inner is not None:
        kind = classify(inner)
        return None if kind is None else f"{kind} (carries {inner})"
    for network, kind in _RANGES:
        if address in network:
            return kind
    if address.is_reserved or not address.is_global:
        return "reserved"
    return None


def is_allowed(address: IPAddress, allowed: Sequence[Network]) -> bool:
    """True when the address, or the IPv4 address it carries, is in an allowed network."""
    candidates = [address]
    inner = embedded_ipv4(address)
    if inner is not None:
        candidates.append(inner)
    return any(a in network for a in candidates for network in allowed)


def refusal(
    address: IPAddress, allowed: Sequence[Network], host: str | None, setting: str
) -> str | None:
    """None when a request may go to ``address``; otherwise the one-line reason, naming the
    allow ``setting``. ``host`` is the URL's host name when it is not the address."""
    kind = classify(address)
    if kind is None or is_allowed(address, allowed):
        return None
    if not host or _is_literal(host, address):
        named = host or str(address)  # as the URL spells it
    else:
        named = f"{host} resolves to {address}, which"
    return f"refused: {named} is {kind}; add it to {setting} to allow"


def _is_literal(host: str, address: IPAddress) -> bool:
    try:
        return ipaddress.ip_address(host) == address
    except ValueError:
        return False


def first_refusal(
    addresses: Iterable[IPAddress], allowed: Sequence[Network], host: str | None, setting: str
) -> str | None:
    """The reason to refuse when any of ``addresses`` is refused: a host whose answers mix
    public and internal addresses is refused whole, not sent to whichever connects first."""
    for address in addresses:
        reason = refusal(address, allowed, host, setting)
        if reason is not None:
            return reason
    return None
