"""One browser stack of a host started and checked, or what a dead consumer left of one ended.

Apart from consumer.browser.supervisor.stack_supervisor because two threads start stacks: the
supervisor's own (the first stack, a restart) and the next-stack helper of an overlapped restart
(consumer.browser.supervisor.overlap_threads). Both go through one StackLauncher, which holds only
what does not change while the consumer runs (settings, the host's work directories, the makers
tests replace); the session permits a start draws on are the supervisor's and are passed in.

A stack counts as started once its first WebDriver session answered: Grid ready is not enough,
Chromium must start and answer BiDi too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scrapefleet.common.error_lines import first_line
from scrapefleet.common.errors import StackError
from scrapefleet.common.runtime.side_threads import SideThreads
from scrapefleet.common.settings import Settings
from scrapefleet.consumer.browser.sessions.session_permits import SessionPermits
from scrapefleet.consumer.browser.sessions.session_pool import SessionPool
from scrapefleet.consumer.browser.stack.browser_stack import BrowserStack, SessionStartPaused
from scrapefleet.consumer.browser.supervisor.states import STACK_DIRECTORIES

log = logging.getLogger(__name__)

FIRST_SESSION_TRIES = 3  # a stack's first browser session, while its Grid stays up

# (session maker, size, keepalive_s, shared permits, permit wait, the watch of its threads)
# -> one stack's sessions
PoolMaker = Callable[
    [Callable[[], Any], int, float, SessionPermits, float, SideThreads], SessionPool
]
StackMaker = Callable[[Path], BrowserStack]  # work directory -> a stack (tests give fakes)
# The running stack, the next one and one retiring rotate between these directories.
STACK_DIR_NAMES = tuple("abcdefgh"[:STACK_DIRECTORIES])


def session_pool(
    make_driver: Callable[[], Any],
    size: int,
    keepalive_s: float,
    permits: SessionPermits,
    permit_wait_s: float,
    threads: SideThreads,
) -> SessionPool:
    return SessionPool(
        make_driver,
        size,
        keepalive_s=keepalive_s,
        session_permits=permits,
        permit_wait_s=permit_wait_s,
        threads=threads,
    )


def stack_work_dirs(state_dir: Path, host: str) -> tuple[Path, ...]:
    """Fixed per host, so that a consumer started again finds what the last one left."""
    return tuple(state_dir / "stack" / host / name for name in STACK_DIR_NAMES)


class StackLauncher:
    def __init__(
        self,
        settings: Settings,
        host: str,
        capacity: int,
        make_pool: PoolMaker,
        make_stack: StackMaker | None,
        threads: SideThreads,
    ) -> None:
        self.settings = settings
        self._threads = threads  # the pools' threads are watched with the consumer's
        self.host = host
        self.capacity = capacity
        self.work_dirs = stack_work_dirs(settings.state_dir, host)
        self.make_stack: StackMaker = make_stack or (
            lambda work_dir: BrowserStack(settings, host, capacity, work_dir)
        )
        self._make_pool = make_pool
        # A lease waits for a permit while the retiring stack's jobs finish; no longer than a
        # job may run, plus a session's start.
        self._permit_wait_s = settings.job_timeout_s + settings.session_create_timeout_s

    def clean_leftovers(self, first: BrowserStack) -> None:
        """At consumer start: end whatever a consumer killed with SIGKILL left of its stacks
        (``first``: the stack of the first work directory)."""
        killed = first.stop().killed
        # The other directories', and a stack of the single-directory layout of older versions.
        legacy = self.settings.state_dir / "stack" / self.host
        for work_dir in (*self.work_dirs[1:], legacy):
            killed += self.make_stack(work_dir).stop().killed
        if killed:
            log.warning("ended %d process(es) of a previous browser stack", killed)

    def start(self, stack: BrowserStack, warm: int, permits: SessionPermits) -> SessionPool | str:
        """Start ``stack`` and its pool, with ``warm`` sessions more than the one its check
        leaves warm (started in the background, as ``permits`` allow); the pool, or why the
        stack would not start."""
        # Touched well within the Grid's session-timeout, which would reap an idle session.
        keepalive_s = self.settings.grid_session_timeout_s / 3
        pool = self._make_pool(
            stack.new_driver, self.capacity, keepalive_s, permits, self._permit_wait_s,
            self._threads,
        )  # fmt: skip
        pool.retire_sessions_after(self.settings.browser_retire_every)
        try:
            stack.start()
            self._first_session(stack, pool, permits)
        except Exception as exc:
            pool.close()
            stack.stop()
            error = str(exc) if isinstance(exc, StackError) else first_line(exc)
            return error.strip() or type(exc).__name__
        pool.warm(warm)
        return pool

    def _first_session(
        self, stack: BrowserStack, pool: SessionPool, permits: SessionPermits
    ) -> None:
        """This first session stays in the pool, warm for the first job. A browser that dies
        while it starts (killed from outside, a hiccup of a loaded host) is tried again a few
        times while the Grid is up (or could be started again), rather than failing the whole
        stack for a back-off."""
        tries_left, rearmed = FIRST_SESSION_TRIES - 1, 0
        while True:
            try:
                with pool.lease("context"):
                    return
            except SessionStartPaused as exc:  # this process was paused: the try is re-armed
                rearmed += 1
                if rearmed > FIRST_SESSION_TRIES:
                    raise
                log.warning("the first browser session of %s: %s; trying again", self.host, exc)
                continue
            except Exception as exc:
                # A Grid that died meanwhile is started again in place, Xvfb kept; a host
                # whose stacks are stopping tries no more.
                stopping = permits.interrupted
                if stopping or not tries_left or not (stack.healthy() or stack.revive_grid()):
                    raise
                log.warning(
                    "the first browser session of %s failed (%s); trying again (%d more)",
                    self.host,
                    first_line(exc),
                    tries_left,
                )
                tries_left -= 1
