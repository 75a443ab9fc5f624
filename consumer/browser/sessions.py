"""Warm WebDriver sessions, one per slot, each with a user context and tab for the next job.

A job leases a driver from the pool, at its isolation level (common.browser.isolation):

- ``isolation="cleared"`` (the default): a warm session whose current window is the slot's
  tab, in the slot's user context; after the job the pool clears what the job stored, in
  place (consumer.browser.context_clearing), or, when it cannot vouch for that, replaces the
  context;
- ``isolation="context"``: a warm session whose current window is a tab in a user context
  opened for this job alone. A user context is a Chromium browser context of its own (cookies,
  localStorage, IndexedDB, HTTP cache, service workers); when the job returns, the pool
  removes it with every tab the job opened, and opens the next job's context;
- ``isolation="session"``: a browser session started for this job and quit after it (a job that
  needs a browser of its own: a proxy, a clean profile).

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

Measured here (medians, one session, local pages): a user context 25 ms, its tab (a new
window) ~360 ms, the switch ~55 ms, removing the context with its tabs ~150 ms; the first page
in a fresh context ~0.2 s against ~0.12 s in a reused one; a new session 1.7-2.8 s. So the pool
removes a job's context and opens the next one in a background thread as soon as the job
returns, and a lease only checks (one round trip) that the prepared context still answers: one
job after another with 0.3 s between them (a consumer's claim), 0.23 s from lease to return
instead of 0.47 s. When the host's CPU is saturated it changes nothing (the work is the same):
a fresh context costs the browser ~0.4-0.6 s of CPU (mostly the new window and its renderer;
a reused tab ~0.13 s), which bounds warm contexts at ~100-120 jobs/min on two cores, whatever
the number of sessions. Opening the next context during the job, in the same session, was
slower still (89 against 103 jobs/min one after another) and is not done.

Slots and the cap: the pool has ``size`` slots and each holds at most one browser session at a
time, so there are never more than ``size`` sessions, whatever the mix of isolations (a
``"session"`` lease on a warm slot quits that slot's session before starting its own). Sessions
start lazily, on the first lease that needs one (or when ``warm`` asks): a pool only ever
holds as many as the most jobs it ran at once. A context lease with no prepared slot free
waits for a slot being prepared rather than starting another browser (~0.5 s against ~2.5 s).

A dead session (quit behind our back, Chromium or chromedriver killed, reaped by the Grid) is
found when a job returns or when it is leased (a classic command fails at once on it),
and replaced: in the background after a job, in the lease itself otherwise, so that the next
job runs. The job whose session died gets the error from its own command, translated by the
action (consumer.browser.selenium_actions.translated_errors -> StackError).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from scrapefleet.common.browser.isolation import (
    DEFAULT_ISOLATION,
    ISOLATION_VALUES,
    Isolation,
    validate_isolation,
)
from scrapefleet.common.errors import StackError
from scrapefleet.consumer.browser.context_clearing import clear_in_place
from scrapefleet.consumer.browser.network_log import forget as forget_network_log

__all__ = [
    "DEFAULT_ISOLATION",
    "ISOLATION_VALUES",
    "Isolation",
    "JobContext",
    "SessionPermits",
    "SessionPool",
    "quit_driver",
    "validate_isolation",
]

log = logging.getLogger(__name__)

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
    (consumer.browser.job_setup)."""

    user_data_dir: Path
    proxy: str | None = None


@dataclass(frozen=True)
class JobContext:
    user_context: str
    tab: str  # its tab's browsing context id, which is also its classic window handle
    # The session's windows once it was open (the session's first window is one of them): a
    # job that leaves another one behind gets no in-place clearing.
    windows: frozenset[str] = frozenset()


class SlotState(Enum):
    IDLE = "idle"  # free to lease: empty, warm, or warm with the next job's context open
    LEASED = "leased"  # a job has it
    BUSY = "busy"  # the pool works on it: closing a context, opening one, replacing a session


