"""The producer's rate-limit steps, around the pure budget (producer.rate_budget).

- learn, from the attempts' audit rows since the last cycle, which keys the sites pushed back
  on (slowed) or served (recovering), and save that and the configured limits to
  ``rate_keys`` (what the rate_limits view shows), written only when it changed;
- read the pending jobs within the budget and hand the planner its admission; without any
  limit or paused key, the plain pending read and no count at all.

Both run in the cycle's transaction, every cycle: a push-back wakes the producer (the attempt
ended) and slows its key in that very cycle. The back-off lives in memory between cycles and
in ``rate_keys`` across leaders: a producer that takes the lead starts from the saved state; a
cycle that fails forgets what it learnt (lost_lead) and reads the saved state again.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime

from sqlalchemy.engine import Connection

from scrapefleet.common import store
from scrapefleet.common.constants import PENDING_SCAN_FACTOR, RATE_WINDOW_REFRESH_S
from scrapefleet.common.rate_limits import (
    NO_SLOWDOWN,
    RateCount,
    Slowdown,
    capped_pause,
    next_slowdown,
)
from scrapefleet.common.settings import Settings
from scrapefleet.common.store.records import PendingJob
from scrapefleet.producer.planner import Admission
from scrapefleet.producer.rate_budget import RateBudget, RateRules

log = logging.getLogger(__name__)


class RateControl:
    def __init__(self, settings: Settings) -> None:
        self.rules = RateRules.from_settings(settings)
        self.max_pause_s = settings.retry_after_max_s  # a pause a host's job asks for, at most
        self.slowdowns: dict[str, Slowdown] = {}
        self._after_event: int | None = None  # the last audit row looked at
        self._saved: dict[str, Slowdown] | None = None  # as last written (None: never)
        self._window: Counter[tuple[str | None, str]] = Counter()
        self._window_read_at: datetime | None = None
        self._last_budget: RateBudget | None = None

    def lock_pending(
        self, conn: Connection, free_slots: int, *, browser_ok: bool, now: datetime
    ) -> tuple[list[PendingJob], Admission | None]:
        """The pending jobs to plan (PENDING_SCAN_FACTOR per free slot, and each tight key's
        budget), and the budget the planner must keep (None: no limit applies now)."""
        limit = free_slots * PENDING_SCAN_FACTOR
        if not self.rules.any and not any(s.paused(now) for s in self.slowdowns.values()):
            return store.lock_pending_jobs(conn, limit, browser_ok=browser_ok), None
        counts = self._counts(conn, now) if self.rules.any else []
        budget = RateBudget(self.rules, counts, self.slowdowns, now)
        self._last_budget = budget
        pending = store.lock_pending_within_limits(
            conn, limit, budget.skips(free_slots), browser_ok=browser_ok
        )
        return pending, budget.admission(pending)

    def _counts(self, conn: Connection, now: datetime) -> list[RateCount]:
        """In-flight jobs, read every cycle; the window's use, read at most every
        RATE_WINDOW_REFRESH_S and meanwhile grown by the jobs this producer placed. That stays
        an upper bound: every attempt started since the read was queued then (counted) or
        placed since (added); a job placed but lost to a race is counted all the same."""
        if self._last_budget is not None:
            for placed in self._last_budget.taken:
                self._window[placed] += 1
            self._last_budget = None
        counts = store.in_flight_counts(conn)
        if not self.rules.counts_starts:
            return counts
        read_at = self._window_read_at
        if read_at is None or not 0 <= (now - read_at).total_seconds() < RATE_WINDOW_REFRESH_S:
            self._window = Counter(
                {(c.rate_key, c.kind): c.window for c in store.window_counts(conn)}
            )
            self._window_read_at = now
        return counts + [RateCount(k, kind, window=n) for (k, kind), n in self._window.items()]

    def learn(self, conn: Connection, now: datetime) -> None:
        """Slow the keys pushed back on since the last look, let the others recover, and save."""
        if self._after_event is None:  # just took the lead: carry on from the saved state
            saved = store.rate_slowdowns(conn)
            self.slowdowns = {k: capped_pause(s, now, self.max_pause_s) for k, s in saved.items()}
        seen, self._after_event = store.throttles_since(
            conn, self._after_event, recovering=bool(self.slowdowns)
        )
        for key, what in seen.items():
            current = self.slowdowns.get(key, NO_SLOWDOWN)
            slowed = next_slowdown(current, what, now, max_pause_s=self.max_pause_s)
            if what.throttled:
                log.warning(
                    "rate key %s pushed back %d time(s): factor %.3g, paused until %s",
                    key,
                    what.throttled,
                    slowed.factor,
                    slowed.paused_until.isoformat() if slowed.paused_until else "-",
                )
            self.slowdowns[key] = slowed
        self.slowdowns = {k: s for k, s in self.slowdowns.items() if not s.is_neutral(now)}
        if self._saved != self.slowdowns:
            store.save_rate_keys(conn, self.rules.keys, self.rules.default, self.slowdowns, now)
            self._saved = dict(self.slowdowns)

    def lost_lead(self) -> None:
        """Another producer may have changed the state meanwhile, or this cycle's writes were
        rolled back: read it again next time."""
        self._after_event = None
        self._saved = None
        self._window_read_at = None  # what another leader placed meanwhile is not in it
        self._last_budget = None
