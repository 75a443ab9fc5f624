"""Proxy pools: named sets of proxies the fleet leases to jobs, one proxy per attempt.

A job asks for a pool (payload key ``proxy_pool``, or its action's ``register(...,
proxy_pool=)``), never for a proxy URL with its password: the producer leases it a proxy of the
pool as it assigns the job (the least recently used ready one under the pool's per-proxy cap),
and the consumer reads that one proxy's credentials for that one attempt
(common.store.identity_pools.proxies). A block charges the proxy, not the job: it cools down, with a
back-off that grows with its consecutive blocks, and a proxy blocked ``ban_blocks`` times within
``ban_window_s`` is banned for ``ban_s`` (or until an operator resets it).

Pure and free of I/O: the CLI and submit refuse bad input here, naming the field, before
anything is written; the back-off and the ban are decided here from plain values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from scrapefleet.common.http.params import validate_proxy_url

PROXY_POOL_KEY = "proxy_pool"  # in a job's payload (any action)
POOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
POOL_NAME_SQL = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"  # the same, for the table's CHECK
MAX_PROXIES_PER_ADD = 10_000
# A new pool's settings have their defaults in the table (common.db.identity_tables).
PROXY_AUTH_REQUIRED = 407  # the proxy's own refusal: its credentials are wrong or spent


class ProxyState(StrEnum):
    READY = "ready"
    COOLING = "cooling"  # until cooldown_until: blocked, or unreachable
    BANNED = "banned"  # until banned_until, or an operator's reset
    DISABLED = "disabled"  # an operator's: never leased until enabled


class LeaseOutcome(StrEnum):
    """How an attempt that held a proxy ended, for the proxy's record (identity_leases)."""

    LEASED = "leased"  # running, or ended without saying (released, failed for the page)
    OK = "ok"  # completed
    BLOCKED = "blocked"
    ERROR = "error"  # the proxy itself failed: unreachable, refused the connection


SESSION_KEY = "session"  # in a job's payload, beside its pool: a sticky session's key
SITE_SESSION = "site"  # the session of the job's site: its URL's host
MAX_SESSION_CHARS = 200


