"""Why a page's renderer died: the page crashed it, or something on the host killed it.

chromedriver says only "tab crashed", whatever the cause. The browser itself knows more, and
tells it on its own DevTools endpoint (the session's ``goog:chromeOptions.debuggerAddress``):
``Target.targetCrashed`` carries Chromium's termination status of the renderer process and its
exit code or signal. Measured here (Chromium 156):

- SIGKILL or SIGTERM from outside, and so the kernel's OOM killer (it sends SIGKILL):
  ``"killed"``, code 9 or 15;
- a page that crashes its renderer: ``chrome://crash`` ``"crashed"`` 11 (SIGSEGV), DevTools'
  ``Page.crash`` and a script that exhausts the V8 heap ``"crashed"`` 5 (SIGTRAP: Chromium
  crashes itself on purpose when out of memory).

A renderer killed from outside is the host's fault (an operator, a watchdog, the OOM killer
reclaiming memory for the whole host: Chromium makes its renderers the kernel's first choice),
so the attempt is released and not counted against the page (consumer.runner). Everything else
stays the page's: only a status of ``"killed"`` is taken as proof, so a watcher that could not
connect, or an event that did not come, leaves today's judgement.

One watcher per browser session, started with it (consumer.browser.stack.browser_stack): a websocket
to the browser that asks for target discovery (pages only) and keeps the last few crashes; a thread
that ends when the browser goes away or the session is quit.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selenium.common.exceptions import WebDriverException

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 3.0
# chromedriver and this watcher hear of the crash on two connections: the watcher's event may
# come after the action's error, seconds after on a starved host (seen in the storm with 3 s).
# Only waited for once a renderer has died, and in full only when no event comes at all.
EVENT_WAIT_S = 10.0
KEPT_DEATHS = 16
MAX_MESSAGE_CHARS = 1 << 20  # a page's URL or title rides on target events: bounded
KILLED = "killed"
_LOOPBACK = ("localhost", "127.0.0.1")
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_SIGNALS = {9: "SIGKILL", 15: "SIGTERM", 2: "SIGINT"}
CRASH_HINTS = ("tab crashed", "page crash", "target crashed")
VMSTAT = Path("/proc/vmstat")


@dataclass(frozen=True)
class Death:
    at: float  # time.monotonic() when the watcher heard of it
    target_id: str
    status: str  # Chromium's TerminationStatus: killed, crashed, abnormal, oom, ...
    code: int  # the exit code, or the signal's number
    oom_kills: int | None  # the kernel's OOM kill count then (/proc/vmstat), None if unknown


def is_renderer_crash(exc: BaseException) -> bool:
    """chromedriver's "tab crashed" (or what consumer.browser.actions.selenium_actions made of
    it)."""
    from scrapefleet.consumer.browser.actions.selenium_actions import (
        RendererCrashed,  # no import cycle
    )

    if isinstance(exc, RendererCrashed):
        return True
    message = str(getattr(exc, "msg", None) or exc).lower()
    return isinstance(exc, WebDriverException) and any(hint in message for hint in CRASH_HINTS)


def killed_from_outside(deaths: list[Death], oom_kills_before: int | None) -> str | None:
    """Why the renderer deaths of an attempt were the host's doing, or None when they were
    the page's (or nothing says). A page that crashed its renderer once is the page's, even if
    another renderer of the attempt was killed too."""
    if not deaths or any(death.status != KILLED for death in deaths):
        return None
    death = deaths[-1]
    signal_name = _SIGNALS.get(death.code, f"signal {death.code}")
    oom = (
        death.oom_kills is not None
        and oom_kills_before is not None
        and death.oom_kills > oom_kills_before
    )
    by = "the kernel's OOM killer" if oom else f"{signal_name} from outside the page"
    return f"its renderer was killed by {by} (the host's fault, not the page's)"


def killed_line(exc: BaseException, killed: str) -> str:
    """The release's line for a renderer killed from outside: what the action was doing, then
    that one cause; never the crash's own words ("the page crashed the renderer", "tab
    crashed"), which blamed the page for what ``killed`` says the host did."""
    from scrapefleet.consumer.browser.actions.selenium_actions import (
        RendererCrashed,  # no import cycle
    )

    what = exc.what if isinstance(exc, RendererCrashed) else ""
    return f"{what}: {killed}" if what else killed


