"""One consumer's browser stack: Xvfb + Selenium Grid standalone + Debian's Chromium.

The stack owns every process it starts and a work directory:

    <work_dir>/home       HOME of the Grid and its browsers
    <work_dir>/tmp        TMPDIR: Chromium's profiles (org.chromium.Chromium.*, scoped_dir*)
    <work_dir>/grid.toml  the Grid's config (max-sessions = host capacity, offline, no manager)
    <work_dir>/grid.log   the Grid's output, whose tail is quoted when it does not come up

A restart is a full stop (every process of the stack ended, temp files removed) and a start,
which is what contains Chromium's slow leaks. Sessions are Remote WebDriver sessions against
the Grid (consumer.browser.stack.grid_driver), whose own slot cap and idle-session reaping are a
second guard behind ours.

The processes are started, measured and ended through a ``StackControl``: in this process
(consumer.browser.stack.process_control), or by the browser agent running as ``browser_user``
(consumer.browser.agent.agent_client) on a host where the consumer holds no capability; then the
directories above are the agent's, under its own directory. This module decides when: the
start and its retries, readiness, health, restarts.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil
from selenium.webdriver import ChromeOptions

from scrapefleet.common.error_lines import first_line
from scrapefleet.common.errors import StackError
from scrapefleet.common.settings import Settings
from scrapefleet.consumer.browser.agent.agent_client import control_for
from scrapefleet.consumer.browser.sessions.session_operations import BrowserLaunch, quit_driver
from scrapefleet.consumer.browser.stack.grid_auth import GridCredentials
from scrapefleet.consumer.browser.stack.grid_driver import (
    GridSession,
    StackWebDriver,
    chrome_options,
    open_session,
    session_profile_dir,
    session_wait_s,
)
from scrapefleet.consumer.browser.stack.host_needs import free_port
from scrapefleet.consumer.browser.stack.process_control import GridConfig
from scrapefleet.consumer.browser.stack.start_deadline import RunningDeadline, paused_past

log = logging.getLogger(__name__)

STATUS_PROBE_TIMEOUT_S = 2.0
READY_POLL_S = 0.1  # between looks at a starting Grid's status
GRID_START_TRIES = 3  # a Grid that exits while it starts is started again, this many in all
# urllib must not send loopback status probes through an http_proxy from the environment.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class GridExited(StackError):
    """The Grid's process exited while it started."""


class SessionStartPaused(StackError):
    """A new session failed because this process was paused past the wait's limit (SIGSTOP, a
    VM paused): not the stack's fault, and a start does not count it as a try."""


class StackHealth(StrEnum):
    UP = "up"
    SLOW = "slow"  # running, but too busy to answer in time: not a fault
    DOWN = "down"


@dataclass(frozen=True)
class StopReport:
    duration_s: float
    killed: int  # processes of the stack ended (Grid, Xvfb, drivers, every browser process)
    sigkilled: int  # of those, how many ignored SIGTERM
    leftover_pids: tuple[int, ...]  # should always be empty; logged by the consumer if not


@dataclass(frozen=True)
class RestartReport:
    duration_s: float
    pss_before_bytes: int
    pss_after_bytes: int
    killed: int


