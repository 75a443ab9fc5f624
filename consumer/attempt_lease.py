"""How long a consumer may go on running its attempts without reaching the database.

The producer rescues an attempt whose heartbeat stopped for ``rescue_after_s`` and hands its job
on; a host cut off from the database (or frozen, then continued) does not know that yet. So a
consumer holds its attempts on a lease: each heartbeat that reaches the database renews it from
the moment that heartbeat was sent (the database's ``heartbeat_at`` is no earlier, so the
consumer's lease never outlasts what the producer sees, whatever the clocks say), and once
``fence_after_s`` passed without one the consumer ends its attempts itself and claims nothing
until a heartbeat gets through. With ``fence_after_s`` below ``rescue_after_s``, a host that is
cut off but running has ended its attempts before the producer gives them to another host.
"""

from __future__ import annotations

from dataclasses import dataclass

from scrapefleet.common.constants import SELF_FENCE_FRACTION


@dataclass
class AttemptLease:
    fence_after_s: float
    renewed_at: float  # time.monotonic() when the last heartbeat that got through was sent

    @classmethod
    def for_rescue_after(cls, rescue_after_s: float, now: float) -> AttemptLease:
        return cls(rescue_after_s * SELF_FENCE_FRACTION, now)

    def renew(self, sent_at: float) -> None:
        """A heartbeat sent at ``sent_at`` reached the database."""
        self.renewed_at = max(self.renewed_at, sent_at)

    def lapsed(self, now: float) -> bool:
        return now - self.renewed_at > self.fence_after_s

    def silent_s(self, now: float) -> float:
        return now - self.renewed_at
