"""Raw WebDriver BiDi commands and events on a session's websocket.

Selenium's typed BiDi modules lag behind Chromium: they cannot name ``userContexts`` for
``emulation.*`` or ``network.setExtraHeaders``, nor a proxy for ``browser.createUserContext``.
So commands go out as plain JSON on the session's own websocket (the one Selenium opens for
``driver.browser``), which also keeps them off Selenium's one-thread-per-callback wrappers.

Selenium logs every message of that websocket at DEBUG, ``network.continueWithAuth`` with a
proxy's password in it: a filter on its logger masks any ``"password"`` value first.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from typing import Any

from scrapefleet.common.errors import ScrapefleetError, StackError
from scrapefleet.common.masking import MASK

EventCallback = Callable[[dict[str, Any]], None]

WEBSOCKET_LOGGER = "selenium.webdriver.remote.websocket_connection"
# A JSON string's value, up to its closing quote or the end of a message Selenium cut short.
_PASSWORD_VALUE = re.compile(r'("password"\s*:\s*")(?:[^"\\]|\\.)*("?)')


class CredentialsMasked(logging.Filter):
    """Masks the value of every ``"password"`` key in a record's message."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if '"password"' in text:
            record.msg, record.args = _PASSWORD_VALUE.sub(rf"\g<1>{MASK}\g<2>", text), ()
        return True


def _mask_websocket_log() -> None:
    logger = logging.getLogger(WEBSOCKET_LOGGER)
    if not any(isinstance(f, CredentialsMasked) for f in logger.filters):
        logger.addFilter(CredentialsMasked())


_mask_websocket_log()


class BidiCommandError(ScrapefleetError):
    """The browser refused a BiDi command (``error`` is its code: "invalid argument", ...)."""

    def __init__(self, method: str, error: str, message: str) -> None:
        super().__init__(f"{method}: {error}: {message}")
        self.method, self.error, self.message = method, error, message


def has_bidi(driver: Any) -> bool:
    return bool((getattr(driver, "caps", None) or {}).get("webSocketUrl"))


def connection(driver: Any) -> Any:
    """The session's BiDi websocket, opened on first use (with the pool's tuning: see
    consumer.browser.sessions.session_operations.tune_bidi). StackError when the session was started
    without BiDi."""
    if not has_bidi(driver):
        raise StackError(
            "the browser session has no BiDi websocket: start sessions with"
            " options.enable_bidi = True"
        )
    if getattr(driver, "_websocket_connection", None) is None:
        driver._start_bidi()
    return driver._websocket_connection


def command(driver: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """Send one command; its ``result``, or BidiCommandError with the browser's answer.
    A websocket that does not answer raises Selenium's WebDriverException (a lost session)."""
    reply: dict[str, Any] = connection(driver).send_cmd(method, params)
    if "error" in reply:
        raise BidiCommandError(method, str(reply["error"]), str(reply.get("message", "")))
    result: dict[str, Any] = reply.get("result") or {}
    return result


_CALLBACKS_LOCK = threading.Lock()


def add_listener(driver: Any, event: str, callback: EventCallback) -> EventCallback:
    """Call ``callback(params)`` for each ``event`` the session receives (Selenium runs each
    call in a thread of its own). The browser sends only events a subscription asked for."""
    callbacks = connection(driver).callbacks
    with _CALLBACKS_LOCK:
        callbacks.setdefault(event, []).append(callback)
    return callback


def remove_listener(driver: Any, event: str, callback: EventCallback) -> None:
    websocket = getattr(driver, "_websocket_connection", None)
    if websocket is None:
        return
    with _CALLBACKS_LOCK:
        listeners = websocket.callbacks.get(event, [])
        if callback in listeners:
            listeners.remove(callback)
