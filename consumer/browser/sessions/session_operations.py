"""One WebDriver session's own operations: its BiDi websocket tuned, a job's user context
and tab opened and removed, the session quit without waiting on its websocket. The session
pool (consumer.browser.sessions.session_pool) decides when; this module is how, one round trip at a
time.

Why WebDriver BiDi user contexts, checked here (Grid 4.48 standalone, Debian's Chromium 156,
offline): ``browser.createUserContext`` and ``browsingContext.create(type="tab",
userContext=...)`` work through the Grid's BiDi websocket (``enable_bidi`` on the options; the
Grid answers with ``se:gridWebSocketUrl``), and the tab's context id is its classic window
handle, so every classic command (get, execute_script, screenshots, CDP through the Grid) runs
in it after a ``switch_to.window``. Chromium's CDP ``Target.createBrowserContext`` sent through
the WebDriver endpoint (``goog/cdp/execute``) is refused with "Not allowed": chromedriver sends
it on the page's DevTools session, which may not create browser contexts, so it would need a
browser-level DevTools socket of our own beside chromedriver. BiDi is the standard way and the
one Selenium speaks.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scrapefleet.common.errors import StackError
from scrapefleet.consumer.browser.actions.network_log import forget as forget_network_log

# Selenium polls its BiDi websocket for each answer every websocket_interval (default 0.1 s):
# that is up to 0.1 s added to every BiDi command, four of them per job.
BIDI_POLL_S = 0.005
# A BiDi command to a hung browser fails after this (Selenium's default is 30 s), so that a
# slot being prepared is replaced instead of held.
BIDI_COMMAND_TIMEOUT_S = 15.0

# () -> a session; (launch=BrowserLaunch) -> a browser started with those (a profile's)
DriverMaker = Callable[..., Any]


@dataclass(frozen=True)
class BrowserLaunch:
    """How to start a browser of a job's own that a warm session cannot stand in for: on a
    persistent profile's user-data-dir and, when its pages go through a proxy, with that proxy
    for the whole browser (``--proxy-server``: a proxy's user context would not be the
    profile's persistent one). ``proxy`` keeps its credentials, answered once the browser runs
    (consumer.browser.actions.job_setup)."""

    user_data_dir: Path
    proxy: str | None = None


@dataclass(frozen=True)
class JobContext:
    user_context: str
    tab: str  # its tab's browsing context id, which is also its classic window handle
    # The session's windows once it was open (the session's first window is one of them): a
    # job that leaves another one behind gets no in-place clearing.
    windows: frozenset[str] = frozenset()


def tune_bidi(driver: Any) -> None:
    """Poll the BiDi websocket often and give up on a silent one sooner; must run before the
    driver's first BiDi command, which opens the websocket with these values."""
    config = getattr(getattr(driver, "command_executor", None), "client_config", None)
    if config is not None:
        config.websocket_interval = BIDI_POLL_S
        config.websocket_timeout = BIDI_COMMAND_TIMEOUT_S


def open_context(driver: Any) -> JobContext:
    """A new user context with one tab, made the session's current window."""
    if not (getattr(driver, "caps", None) or {}).get("webSocketUrl"):
        raise StackError(
            "the browser session has no BiDi websocket: start sessions with"
            " options.enable_bidi = True"
        )
    user_context = driver.browser.create_user_context()
    try:
        tab = driver.browsing_context.create(type="tab", user_context=user_context)
        driver.switch_to.window(tab)
        windows = frozenset(driver.window_handles)
    except BaseException:
        with contextlib.suppress(Exception):
            driver.browser.remove_user_context(user_context)
        raise
    return JobContext(user_context, tab, windows)


def close_context(driver: Any, context: JobContext) -> None:
    """Remove the user context: every tab and window the job opened in it goes with it."""
    forget_network_log(driver, context.user_context)
    driver.browser.remove_user_context(context.user_context)


def quit_driver(driver: Any) -> None:
    """End a session without waiting on its BiDi websocket; never raises.

    Selenium's quit() closes the websocket first and waits for the close handshake, which the
    Grid's websocket proxy never completes: ~10 s for every BiDi session here, live or dead.
    So the websocket is detached and closed in a thread of its own (it ends once the session's
    deletion makes the Grid drop the connection), and the session is deleted at once (~0.4 s).
    """
    websocket = getattr(driver, "_websocket_connection", None)
    if websocket is not None:
        driver._websocket_connection = None
        threading.Thread(target=_close_quietly, args=(websocket,), daemon=True).start()
    with contextlib.suppress(Exception):  # dead already, or the stack's stop will end it
        driver.quit()


def _close_quietly(websocket: Any) -> None:
    with contextlib.suppress(Exception):
        websocket.close()
