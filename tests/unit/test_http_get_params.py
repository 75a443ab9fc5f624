"""http_get's params, checked at submit: proxies, headers, cookies, user agent; the host's
http_* settings; and the title as document.title would give it."""

from __future__ import annotations

from typing import Any

import pytest

from scrapefleet.common.actions.registry import get_action
from scrapefleet.common.errors import SettingsError, SubmitError
from scrapefleet.common.http.page_text import TITLE_MAX_CHARS, parse_title
from scrapefleet.common.http.params import MAX_COOKIES, MAX_HEADERS
from scrapefleet.common.http.pooling_transport import split_proxy
from scrapefleet.common.settings import load_settings

pytestmark = pytest.mark.timeout(30)

URL = "https://shop.example/p/1"


def _validate(**payload: Any) -> Any:
    return get_action("http_get").validate({"url": URL, **payload})


def _refused(field: str, **payload: Any) -> str:
    with pytest.raises(SubmitError) as caught:
        _validate(**payload)
    message = str(caught.value)
    assert message.startswith(f"payload.{field}"), message
    return message


# -- params ---------------------------------------------------------------------------------------


def test_the_old_payloads_still_validate() -> None:
    params = _validate(timeout_s=5, fail_on_status=False)
    assert (params.timeout_s, params.fail_on_status) == (5, False)
    assert _validate().timeout_s is None  # the host's http_timeout_s applies
    _refused("url", url="ftp://x")
    _refused("url", url="http://")
    _refused("surprise", surprise=1)


@pytest.mark.parametrize(
    "proxy",
    [
        "http://127.0.0.1:3128",
        "https://proxy.example:8443",
        "socks5://user:p%40ss@proxy.example:1080",
        "socks5h://proxy.example",
        "http://user:secret@[::1]:8080/",
    ],
)
def test_proxies_that_are_accepted(proxy: str) -> None:
    assert _validate(proxy=proxy).proxy == proxy


@pytest.mark.parametrize(
    ("proxy", "why"),
    [
        ("ftp://proxy.example:21", "scheme must be http, https, socks5"),
        ("socks4://proxy.example:1080", "scheme must be http, https, socks5"),
        ("proxy.example:3128", "scheme must be"),
        ("http://:3128", "must name a host"),
        ("http://proxy.example:99999", "invalid port"),
        ("http://proxy.example/some/path", "without a path"),
        ("http://proxy.example:3128\r\nX: y", "control characters"),
    ],
)
def test_a_bad_proxy_is_refused_naming_the_field(proxy: str, why: str) -> None:
    assert why in _refused("proxy", proxy=proxy)


def test_a_refused_proxy_never_echoes_its_password() -> None:
    message = _refused("proxy", proxy="ftp://user:hunter2@proxy.example")
    assert "hunter2" not in message


def test_split_proxy_takes_the_credentials_out_of_the_url() -> None:
    assert split_proxy("socks5://us%3Aer:p%40ss@Proxy.Example:1080") == (
        "socks5://proxy.example:1080",
        ("us:er", "p@ss"),
    )
    assert split_proxy("http://[::1]:3128/") == ("http://[::1]:3128", None)


def test_headers_within_bounds_are_accepted() -> None:
    headers = {"Accept-Language": "fr-FR,fr;q=0.9", "X-Trace": "abc", "Referer": URL}
    assert _validate(headers=headers).headers == headers


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ({"Connection": "close"}, "hop-by-hop"),
        ({"transfer-encoding": "chunked"}, "hop-by-hop"),
        ({"Proxy-Authorization": "Basic x"}, "hop-by-hop"),
        ({"Host": "other.example"}, "set from the URL"),
        ({"Cookie": "a=1"}, "use the cookies param"),
        ({"User-Agent": "x"}, "use the user_agent param"),
        ({"X-A": "1\r\nX-Injected: 1"}, "printable ASCII"),
        ({"X-A": "caf\u00e9"}, "printable ASCII"),
        ({"Bad Name": "1"}, "not a valid header name"),
        ({"X-A": "1", "x-a": "2"}, "given twice"),
        ({"X-A": "v" * 9000}, "over 8192 characters"),
        ({f"X-{n}": "1" for n in range(MAX_HEADERS + 1)}, f"at most {MAX_HEADERS} headers"),
        ({f"X-{n}": "v" * 8000 for n in range(5)}, "characters in all"),
    ],
)
def test_bad_headers_are_refused(headers: dict[str, str], why: str) -> None:
    assert why in _refused("headers", headers=headers)


def test_cookies_within_bounds_are_accepted() -> None:
    cookies = {"session": "abc123", "consent": "yes,all=1"}
    assert _validate(cookies=cookies).cookies == cookies


@pytest.mark.parametrize(
    ("cookies", "why"),
    [
        ({"a": "1; admin=1"}, "without ';'"),
        ({"a": "x\n"}, "printable ASCII"),
        ({"bad name": "1"}, "not a valid cookie name"),
        ({"a": "v" * 5000}, "over 4096 characters"),
        ({f"c{n}": "1" for n in range(MAX_COOKIES + 1)}, f"at most {MAX_COOKIES} cookies"),
        ({f"c{n}": "v" * 4000 for n in range(5)}, "characters in all"),
    ],
)
def test_bad_cookies_are_refused(cookies: dict[str, str], why: str) -> None:
    assert why in _refused("cookies", cookies=cookies)


