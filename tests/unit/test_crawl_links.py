"""common.crawl.links: one spelling per page, the links of a page, the crawl's rules."""

from __future__ import annotations

import pytest

from scrapefleet.common.crawl.links import (
    LinkRules,
    compile_patterns,
    extract_links,
    normalise_url,
    registrable_domain,
    site_of,
)

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("HTTP://Example.ORG/a/B?q=1#top", "http://example.org/a/B?q=1"),
        ("http://example.org:80/x", "http://example.org/x"),
        ("https://example.org:443", "https://example.org/"),
        ("https://example.org:8443/x#", "https://example.org:8443/x"),
        ("http://[::1]:8080/p", "http://[::1]:8080/p"),
        ("http://user:pw@Example.org/p", "http://user:pw@example.org/p"),
        ("  http://example.org/sp  ", "http://example.org/sp"),
    ],
)
def test_one_spelling_per_page(raw: str, normal: str) -> None:
    assert normalise_url(raw) == normal


@pytest.mark.parametrize(
    ("spellings", "key"),
    [
        # Dot segments, as a browser resolves them.
        (
            ["http://a.test/a/../b/./c", "http://a.test/b/c", "http://a.test/x/%2e%2E/b/c"],
            "http://a.test/b/c",
        ),
        (["http://a.test/a/b/..", "http://a.test/a/./"], "http://a.test/a/"),
        # Percent-encoding: hex case, and the raw character; unreserved ones decoded.
        (
            ["http://a.test/caf%c3%a9", "http://a.test/caf%C3%A9", "http://a.test/café"],
            "http://a.test/caf%C3%A9",
        ),
        (["http://a.test/%7euser", "http://a.test/~user"], "http://a.test/~user"),
        (["http://a.test/a b", "http://a.test/a%20b"], "http://a.test/a%20b"),
        # An encoded slash stays one: it is not a path separator to the server.
        (["http://a.test/a%2fb", "http://a.test/a%2Fb"], "http://a.test/a%2Fb"),
        # IDN and punycode: one host.
        (
            [
                "http://bücher.example/x",
                "http://xn--bcher-kva.example/x",
                "http://BÜCHER.example/x",
            ],
            "http://xn--bcher-kva.example/x",
        ),
        # The query: escapes the same way, order and case kept.
        (
            ["http://a.test/s?q=caf%c3%a9&B=é#f", "http://a.test/s?q=caf%C3%A9&B=%C3%A9"],
            "http://a.test/s?q=caf%C3%A9&B=%C3%A9",
        ),
    ],
)
def test_every_spelling_of_a_page_has_one_key(spellings: list[str], key: str) -> None:
    assert {normalise_url(spelling) for spelling in spellings} == {key}


def test_the_query_order_is_kept() -> None:
    assert normalise_url("http://a.test/p?b=2&a=1") == "http://a.test/p?b=2&a=1"


@pytest.mark.parametrize(
    "raw", ["mailto:a@example.org", "javascript:void(0)", "ftp://example.org/", "http://", "x:y"]
)
def test_what_is_not_a_page_has_no_spelling(raw: str) -> None:
    assert normalise_url(raw) is None


def test_a_bad_port_is_not_a_page() -> None:
    assert normalise_url("http://example.org:http/") is None


def test_links_resolved_deduplicated_in_order() -> None:
    html = """<html><head><title>t</title></head><body>
      <a href="b.html#one">B</a> <a href="/C">C</a> <a href="B.html">other case path</a>
      <a href="HTTP://SITE.test/b.html#two">B again</a> <a>no href</a> <a href="">empty</a>
      <area href="area.html"> <a href="mailto:x@y">mail</a> <a href="https://other.test/">out</a>
      <link href="style.css">
    </body></html>"""
    assert extract_links(html, "http://site.test/dir/page.html") == [
        "http://site.test/dir/b.html",
        "http://site.test/C",
        "http://site.test/dir/B.html",
        "http://site.test/b.html",
        "http://site.test/dir/area.html",
        "https://other.test/",
    ]


def test_base_href_wins_over_the_page_url() -> None:
    html = '<base href="/root/"><a href="x">x</a>'
    assert extract_links(html, "http://site.test/a/b") == ["http://site.test/root/x"]


def test_rules_same_site_include_exclude() -> None:
    rules = LinkRules(
        site="site.test:8080",
        include=compile_patterns([r"/docs/", r"/blog/"], "include"),
        exclude=compile_patterns([r"\.pdf$"], "exclude"),
    )
    assert rules.keeps("http://site.test:8080/docs/a")
    assert not rules.keeps("http://site.test/docs/a")  # another port is another site
    assert not rules.keeps("http://site.test:8080/shop/a")
    assert not rules.keeps("http://site.test:8080/docs/a.pdf")
    assert LinkRules(site=None).keeps("https://anywhere.test/")
    assert site_of("http://u:p@site.test:8080/x") == "site.test:8080"


def test_a_bad_pattern_is_named() -> None:
    with pytest.raises(ValueError, match=r"include\[1\]: not a valid regular expression"):
        compile_patterns(["ok", "(unclosed"], "include")


def test_a_domain_scope_keeps_every_host_of_the_registrable_domain() -> None:
    assert registrable_domain("www.python.org") == "python.org"
    assert registrable_domain("docs.example.co.uk:8443") == "example.co.uk"
    assert registrable_domain("127.0.0.1:8000") == "127.0.0.1"  # an address is its own
    assert registrable_domain("localhost") == "localhost"
    rules = LinkRules(site=None, domain="python.org")
    assert rules.keeps("https://docs.python.org/3/")
    assert rules.keeps("http://python.org:8080/")
    assert not rules.keeps("https://python.org.evil.test/")
    assert not rules.keeps("https://notpython.org/")
    # github.io is a public suffix: each user's pages are a domain of their own
    assert not LinkRules(site=None, domain="a.github.io").keeps("https://b.github.io/")


def test_a_query_takes_the_pages_charset_and_the_path_utf8() -> None:
    assert normalise_url("/caf\xe9?q=\xe9#\xe9", "http://a.test/", "cp1252") == (
        "http://a.test/caf%C3%A9?q=%E9"
    )
    assert normalise_url("/s?q=\u4e2d", "http://a.test/", "windows-1252") == (
        "http://a.test/s?q=%26%2320013%3B"  # not in the charset: a character reference
    )
    assert normalise_url("/s?q=\xe9", "http://a.test/", "utf-16") == "http://a.test/s?q=%C3%A9"
    assert normalise_url("/s?q=\xe9", "http://a.test/", "no-such-charset") == (
        "http://a.test/s?q=%C3%A9"
    )
