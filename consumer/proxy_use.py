"""An attempt that leased a pool's proxy (common.identities.proxy_pools): how the proxy reaches
the action, and what the attempt's failure says about the proxy. Pure, no I/O.

- The leased URL (credentials included) replaces the payload's ``proxy_pool`` in a copy of the
  payload the attempt runs with, never in the job's row: as the browser option ``proxy`` for a
  browser action (the runner applies it, answering the proxy's 407 itself:
  consumer.browser.actions.job_setup), as the param ``proxy`` for an action whose params have one
  (``http_get``).
- A failure is the proxy's **block** when the site or the proxy refused this exit address: an
  HTTP status the pool names (403, 429 by default) or the proxy's own 407; it is the proxy's
  **error** when the proxy could not be reached (a connection refused, reset or timed out on
  the way to it). Anything else is the page's, as without a proxy.
- Every text an attempt leaves (its error, its reason) is scrubbed of the leased password.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

from scrapefleet.common.actions.error_classes import HttpStatusError
from scrapefleet.common.browser.options import BROWSER_KEY
from scrapefleet.common.identities.proxy_pools import (
    PROXY_AUTH_REQUIRED,
    PROXY_POOL_KEY,
    SESSION_KEY,
)
from scrapefleet.common.masking import MASK

ProxyVerdict = Literal["blocked", "error"]

# What the HTTP client's and Chromium's errors say when the proxy itself could not be reached.
_UNREACHABLE_TYPES = ("ConnectError", "ConnectTimeout", "ProxyError")
_UNREACHABLE_WORDS = (
    "ERR_PROXY_CONNECTION_FAILED",
    "ERR_TUNNEL_CONNECTION_FAILED",
    "ERR_SOCKS_CONNECTION_FAILED",
)
_PROXY_AUTH_WORDS = ("407", "ERR_PROXY_AUTH")


def with_leased_proxy(
    payload: dict[str, Any],
    url: str,
    *,
    needs_browser: bool,
    takes_proxy: bool,
    own_fields: Collection[str] = (),
) -> dict[str, Any]:
    """The payload an attempt runs with: ``proxy_pool`` (and its ``session``) replaced by the
    leased ``url`` where the action takes a proxy (``takes_proxy``: its params have a ``proxy``
    field). ``own_fields``: the action's params, whose keys of those names stay."""
    gone = {PROXY_POOL_KEY, SESSION_KEY} - set(own_fields)
    ran = {k: v for k, v in payload.items() if k not in gone}
    if needs_browser:
        options = ran.get(BROWSER_KEY)
        ran[BROWSER_KEY] = {**(options if isinstance(options, dict) else {}), "proxy": url}
    elif takes_proxy:
        ran["proxy"] = url
    return ran


def proxy_verdict(exc: BaseException, block_statuses: Collection[int]) -> ProxyVerdict | None:
    """What a failed attempt's exception says about its proxy: its ``blocked`` (the pool's
    block statuses, the proxy's 407), its ``error`` (unreachable), or None (the page's)."""
    for each in _chain(exc):
        if isinstance(each, HttpStatusError) and each.status is not None:
            if each.status == PROXY_AUTH_REQUIRED or each.status in block_statuses:
                return "blocked"
            return None
    for each in _chain(exc):
        name, text = type(each).__name__, str(each)
        if name == "ProxyError" and any(word in text for word in _PROXY_AUTH_WORDS):
            return "blocked"
        if name in _UNREACHABLE_TYPES or any(word in text for word in _UNREACHABLE_WORDS):
            return "error"
    return None


def scrub(text: str | None, url: str | None) -> str | None:
    """``text`` without the leased proxy's password (as given, and percent-decoded)."""
    if text is None or url is None:
        return text
    secret = urlsplit(url).password
    if secret:
        for form in {secret, unquote(secret)}:
            if len(form) >= 3:  # a one- or two-letter password would mask half the text
                text = text.replace(form, MASK)
    return text


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception, its causes and contexts, outermost first (bounded)."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain and len(chain) < 20:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain
