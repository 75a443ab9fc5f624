"""Dashboard sessions: a server-side session only for a browser that gave the token.

An unlocked browser (the operator typed the token: "unlock" or the login form) holds a random
id in its cookie (HttpOnly, SameSite=Strict, Secure over https); its session (form token,
"unlocked", flash messages) is in the server's memory. Neither the operator token nor anything
derived from it ever reaches the browser, so a cookie that leaks (cookies are shared by every
port of a host) expires with its session and dies at "lock".

A browser that has not given the token gets no server-side session at all: its form token and
flash messages travel in a second cookie, signed with a key this process draws at start
(``FORM_COOKIE_NAME``). Anonymous visitors therefore cost the server no memory and cannot push
an operator's session out of the bounded store, however many of them come (a server-side session per
cookie-less ``GET /login`` would let a flood fill it). The login form stays
CSRF-safe: its token is in that signed cookie, which a page elsewhere can neither read nor
forge, and the origin checks (``control_forms.guard``) come first anyway.

A session ends after ``idle_s`` without a request, at "lock", and when the dashboard restarts
(the store is memory only and the signing key is new): after a restart every browser is locked
again and a form rendered before it is refused as stale, which a reload cures.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from flask import Flask, Request, Response, request
from flask.sessions import SessionInterface, SessionMixin, session_json_serializer
from itsdangerous import BadSignature, URLSafeTimedSerializer
from werkzeug.datastructures import CallbackDict

COOKIE_NAME = "scrapefleet_session"
FORM_COOKIE_NAME = "scrapefleet_form"
UNLOCKED = "unlocked"  # session key: the operator gave the token in this browser session
# Only token holders get a server-side session now: this bounds what an operator's scripts
# logging in again and again can take, not what strangers can.
MAX_SESSIONS = 10_000
# Browsers drop a cookie over 4 KB: an anonymous cookie that would be longer keeps its form
# token and loses its flash messages (notices only).
MAX_FORM_COOKIE_CHARS = 3_800
FLASHES = "_flashes"  # Flask's session key for flash messages


class SessionStore:
    """Session id -> data, each with an idle deadline. Thread-safe: waitress serves from a
    pool of threads."""

    def __init__(
        self,
        idle_s: float,
        max_sessions: int = MAX_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._idle_s = idle_s
        self._max = max_sessions
        self._clock = clock
        self._lock = threading.Lock()
        self._data: dict[str, tuple[float, dict[str, Any]]] = {}

    @property
    def idle_s(self) -> float:
        return self._idle_s

    def __len__(self) -> int:
        return len(self._data)

    def get(self, sid: str) -> dict[str, Any] | None:
        with self._lock:
            entry = self._data.get(sid)
            if entry is None:
                return None
            if entry[0] <= self._clock():
                del self._data[sid]
                return None
            return dict(entry[1])

    def put(self, sid: str | None, data: dict[str, Any]) -> str:
        """Store ``data`` under ``sid`` (a new random id when None) and push its deadline on."""
        with self._lock:
            now = self._clock()
            if sid is None:
                sid = secrets.token_urlsafe(32)
                if len(self._data) >= self._max:
                    self._make_room(now)
            self._data[sid] = (now + self._idle_s, dict(data))
            return sid

    def delete(self, sid: str) -> None:
        with self._lock:
            self._data.pop(sid, None)

    def _make_room(self, now: float) -> None:
        for sid in [s for s, (deadline, _) in self._data.items() if deadline <= now]:
            del self._data[sid]
        while len(self._data) >= self._max:
            del self._data[min(self._data, key=lambda s: self._data[s][0])]


class DashboardSession(CallbackDict[str, Any], SessionMixin):
    """``sid`` is the server-side id of an unlocked session; None for an anonymous browser
    (its data came from, and goes back to, the signed form cookie)."""

    def __init__(self, initial: dict[str, Any] | None, sid: str | None) -> None:
        def on_update(session: DashboardSession) -> None:
            session.modified = True

        super().__init__(initial, on_update)
        self.sid = sid
        self.modified = False
        self.renew = False

    @property
    def new(self) -> bool:  # type: ignore[override]
        return self.sid is None

    def start_over(self) -> None:
        """Forget everything and take a new id at the end of the request: at unlock (so an id
        planted in the browser beforehand never becomes an unlocked session) and at lock."""
        self.clear()
        self.renew = True


class MemorySessionInterface(SessionInterface):
    """Unlocked sessions in ``store``; anonymous ones in a cookie signed with ``key``."""

    def __init__(self, store: SessionStore, key: bytes | None = None) -> None:
        self.store = store
        self._signer = URLSafeTimedSerializer(
            key or secrets.token_bytes(32),
            salt="scrapefleet-dashboard-form",
            serializer=session_json_serializer,
        )

    def get_cookie_name(self, app: Flask) -> str:
        return COOKIE_NAME

    def open_session(self, app: Flask, request: Request) -> DashboardSession:
        sid = request.cookies.get(COOKIE_NAME)
        data = self.store.get(sid) if sid else None
        if data is not None:
            return DashboardSession(data, sid)
        return DashboardSession(self._anonymous(request.cookies.get(FORM_COOKIE_NAME)), None)

    def _anonymous(self, cookie: str | None) -> dict[str, Any] | None:
        if not cookie or len(cookie) > MAX_FORM_COOKIE_CHARS:
            return None
        try:
            data = self._signer.loads(cookie, max_age=math.ceil(self.store.idle_s))
        except (BadSignature, ValueError, TypeError):
            return None  # forged, from before a restart, or idle too long: a fresh start
        if not isinstance(data, dict):
            return None
        data.pop(UNLOCKED, None)  # never signed into this cookie; an unlock is server-side only
        return data

    def save_session(self, app: Flask, session: SessionMixin, response: Response) -> None:
        assert isinstance(session, DashboardSession)
        old = session.sid
        if old is not None and (session.renew or not session.get(UNLOCKED)):
            self.store.delete(old)
            session.sid = None
        response.vary.add("Cookie")
        if session.get(UNLOCKED):
            session.sid = self.store.put(session.sid, dict(session))
            if session.sid != request.cookies.get(COOKIE_NAME):
                self._set(response, COOKIE_NAME, session.sid)
            if FORM_COOKIE_NAME in request.cookies:
                response.delete_cookie(FORM_COOKIE_NAME, path="/")
            return
        if COOKIE_NAME in request.cookies:
            response.delete_cookie(COOKIE_NAME, path="/")
        if not session:
            if FORM_COOKIE_NAME in request.cookies:
                response.delete_cookie(FORM_COOKIE_NAME, path="/")
            return
        # Signed again on every answer: the idle deadline moves on, as a stored session's does.
        value = self._signer.dumps(dict(session))
        if len(value) > MAX_FORM_COOKIE_CHARS:
            value = self._signer.dumps({k: v for k, v in session.items() if k != FLASHES})
        self._set(response, FORM_COOKIE_NAME, value)

    @staticmethod
    def _set(response: Response, name: str, value: str) -> None:
        response.set_cookie(
            name, value, path="/", httponly=True, samesite="Strict", secure=request.is_secure
        )