class _Slot:
    def __init__(self, index: int) -> None:
        self.index = index
        self.state = SlotState.IDLE
        self.driver: Any | None = None
        self.context: JobContext | None = None
        self.own_session = False  # an isolation="session" lease's browser: quit after the job
        self.fresh = False  # its context has had no job yet (what a "context" job needs)
        self.job_isolation: Isolation | None = None  # the level the slot's last job ran at
        self.last_used = 0.0
        self.jobs_on_driver = 0  # jobs its session has run since it started
        # Its tab's history length after the last clearing in place (None: not cleared yet),
        # which tells the next clearing whether the job left more than its one entry.
        self.history_length: int | None = None

    def open_context(self) -> None:
        assert self.driver is not None
        self.context = open_context(self.driver)
        self.fresh = True
        self.history_length = None

    @property
    def ready(self) -> bool:
        return self.driver is not None and self.context is not None


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


def first_line(exc: BaseException) -> str:
    """An error in one line for the log (chromedriver appends its native stack trace)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


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


RECLAIM_AGAIN_S = 2.0


class SessionPermits:
    """At most ``limit`` browser sessions across the pools that share these permits (a host's
    running stack and the next or retiring one). An idle session never holds up a lease: a
    lease that finds every permit held asks another pool to quit one of its idle sessions and
    takes the permit that frees."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held = 0
        self._reclaiming = 0  # idle sessions asked to quit, their permits not yet back
        self._asked_at = 0.0  # when a pool was last asked to give a session back
        self._interrupted = False
        self._cond = threading.Condition()
        self._pools: list[SessionPool] = []

    @property
    def held(self) -> int:
        with self._cond:
            return self._held

    def join(self, pool: SessionPool) -> None:
        with self._cond:
            self._pools.append(pool)

    def leave(self, pool: SessionPool) -> None:
        with self._cond:
            self._pools = [p for p in self._pools if p is not pool]

    def acquire(self, pool: SessionPool, timeout_s: float, reclaim: bool = True) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            with self._cond:
                if self._interrupted:
                    return False
                if self._held < self.limit:
                    self._held += 1
                    return True
                others = [p for p in self._pools if p is not pool] if reclaim else []
                # One ask at a time; asked again when the last has not freed one in a while
                # (its pool was closed, or the session it owed was taken by its own lease).
                stale = time.monotonic() - self._asked_at > RECLAIM_AGAIN_S
                ask = bool(others) and (not self._reclaiming or stale)
                if ask:
                    self._asked_at = time.monotonic()
            # Pools are asked outside our lock: a pool calls release() under its own.
            if ask and any(other.give_back() for other in others):
                with self._cond:
                    self._reclaiming += 1
            with self._cond:
                remaining = deadline - time.monotonic()
                if self._held < self.limit:
                    continue
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.5))

    @property
    def interrupted(self) -> bool:
        with self._cond:
            return self._interrupted

    def interrupt(self) -> None:
        """Every acquire, waiting or to come, fails at once (the host's stacks are stopping)."""
        with self._cond:
            self._interrupted = True
            self._cond.notify_all()

    def release(self) -> None:
        with self._cond:
            self._held = max(self._held - 1, 0)
            self._reclaiming = max(self._reclaiming - 1, 0)
            self._cond.notify_all()