def session_key(value: object, payload: Mapping[str, Any]) -> str:
    """A job's sticky session key: ``"site"`` is its URL's host; any other text is itself.
    ValueError says what is wrong."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_SESSION_CHARS:
        raise ValueError(f"must be a text of 1-{MAX_SESSION_CHARS} characters")
    if value != SITE_SESSION:
        return value
    host = urlsplit(str(payload.get("url") or "")).hostname
    if not host:
        raise ValueError(f"{SITE_SESSION!r} needs the payload's url, with a host")
    return host


def validate_pool_name(value: object) -> str:
    if not isinstance(value, str) or not POOL_NAME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a pool name (1-64 letters, digits, '_', '.', '-';"
            " starting with a letter or digit)"
        )
    return value


def payload_proxy_pool(payload: Mapping[str, Any]) -> str | None:
    """The pool a payload names (validated: ValueError says what is wrong), else None."""
    value = payload.get(PROXY_POOL_KEY)
    return None if value is None else validate_pool_name(value)


@dataclass(frozen=True)
class ProxyEntry:
    """A proxy as stored: its URL without credentials, and the credentials apart."""

    url: str  # scheme://host:port
    username: str | None
    password: str | None

    @property
    def shown(self) -> str:
        """What a person sees: the URL, with ``***@`` where credentials are."""
        if self.username is None:
            return self.url
        scheme, _, rest = self.url.partition("://")
        return f"{scheme}://***@{rest}"

    @property
    def socks_with_credentials(self) -> bool:
        return self.url.startswith("socks") and self.username is not None


def parse_proxy(value: str) -> ProxyEntry:
    """``scheme://[user:password@]host:port`` -> its parts; ValueError says what is wrong (never
    repeating the value, which may hold a password). A port is required: a proxy's default
    port is a guess."""
    try:
        validate_proxy_url(value)
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    parts = urlsplit(value)
    if parts.port is None:
        raise ValueError("must name the proxy's port (scheme://host:port)")
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    url = urlunsplit((parts.scheme.lower(), f"{host}:{parts.port}", "", "", ""))
    if parts.username is None:
        return ProxyEntry(url, None, None)
    return ProxyEntry(url, unquote(parts.username), unquote(parts.password or ""))


def parse_proxy_lines(lines: list[str]) -> list[ProxyEntry]:
    """A file of proxies, one URL a line (blank lines and ``#`` comments skipped): every line
    checked before any is used; ValueError names the first bad line."""
    entries = []
    seen: set[str] = set()
    for number, raw in enumerate(lines, 1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        try:
            entry = parse_proxy(text)
        except ValueError as exc:
            raise ValueError(f"line {number}: {exc}") from None
        if entry.url in seen:
            raise ValueError(f"line {number}: {entry.url} is listed twice")
        seen.add(entry.url)
        entries.append(entry)
    if len(entries) > MAX_PROXIES_PER_ADD:
        raise ValueError(f"at most {MAX_PROXIES_PER_ADD} proxies at once")
    return entries


MAX_BLOCK_STATUSES = 20


def parse_block_statuses(text: str) -> tuple[int, ...]:
    """``"403,429"`` -> (403, 429): HTTP statuses 400-599 that mean a pool's proxy was
    refused; ValueError says what is wrong."""
    statuses: list[int] = []
    for part in text.split(","):
        word = part.strip()
        if not word.isdigit() or not 400 <= int(word) <= 599:
            raise ValueError(f"{word!r} is not an HTTP status 400-599 (give them as 403,429)")
        if int(word) not in statuses:
            statuses.append(int(word))
    if len(statuses) > MAX_BLOCK_STATUSES:
        raise ValueError(f"at most {MAX_BLOCK_STATUSES} statuses")
    return tuple(statuses)


def block_cooldown_s(base_s: float, max_s: float, consecutive_blocks: int) -> float:
    """How long a proxy cools down after its ``consecutive_blocks``-th block in a row (1 for
    the first): ``base_s`` doubled per block before it, at most ``max_s``."""
    if consecutive_blocks < 1:
        raise ValueError("consecutive_blocks starts at 1")
    return float(min(max_s, base_s * 2 ** min(consecutive_blocks - 1, 30)))


def banned(blocks_in_window: int, ban_blocks: int) -> bool:
    """Whether a proxy blocked ``blocks_in_window`` times (this block included) is banned."""
    return ban_blocks > 0 and blocks_in_window >= ban_blocks


def unavailable(
    state: str,
    cooldown_until: datetime | None,
    banned_until: datetime | None,
    now: datetime,
) -> str | None:
    """Why a proxy cannot be leased at ``now`` (``disabled``, ``banned``, ``cooling``), or None.
    Times decide, not ``state`` alone: a cool-down or a ban that has passed is over."""
    if state == ProxyState.DISABLED:
        return ProxyState.DISABLED.value
    if banned_until is not None and banned_until > now:
        return ProxyState.BANNED.value
    if cooldown_until is not None and cooldown_until > now:
        return ProxyState.COOLING.value
    return None


def pool_wait_reason(pool: str, counts: Mapping[str, int]) -> str:
    """``waiting: pool 'residential' has no ready proxy (12 cooling down, 3 banned)``, from the
    pool's proxies counted by why they cannot take a job now (unavailable's words, and
    ``busy``: at the pool's per-proxy cap)."""
    words = (
        ("busy", "at their job cap"),
        ("cooling", "cooling down"),
        ("banned", "banned"),
        ("disabled", "disabled"),
    )
    parts = [f"{counts[key]} {label}" for key, label in words if counts.get(key)]
    if not parts:
        return f"waiting: pool {pool!r} has no proxy"
    return f"waiting: pool {pool!r} has no ready proxy ({', '.join(parts)})"
