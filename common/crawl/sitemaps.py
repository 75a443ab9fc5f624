"""Sitemaps as a crawl's seeds: the URLs a sitemap, a sitemap index or a robots.txt lists.

Pure functions over a fetched body, no I/O. What a body is follows from what it holds: a
robots.txt (its URL's path is ``/robots.txt``) lists sitemaps in its ``Sitemap:`` lines; an XML
``<sitemapindex>`` lists sitemaps, an XML ``<urlset>`` lists pages, each in its ``<loc>``
elements; any other text lists pages, one URL a line (the sitemaps protocol's text form). A
gzip body (``.xml.gz``) is decompressed first, to at most ``max_bytes``. XML is parsed with
lxml with entities left unresolved and no network, so a hostile sitemap can neither read files
nor expand itself; a body that does not parse lists nothing.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit

__all__ = ["SitemapKind", "SitemapList", "read_sitemap"]

GZIP_MAGIC = b"\x1f\x8b"


class SitemapKind(StrEnum):
    ROBOTS = "robots"  # a robots.txt: its Sitemap: lines
    INDEX = "index"  # <sitemapindex>: sitemaps
    URLSET = "urlset"  # <urlset>: pages
    TEXT = "text"  # one page URL a line
    EMPTY = "empty"  # nothing a crawl can use


@dataclass(frozen=True)
class SitemapList:
    kind: SitemapKind
    urls: list[str]
    truncated: bool = False  # the gzip body went on past max_bytes

    @property
    def lists_sitemaps(self) -> bool:
        return self.kind in (SitemapKind.ROBOTS, SitemapKind.INDEX)


def read_sitemap(url: str, body: bytes, max_bytes: int) -> SitemapList:
    """The URLs ``body`` (fetched from ``url``) lists, and whether they are sitemaps or pages."""
    if urlsplit(url).path == "/robots.txt":
        from protego import Protego

        return SitemapList(SitemapKind.ROBOTS, list(Protego.parse(_text(body)).sitemaps))
    truncated = False
    if body.startswith(GZIP_MAGIC):
        body, truncated = _gunzip(body, max_bytes)
    if body.lstrip()[:1] == b"<":
        kind, urls = _xml_locs(body)
        return SitemapList(kind, urls, truncated)
    lines = (line.strip() for line in _text(body).splitlines())
    urls = [line for line in lines if line.startswith(("http://", "https://"))]
    return SitemapList(SitemapKind.TEXT if urls else SitemapKind.EMPTY, urls, truncated)


def _text(body: bytes) -> str:
    return body.decode("utf-8", "replace")


def _gunzip(body: bytes, max_bytes: int) -> tuple[bytes, bool]:
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflate.decompress(body, max_bytes)
    except zlib.error:
        return b"", False
    return out, bool(inflate.unconsumed_tail)


def _xml_locs(body: bytes) -> tuple[SitemapKind, list[str]]:
    from lxml import etree

    parser = etree.XMLParser(
        resolve_entities=False, no_network=True, huge_tree=False, recover=True, load_dtd=False
    )
    try:
        root = etree.fromstring(body, parser=parser)
    except etree.XMLSyntaxError:
        return SitemapKind.EMPTY, []
    if root is None:
        return SitemapKind.EMPTY, []
    name = etree.QName(root).localname
    kind = {"sitemapindex": SitemapKind.INDEX, "urlset": SitemapKind.URLSET}.get(name)
    if kind is None:
        return SitemapKind.EMPTY, []
    locs = [
        (element.text or "").strip()
        for element in root.iter("{*}loc")
        if isinstance(element.tag, str)
    ]
    return kind, [loc for loc in locs if loc]
