"""A sticky session's cookie jar and user agent for the HTTP jobs of one session (common.
identities: ``"session"`` beside a ``proxy_pool``), so that a site sees one visitor: the
cookies it set on the session's jobs before come back, and the User-Agent stays the one the
session's first job went out with.

The runner makes the jar current for the job's thread (``in_session``) and every request the
action makes through common.http.client uses it instead of a jar of its own; what the jar holds
afterwards is stored with the session (store.keep_session). Stored as a JSON list, bounded: the
newest MAX_COOKIES cookies, none past its expiry, each value at most MAX_VALUE_CHARS.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from http.cookiejar import Cookie, CookieJar, DefaultCookiePolicy
from typing import Any

MAX_COOKIES = 100
MAX_VALUE_CHARS = 4096
MAX_JAR_BYTES = 65536  # migration 0040's bound
MAX_USER_AGENT_CHARS = 1024  # migration 0040's bound


@dataclass
class HttpSession:
    """The jar and user agent the current job's requests share with its session."""

    jar: CookieJar
    user_agent: str | None = None

    @classmethod
    def from_stored(cls, cookies: Any, user_agent: str | None) -> HttpSession:
        """From what store.session_for_attempt read (None: a session with no jar yet)."""
        policy = DefaultCookiePolicy(strict_ns_domain=DefaultCookiePolicy.DomainStrictNonDomain)
        jar = CookieJar(policy=policy)
        for entry in cookies if isinstance(cookies, list) else []:
            cookie = _cookie(entry)
            if cookie is not None:
                jar.set_cookie(cookie)
        return cls(jar, user_agent)

    def stored(self) -> tuple[list[dict[str, Any]], str | None]:
        """The jar as a bounded JSON list, and the user agent, for store.keep_session."""
        now = int(time.time())
        kept = [
            _entry(c)
            for c in self.jar
            if not c.is_expired(now) and c.value is not None and len(c.value) <= MAX_VALUE_CHARS
        ][-MAX_COOKIES:]
        while kept and len(json.dumps(kept)) > MAX_JAR_BYTES:
            kept.pop(0)  # the oldest go first
        agent = (
            self.user_agent
            if self.user_agent and len(self.user_agent) <= MAX_USER_AGENT_CHARS
            else None
        )
        return kept, agent


def stored_jar(stored: Any) -> tuple[Any, str | None]:
    """(cookies, user agent) of what store.session_for_attempt read (its StoredSession)."""
    return getattr(stored, "cookies", None), getattr(stored, "user_agent", None)


_CURRENT: ContextVar[HttpSession | None] = ContextVar("scrapefleet_http_session", default=None)


def current_session() -> HttpSession | None:
    """The session of the job running in this thread, if it has one."""
    return _CURRENT.get()


@contextmanager
def in_session(session: HttpSession) -> Iterator[HttpSession]:
    token = _CURRENT.set(session)
    try:
        yield session
    finally:
        _CURRENT.reset(token)


_FIELDS = ("name", "value", "domain", "path", "secure", "expires")


def _entry(cookie: Cookie) -> dict[str, Any]:
    entry = {name: getattr(cookie, name) for name in _FIELDS}
    entry["host_only"] = not cookie.domain_specified
    return entry


def _cookie(entry: Any) -> Cookie | None:
    """A stored entry back as a cookie; None for one that is not a stored entry's shape."""
    if not isinstance(entry, dict):
        return None
    name, value, domain, path = (entry.get(k) for k in ("name", "value", "domain", "path"))
    if not (
        isinstance(name, str)
        and isinstance(value, str)
        and isinstance(domain, str)
        and isinstance(path, str)
    ):
        return None
    expires = entry.get("expires")
    host_only = entry.get("host_only") is not False
    return Cookie(
        version=0,
        name=name,
        value=value,
        port=None,
        port_specified=False,
        domain=domain,
        domain_specified=not host_only,
        domain_initial_dot=domain.startswith("."),
        path=path,
        path_specified=True,
        secure=entry.get("secure") is True,
        expires=expires if isinstance(expires, int) else None,
        discard=not isinstance(expires, int),
        comment=None,
        comment_url=None,
        rest={},
    )
