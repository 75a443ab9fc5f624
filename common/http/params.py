"""Checks for what an ``http_get`` job (or the host's settings) may ask of an HTTP request: a
proxy URL, extra headers, cookies and a user agent.

Pure functions raising ValueError, so the params model names the field and the settings name
the setting; nothing here imports httpx, which ``submit`` does not need. A message never echoes
the value: a proxy URL may carry a password.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")
MAX_PROXY_CHARS = 2048

MAX_HEADERS = 50
MAX_HEADER_NAME_CHARS = 256
MAX_HEADER_VALUE_CHARS = 8192
MAX_HEADERS_TOTAL_CHARS = 32 * 1024

MAX_COOKIES = 50
MAX_COOKIE_VALUE_CHARS = 4096
MAX_COOKIES_TOTAL_CHARS = 16 * 1024

MAX_USER_AGENT_CHARS = 512

# RFC 9110 token: what a header or cookie name may be made of.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Visible ASCII, space and tab: httpx sends header values as ASCII, and CR/LF would split them.
_FIELD_VALUE = re.compile(r"[\t\x20-\x7e]*")
# Cookie values: as above without ';' (it ends the pair) and tab.
_COOKIE_VALUE = re.compile(r"[\x20-\x3a\x3c-\x7e]*")

# The connection's own headers belong to the client and the proxy: set by a job they would
# break keep-alive, framing or the proxy hop. Cookie and User-Agent have params of their own.
FORBIDDEN_HEADERS = {
    "connection": "a hop-by-hop header",
    "keep-alive": "a hop-by-hop header",
    "proxy-connection": "a hop-by-hop header",
    "proxy-authorization": "a hop-by-hop header (put credentials in the proxy URL)",
    "proxy-authenticate": "a hop-by-hop header",
    "te": "a hop-by-hop header",
    "trailer": "a hop-by-hop header",
    "transfer-encoding": "a hop-by-hop header",
    "upgrade": "a hop-by-hop header",
    "host": "set from the URL",
    "content-length": "set by the client",
    "cookie": "use the cookies param",
    "user-agent": "use the user_agent param",
}


def validate_proxy_url(value: str) -> str:
    """``scheme://[user:password@]host[:port]`` with an http, https or socks5 scheme."""
    if len(value) > MAX_PROXY_CHARS:
        raise ValueError(f"must be at most {MAX_PROXY_CHARS} characters")
    if not _FIELD_VALUE.fullmatch(value) or " " in value or "\t" in value:
        raise ValueError("must be an ASCII URL without spaces or control characters")
    parts = urlsplit(value)
    if parts.scheme.lower() not in PROXY_SCHEMES:
        raise ValueError("scheme must be http, https, socks5 or socks5h")
    try:
        host, _port = parts.hostname, parts.port
    except ValueError:
        raise ValueError("has an invalid port") from None
    if not host:
        raise ValueError("must name a host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError("must be scheme://[user:password@]host[:port], without a path")
    return value


def validate_headers(value: dict[str, str]) -> dict[str, str]:
    if len(value) > MAX_HEADERS:
        raise ValueError(f"at most {MAX_HEADERS} headers")
    seen: set[str] = set()
    total = 0
    for name, field_value in value.items():
        if not _TOKEN.fullmatch(name) or len(name) > MAX_HEADER_NAME_CHARS:
            raise ValueError(f"{name[:40]!r} is not a valid header name")
        lower = name.lower()
        if lower in FORBIDDEN_HEADERS:
            raise ValueError(f"{name!r} cannot be set: {FORBIDDEN_HEADERS[lower]}")
        if lower in seen:
            raise ValueError(f"{name!r} is given twice")
        seen.add(lower)
        if len(field_value) > MAX_HEADER_VALUE_CHARS:
            raise ValueError(f"the value of {name!r} is over {MAX_HEADER_VALUE_CHARS} characters")
        if not _FIELD_VALUE.fullmatch(field_value):
            raise ValueError(f"the value of {name!r} must be printable ASCII")
        total += len(name) + len(field_value)
    if total > MAX_HEADERS_TOTAL_CHARS:
        raise ValueError(f"over {MAX_HEADERS_TOTAL_CHARS} characters in all")
    return value


def validate_cookies(value: dict[str, str]) -> dict[str, str]:
    if len(value) > MAX_COOKIES:
        raise ValueError(f"at most {MAX_COOKIES} cookies")
    total = 0
    for name, cookie_value in value.items():
        if not _TOKEN.fullmatch(name) or len(name) > MAX_HEADER_NAME_CHARS:
            raise ValueError(f"{name[:40]!r} is not a valid cookie name")
        if len(cookie_value) > MAX_COOKIE_VALUE_CHARS:
            raise ValueError(f"the value of {name!r} is over {MAX_COOKIE_VALUE_CHARS} characters")
        if not _COOKIE_VALUE.fullmatch(cookie_value):
            raise ValueError(f"the value of {name!r} must be printable ASCII without ';'")
        total += len(name) + len(cookie_value) + 2
    if total > MAX_COOKIES_TOTAL_CHARS:
        raise ValueError(f"over {MAX_COOKIES_TOTAL_CHARS} characters in all")
    return value


def validate_user_agent(value: str) -> str:
    if not value or len(value) > MAX_USER_AGENT_CHARS:
        raise ValueError(f"must be 1 to {MAX_USER_AGENT_CHARS} characters")
    if not _FIELD_VALUE.fullmatch(value):
        raise ValueError("must be printable ASCII")
    return value