def oom_kill_count(vmstat: Path = VMSTAT) -> int | None:
    """The kernel's count of OOM kills since boot; None where it is not readable."""
    try:
        with vmstat.open() as handle:
            for line in handle:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def debugger_address(capabilities: Mapping[str, Any]) -> tuple[str, int] | None:
    """The browser's DevTools endpoint from a session's capabilities, if on loopback."""
    try:
        address = capabilities["goog:chromeOptions"]["debuggerAddress"]
        host, _, port = str(address).rpartition(":")
        number = int(port)
    except (KeyError, TypeError, ValueError):
        return None
    if host not in _LOOPBACK or not 0 < number < 65536:
        return None
    return "127.0.0.1", number


class RendererWatch:
    """The renderer deaths of one browser, as its DevTools endpoint reports them."""

    def __init__(self, websocket: Any) -> None:
        self._ws = websocket
        self._deaths: deque[Death] = deque(maxlen=KEPT_DEATHS)
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._read, name="renderer-watch", daemon=True)
        self._thread.start()

    @classmethod
    def start(cls, capabilities: Mapping[str, Any]) -> RendererWatch | None:
        """A watcher for the session's browser; None (logged) when it cannot be had: the
        attempt's judgement then stays what chromedriver's error alone says."""
        address = debugger_address(capabilities)
        if address is None:
            return None
        try:
            import websocket  # selenium's own dependency

            host, port = address
            url = f"http://{host}:{port}/json/version"
            with _DIRECT.open(url, timeout=CONNECT_TIMEOUT_S) as answer:
                path = json.load(answer)["webSocketDebuggerUrl"].split(f":{port}", 1)[1]
            if not path.startswith("/devtools/browser/"):
                raise ValueError(f"unexpected DevTools path {path[:80]!r}")
            ws = websocket.create_connection(
                f"ws://{host}:{port}{path}", timeout=CONNECT_TIMEOUT_S, suppress_origin=True
            )
            ws.settimeout(None)
            ws.send(
                json.dumps(
                    {
                        "id": 1,
                        "method": "Target.setDiscoverTargets",
                        "params": {"discover": True, "filter": [{"type": "page"}]},
                    }
                )
            )
        except Exception as exc:
            log.info("no renderer watch for a browser session: %s: %s", type(exc).__name__, exc)
            return None
        return cls(ws)

    def deaths_since(
        self, since: float, tab: str | None = None, wait_s: float = EVENT_WAIT_S
    ) -> list[Death]:
        """The deaths heard of after ``since`` (time.monotonic()), and any of the target
        ``tab`` (a job's tab prepared ahead may have lost its renderer before the job began),
        waiting up to ``wait_s`` for a first one (the crash is known to have happened)."""
        deadline = time.monotonic() + wait_s
        with self._cond:
            while True:
                deaths = [
                    death
                    for death in self._deaths
                    if death.at >= since or (tab is not None and death.target_id == tab)
                ]
                left = deadline - time.monotonic()
                if deaths or self._closed or left <= 0:
                    return deaths
                self._cond.wait(left)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        with contextlib.suppress(Exception):
            self._ws.abort()  # wakes the reading thread, which closes the socket
        with contextlib.suppress(Exception):
            self._ws.close(timeout=0)

    def _read(self) -> None:
        try:
            while not self._closed:
                message = self._ws.recv()
                if not isinstance(message, str) or len(message) > MAX_MESSAGE_CHARS:
                    continue
                self._heard(message)
        except Exception:  # the browser went away, or close(): nothing more to hear
            pass
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()

    def _heard(self, message: str) -> None:
        if '"Target.targetCrashed"' not in message:
            return
        try:
            params = json.loads(message)["params"]
            death = Death(
                at=time.monotonic(),
                target_id=str(params.get("targetId", ""))[:64],
                status=str(params.get("status", ""))[:32],
                code=int(params.get("errorCode", 0)),
                oom_kills=oom_kill_count(),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return
        with self._cond:
            self._deaths.append(death)
            self._cond.notify_all()


def renderer_killed(driver: Any, since: float, oom_kills_before: int | None) -> str | None:
    """Why the renderer that died under ``driver`` since ``since`` was killed from outside (the
    host's fault); None when the page crashed it or nothing says."""
    watch = getattr(driver, "renderer_watch", None)
    if not isinstance(watch, RendererWatch):
        return None
    return killed_from_outside(watch.deaths_since(since, _job_tab(driver)), oom_kills_before)


def _job_tab(driver: Any) -> str | None:
    """The job's tab (its target id): the session pool's context for it, else the current
    window as chromedriver remembers it (it answers that without asking the dead renderer)."""
    context = getattr(driver, "job_context", None)
    tab = getattr(context, "tab", None)
    if isinstance(tab, str):
        return tab
    try:
        handle = driver.current_window_handle
    except Exception:
        return None
    return handle if isinstance(handle, str) else None
