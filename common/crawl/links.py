"""A crawl's links: found in a page's HTML, normalised, and kept or not by the crawl's rules.

Pure functions, no I/O. A link is normalised so that one page has one spelling, which is the
crawl's dedupe key: scheme and host lower-case, an IDN host as punycode, the default port
dropped, an empty path made ``/``, dot segments resolved, the fragment dropped (the same page,
scrolled), non-ASCII characters percent-encoded (as UTF-8, but in a query as the page's charset,
as browsers send it) and every escape in one spelling
(upper-case hex, unreserved characters unescaped). Letters of path and query keep their case
(servers may tell it apart), and the query its order. Only http(s) links are links here
(mailto:, javascript:, data: and the like are not pages to fetch).

A link is kept when it is on the crawl's site (the same host and port as the seed, by default;
or, with ``same_domain``, any host of the seed's registrable domain, by the Public Suffix List),
matches one of the ``include`` patterns (when there are any) and none of the ``exclude``
patterns; patterns are Python regular expressions searched in the normalised URL, each search
bounded in time (common.actions.bounded_regex). A link longer than MAX_LINK_CHARS, as written or
normalised, is not followed.
"""

from __future__ import annotations

import codecs
import ipaddress
import re
import string
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from urllib.parse import urljoin, urlsplit, urlunsplit

from publicsuffixlist import PublicSuffixList
from w3lib.url import safe_url_string

from scrapefleet.common.actions.bounded_regex import Pattern, bounded_search, compile_patterns

__all__ = [
    "MAX_LINK_CHARS",
    "LinkRules",
    "compile_patterns",
    "extract_links",
    "normalise_url",
    "registrable_domain",
    "site_of",
    "unique",
]

DEFAULT_PORTS = {"http": 80, "https": 443}
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
# What safe_url_string may change in an ASCII URL: controls, space, the characters RFC 3986
# does not allow in a URL, and brackets and quotes outside the host (all quoted).
_QUOTED_BY_W3LIB = re.compile(r"""[\x00-\x20"'<>\[\]\\^`{|}\x7f]""")
_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
MAX_LINK_CHARS = 2048  # a longer link is not followed (a crawl key is at most this long)


