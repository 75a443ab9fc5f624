"""When a consumer with no LISTEN connection claims next (consumer_wakeup = poll, or behind a
transaction pooler without listen_database_url).

Such a consumer hears of new work only by claiming. Polling every ``consumer_poll_s`` alone
would leave a slot idle for up to that long after every job: its completion wakes the producer
(NOTIFY), which refills the slot within tens of milliseconds, but the host would not look
until its next poll. So a freed slot starts a refill: claims at REFILL_FIRST_S, then at
doubling intervals while they find nothing, back to the plain poll once one finds work or the
interval reaches ``poll_s``. A freed slot while jobs of this host are still queued is claimed
at once. Pure: the caller passes the time (time.monotonic()).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

REFILL_FIRST_S = 0.05  # a producer's wake-up (5 ms debounce) and its cycle, with room


@dataclass
class PollSchedule:
    poll_s: float
    next_claim_at: float = 0.0  # the first claim at once
    refill_step_s: float | None = None  # None: the plain poll; else the refill's last step
    freed_at: float = -math.inf  # the last slot_freed

    def slot_freed(self, now: float, *, more_queued: bool) -> None:
        """Outcomes were written: their slots are free."""
        self.freed_at = now
        if more_queued:
            self.next_claim_at = now
            self.refill_step_s = None
            return
        self.refill_step_s = REFILL_FIRST_S
        self.next_claim_at = min(self.next_claim_at, now + REFILL_FIRST_S)

    def claim_now(self, now: float) -> None:
        """Claim on the next pass: something other than a job's end may have made work
        claimable here (the host's state changed, a stuck thread returned), or the last claim
        raised (the database away)."""
        self.next_claim_at = min(self.next_claim_at, now)

    def claim_started(self) -> None:
        """A claim runs now: the next is set when it ends (claimed), or by slots freed while
        it runs."""
        self.next_claim_at = math.inf

    def claim_due_in(self, now: float) -> float:
        """Seconds until the next claim (0: claim now)."""
        return max(0.0, self.next_claim_at - now)

    def claimed(self, started: float, now: float, count: int) -> None:
        """A claim that started at ``started`` took ``count`` jobs. Slots freed meanwhile (light
        jobs end within their claim) keep the refill slot_freed scheduled for them."""
        if self.freed_at >= started:
            return
        step = self.refill_step_s
        if count or step is None or step * 2 >= self.poll_s:
            self.refill_step_s = None
            self.next_claim_at = now + self.poll_s
            return
        self.refill_step_s = step * 2
        self.next_claim_at = now + self.refill_step_s
