"""Pure decisions behind the dashboard's request checks: where a redirect may go, whether a
state-changing request came from the dashboard's own pages, whether an address is loopback.

No Flask here: each function takes plain values, so the unit tests need no server.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Collection
from urllib.parse import urlsplit

MAX_NEXT = 2000  # a longer "next" is not one of our own links
DEFAULT_PORTS = {"http": 80, "https": 443}


def local_next(target: str | None, default: str) -> str:
    """``target`` when it is a path on this site, else ``default``.

    Only "/..." is accepted, never "//host" or "/\\host" (browsers read both as another host).
    Browsers also drop tabs and newlines inside a URL and trim control characters and spaces,
    so "/\\t/evil.example/" would become "//evil.example/": any control, format or whitespace
    character refuses the target rather than being stripped into something else.
    """
    if not target or len(target) > MAX_NEXT:
        return default
    if not target.startswith("/") or target[1:2] in ("/", "\\"):
        return default
    # isprintable() is False for every Unicode control, format and separator character but
    # the ASCII space, which is refused on its own line.
    if not target.isprintable() or " " in target:
        return default
    return target


class Verdict(enum.Enum):
    SAME_ORIGIN = "same-origin"  # a browser says it comes from one of our own pages
    CROSS = "cross"  # another site, or another origin of this one (another port, scheme)
    NO_BROWSER = "no browser headers"  # neither Origin nor Sec-Fetch-Site: not a browser


def _origin_key(url: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(url.strip())
        scheme = parts.scheme.lower()
        host = (parts.hostname or "").lower()
        port = parts.port or DEFAULT_PORTS.get(scheme)
    except ValueError:
        return None
    if scheme not in DEFAULT_PORTS or not host or port is None:
        return None
    return scheme, host, port


def origin_verdict(origin: str | None, fetch_site: str | None, own_origin: str) -> Verdict:
    """Where a state-changing request comes from, as far as the browser tells us.

    ``Sec-Fetch-Site`` is set by the browser and cannot be changed by a page: only
    "same-origin" passes. "same-site" is what a page on ANOTHER PORT of the same host gets
    (a site ignores ports), and "cross-site"/"none" never come from our own forms. Without it
    (an older browser, or plain http to a non-loopback name, where browsers leave it out),
    ``Origin`` must equal ``own_origin`` (scheme, host and port); "null" (a sandboxed frame, a
    data: URL) never does. With neither header the client is not a browser (curl, a script);
    the caller decides what such a request must carry instead.
    """
    if fetch_site:
        return Verdict.SAME_ORIGIN if fetch_site.strip().lower() == "same-origin" else Verdict.CROSS
    if origin:
        mine = _origin_key(own_origin)
        theirs = _origin_key(origin)
        return Verdict.SAME_ORIGIN if mine and theirs == mine else Verdict.CROSS
    return Verdict.NO_BROWSER


def is_loopback_literal(address: str) -> bool | None:
    """True/False for an IP literal or "localhost"; None for a name that needs resolving."""
    text = address.strip().strip("[]")
    if text.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return None


def host_allowed(host_header: str | None, names: Collection[str]) -> bool:
    """May a request with this ``Host`` header be answered?

    A page on an attacker's domain that resolves to this machine (DNS rebinding) reaches the
    dashboard with the attacker's name in ``Host``, and the browser treats the answer as that
    page's own. IP literals and "localhost" cannot be rebound, so they pass; any other name
    must be one the operator listed (``dashboard_hosts``: a proxy's or a DNS name of ours).
    """
    if not host_header:
        return False
    text = host_header.strip().lower()
    if text.startswith("["):  # [v6]:port
        host = text[1 : text.find("]")] if "]" in text else ""
    else:
        host = text.rsplit(":", 1)[0] if text.count(":") == 1 else text
    host = host.rstrip(".")
    if host == "localhost":
        return True
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return host in names
