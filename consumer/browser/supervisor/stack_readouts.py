"""What the daemon reads of its browser stack: the status document's and the claims' views, and
the metrics endpoint's, all read-only.

Apart from consumer.browser.supervisor.stack_supervisor, whose base class this is, because these run
on the threads that ask (the main loop, the heartbeat's status document, the metrics endpoint)
and only read: the state machine's state (one value, replaced whole by the supervisor's
thread), the stacks the host holds (consumer.browser.supervisor.held_stacks, under its lock) and the
browser limit (consumer.browser.supervisor.load_tracker). Nothing here posts an event or changes a
field.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from scrapefleet.consumer.browser.stack.browser_stack import BrowserStack
from scrapefleet.consumer.browser.supervisor.held_stacks import HostStacks
from scrapefleet.consumer.browser.supervisor.load_tracker import LoadLimit
from scrapefleet.consumer.browser.supervisor.states import (
    StackState,
    browser_status,
    claim_budget,
    is_running,
    maintenance_state,
    next_check_s,
)

Clock = Callable[[], datetime]


class StackViews:
    _state: StackState
    _stacks: HostStacks
    _load: LoadLimit
    _clock: Clock

    @property
    def stack(self) -> BrowserStack:
        """The running stack (or the one to start)."""
        return self._stacks.stack

    @property
    def state(self) -> StackState:
        return self._state

    @property
    def running(self) -> bool:
        """Started and checked with a session."""
        return is_running(self._state)

    @property
    def maintenance_state(self) -> str | None:
        """'restarting' or 'rebooting' while one is due or under way (status document)."""
        return maintenance_state(self._state)

    def browser_status(self) -> tuple[str, str | None, float | None]:
        """(BrowserState, reason, next try as unix time) for the status document."""
        browser, reason, retry_at = browser_status(self._state)
        return browser, reason, (retry_at.timestamp() if retry_at is not None else None)

    def claim_budget(
        self, free: int, since_restart: int, since_boot: int, browser_busy: int = 0
    ) -> tuple[int, int]:
        """(jobs, of which browser jobs) that may be claimed now out of ``free`` slots, with
        ``browser_busy`` browser jobs in flight: the budgets, and the host's load."""
        jobs, browser = claim_budget(self._state, free, since_restart, since_boot)
        limit, _ = self._load.limit()
        return jobs, max(0, min(browser, limit - browser_busy))

    def starved(self) -> str | None:
        """Why the host is starved of CPU or memory now (consumer.browser.supervisor.load_rules),
        else None."""
        return self._load.starved(self._clock().timestamp())

    def browser_limit(self) -> tuple[int, str | None]:
        """Browser jobs the host takes at once now, and why fewer than its capacity."""
        return self._load.limit()

    def next_check_s(self) -> float:
        """How soon ``step`` has something to do without being woken."""
        return next_check_s(self._state, self._clock())

    def memory_pss_bytes(self) -> int:
        """The PSS of every browser stack of the host (the running one, one retiring, one
        starting) for the metrics endpoint; never an error (a scrape must not fail because a
        browser process just exited)."""
        return self._stacks.memory_pss_bytes(self.running)

    def stacks(self) -> list[BrowserStack]:
        """Every stack of the host now: the running one, then one starting or retiring."""
        return self._stacks.all_stacks()

    @property
    def retiring_busy(self) -> int:
        """Browser jobs still running, or still to run, on stacks an overlapped restart
        retired."""
        return self._stacks.retiring_busy

    @property
    def retiring_done(self) -> int:
        """Stacks an overlapped restart retired whose last job has returned."""
        return self._stacks.retiring_done
