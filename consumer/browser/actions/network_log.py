"""Every request of a job's page, kept while the job runs: what a failed attempt saves as
``attempt-N.network.json`` and where ``fetch_page`` finds its document's response headers.

Why WebDriver BiDi ``network.*`` events, subscribed for the job's user context only
(``session.subscribe`` with ``userContexts``), checked here with Grid 4.48 and Chromium 156:
they carry each response's status and headers (``cf-ray`` and the like) and its timings, for
subresources and popups alike, and they reach us while a classic ``get`` is still loading, so
that a log is complete when the action returns. The Performance API has neither headers nor
failed requests; CDP ``Network.*`` events are not reachable through the Grid's WebDriver
endpoint (``goog/cdp/execute`` returns results, never events). A user context that outlives
its job (a slot cleared in place) keeps its subscription for the next job's log: two round trips
through the Grid less a job.

Bounded: at most MAX_ENTRIES requests and about MAX_LOG_CHARS of JSON; what does not fit is
counted in ``dropped``. Header values are cut at MAX_HEADER_VALUE_CHARS.

What is written out (``as_json``, the artifact the dashboard serves) carries no secret: cookie
values and credential headers as a short SHA-256 (the same cookie shows the same), URLs without
their userinfo and with token-named parameters hashed (common.masking). The entries kept in
memory stay as they came: ``fetch_page`` matches its document by URL.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

from scrapefleet.common.masking import digest, mask_headers, mask_url
from scrapefleet.consumer.browser.sessions import bidi

EVENTS = ("network.responseCompleted", "network.fetchError")
MAX_ENTRIES = 500
MAX_LOG_CHARS = 1_000_000
MAX_URL_CHARS = 2048
MAX_HEADERS_PER_RESPONSE = 64
MAX_HEADER_VALUE_CHARS = 1024
TIMING_KEYS = ("requestTime", "requestStart", "responseStart", "responseEnd")
DOCUMENT_WAIT_S = 1.0  # a document's event normally arrives before get() returns
# Before a failure's log is saved: no event for this long, or this long at most (a failure
# capture runs once per failed attempt, so the wait costs the host little).
SETTLE_QUIET_S = 0.25
SETTLE_MOST_S = 1.5


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _header_value(value: Any) -> str:
    if isinstance(value, dict):  # BiDi bytes value: {"type": "string", "value": ...}
        value = value.get("value", "")
    return _cut(str(value), MAX_HEADER_VALUE_CHARS)


def response_headers(raw: list[dict[str, Any]]) -> dict[str, str]:
    """Names in lower case; a repeated header's values joined with ", " (Set-Cookie too)."""
    headers: dict[str, str] = {}
    for header in raw[: MAX_HEADERS_PER_RESPONSE * 2]:
        name = str(header.get("name", "")).lower()
        if not name:
            continue
        value = _header_value(header.get("value"))
        if name in headers:
            headers[name] = _cut(f"{headers[name]}, {value}", MAX_HEADER_VALUE_CHARS)
        elif len(headers) < MAX_HEADERS_PER_RESPONSE:
            headers[name] = value
    return headers


def entry_of(event: str, params: dict[str, Any]) -> dict[str, Any]:
    """One request as the log keeps it, from a responseCompleted or fetchError event."""
    request = params.get("request") or {}
    response = params.get("response") or {}
    timings = request.get("timings") or {}
    entry: dict[str, Any] = {
        "url": _cut(str(request.get("url", "")), MAX_URL_CHARS),
        "method": request.get("method"),
        "type": request.get("destination") or request.get("initiatorType") or None,
        "document": bool(params.get("navigation")),
        "status": response.get("status") if response else None,
        "mime_type": response.get("mimeType") if response else None,
        "from_cache": bool(response.get("fromCache")) if response else False,
        "headers": response_headers(response.get("headers") or []) if response else {},
        "error": _error_text(params) if event == "network.fetchError" else None,
        "at_ms": params.get("timestamp"),  # Unix time of the event, ms
        "timings_ms": {
            key: round(float(timings[key]), 1)
            for key in TIMING_KEYS
            if isinstance(timings.get(key), int | float) and timings[key]
        },
        "context": params.get("context"),
    }
    return entry


