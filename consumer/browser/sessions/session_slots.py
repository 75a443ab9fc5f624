"""A session pool's slot: at most one browser session, its user context and tab for the next
job, and what is done to them between jobs (the pool, consumer.browser.sessions.session_pool,
decides when, under its lock; a slot is worked on by one thread at a time, the one that set it
LEASED or BUSY).

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
"""

from __future__ import annotations

import contextlib
import logging
from enum import Enum
from typing import Any

from scrapefleet.common.browser.isolation import Isolation
from scrapefleet.common.error_lines import first_line
from scrapefleet.common.errors import StackError
from scrapefleet.consumer.browser.sessions.context_clearing import clear_in_place
from scrapefleet.consumer.browser.sessions.session_operations import (
    JobContext,
    close_context,
    open_context,
)

log = logging.getLogger(__name__)


class SlotState(Enum):
    IDLE = "idle"  # free to lease: empty, warm, or warm with the next job's context open
    LEASED = "leased"  # a job has it
    BUSY = "busy"  # the pool works on it: closing a context, opening one, replacing a session


class Slot:
    def __init__(self, index: int) -> None:
        self.index = index
        self.state = SlotState.IDLE
        self.driver: Any | None = None
        self.context: JobContext | None = None
        self.own_session = False  # an isolation="session" lease's browser: quit after the job
        self.fresh = False  # its context has had no job yet (what a "context" job needs)
        self.job_isolation: Isolation | None = None  # the level the slot's last job ran at
        # Its context holds what "shared" jobs left: a job of another level gets a fresh one.
        self.shared = False
        self.last_used = 0.0
        self.jobs_on_driver = 0  # jobs its session has run since it started
        # Its tab's history length after the last clearing in place (None: not cleared yet),
        # which tells the next clearing whether the job left more than its one entry.
        self.history_length: int | None = None

    def open_context(self) -> None:
        assert self.driver is not None
        self.context = open_context(self.driver)
        self.fresh = True
        self.shared = False
        self.history_length = None

    @property
    def ready(self) -> bool:
        return self.driver is not None and self.context is not None

    def answers(self) -> bool:
        """One round trip that reaches the browser: it lives and the prepared tab (the
        session's current window since it was opened) is still there. Not
        current_window_handle: chromedriver answers that from its own state, for a browser
        SIGSTOPped and for one just killed that it has not yet noticed (seen here)."""
        assert self.driver is not None and self.context is not None
        try:
            return self.context.tab in self.driver.window_handles
        except Exception:
            return False

    def reuse_for(self, isolation: Isolation) -> bool:
        """Make the warm session ready for a job at ``isolation`` (not "session"): True once it
        is, False when it must be replaced (no session, or one that does not answer). A
        StackError (the stack is stopping) is raised."""
        self.job_isolation = isolation
        if self.ready and self.answers():
            if (isolation == "context" and not self.fresh) or (
                self.shared and isolation != "shared"
            ):
                assert self.driver is not None and self.context is not None
                with contextlib.suppress(Exception):  # a failed removal: the reopen says why
                    close_context(self.driver, self.context)
                self.context = None
            else:
                self.fresh = False
                return True
        if self.driver is not None and self.context is None:
            try:
                self.open_context()
                self.fresh = False
                return True
            except StackError:
                raise
            except Exception as exc:
                log.info(
                    "session slot %d: no new context (%s); replacing it",
                    self.index,
                    first_line(exc, named=True),
                )
        return False

    def ready_for_next_job(self, open_next: bool) -> None:
        """After a job: its "shared" context kept as it is, its "cleared" context cleared in
        place, else removed (and, with ``open_next``, the next job's opened now). Raises what
        the session raised: it is lost."""
        assert self.driver is not None
        # A classic command fails at once on a dead session, where a BiDi command would wait
        # out BIDI_COMMAND_TIMEOUT_S (Selenium does not notice the closed websocket).
        # window_handles answers even if the job closed its own window.
        handles = self.driver.window_handles
        context = self.context
        if context is not None and self.job_isolation == "shared":
            # Nothing cleared: the tab stays on the job's page, for the next job to navigate
            # from. Only a job that closed its tab or left another window gets a fresh context.
            if frozenset(handles) == context.windows:
                self.driver.switch_to.window(context.tab)
                self.shared = True
                return
            log.debug("session slot %d: a fresh context: a shared job's windows", self.index)
        if context is not None and self.job_isolation == "cleared":
            cleared = clear_in_place(self.driver, context, handles, self.history_length)
            self.history_length = cleared.history_length
            if cleared.why is None:
                return
            log.debug("session slot %d: a fresh context, not cleared: %s", self.index, cleared.why)
        if context is not None:
            self.context = None
            close_context(self.driver, context)
        if open_next:
            self.open_context()


def pick_slot(slots: list[Slot], isolation: Isolation, leases_ahead: int) -> Slot | None:
    """The idle slot a lease at ``isolation`` takes, or None: wait for one being prepared.
    ``leases_ahead``: leases already waiting for a prepared slot."""
    idle = [slot for slot in slots if slot.state is SlotState.IDLE]
    if isolation == "session":
        # An empty slot first: a warm session is worth keeping for the jobs that follow.
        return min(idle, key=lambda s: (s.driver is not None, s.ready), default=None)
    prepared = [slot for slot in idle if slot.ready]
    if prepared:
        # A "context" job takes a fresh context first; a "cleared" job a cleared one first,
        # keeping the fresh ones for the jobs that need them; a "shared" job a shared one
        # first, and every other job one that is not (a shared context is replaced for it).
        shared = isolation == "shared"
        return min(
            prepared, key=lambda s: (s.shared != shared, s.fresh != (isolation == "context"))
        )
    # A slot being prepared is ready in ~0.5 s; a new browser takes ~2.5 s. Start one only
    # when every slot being prepared is already promised to a lease waiting before us.
    busy = sum(1 for slot in slots if slot.state is SlotState.BUSY)
    if busy > leases_ahead:
        return None
    return min(idle, key=lambda s: s.driver is None, default=None)