class BrowserStack:
    def __init__(
        self,
        settings: Settings,
        host: str,
        capacity: int,
        work_dir: Path,
        display: int | None = None,
        grid_port: int | None = None,
    ) -> None:
        self.settings = settings
        self.host = host
        self.capacity = capacity
        self.work_dir = Path(work_dir).resolve()
        self.config_path = self.work_dir / "grid.toml"
        self.grid_log = self.work_dir / "grid.log"
        self._fixed_display = display
        self._fixed_port = grid_port
        self.display: int | None = display
        self.grid_port: int | None = grid_port
        # Here, or through the browser agent (consumer.browser.agent.agent_client.control_for).
        self._control = control_for(settings, self.work_dir, uuid.uuid4().hex)
        self._grid_auth: GridCredentials | None = None  # new at every start of the Grid
        self._started = False
        self._lock = threading.RLock()
        self.grid_restarts = 0  # Grids started again in place after exiting while they started

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def tmp_dir(self) -> Path:
        """TMPDIR of the stack's processes (Chromium's profiles are made there)."""
        return self._control.tmp_dir

    @property
    def grid_url(self) -> str:
        if self.grid_port is None:
            raise StackError(f"browser stack of {self.host} is not started")
        return f"http://127.0.0.1:{self.grid_port}"

    def grid_open(
        self, path: str, method: str = "GET", timeout: float = STATUS_PROBE_TIMEOUT_S
    ) -> Any:
        """An HTTP request to the Grid's own API (``path`` from ``/``), with its credentials:
        the response, to be closed by the caller (urllib's errors are the caller's)."""
        request = urllib.request.Request(f"{self.grid_url}{path}", method=method)
        if self._grid_auth is not None:
            request.add_header("Authorization", self._grid_auth.authorization())
        return _DIRECT.open(request, timeout=timeout)

    @property
    def grid_pid(self) -> int | None:
        return self._control.grid_pid

    @property
    def xvfb_pid(self) -> int | None:
        return self._control.xvfb_pid

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
            try:
                self._control.prepare()
                width, height = self.settings.screen_width_px, self.settings.screen_height_px
                self.display = self._control.start_xvfb(self._fixed_display, width, height)
                self._start_grid_until_ready()
            except BaseException:
                self.stop()
                raise

    def revive_grid(self) -> bool:
        """Start the Grid again in place when its process has exited while Xvfb runs (killed
        from outside, a JVM crash): the stack's other pieces and directories stay. False when
        there is nothing to revive or the Grid would not come up."""
        with self._lock:
            grid, xvfb = self._control.running()
            if not self._started or grid or not xvfb:
                return False
            try:
                self._start_grid_until_ready(revive=True)
            except StackError as exc:
                log.warning(
                    "the Grid of %s did not come back: %s", self.host, first_line(exc, named=True)
                )
                return False
            return True

    def stop(self) -> StopReport:
        """End every process of the stack, verify none is left, empty the temp dirs."""
        with self._lock:
            started = time.monotonic()
            result = self._control.stop()
            self._started = False
            return StopReport(
                duration_s=time.monotonic() - started,
                killed=result.ended,
                sigkilled=result.sigkilled,
                leftover_pids=result.leftover_pids,
            )

    def restart(self) -> RestartReport:
        with self._lock:
            started = time.monotonic()
            before = self.memory_pss_bytes()
            report = self.stop()
            self.start()
            return RestartReport(
                duration_s=time.monotonic() - started,
                pss_before_bytes=before,
                pss_after_bytes=self.memory_pss_bytes(),
                killed=report.killed,
            )

    def __enter__(self) -> BrowserStack:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # -- state -------------------------------------------------------------------------

    def processes(self) -> list[psutil.Process]:
        """Live psutil processes of this stack (Grid, Xvfb, drivers, browsers)."""
        return self._control.processes()

    def memory_pss_bytes(self) -> int:
        return self._control.pss_bytes()

    def healthy(self) -> bool:
        return self.health() is StackHealth.UP

    def health(self) -> StackHealth:
        """UP; SLOW when its processes run but the Grid did not answer its status within
        STATUS_PROBE_TIMEOUT_S (a host short of CPU: more time would fix it); DOWN when a
        process exited, the Grid refuses the connection or says its node is not up. A Grid
        whose every slot holds a session says ``ready: false`` (no capacity for one more): that
        is a busy Grid, not a broken one, so health reads the node's availability instead."""
        with self._lock:
            if not self._started or not all(self._control.running()):
                return StackHealth.DOWN
            try:
                up = self._grid_answers(full_is_up=True)
                return StackHealth.UP if up else StackHealth.DOWN
            except TimeoutError:
                return StackHealth.SLOW

    # -- sessions ----------------------------------------------------------------------

    def chrome_options(self, launch: BrowserLaunch | None = None) -> ChromeOptions:
        return chrome_options(self.settings, self._control.browser_uid, launch)

    def new_driver(self, launch: BrowserLaunch | None = None) -> StackWebDriver:
        """A fresh session from the Grid (started as ``launch`` says, a persistent profile's
        browser, when given); any failure to get one is a StackError."""
        grid = GridSession(self.host, self.grid_url, self._grid_auth, self._control)
        started = time.monotonic()
        try:
            return open_session(self.settings, grid, launch)
        except StackError as exc:
            # The call outlasted its limit because this process was paused (start_deadline).
            if paused_past(session_wait_s(self.settings), started, time.monotonic()):
                raise SessionStartPaused(str(exc)) from exc
            raise

    def end_session(self, driver: Any, timeout_s: float = 5.0) -> int:
        """Kill one session's browser (a hung job's): its Chromium processes, found by the
        profile directory chromedriver reported, then the session itself. The session's own
        pending command fails at once, so the thread running it returns. Returns the number of
        processes killed; never raises."""
        profile_dir = session_profile_dir(driver)
        killed = self._control.end_browser(profile_dir, timeout_s) if profile_dir else 0
        quit_driver(driver)  # never raises; the Grid frees the slot and ends chromedriver
        return killed

    # -- internals ---------------------------------------------------------------------

    def _start_grid(self) -> None:
        self.grid_port = self._fixed_port if self._fixed_port is not None else free_port()
        self._grid_auth = GridCredentials.new()
        self._control.start_grid(
            GridConfig(
                host=self.host,
                port=self.grid_port,
                capacity=self.capacity,
                session_timeout_s=self.settings.grid_session_timeout_s,
                request_timeout_s=int(self.settings.session_create_timeout_s),
                auth=self._grid_auth,
                driver=self.settings.browser_driver,
            )
        )

    def _start_grid_until_ready(self, revive: bool = False) -> None:
        """Start the Grid and wait until it is ready; a Grid that exits meanwhile (killed,
        crashed) is started again, up to GRID_START_TRIES in all, instead of failing the
        stack for a back-off. A Grid that is merely slow is not: its deadline says so."""
        for tries_left in range(GRID_START_TRIES - 1, -1, -1):
            if revive or self._control.grid_pid is not None:
                self._end_dead_grid()
            revive = False
            self._start_grid()
            try:
                self._wait_ready()
                return
            except GridExited as exc:
                if not tries_left or not self._control.running()[1]:
                    raise
                self.grid_restarts += 1
                log.warning(
                    "the Grid of %s exited while it started (%s); starting it again (%d more)",
                    self.host,
                    first_line(exc, named=True),
                    tries_left,
                )

    def _end_dead_grid(self) -> None:
        self._control.end_grid()
        if self._fixed_port is None:
            self.grid_port = None  # a fresh port: the dead one's may linger in the kernel

    def _grid_ready(self) -> bool:
        try:
            return self._grid_answers()
        except TimeoutError:
            return False

    def _grid_answers(self, full_is_up: bool = False) -> bool:
        """Whether the Grid says it is ready (``full_is_up``: or that its nodes are up with every
        slot taken); TimeoutError when it says nothing in time."""
        try:
            with self.grid_open("/status") as resp:
                status = json.load(resp)["value"]
            return bool(status["ready"]) or (full_is_up and nodes_up(status["nodes"]))
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise exc.reason from None
            return False
        except TimeoutError:  # an OSError too: not to be taken for a refused connection
            raise
        except (OSError, ValueError, KeyError, TypeError):
            return False

    def _wait_ready(self) -> None:
        # Time the process was frozen or starved meanwhile does not count (start_deadline).
        deadline = RunningDeadline.after(self.settings.stack_start_timeout_s, time.monotonic())
        while deadline.left(time.monotonic()) > 0:
            if not self._control.running()[0]:
                raise GridExited(
                    f"Grid of {self.host} exited at start; log tail:\n{self._control.grid_failed()}"
                )
            if self._grid_ready():
                return
            before = time.monotonic()
            time.sleep(READY_POLL_S)
            deadline.slept(READY_POLL_S, before, time.monotonic())
        raise StackError(
            f"Grid of {self.host} not ready after {self.settings.stack_start_timeout_s:.0f} s; "
            f"log tail:\n{self._control.log_tail()}"
        )


def nodes_up(nodes: list[dict[str, Any]]) -> bool:
    """Whether a Grid's status lists nodes and every one of them is up (whatever its slots)."""
    return bool(nodes) and all(node.get("availability") == "UP" for node in nodes)
