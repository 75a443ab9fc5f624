"""Secrets out of what is shown: a job's proxy credentials, cookie values and credential
headers, passwords and tokens in URLs, wherever a person or a file sees them.

One pure module so that every place that shows a job (``jobs show``, ``jobs list --json``,
exports, the dashboard's job page), every log line and every network log a failed attempt saves
masks the same things the same way. Nothing here changes what is stored or sent: the job keeps
its values, only their renderings are masked.

Two ways to hide a value: ``MASK`` where a person reads it (nothing to compare), and
``digest()`` in network logs, where telling "the same cookie came back" from "a new one was
set" is what a log is read for (a short SHA-256 of the value, never the value).

``terminal_text()`` is the other half of showing: what a host or a page wrote reaches an
operator's terminal with its control characters spelled out, never obeyed.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

MASK = "***"
DIGEST_HEX_CHARS = 16

# Header names whose value is a credential or a session, whatever the site calls them:
# the well-known ones by name, the rest by what their name says.
CREDENTIAL_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "set-cookie2"}
)
_CREDENTIAL_WORDS = re.compile(
    r"auth|token|secret|passw|api[-_]?key|apikey|session|cookie|credential|signature"
    r"|csrf|xsrf|bearer|private[-_]?key|access[-_]?key",
    re.IGNORECASE,
)
# Names the words above catch that carry no secret, and are read when a page misbehaves.
_NOT_CREDENTIALS = ("access-control-", "www-authenticate", "proxy-authenticate")
# Query parameter names of credentials too short or common for the words above.
_CREDENTIAL_PARAMS = frozenset({"key", "sig", "sid", "pwd", "pass", "jwt", "code"})
# Keys of a job's payload or result that hold a secret as a plain string.
SECRET_KEYS = frozenset(
    {
        "password",
        "passwd",
        "secret",
        "token",
        "api_key",
        "apikey",
        "access_token",
        "refresh_token",
        "client_secret",
        "private_key",
        "authorization",
    }
)
# A URL inside free text (a traceback, a log message): a scheme, then up to a space or quote.
_URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]+")
# ``Authorization: Basic dXNlcjpwdw==`` in a dumped request, ``Bearer eyJ...`` anywhere.
_CREDENTIAL_IN_TEXT = re.compile(
    r"\b((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:[A-Za-z]+\s+)?|Bearer\s+)"
    r"[A-Za-z0-9._~+/=\-]{6,}",
    re.IGNORECASE,
)
# A Cookie or Set-Cookie header quoted in free text (a dumped request, a repr of headers):
# ``Cookie: sid=abc; theme=dark``, ``'Set-Cookie': 'sid=abc; Path=/'``, up to the line's or
# the quote's end. Its cookie values are hidden, names and attributes kept.
_COOKIE_HEADER_IN_TEXT = re.compile(
    r"\b((?:set-)?cookie2?[\"']?\s*[:=]\s*[\"']?)([^\r\n\"']*)", re.IGNORECASE
)
# ``Authorization: Digest username="bob", response="..."``: a header line's whole value, not
# only its first word (the pattern above stops at the first character outside a token).
_AUTHORIZATION_LINE_IN_TEXT = re.compile(
    r"^(\s*(?:proxy-)?authorization\s*:\s*)(\S.*)$", re.IGNORECASE | re.MULTILINE
)
_QUERY_PAIR = re.compile(r"(^|[&;])([^=&;]*)=([^&;]*)")
# A cookie pair at the start of a Cookie/Set-Cookie value or after the ", " that joins
# repeated Set-Cookie headers: a token name, "=", a value up to ";" or ",". An attribute
# (``; Path=/``) follows "; " and an Expires date's ", " is followed by a day, not a name=.
_COOKIE_PAIR = re.compile(r"(^|, |; )([!#$%&'*+\-.^_`|~0-9A-Za-z]+)=([^;,]*)")
_SET_COOKIE_ATTRIBUTES = frozenset(
    {"path", "domain", "expires", "max-age", "samesite", "priority", "partitioned", "version"}
)


def _control_escapes() -> dict[int, str]:
    table = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]}
    table |= {ord("\r"): "\\r", ord("\n"): "\\n", ord("\t"): "\\t", ord("\b"): "\\b"}
    # Bidirectional overrides and isolates, zero-width marks, line and paragraph separators:
    # they reorder or hide what a terminal shows, a "fake all good" as surely as \r does.
    for c in [*range(0x200B, 0x2010), *range(0x2028, 0x202F), *range(0x2066, 0x206A), 0xFEFF]:
        table[c] = f"\\u{c:04x}"
    return table


_CONTROL_ESCAPES = _control_escapes()
_CONTROL_ESCAPES_KEEP_LINES = {
    c: e for c, e in _CONTROL_ESCAPES.items() if c not in (ord("\n"), ord("\t"))
}


def terminal_text(text: str, keep_newlines: bool = True) -> str:
    """``text`` with every control character spelled out (ESC -> ``\\x1b``, CR -> ``\\r``, C1
    controls, bidi overrides...), so that a terminal shows it rather than obeys it: no cleared
    screen, title set, cursor moved or line overwritten by what a host or a page wrote.
    Newlines and tabs are kept for multi-line text (a traceback); pass ``keep_newlines=False``
    for a value that must stay on its one line."""
    return text.translate(_CONTROL_ESCAPES_KEEP_LINES if keep_newlines else _CONTROL_ESCAPES)


def digest(value: str) -> str:
    """A short fingerprint of ``value``: equal values show equal, the value never shows."""
    return (
        "sha256:" + hashlib.sha256(value.encode("utf-8", "replace")).hexdigest()[:DIGEST_HEX_CHARS]
    )


def is_credential_name(name: str) -> bool:
    """A header, query parameter or field name that says it holds a credential."""
    lower = name.strip().lower()
    if lower.startswith(_NOT_CREDENTIALS):
        return False
    return (
        lower in CREDENTIAL_HEADERS
        or lower in _CREDENTIAL_PARAMS
        or bool(_CREDENTIAL_WORDS.search(lower))
    )


def mask_url(url: str, hide: Any = None) -> str:
    """``url`` without its userinfo (``user:password@`` -> ``***@``) and with the values of
    credential-named query and fragment parameters hidden (``?token=abc`` -> ``?token=***``).
    Text that is not a URL comes back as it was."""
    conceal = hide or _mask_value
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if not parts.scheme or not parts.netloc:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        netloc = MASK + "@" + netloc.rpartition("@")[2]
    return urlunsplit(
        (
            parts.scheme,
            netloc,
            parts.path,
            _mask_pairs(parts.query, conceal),
            _mask_pairs(parts.fragment, conceal),
        )
    )


def _mask_value(_value: str) -> str:
    return MASK


def _mask_pairs(text: str, conceal: Any) -> str:
    if "=" not in text:
        return text

    def one(match: re.Match[str]) -> str:
        lead, name, value = match.groups()
        shown = conceal(value) if value and is_credential_name(name) else value
        return f"{lead}{name}={shown}"

    return _QUERY_PAIR.sub(one, text)


def mask_text(text: str) -> str:
    """Free text (an error, a traceback, a log line) with every URL in it masked as
    ``mask_url`` does, the values of quoted Cookie/Set-Cookie headers hidden, and
    Authorization, Proxy-Authorization and ``Bearer <token>``-like credentials hidden."""
    if "://" in text:
        text = _URL_IN_TEXT.sub(lambda m: mask_url(m.group(0)), text)
    if "ookie" in text or "OOKIE" in text:
        text = _COOKIE_HEADER_IN_TEXT.sub(
            lambda m: m.group(1) + mask_cookie_header(m.group(2)), text
        )
    text = _AUTHORIZATION_LINE_IN_TEXT.sub(lambda m: m.group(1) + MASK, text)
    return _CREDENTIAL_IN_TEXT.sub(lambda m: m.group(1) + MASK, text)


def mask_cookie_header(value: str, hide: Any = None) -> str:
    """A Cookie or Set-Cookie value with each cookie's value hidden, names and attributes
    (Path, Expires...) kept: which cookies a site sets is what a log is read for."""
    conceal = hide or _mask_value

    def one(match: re.Match[str]) -> str:
        lead, name, cookie_value = match.groups()
        if lead == "; " and name.lower() in _SET_COOKIE_ATTRIBUTES:
            return match.group(0)
        return f"{lead}{name}={conceal(cookie_value)}"

    return _COOKIE_PAIR.sub(one, value)


def mask_header(name: str, value: str, hide: Any = None) -> str:
    conceal = hide or _mask_value
    lower = name.lower()
    if lower in ("cookie", "set-cookie", "set-cookie2"):
        return mask_cookie_header(value, conceal)
    if is_credential_name(lower):
        return conceal(value)
    if lower in ("location", "content-location", "link", "referer", "refresh"):
        return mask_text(value)
    return value


def mask_headers(headers: dict[str, Any], hide: Any = None) -> dict[str, Any]:
    return {
        name: mask_header(name, value, hide) if isinstance(value, str) else MASK
        for name, value in headers.items()
    }


def mask_document(value: Any) -> Any:
    """A job's payload or result (any JSON value) as it may be shown: every string's URLs
    masked, ``cookies`` values hidden, credential ``headers`` hidden, and the values of keys
    named like ``password``/``token`` hidden. A new value; ``value`` is left as it was."""
    if isinstance(value, dict):
        shown: dict[str, Any] = {}
        for key, item in value.items():
            name = str(key).lower()
            if name == "cookies":
                shown[key] = _mask_cookies(item)
            elif name == "headers" and isinstance(item, dict):
                shown[key] = mask_headers(item)
            elif name in SECRET_KEYS and isinstance(item, str | int | float) and item != "":
                shown[key] = MASK
            else:
                shown[key] = mask_document(item)
        return shown
    if isinstance(value, list):
        return [mask_document(item) for item in value]
    if isinstance(value, str):
        return mask_text(value)
    return value


def _mask_cookies(cookies: Any) -> Any:
    if isinstance(cookies, dict):
        return {name: MASK for name in cookies}
    if isinstance(cookies, list):  # WebDriver-style [{"name": ..., "value": ...}, ...]
        return [
            {**c, "value": MASK} if isinstance(c, dict) and "value" in c else MASK for c in cookies
        ]
    return MASK if cookies not in (None, "") else cookies


def mask_job_row(row: dict[str, Any]) -> dict[str, Any]:
    """A job row (or its archived copy) as it may be shown: payload and result masked as
    ``mask_document`` does, the callback URL, last error and event messages as ``mask_text``."""
    shown = dict(row)
    for key in ("payload", "result"):
        if shown.get(key) is not None:
            shown[key] = mask_document(shown[key])
    for key in ("callback_url", "last_error", "url", "message"):
        if isinstance(shown.get(key), str):
            shown[key] = mask_text(shown[key])
    return shown
