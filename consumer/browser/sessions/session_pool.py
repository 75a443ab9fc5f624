"""Warm WebDriver sessions, one per slot, each with a user context and tab for the next job.

A job leases a driver from the pool, at its isolation level (common.browser.isolation):

- ``isolation="cleared"`` (the default): a warm session whose current window is the slot's
  tab, in the slot's user context; after the job the pool clears what the job stored, in
  place (consumer.browser.sessions.context_clearing), or, when it cannot vouch for that, replaces
  the context;
- ``isolation="context"``: a warm session whose current window is a tab in a user context
  opened for this job alone. A user context is a Chromium browser context of its own (cookies,
  localStorage, IndexedDB, HTTP cache, service workers); when the job returns, the pool
  removes it with every tab the job opened, and opens the next job's context;
- ``isolation="session"``: a browser session started for this job and quit after it (a job that
  needs a browser of its own: a proxy, a clean profile).

How a session is driven, and why BiDi user contexts: consumer.browser.sessions.session_operations.

A dead session (quit behind our back, Chromium or chromedriver killed, reaped by the Grid) is
found when a job returns or when it is leased (a classic command fails at once on it),
and replaced: in the background after a job, in the lease itself otherwise, so that the next
job runs. The job whose session died gets the error from its own command, translated by the
action (consumer.browser.actions.selenium_actions.translated_errors -> StackError).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from scrapefleet.common import tracing
from scrapefleet.common.browser.isolation import (
    DEFAULT_ISOLATION,
    Isolation,
    validate_isolation,
)
from scrapefleet.common.error_lines import first_line
from scrapefleet.common.errors import StackError
from scrapefleet.common.runtime.side_threads import SideThreads
from scrapefleet.consumer.browser.sessions.pool_counts import SessionPoolViews
from scrapefleet.consumer.browser.sessions.session_operations import (
    BIDI_COMMAND_TIMEOUT_S,
    BrowserLaunch,
    DriverMaker,
    quit_driver,
    tune_bidi,
)
from scrapefleet.consumer.browser.sessions.session_permits import SessionPermits
from scrapefleet.consumer.browser.sessions.session_slots import Slot, SlotState, pick_slot

log = logging.getLogger(__name__)


class SessionPool(SessionPoolViews):
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
        threads: SideThreads | None = None,
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
        self._slots = [Slot(i) for i in range(size)]
        self._cond = threading.Condition()
        self._closed = False
        self._waiting_for_prepared = 0
        self._owed = 0  # sessions to give back to the permits as soon as a job returns one
        # Its threads are watched (common.runtime.side_threads): the consumer's, given.
        threads = threads or SideThreads()
        self._background = threads.executor("session-pool", size)
        self._stop = threading.Event()
        self.replaced = 0  # dead sessions found and replaced, for logs and tests
        self.retired = 0  # sessions quit after their job budget, for logs and tests
        self._retire_after_jobs = 0
        self._peak_leased = 0  # the most leases at once: how many sessions the jobs needed
        self._keepalive: threading.Thread | None = None
        if keepalive_s is not None:
            run = functools.partial(self._keep_alive, keepalive_s)
            self._keepalive = threads.start("session-keepalive", run, lasting=False)

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

    def retire_sessions_after(self, jobs: int) -> None:
        """Quit a session once it has run ``jobs`` jobs and start its successor off the jobs'
        path (0: never). What leaks is the browser; its Grid and display stay up."""
        if jobs < 0:
            raise ValueError(f"a session's job budget cannot be negative ({jobs})")
        self._retire_after_jobs = jobs

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

    def _take(self, isolation: Isolation) -> Slot:
        waiting = False
        with self._cond:
            try:
                while True:
                    if self._closed:
                        raise StackError("the browser session pool is closed")
                    ahead = self._waiting_for_prepared - (1 if waiting else 0)
                    slot = pick_slot(self._slots, isolation, ahead)
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

    def _return_idle(self, slot: Slot) -> None:
        with self._cond:
            slot.state = SlotState.IDLE
            self._cond.notify_all()

    # -- a job's driver -----------------------------------------------------------------------

    def _ready_for_job(
        self, slot: Slot, isolation: Isolation, launch: BrowserLaunch | None = None
    ) -> Any:
        driver = self._driver_for_job(slot, isolation, launch)
        # The job's context rides on its driver, so that the job's browser options and network
        # log need not ask the browser which tab and user context they are in (two round trips).
        with contextlib.suppress(AttributeError):  # a driver that takes no attribute
            driver.job_context = None if slot.own_session else slot.context
        return driver

    def _driver_for_job(
        self, slot: Slot, isolation: Isolation, launch: BrowserLaunch | None = None
    ) -> Any:
        if isolation == "session":
            self._discard(slot)  # the cap: the slot's warm session goes before a new one comes
            slot.driver = self._new_driver(launch=launch)
            slot.own_session = True
            tracing.note(session="new")
            return slot.driver
        if slot.reuse_for(isolation):
            tracing.note(session="reused")
            return slot.driver
        tracing.note(session="new" if slot.driver is None else "replaced")
        if slot.driver is not None:
            log.info("session slot %d: the session does not answer; replacing it", slot.index)
            self._discard(slot)
            self._count_replaced()
        self._warm(slot)
        return slot.driver

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

    def _warm(self, slot: Slot, wait: bool = True) -> None:
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

    def _discard(self, slot: Slot) -> None:
        driver, slot.driver, slot.context, slot.own_session = slot.driver, None, None, False
        slot.fresh = False
        slot.jobs_on_driver = 0
        if driver is not None:
            quit_driver(driver)
            self._release_permit()

    # -- after a job --------------------------------------------------------------------------

    def _after_job(self, slot: Slot) -> None:
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

    def _recycle(self, slot: Slot) -> None:
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
                slot.ready_for_next_job(open_next=self._prepare_ahead and not self._closed)
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

    def _renew(self, slot: Slot) -> None:
        """The slot's session ran its budget: quit it, and start the next one now unless jobs
        start their own (the pool's sessions stay as many as the jobs used)."""
        log.debug("session slot %d: retired after %d jobs", slot.index, slot.jobs_on_driver)
        self._discard(slot)
        with self._cond:
            self.retired += 1
        self._warm_quietly(slot)

    def _warm_in_background(self, slot: Slot) -> None:
        try:
            if not self._closed:
                self._warm(slot, wait=False)  # no permit free: the lease will start it
        except Exception as exc:
            log.info("session slot %d: no session to warm: %s", slot.index, first_line(exc))
        finally:
            self._settle(slot)

    def _warm_quietly(self, slot: Slot) -> None:
        if not self._prepare_ahead or self._closed:
            return  # the next lease starts one
        try:
            self._warm(slot, wait=False)
        except Exception as exc:  # the stack is down: the next lease says so, as StackError
            log.warning("session slot %d: no replacement session: %s", slot.index, first_line(exc))

    def _settle(self, slot: Slot) -> None:
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

    def _retire(self, slot: Slot) -> None:
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

    def _touch(self, slot: Slot) -> None:
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
