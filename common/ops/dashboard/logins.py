"""Dashboard sessions kept in the server's memory; the browser holds only a random id.

The cookie (HttpOnly, SameSite=Strict, Secure over https) names a session; the session holds
the form token (``csrf``), whether the controls are unlocked, and flash messages. Neither the
operator token nor anything derived from it ever reaches the browser, so a cookie that leaks
(cookies are shared by every port of a host) expires with its session and dies at "lock".

A session ends after ``idle_s`` without a request, at "lock", and when the dashboard restarts
(the store is memory only): after a restart every browser is locked again and a form rendered
before it is refused as stale, which a reload cures.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from flask import Flask, Request, Response, request
from flask.sessions import SessionInterface, SessionMixin
from werkzeug.datastructures import CallbackDict

COOKIE_NAME = "scrapefleet_session"
MAX_SESSIONS = 10_000  # bounds the memory a flood of cookie-less visitors can take


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
    def __init__(self, store: SessionStore) -> None:
        self.store = store

    def get_cookie_name(self, app: Flask) -> str:
        return COOKIE_NAME

    def open_session(self, app: Flask, request: Request) -> DashboardSession:
        sid = request.cookies.get(COOKIE_NAME)
        data = self.store.get(sid) if sid else None
        return DashboardSession(data, sid if data is not None else None)

    def save_session(self, app: Flask, session: SessionMixin, response: Response) -> None:
        assert isinstance(session, DashboardSession)
        old = session.sid
        if session.renew and old is not None:
            self.store.delete(old)
            session.sid = None
        if not session:
            if old is not None:
                self.store.delete(old)
                response.delete_cookie(COOKIE_NAME, path="/")
            return
        session.sid = self.store.put(session.sid, dict(session))
        if session.sid != request.cookies.get(COOKIE_NAME):
            response.set_cookie(
                COOKIE_NAME,
                session.sid,
                path="/",
                httponly=True,
                samesite="Strict",
                secure=request.is_secure,
            )
        response.vary.add("Cookie")
