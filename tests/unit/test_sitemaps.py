"""common.crawl.sitemaps: what a robots.txt, a sitemap index, a urlset, a text sitemap and a gzip
one list, and that a hostile one can neither expand nor read files."""

from __future__ import annotations

import gzip

import pytest

from scrapefleet.common.crawl.sitemaps import SitemapKind, read_sitemap

pytestmark = pytest.mark.timeout(10)

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
URLSET = f"<?xml version='1.0'?><urlset {NS}><url><loc> http://a.test/1 </loc></url><url><loc>http://a.test/2</loc></url></urlset>"


def test_each_form_lists_its_urls() -> None:
    robots = b"User-agent: *\nDisallow: /x\nSitemap: http://a.test/index.xml\n"
    assert read_sitemap("http://a.test/robots.txt", robots, 1000).urls == [
        "http://a.test/index.xml"
    ]
    index = (
        f"<sitemapindex {NS}><sitemap><loc>http://a.test/s1.xml.gz</loc></sitemap></sitemapindex>"
    )
    listed = read_sitemap("http://a.test/index.xml", index.encode(), 1000)
    assert (listed.kind, listed.urls, listed.lists_sitemaps) == (
        SitemapKind.INDEX,
        ["http://a.test/s1.xml.gz"],
        True,
    )
    plain = read_sitemap("http://a.test/s.xml", URLSET.encode(), 10_000)
    assert (plain.kind, plain.urls) == (SitemapKind.URLSET, ["http://a.test/1", "http://a.test/2"])
    zipped = read_sitemap("http://a.test/s.xml.gz", gzip.compress(URLSET.encode()), 10_000)
    assert zipped.urls == plain.urls
    text = read_sitemap("http://a.test/s.txt", b"http://a.test/1\n\nnot a url\n", 1000)
    assert (text.kind, text.urls) == (SitemapKind.TEXT, ["http://a.test/1"])


def test_a_gzip_bomb_is_cut_and_garbage_lists_nothing() -> None:
    bomb = gzip.compress(b"<urlset>" + b" " * 10_000_000)
    listed = read_sitemap("http://a.test/s.xml.gz", bomb, 100_000)
    assert listed.truncated
    assert read_sitemap("http://a.test/s.xml", b"<html><p>no", 1000).kind == SitemapKind.EMPTY
    assert read_sitemap("http://a.test/s.xml.gz", b"\x1f\x8bjunk", 1000).urls == []


def test_entities_are_not_expanded_nor_files_read() -> None:
    hostile = (
        b'<?xml version="1.0"?><!DOCTYPE u [<!ENTITY f SYSTEM "file:///etc/hostname">'
        b'<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>'
        b"<urlset><url><loc>http://a.test/&f;&b;</loc></url></urlset>"
    )
    urls = read_sitemap("http://a.test/s.xml", hostile, 10_000).urls
    assert all("aaaaaaaaaa" not in url and "\n" not in url for url in urls)