def test_user_agent_is_checked() -> None:
    assert _validate(user_agent="Mozilla/5.0 (X11)").user_agent == "Mozilla/5.0 (X11)"
    _refused("user_agent", user_agent="")
    _refused("user_agent", user_agent="x\r\nX-Injected: 1")
    _refused("user_agent", user_agent="x" * 600)


# -- settings -------------------------------------------------------------------------------------


def test_http_settings_defaults_and_validation() -> None:
    settings = load_settings()
    assert settings.http_proxy is None
    assert settings.http_user_agent == "scrapefleet/0.1"
    proxied = load_settings(http_proxy="socks5://u:hunter2@127.0.0.1:1080")
    assert proxied.http_proxy is not None
    assert "hunter2" not in repr(proxied)
    assert load_settings(http_proxy="").http_proxy is None
    with pytest.raises(SettingsError, match="invalid setting http_proxy") as caught:
        load_settings(http_proxy="ftp://u:hunter2@proxy.example")
    assert "hunter2" not in str(caught.value)
    with pytest.raises(SettingsError, match="invalid setting http_user_agent"):
        load_settings(http_user_agent="a\nb")
    with pytest.raises(SettingsError, match="invalid setting http_max_body_bytes"):
        load_settings(http_max_body_bytes=10)


# -- the title ------------------------------------------------------------------------------------


def _page(head: str, charset: str = "utf-8") -> bytes:
    return f"<!doctype html><html><head>{head}</head><body><p>x</p></body></html>".encode(charset)


def test_entities_are_decoded() -> None:
    body = _page("<title>os &#8212; Miscellaneous &amp; more &eacute;t&#xE9; &nbsp;</title>")
    # Only ASCII whitespace is collapsed and stripped, as document.title does: NBSP stays.
    assert parse_title(body) == "os \u2014 Miscellaneous & more \u00e9t\u00e9 \u00a0"


def test_whitespace_is_collapsed() -> None:
    assert parse_title(_page("<title>\n   A \t\r\n  page \n</title>")) == "A page"


def test_tags_inside_the_title_are_its_text_as_written() -> None:
    # The title element holds text (RCDATA): a browser shows a tag in it literally.
    body = _page("<title>Deals <b>today</b> &amp; <br/>more</title>")
    assert parse_title(body) == "Deals <b>today</b> & <br/>more"


def test_the_first_title_counts_and_an_svg_title_is_not_the_page_title() -> None:
    body = _page("<svg><title>an icon</title></svg><title>The page</title><title>2nd</title>")
    assert parse_title(body) == "The page"


def test_a_title_in_a_script_is_not_the_title() -> None:
    body = _page("<script>var t = '<title>no</title>';</script><title>yes</title>")
    assert parse_title(body) == "yes"


def test_missing_and_empty_titles() -> None:
    assert parse_title(_page("<meta charset=utf-8>")) is None
    assert parse_title(b"") is None
    assert parse_title(b"\x00\xff\xfe binary") is None
    assert parse_title(_page("<title>  </title>")) == ""
    assert parse_title(_page("<TITLE>Upper</TITLE>")) == "Upper"


def test_a_huge_title_is_bounded() -> None:
    body = _page("<title>" + "word " * 500_000 + "</title>")
    title = parse_title(body)
    assert title is not None
    assert len(title) == TITLE_MAX_CHARS
    assert title.startswith("word word")


def test_an_unclosed_title_runs_to_the_end_and_is_bounded() -> None:
    title = parse_title(b"<title>never closed " + b"x" * 10_000)
    assert title is not None and title.startswith("never closed xxx")
    assert len(title) == TITLE_MAX_CHARS


def test_the_charset_comes_from_the_header_or_the_page() -> None:
    latin = _page("<title>caf\u00e9</title>", "latin-1")
    assert parse_title(latin, "text/html; charset=ISO-8859-1") == "caf\u00e9"
    assert parse_title(_page('<meta charset="iso-8859-1"><title>caf\u00e9</title>', "latin-1")) == (
        "caf\u00e9"
    )
    # No charset said and not UTF-8: sniffed as Windows-1252, as a browser does.
    assert parse_title(latin) == "caf\u00e9"
    assert parse_title(_page("<title>x</title>"), "text/html; charset=bogus") == "x"


# -- the charset, as a browser decides it ---------------------------------------------------------

CP1252_TITLE = b"<title>\x93Quoted\x94 \x80 5 \x96 caf\xe9</title>"
AS_SHOWN = "\u201cQuoted\u201d \u20ac 5 \u2013 caf\u00e9"


def test_iso_8859_1_is_read_as_windows_1252_as_browsers_do() -> None:
    assert parse_title(CP1252_TITLE, "text/html; charset=iso-8859-1") == AS_SHOWN
    assert parse_title(b"<meta charset=latin1>" + CP1252_TITLE) == AS_SHOWN


def test_an_undeclared_page_that_is_not_utf8_is_sniffed() -> None:
    assert parse_title(CP1252_TITLE, "text/html") == AS_SHOWN
    assert parse_title("<title>café</title>".encode(), "text/html") == "café"


def test_a_bom_wins_over_the_header_and_the_header_over_meta() -> None:
    utf8 = "<title>café</title>".encode()
    assert parse_title(b"\xef\xbb\xbf" + utf8, "text/html; charset=iso-8859-1") == "café"
    meta = b"<meta charset=iso-8859-1>" + utf8
    assert parse_title(meta, "text/html; charset=utf-8") == "café"