def normalise_url(url: str, base: str | None = None, encoding: str = "utf-8") -> str | None:
    """``url`` (resolved against ``base``) in its one spelling, or None when it is not an
    http(s) URL with a host. ``encoding``: the charset of the page the link is on, which its
    query is encoded in, as browsers do (the path is always UTF-8)."""
    url = url.strip()
    try:
        joined = urljoin(base, url) if base else url
        if not joined.isascii() and not _is_utf8(encoding):
            joined = _query_in(joined, encoding)
        # w3lib: the host as IDNA (punycode), non-ASCII characters percent-encoded as UTF-8;
        # a URL with neither (most links) is as w3lib would leave it, for a sixth of the time.
        if not joined.isascii() or _QUOTED_BY_W3LIB.search(joined):
            joined = safe_url_string(joined)
        parts = urlsplit(joined)
        port = parts.port
    except ValueError:  # a port that is no number, a bad IPv6 literal, a host IDNA refuses
        return None
    scheme = parts.scheme.lower()
    host = parts.hostname  # already lower-case
    if scheme not in DEFAULT_PORTS or not host:
        return None
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    netloc = host if port in (None, DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    if parts.username is not None:
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@{netloc}"
    path = remove_dot_segments(normal_escapes(parts.path) or "/")
    return urlunsplit((scheme, netloc, path, normal_escapes(parts.query), ""))


def _is_utf8(encoding: str) -> bool:
    try:
        name = codecs.lookup(encoding).name
    except LookupError:
        return True  # a charset Python does not know: UTF-8, as w3lib would
    # WHATWG URL: a UTF-16 page's URLs use UTF-8 too.
    return name in ("utf-8", "utf-16", "utf-16-le", "utf-16-be")


def _query_in(url: str, encoding: str) -> str:
    """``url`` with its query's non-ASCII characters percent-encoded in ``encoding``; one the
    charset lacks as the character reference ``&#N;``, percent-encoded (WHATWG URL's
    "percent-encode after encoding")."""
    before, hash_, fragment = url.partition("#")
    head, sep, query = before.partition("?")
    if not sep:
        return url
    out = []
    for char in query:
        if char.isascii():
            out.append(char)
            continue
        try:
            raw = char.encode(encoding)
        except UnicodeEncodeError:
            raw = f"&#{ord(char)};".encode()
        out.append("".join(f"%{byte:02X}" for byte in raw))
    return f"{head}?{''.join(out)}{hash_}{fragment}"


def normal_escapes(text: str) -> str:
    """Percent-escapes in one spelling (RFC 3986 6.2.2): upper-case hex, and the unreserved
    characters (letters, digits, ``-._~``) unescaped; every other character left as written."""
    return _ESCAPE.sub(_normal_escape, text)


def _normal_escape(match: re.Match[str]) -> str:
    char = chr(int(match[1], 16))
    return char if char in _UNRESERVED else f"%{match[1].upper()}"


def remove_dot_segments(path: str) -> str:
    """An absolute path with ``.`` and ``..`` segments resolved, as a browser does
    (RFC 3986 5.2.4): ``/a/../b/./c`` is ``/b/c``, ``/a/b/..`` is ``/a/``."""
    segments = path.split("/")[1:]
    kept: list[str] = []
    for segment in segments:
        if segment == "..":
            if kept:
                kept.pop()
        elif segment != ".":
            kept.append(segment)
    if segments[-1] in (".", ".."):
        kept.append("")
    return "/" + "/".join(kept)


def site_of(url: str) -> str:
    """The site a normalised URL is on: its host, and its port unless the default."""
    return urlsplit(url).netloc.rpartition("@")[2]


def registrable_domain(site: str) -> str:
    """The registrable domain (public suffix + 1 label) of a site's host, port dropped:
    ``python.org`` for ``www.python.org``, ``example.co.uk`` for ``a.example.co.uk``; an IP
    address, or a host with no public suffix above it (``localhost``), is its own."""
    host = urlsplit(f"//{site}").hostname or site
    if host.startswith("["):
        return host
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return _private_suffix(host) or host
    return host


@cache
def _suffix_list() -> PublicSuffixList:
    return PublicSuffixList()  # the list the package ships: read once, no network


def _private_suffix(host: str) -> str | None:
    return _suffix_list().privatesuffix(host)


@dataclass(frozen=True)
class LinkRules:
    site: str | None  # None: any site (or any of ``domain``'s)
    include: tuple[Pattern, ...] = ()
    exclude: tuple[Pattern, ...] = ()
    domain: str | None = None  # a registrable domain: any host of it

    def in_scope(self, url: str) -> bool:
        """Whether ``url`` is on the crawl's site (or domain), patterns aside."""
        if self.site is not None and site_of(url) != self.site:
            return False
        return self.domain is None or registrable_domain(site_of(url)) == self.domain

    def keeps(self, url: str) -> bool:
        if not self.in_scope(url):
            return False
        if self.include and not any(bounded_search(p, url, "include") for p in self.include):
            return False
        return not any(bounded_search(p, url, "exclude") for p in self.exclude)


def extract_links(html: str, page_url: str, encoding: str = "utf-8") -> list[str]:
    """The page's http(s) links, normalised, each once, in the order they first appear;
    relative ones resolved against its <base href> or else its own URL; queries in the page's
    ``encoding``. Parsed with lxml's HTML parser (libxml2: about a sixth of html.parser's time
    on a large page)."""
    from lxml import etree

    if not html.strip():
        return []
    parser = etree.HTMLParser(encoding="utf-8", no_network=True, remove_comments=True)
    root = etree.fromstring(html.encode("utf-8", "surrogatepass"), parser)
    if root is None:
        return []
    hrefs: list[str] = []
    base: str | None = None
    for element in root.iter("a", "area", "base"):
        href = element.get("href")
        if not href:
            continue
        if element.tag == "base":
            base = href if base is None else base
        else:
            hrefs.append(href)
    base_url = urljoin(page_url, base) if base else page_url
    urls = (normalise_url(h, base_url, encoding) for h in hrefs if len(h) <= MAX_LINK_CHARS)
    return unique(u for u in urls if u is not None and len(u) <= MAX_LINK_CHARS)


def unique(urls: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(urls))
