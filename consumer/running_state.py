"""What the parts of a running consumer share, each a small object with one owner.

consumer.serving.RunningConsumer wires the parts (consumer.claiming.Claimer,
consumer.attempt_endings.AttemptEndings, consumer.heartbeat.Heartbeat and its neighbours,
consumer.stopping.Stopper); each is given what it needs when it is built. What more than one of
their threads reads or moves is here:

- HostStateView: the host's state in the database as last learnt (the heartbeat writes it, and
  the main thread when it applies what the stack supervisor posted);
- Wakeup: when the main (claiming) thread looks again, the poll schedule of a consumer without
  LISTEN, and the inbox through which other threads post events to the main thread instead of
  calling into it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from scrapefleet.common.store.statuses import HostState
from scrapefleet.consumer.poll_schedule import PollSchedule

Clock = Callable[[], float]  # time.monotonic, or a test's
NOT_CLAIMING_STATES = (HostState.DRAINING, HostState.DISABLED)


@dataclass(frozen=True)
class HostStateMoved:
    """The stack supervisor wrote the host's state (restarting, disabled, active again)."""

    state: str


@dataclass(frozen=True)
class StackCounterSet:
    """The stack supervisor reset the host's jobs_since_restart (a new stack)."""

    count: int


Posted = HostStateMoved | StackCounterSet


class HostStateView:
    """The host's state in the database as last learnt; one value, replaced whole."""

    def __init__(self, state: str) -> None:
        self._state = state
        self._lock = threading.Lock()

    @property
    def value(self) -> str:
        return self._state

    def replace(self, state: str) -> str:
        """Set it; the value it had."""
        with self._lock:
            before, self._state = self._state, state
        return before


def wake_after_write(*, polling: bool, more_queued: bool, stopping: bool) -> bool:
    """Whether written outcomes wake the main thread: polling, always (its schedule decides
    when to claim); else only if more may be queued here, or a drain waits for them."""
    return polling or more_queued or stopping


class Wakeup:
    """When the main thread looks again: woken by a NOTIFY, a freed slot, a state change or a
    posted event; without LISTEN its claims follow a PollSchedule, under this object's lock
    (the recorder's thread moves it too)."""

    def __init__(self, poll: PollSchedule | None, clock: Clock = time.monotonic) -> None:
        self._event = threading.Event()
        self._poll = poll
        self._lock = threading.Lock()
        self._clock = clock
        self._inbox: queue.SimpleQueue[Posted] = queue.SimpleQueue()

    @property
    def polling(self) -> bool:
        return self._poll is not None

    def wake(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    def wait(self, timeout_s: float) -> bool:
        return self._event.wait(timeout_s)

    def post(self, event: Posted) -> None:
        """From any thread: an event for the main thread, which applies it on its next pass."""
        self._inbox.put(event)
        self._event.set()

    def take_posted(self) -> list[Posted]:
        """The main thread: the events posted since its last look, oldest first."""
        taken: list[Posted] = []
        while True:
            try:
                taken.append(self._inbox.get_nowait())
            except queue.Empty:
                return taken

    def claim_soon(self) -> None:
        """Let the main loop claim now: with LISTEN it claims on every wake; polling, the
        schedule's next claim is brought forward."""
        if self._poll is not None:
            with self._lock:
                self._poll.claim_now(self._clock())
        self._event.set()

    def outcomes_written(self, *, more_queued: bool, stopping: bool) -> None:
        """Slots are free now: claim if more may be queued, or, polling, once the producer has
        had a moment to refill them."""
        if self._poll is not None:
            with self._lock:
                self._poll.slot_freed(self._clock(), more_queued=more_queued)
        if wake_after_write(polling=self.polling, more_queued=more_queued, stopping=stopping):
            self._event.set()

    def on_schedule(self, claim: Callable[[], int]) -> tuple[int, float]:
        """Run ``claim`` if the poll schedule says so; the jobs claimed and the seconds until
        its next claim."""
        assert self._poll is not None
        with self._lock:
            started = self._clock()
            due_in = self._poll.claim_due_in(started)
            if due_in == 0:
                self._poll.claim_started()
        if due_in > 0:
            return 0, due_in
        try:
            claimed = claim()
        except BaseException:
            with self._lock:
                self._poll.claim_now(self._clock())
            raise
        with self._lock:
            now = self._clock()
            self._poll.claimed(started, now, claimed)
            return claimed, self._poll.claim_due_in(now)