class SessionPool:
    """``size`` slots of warm sessions; thread-safe; at most ``size`` leases at once.

    ``make_driver`` returns a new session with BiDi enabled (for ``"context"`` leases) and
    raises StackError when the stack cannot give one. ``prepare_ahead`` opens the next job's
    context as soon as a job returns (off the job's path) instead of in the next lease.
    ``keepalive_s`` touches sessions idle that long, so that the Grid's session-timeout does
    not reap them (give it well under ``grid_session_timeout_s``); None: never.
    ``session_permits``, shared by pools, caps their sessions together (a host's old and new
    stack during an overlapped restart): a session is started only with a permit, waited for
    up to ``permit_wait_s`` by a lease (taken from another pool's idle session if need be),
    never by ``warm``.
    """

    def __init__(
        self,
        make_driver: DriverMaker,
        size: int,
        *,
        prepare_ahead: bool = True,
        keepalive_s: float | None = None,
        session_permits: SessionPermits | None = None,
        permit_wait_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if size < 1:
            raise ValueError(f"a session pool needs at least one slot (size={size})")
        self.size = size
        self._permits = session_permits
        self._permit_wait_s = permit_wait_s
        if session_permits is not None:
            session_permits.join(self)
        self._make_driver = make_driver
        self._prepare_ahead = prepare_ahead
        self._clock = clock
        self._slots = [_Slot(i) for i in range(size)]
        self._cond = threading.Condition()
        self._closed = False
        self._waiting_for_prepared = 0
        self._owed = 0  # sessions to give back to the permits as soon as a job returns one
        self._background = ThreadPoolExecutor(max_workers=size, thread_name_prefix="session-pool")
        self._stop = threading.Event()
        self.replaced = 0  # dead sessions found and replaced, for logs and tests
        self.retired = 0  # sessions quit after their job budget, for logs and tests
        self._retire_after_jobs = 0
        self._peak_leased = 0  # the most leases at once: how many sessions the jobs needed
        self._keepalive: threading.Thread | None = None
        if keepalive_s is not None:
            self._keepalive = threading.Thread(
                target=self._keep_alive, args=(keepalive_s,), name="session-keepalive",
                daemon=True,
            )  # fmt: skip
            self._keepalive.start()

    # -- what a job thread calls --------------------------------------------------------------

    @contextmanager
    def lease(
        self, isolation: Isolation = DEFAULT_ISOLATION, *, launch: BrowserLaunch | None = None
    ) -> Iterator[Any]:
        """A driver for one job; StackError when no session can be had (the host's fault).
        ``launch`` (a persistent profile's): a browser of its own started with it, quit after
        the job, like ``isolation="session"``."""
        isolation = "session" if launch is not None else validate_isolation(isolation)
        slot = self._take(isolation)
        try:
            driver = self._ready_for_job(slot, isolation, launch)
        except BaseException:
            self._return_idle(slot)
            raise
        try:
            yield driver
        finally:
            self._after_job(slot)

    # -- what the owner reads and calls -------------------------------------------------------

    @property
    def sessions_alive(self) -> int:
        """Sessions the pool holds now (leased, idle or being prepared)."""
        with self._cond:
            return sum(1 for slot in self._slots if slot.driver is not None)

    @property
    def peak_leased(self) -> int:
        """The most leases this pool has given at once: as many sessions as its jobs needed."""
        with self._cond:
            return self._peak_leased

    @property
    def prepared(self) -> int:
        """Idle slots with a context open for the next job."""
        with self._cond:
            return sum(1 for slot in self._slots if slot.state is SlotState.IDLE and slot.ready)

    @property
    def idle_sessions(self) -> int:
        with self._cond:
            return sum(1 for s in self._slots if s.state is SlotState.IDLE and s.driver is not None)

    @property
    def leased(self) -> int:
        with self._cond:
            return sum(1 for slot in self._slots if slot.state is SlotState.LEASED)

    def retire_sessions_after(self, jobs: int) -> None:
        """Quit a session once it has run ``jobs`` jobs and start its successor off the jobs'
        path (0: never). What leaks is the browser; its Grid and display stay up."""
        if jobs < 0:
            raise ValueError(f"a session's job budget cannot be negative ({jobs})")
        self._retire_after_jobs = jobs

    def session_ids(self) -> list[str]:
        with self._cond:
            return [str(s.driver.session_id) for s in self._slots if s.driver is not None]

    def warm(self, count: int) -> int:
        """Start sessions, each with a context open, in up to ``count`` empty slots, in the
        background (a new stack's first jobs then find them ready); returns how many start."""
        with self._cond:
            if self._closed:
                return 0
            empty = [s for s in self._slots if s.state is SlotState.IDLE and s.driver is None]
            chosen = empty[: max(count, 0)]
            for slot in chosen:
                slot.state = SlotState.BUSY
        for slot in chosen:
            try:
                self._background.submit(self._warm_in_background, slot)
            except RuntimeError:  # closed meanwhile
                self._return_idle(slot)
        return len(chosen)

    def give_back(self) -> bool:
        """Free one permit for another pool: quit an idle session now, else the next session a
        job returns. False if this pool holds no session at all."""
        if self.release_idle(keep=self.idle_sessions - 1):
            return True
        with self._cond:
            if self._closed or not any(s.driver is not None for s in self._slots):
                return False
            self._owed += 1
            return True

    def release_idle(self, keep: int) -> int:
        """Quit idle sessions beyond ``keep`` (prepared ones kept first), so that their permits
        go to another pool; leases go on. Returns how many are quit."""
        with self._cond:
            idle = [s for s in self._slots if s.state is SlotState.IDLE and s.driver is not None]
            idle.sort(key=lambda s: not s.ready)
            extra = idle[max(keep, 0) :]
            for slot in extra:
                slot.state = SlotState.BUSY
        for slot in extra:
            try:
                self._background.submit(self._retire, slot)
            except RuntimeError:  # closed meanwhile: close() ends them
                self._return_idle(slot)
        return len(extra)

    def close(self, wait: bool = True) -> None:
        """Quit every idle session now; a leased one is quit when its job returns. Leases
        asked for after this raise StackError. ``wait=False``: return without waiting for the
        sessions being quit or started (their stack is about to be stopped anyway)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._stop.set()
            idle = [slot for slot in self._slots if slot.state is SlotState.IDLE]
            for slot in idle:
                slot.state = SlotState.BUSY
            self._cond.notify_all()
        for slot in idle:
            self._background.submit(self._retire, slot)
        self._background.shutdown(wait=wait)
        if self._keepalive is not None and wait:
            self._keepalive.join(timeout=BIDI_COMMAND_TIMEOUT_S)
        if self._permits is not None:  # leased sessions still give their permits back
            self._permits.leave(self)

    def __enter__(self) -> SessionPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- choosing a slot ----------------------------------------------------------------------

    def _take(self, isolation: Isolation) -> _Slot:
        waiting = False
        with self._cond:
            try:
                while True:
                    if self._closed:
                        raise StackError("the browser session pool is closed")
                    slot = self._pick(isolation, waiting)
                    if slot is not None:
                        slot.state = SlotState.LEASED
                        leased = sum(1 for s in self._slots if s.state is SlotState.LEASED)
                        self._peak_leased = max(self._peak_leased, leased)
                        return slot
                    if isolation != "session" and not waiting:
                        waiting = True
                        self._waiting_for_prepared += 1
                    self._cond.wait()
            finally:
                if waiting:
                    self._waiting_for_prepared -= 1

    def _pick(self, isolation: Isolation, waiting: bool) -> _Slot | None:
        idle = [slot for slot in self._slots if slot.state is SlotState.IDLE]
        if isolation == "session":
            # An empty slot first: a warm session is worth keeping for the jobs that follow.
            return min(idle, key=lambda s: (s.driver is not None, s.ready), default=None)
        prepared = [slot for slot in idle if slot.ready]
        if prepared:
            # A "context" job takes a fresh context first; a "cleared" job a cleared one first,
            # keeping the fresh ones for the jobs that need them.
            return min(prepared, key=lambda s: s.fresh != (isolation == "context"))
        # A slot being prepared is ready in ~0.5 s; a new browser takes ~2.5 s. Start one only
        # when every slot being prepared is already promised to a lease waiting before us.
        busy = sum(1 for slot in self._slots if slot.state is SlotState.BUSY)
        ahead = self._waiting_for_prepared - (1 if waiting else 0)
        if busy > ahead:
            return None
        return min(idle, key=lambda s: s.driver is None, default=None)

    def _return_idle(self, slot: _Slot) -> None:
        with self._cond:
            slot.state = SlotState.IDLE
            self._cond.notify_all()

    # -- a job's driver -----------------------------------------------------------------------

    def _ready_for_job(
        self, slot: _Slot, isolation: Isolation, launch: BrowserLaunch | None = None
    ) -> Any:
        driver = self._driver_for_job(slot, isolation, launch)
        # The job's context rides on its driver, so that the job's browser options and network
        # log need not ask the browser which tab and user context they are in (two round trips).
        with contextlib.suppress(AttributeError):  # a driver that takes no attribute
            driver.job_context = None if slot.own_session else slot.context
        return driver

    def _driver_for_job(
        self, slot: _Slot, isolation: Isolation, launch: BrowserLaunch | None = None
    ) -> Any:
        if isolation == "session":
            self._discard(slot)  # the cap: the slot's warm session goes before a new one comes
            slot.driver = self._new_driver(launch=launch)
            slot.own_session = True
            return slot.driver
        slot.job_isolation = isolation
        if slot.ready and self._answers(slot):
            if isolation == "context" and not slot.fresh:
                assert slot.driver is not None and slot.context is not None
                with contextlib.suppress(Exception):  # a failed removal: the reopen says why
                    close_context(slot.driver, slot.context)
                slot.context = None
            else:
                slot.fresh = False
                return slot.driver
        if slot.driver is not None and slot.context is None:
            try:
                slot.open_context()
                slot.fresh = False
                return slot.driver
            except StackError:
                raise
            except Exception as exc:
                log.info(
                    "session slot %d: no new context (%s); replacing it",
                    slot.index,
                    first_line(exc),
                )
        if slot.driver is not None:
            log.info("session slot %d: the session does not answer; replacing it", slot.index)
            self._discard(slot)
            self._count_replaced()
        self._warm(slot)
        return slot.driver

    def _answers(self, slot: _Slot) -> bool:
        """One round trip that reaches the browser: it lives and the prepared tab (the
        session's current window since it was opened) is still there. Not
        current_window_handle: chromedriver answers that from its own state, for a browser
        SIGSTOPped and for one just killed that it has not yet noticed (seen here)."""
        assert slot.driver is not None and slot.context is not None
        try:
            return slot.context.tab in slot.driver.window_handles
        except Exception:
            return False

    def _new_driver(self, wait: bool = True, launch: BrowserLaunch | None = None) -> Any:
        timeout = self._permit_wait_s if wait else 0
        if self._permits is not None and not self._permits.acquire(self, timeout, reclaim=wait):
            if self._permits.interrupted:  # not a wait that ran out: say what happened
                raise StackError("no browser session: the host's browser stacks are stopping")
            # A wait that ran out: the host is busy, not broken (the runner tells slowness
            # from faults by a timeout among the causes).
            raise StackError(
                "no browser session: the host's sessions are all in use"
                + (f" after {self._permit_wait_s:.0f} s" if wait else "")
            ) from TimeoutError("waiting for a session permit")
        try:
            driver = self._make_driver() if launch is None else self._make_driver(launch=launch)
        except StackError:
            self._release_permit()
            raise
        except Exception as exc:
            self._release_permit()
            raise StackError(f"no browser session: {type(exc).__name__}: {exc}") from exc
        tune_bidi(driver)
        return driver

    def _release_permit(self) -> None:
        if self._permits is not None:
            self._permits.release()

    def _warm(self, slot: _Slot, wait: bool = True) -> None:
        """A new session in an empty slot, with a context open for the next job."""
        slot.driver = self._new_driver(wait)
        try:
            slot.open_context()
        except StackError:
            self._discard(slot)
            raise
        except Exception as exc:
            self._discard(slot)
            raise StackError(f"no browsing context in a new session: {exc}") from exc

    def _count_replaced(self) -> None:
        with self._cond:
            self.replaced += 1

    def _discard(self, slot: _Slot) -> None:
        driver, slot.driver, slot.context, slot.own_session = slot.driver, None, None, False
        slot.fresh = False
        slot.jobs_on_driver = 0
        if driver is not None:
            quit_driver(driver)
            self._release_permit()

    # -- after a job --------------------------------------------------------------------------

    def _after_job(self, slot: _Slot) -> None:
        with self._cond:
            slot.state = SlotState.BUSY
            slot.last_used = self._clock()
            closed = self._closed
            owed = self._owed > 0 and slot.driver is not None and not closed
            if owed:
                self._owed -= 1
        # Owed: this session's permit goes to another pool that waits for one. Either way off
        # the job's thread: a quit lasts until the browser has exited (up to seconds).
        work = self._retire if owed or closed else self._recycle
        try:
            self._background.submit(work, slot)
        except RuntimeError:  # closed meanwhile: no more background work
            self._retire(slot)

    def _recycle(self, slot: _Slot) -> None:
        """Close the job's context and open the next job's; replace a session that died."""
        try:
            if slot.own_session:
                self._discard(slot)
                return
            if slot.driver is None:
                return
            slot.jobs_on_driver += 1
            if 0 < self._retire_after_jobs <= slot.jobs_on_driver:
                self._renew(slot)
                return
            try:
                # A classic command fails at once on a dead session, where a BiDi command
                # would wait out BIDI_COMMAND_TIMEOUT_S (Selenium does not notice the closed
                # websocket). window_handles answers even if the job closed its own window.
                handles = slot.driver.window_handles
                context = slot.context
                if context is not None and slot.job_isolation == "cleared":
                    cleared = clear_in_place(slot.driver, context, handles, slot.history_length)
                    slot.history_length = cleared.history_length
                    if cleared.why is None:
                        return
                    log.debug(
                        "session slot %d: a fresh context, not cleared: %s", slot.index, cleared.why
                    )
                if context is not None:
                    slot.context = None
                    close_context(slot.driver, context)
                if self._prepare_ahead and not self._closed:
                    slot.open_context()
            except Exception as exc:
                log.info(
                    "session slot %d: lost after a job (%s); replacing it",
                    slot.index,
                    first_line(exc),
                )
                self._discard(slot)
                self._count_replaced()
                self._warm_quietly(slot)
        finally:
            self._settle(slot)

    def _renew(self, slot: _Slot) -> None:
        """The slot's session ran its budget: quit it, and start the next one now unless jobs
        start their own (the pool's sessions stay as many as the jobs used)."""
        log.debug("session slot %d: retired after %d jobs", slot.index, slot.jobs_on_driver)
        self._discard(slot)
        with self._cond:
            self.retired += 1
        self._warm_quietly(slot)

    def _warm_in_background(self, slot: _Slot) -> None:
        try:
            if not self._closed:
                self._warm(slot, wait=False)  # no permit free: the lease will start it
        except Exception as exc:
            log.info("session slot %d: no session to warm: %s", slot.index, first_line(exc))
        finally:
            self._settle(slot)

    def _warm_quietly(self, slot: _Slot) -> None:
        if not self._prepare_ahead or self._closed:
            return  # the next lease starts one
        try:
            self._warm(slot, wait=False)
        except Exception as exc:  # the stack is down: the next lease says so, as StackError
            log.warning("session slot %d: no replacement session: %s", slot.index, first_line(exc))

    def _settle(self, slot: _Slot) -> None:
        """Back to idle; or quit, when the pool closed meanwhile or owes a session."""
        with self._cond:
            owed = self._owed > 0 and slot.driver is not None
            if owed:
                self._owed -= 1
            if not self._closed and not owed:
                slot.state = SlotState.IDLE
                self._cond.notify_all()
                return
        self._retire(slot)

    def _retire(self, slot: _Slot) -> None:
        self._discard(slot)
        self._return_idle(slot)

    # -- idle sessions ------------------------------------------------------------------------

    def _keep_alive(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            due = self._clock() - every_s
            with self._cond:
                stale = [
                    slot
                    for slot in self._slots
                    if slot.state is SlotState.IDLE
                    and slot.driver is not None
                    and slot.last_used <= due
                ]
                for slot in stale:
                    slot.state = SlotState.BUSY
            for slot in stale:
                try:
                    self._background.submit(self._touch, slot)
                except RuntimeError:  # closing
                    self._return_idle(slot)

    def _touch(self, slot: _Slot) -> None:
        """One command, which the Grid counts as use; a session that does not answer is
        replaced now rather than in a job's lease."""
        try:
            assert slot.driver is not None
            slot.driver.current_window_handle  # noqa: B018  (the round trip is the point)
            slot.last_used = self._clock()
        except Exception as exc:
            log.info(
                "session slot %d: idle session lost (%s); replacing it", slot.index, first_line(exc)
            )
            self._discard(slot)
            self._count_replaced()
            self._warm_quietly(slot)
        finally:
            self._settle(slot)
