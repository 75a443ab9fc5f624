"""The browser stacks a host holds now, and which job counts on which of them.

Apart from consumer.browser.supervisor.stack_supervisor because many threads read these and each
field has one kind of writer, which this module's methods name:

- the stacks and their pools (the running one, a next one started beside it, those an
  overlapped restart retired) are replaced by the supervisor's own thread only, ``stack-<host>``
  (the methods under "the owner's"); the helpers that start and stop stacks
  (consumer.browser.supervisor.overlap_threads) post what they did to that thread instead of
  changing them;
- which pool a job counts on, and its live driver, are written by the job threads as they lease
  and return, and by the main loop's claims;
- the status document, the metrics endpoint and the supervisor's ticks only read (the views).

All of it is under one lock, held for a few dictionary and list operations at a time, never
across a start, a stop or a lease.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from scrapefleet.consumer.browser.sessions.session_pool import SessionPool
from scrapefleet.consumer.browser.stack.browser_stack import BrowserStack

Held = tuple[BrowserStack, SessionPool]  # a stack and its sessions


def pss_bytes(stack: BrowserStack) -> int:
    """The stack's PSS; 0 rather than an error (a process that exited while it was read)."""
    try:
        return stack.memory_pss_bytes()
    except Exception:
        return 0


class HostStacks:
    def __init__(self, stack: BrowserStack, lock: threading.Lock) -> None:
        self.lock = lock
        self.stack = stack  # the running one (or the one to start)
        self.pool: SessionPool | None = None  # its sessions, once it runs
        self.next: Held | None = None  # started, not yet in use
        self.retiring: list[Held] = []
        # Browser jobs claimed and not yet returned -> the pool of the stack whose budget they
        # were claimed under (or, claimed before the first stack ran, the pool they lease
        # from): a job claimed just before a switch still runs on the old stack.
        self._claimed_on: dict[int, SessionPool] = {}
        self._sessions: dict[int, Any] = {}  # job id -> its live driver

    # -- views (any thread) -----------------------------------------------------------------

    def others(self) -> list[Held]:
        """The stacks other than the running one: retiring, and a next one not yet in use."""
        with self.lock:
            return [*self.retiring, *([self.next] if self.next else [])]

    def all_stacks(self) -> list[BrowserStack]:
        """Every stack of the host now: the running one, then one starting or retiring."""
        return [self.stack, *(stack for stack, _ in self.others())]

    def memory_pss_bytes(self, running: bool) -> int:
        """The PSS of every stack (the running one only when ``running``); never an error."""
        others = sum(pss_bytes(stack) for stack, _ in self.others())
        return others + (pss_bytes(self.stack) if running else 0)

    @property
    def retiring_busy(self) -> int:
        """Browser jobs still running, or still to run, on stacks an overlapped restart
        retired."""
        with self.lock:
            return sum(self._busy(pool) for _, pool in self.retiring)

    @property
    def retiring_done(self) -> int:
        """Stacks an overlapped restart retired whose last job has returned."""
        with self.lock:
            return sum(1 for _, pool in self.retiring if self._busy(pool) == 0)

    def taken_work_dirs(self) -> set[Path]:
        """The work directories of the running and the retiring stacks."""
        with self.lock:
            return {self.stack.work_dir, *(stack.work_dir for stack, _ in self.retiring)}

    def _busy(self, pool: SessionPool) -> int:
        """Browser jobs counted on ``pool``: claimed for it (or leasing from it) and not yet
        returned (under the lock). Once a retired pool counts none it never will again: a
        lease takes a pool it is counted on, or else the running one."""
        return sum(1 for claimed_on in self._claimed_on.values() if claimed_on is pool)

    # -- the jobs' (the main loop's claims, the job threads) --------------------------------

    def claimed(self, job_ids: Iterable[int]) -> None:
        """Browser jobs just claimed count on the running stack (none yet: the first stack,
        which starts for them)."""
        with self.lock:
            if self.pool is not None:
                self._claimed_on.update((job_id, self.pool) for job_id in job_ids)

    def lease_pool(self, job_id: int) -> SessionPool | None:
        """The pool the job leases from: the one it was claimed for, or else the running one.
        Counted as the pool's until the job is done, also while its lease waits for a slot:
        a retired stack is stopped only once no job counts on it."""
        with self.lock:
            pool = self._claimed_on.get(job_id) or self.pool
            if pool is not None:
                self._claimed_on[job_id] = pool
            return pool

    def session_began(self, job_id: int, driver: Any) -> None:
        with self.lock:
            self._sessions[job_id] = driver

    def session_ended(self, job_id: int) -> None:
        with self.lock:
            self._sessions.pop(job_id, None)

    def lease_ended(self, job_id: int) -> None:
        with self.lock:
            self._claimed_on.pop(job_id, None)

    def returned(self, job_id: int) -> None:
        """The job is done: also one that never leased (a bad payload)."""
        with self.lock:
            self._sessions.pop(job_id, None)
            self._claimed_on.pop(job_id, None)

    # -- the owner's (the supervisor's thread) ----------------------------------------------

    def take_session(self, job_id: int) -> Any:
        """The job's live driver, if it has one, no longer counted as its."""
        with self.lock:
            return self._sessions.pop(job_id, None)

    def set_pool(self, pool: SessionPool | None) -> None:
        with self.lock:
            self.pool = pool

    def adopt_next(self, held: Held) -> None:
        with self.lock:
            self.next = held

    def switch(self) -> tuple[SessionPool, int] | None:
        """The next stack becomes the running one and the running one retires: its pool, and
        how many of the jobs counted on it have yet to lease; None when there was no next
        (stopped meanwhile: a close) or no pool to retire."""
        with self.lock:
            if self.next is None:
                return None
            old_stack, old_pool = self.stack, self.pool
            (self.stack, self.pool), self.next = self.next, None
            if old_pool is None:
                return None
            self.retiring.append((old_stack, old_pool))
            return old_pool, self._busy(old_pool) - old_pool.leased

    def retired_done(self) -> list[Held]:
        """The retired stacks whose last job has returned."""
        with self.lock:
            return [(stack, pool) for stack, pool in self.retiring if self._busy(pool) == 0]

    def drop_retired(self, stopped: Iterable[Held]) -> int:
        """``stopped`` are gone: how many retired stacks remain."""
        gone = list(stopped)
        with self.lock:
            self.retiring = [held for held in self.retiring if held not in gone]
            return len(self.retiring)

    def take_others(self) -> list[Held]:
        """The retiring stacks and a next one, no longer held (they are being stopped)."""
        with self.lock:
            others = [*self.retiring, *([self.next] if self.next else [])]
            self.retiring, self.next = [], None
            return others