def written_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry as a saved log shows it: its secrets hashed (see the module's docstring)."""
    return {
        **entry,
        "url": mask_url(entry["url"], digest),
        "headers": mask_headers(entry["headers"], digest),
    }


def _error_text(params: dict[str, Any]) -> str:
    # Chromium gives no text for a request it blocked on our own ask (the job's ``block``).
    return str(params.get("errorText") or "failed before a response (no reason given)")


class NetworkLog:
    """Thread-safe: events arrive on Selenium's callback threads."""

    def __init__(
        self, max_entries: int = MAX_ENTRIES, max_chars: int = MAX_LOG_CHARS, clock: Any = None
    ) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._entries: list[dict[str, Any]] = []
        self._by_request: dict[str, dict[str, Any]] = {}  # BiDi request id -> its entry
        self._chars = 0
        self.dropped = 0
        self._cond = threading.Condition()
        self._clock = clock or time.monotonic
        self._last_event_at = self._clock()

    def record(self, event: str, params: dict[str, Any]) -> None:
        entry = entry_of(event, params)
        request_id = str((params.get("request") or {}).get("request", ""))
        size = len(json.dumps(entry, default=str))
        with self._cond:
            known = self._by_request.get(request_id) if request_id else None
            if known is not None and event == "network.fetchError":
                # Chromium reports a response it then refuses to use (a 404 script body,
                # say) as completed, then failed: one request, its status and its error.
                known["error"] = entry["error"]
                return
            self._last_event_at = self._clock()
            if len(self._entries) >= self.max_entries or self._chars + size > self.max_chars:
                self.dropped += 1
                return
            self._entries.append(entry)
            if request_id:
                self._by_request[request_id] = entry
            self._chars += size
            self._cond.notify_all()

    def settle(self, quiet_s: float = SETTLE_QUIET_S, most_s: float = SETTLE_MOST_S) -> None:
        """Wait until no event has come for ``quiet_s`` (at most ``most_s``): Selenium hands
        each event to a thread of its own, so on a busy host a response's event may still be on
        its way when a failure is captured."""
        deadline = self._clock() + most_s
        with self._cond:
            while True:
                now = self._clock()
                wait = min(self._last_event_at + quiet_s, deadline) - now
                if wait <= 0:
                    return
                self._cond.wait(wait)

    def entries(self) -> list[dict[str, Any]]:
        with self._cond:
            return list(self._entries)

    def as_json(self) -> str:
        with self._cond:
            requests = [written_entry(entry) for entry in self._entries]
            data = {"requests": requests, "dropped": self.dropped}
            return json.dumps(data, indent=1, default=str)

    def document(self, url: str, wait_s: float = DOCUMENT_WAIT_S) -> dict[str, Any] | None:
        """The last top-level document response for ``url`` (fragment ignored), waited for up
        to ``wait_s``; else the last document response of any URL (a redirect's end may be
        named differently by the page); None when the log has no document at all."""
        wanted = url.partition("#")[0]
        deadline = self._clock() + wait_s
        with self._cond:
            while True:
                documents = [e for e in self._entries if e["document"] and e["status"]]
                exact = [e for e in documents if e["url"].partition("#")[0] == wanted]
                remaining = deadline - self._clock()
                if exact or remaining <= 0:
                    chosen = exact or documents
                    return chosen[-1] if chosen else None
                self._cond.wait(min(remaining, 0.05))


# The log of the job a driver runs now: one job per driver at a time (a pool slot's lease).
_LOGS: weakref.WeakKeyDictionary[Any, NetworkLog] = weakref.WeakKeyDictionary()
_LOGS_LOCK = threading.Lock()
# Subscriptions kept from one job to the next: driver -> {user context: subscription id}. A
# slot whose user context outlives its job (isolation "cleared") subscribes once, not twice a
# job: two round trips through the Grid less per job. Events that come between two jobs find
# no listener and are dropped by Selenium.
_STANDING: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()


def network_log_of(driver: Any) -> NetworkLog | None:
    with _LOGS_LOCK:
        try:
            return _LOGS.get(driver)
        except TypeError:  # a driver that cannot be a weak key (a test's fake) has no log
            return None


@contextlib.contextmanager
def recording(
    driver: Any, user_context: str | None, *, standing: bool = False
) -> Iterator[NetworkLog]:
    """Log every request of ``user_context`` (its tabs, frames and popups) until exit; None:
    of every context of the session (a session that runs one job alone: `scrapefleet try`).
    ``standing``: the user context outlives the job, so its subscription is kept for the next
    job's log (``forget`` ends it when the context goes)."""
    log = NetworkLog()
    listeners = [
        (event, bidi.add_listener(driver, event, _recorder(log, event))) for event in EVENTS
    ]
    subscription: str | None = None
    try:
        kept = _standing_subscription(driver, user_context) if standing else None
        if kept is None:
            params: dict[str, Any] = {"events": list(EVENTS)}
            if user_context is not None:
                params["userContexts"] = [user_context]
            answer = bidi.command(driver, "session.subscribe", params)
            subscription = answer.get("subscription")
            if standing and user_context is not None and subscription:
                with _LOGS_LOCK:
                    _STANDING.setdefault(driver, {})[user_context] = str(subscription)
                subscription = None  # kept: not ended with this job
        with _LOGS_LOCK:
            _LOGS[driver] = log
        yield log
    finally:
        with _LOGS_LOCK:
            if _LOGS.get(driver) is log:
                del _LOGS[driver]
        for event, callback in listeners:
            bidi.remove_listener(driver, event, callback)
        if subscription:
            with contextlib.suppress(Exception):  # the session may be gone: nothing to undo
                bidi.command(driver, "session.unsubscribe", {"subscriptions": [subscription]})


def _standing_subscription(driver: Any, user_context: str | None) -> str | None:
    if user_context is None:
        return None
    with _LOGS_LOCK:
        try:
            return _STANDING.get(driver, {}).get(user_context)
        except TypeError:  # a driver that cannot be a weak key (a test's fake)
            return None


def forget(driver: Any, user_context: str) -> None:
    """End the standing subscription of ``user_context``, which is going away."""
    with _LOGS_LOCK:
        try:
            subscription = _STANDING.get(driver, {}).pop(user_context, None)
        except TypeError:
            return
    if subscription is not None:
        with contextlib.suppress(Exception):  # the session may be gone: nothing to undo
            bidi.command(driver, "session.unsubscribe", {"subscriptions": [subscription]})


def _recorder(log: NetworkLog, event: str) -> bidi.EventCallback:
    def record(params: dict[str, Any]) -> None:
        log.record(event, params)

    return record
