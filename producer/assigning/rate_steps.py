"""The producer's rate-limit steps, around the pure budget (producer.assigning.rate_budget).

- learn, from the attempts' audit rows since the last cycle, which keys the sites pushed back
  on (slowed) or served (recovering), and save that and the configured limits to
  ``rate_keys`` (what the rate_limits view shows), written only when it changed;
- read the pending jobs within the budget and hand the planner its admission; without any
  limit or paused key, the plain pending read and no count at all;
- an operator's live controls (common.store.operating.controls), read every cycle: a paused key,
  kind or crawl is left out of the pending reads, a live limit replaces the configured one.

Both run in the cycle's transaction, every cycle: a push-back wakes the producer (the attempt
ended) and slows its key in that very cycle. The back-off lives in memory between cycles and
in ``rate_keys`` across leaders: a producer that takes the lead starts from the saved state; a
cycle that fails forgets what it learnt (lost_lead) and reads the saved state again.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta

from sqlalchemy.engine import Connection

from scrapefleet.common import store
from scrapefleet.common.constants import (
    PENDING_SCAN_FACTOR,
    PUSHBACK_LOG_EVERY_S,
    RATE_WINDOW_REFRESH_S,
    ROBOTS_TTL_S,
)
from scrapefleet.common.jobs.rate_limits import (
    NO_SLOWDOWN,
    RateCount,
    RateLimit,
    Slowdown,
    capped_pause,
    next_slowdown,
)
from scrapefleet.common.settings import Settings
from scrapefleet.common.store.operating.controls import LiveControl, LiveControls, Scope
from scrapefleet.common.store.records import PendingJob
from scrapefleet.producer.assigning.planner import Admission
from scrapefleet.producer.assigning.pushback_log import PushBackLog, pushback_line
from scrapefleet.producer.assigning.rate_budget import RateBudget, RateRules

log = logging.getLogger(__name__)


def with_live_limits(configured: RateRules, live: LiveControls) -> RateRules:
    """The settings file's rules with an operator's live limits over them: a key's or kind's
    live limit replaces its configured one (pure)."""
    keys = live.limits(Scope.RATE_KEY)
    kinds = live.limits(Scope.KIND)
    if not keys and not kinds:
        return configured
    return replace(
        configured,
        keys={**configured.keys, **{k: _limit(c) for k, c in keys.items()}},
        kinds={**configured.kinds, **{k: _limit(c) for k, c in kinds.items()}},
    )


def _limit(control: LiveControl) -> RateLimit:
    return RateLimit(concurrency=control.concurrency, per_minute=control.per_minute)


def next_paced_start(
    delays: Mapping[str, float], last_placed: Mapping[str, datetime], now: datetime
) -> datetime | None:
    """The earliest next start, after ``now``, of a key spaced by ``delays`` (seconds) whose
    last job was placed at ``last_placed``; None when no such key is waiting out its delay."""
    starts = (
        placed + timedelta(seconds=delays[key])
        for key, placed in last_placed.items()
        if key in delays
    )
    return min((start for start in starts if start > now), default=None)


class RateControl:
    def __init__(self, settings: Settings) -> None:
        self.configured = RateRules.from_settings(settings)  # the settings file's: the default
        self.rules = self.configured  # with an operator's live limits over it, this cycle
        self.max_pause_s = settings.retry_after_max_s  # a pause a host's job asks for, at most
        self.slowdowns: dict[str, Slowdown] = {}
        self._after_event: int | None = None  # the last audit row looked at
        self._saved: dict[str, Slowdown] | None = None  # as last written (None: never)
        self._window: Counter[tuple[str | None, str]] = Counter()
        self._window_read_at: datetime | None = None
        self._last_budget: RateBudget | None = None
        # Crawl-delays the sites' robots.txt asked for (key -> seconds, learned at), and when
        # each such key's last job was placed.
        self.crawl_delays: dict[str, tuple[float, datetime]] = {}
        self._last_placed: dict[str, datetime] = {}
        self._pushback_log = PushBackLog(PUSHBACK_LOG_EVERY_S)

    def lock_pending(
        self,
        conn: Connection,
        free_slots: int,
        *,
        browser_ok: bool,
        now: datetime,
        only_kinds: frozenset[str] | None = None,
    ) -> tuple[list[PendingJob], Admission | None]:
        """The pending jobs to plan (PENDING_SCAN_FACTOR per free slot, and each tight key's
        budget), and the budget the planner must keep (None: no limit applies now)."""
        limit = free_slots * PENDING_SCAN_FACTOR
        # An operator's live pauses and limits: a handful of rows, read every cycle, so a
        # change applies from the next cycle without a restart.
        live = store.live_controls(conn)
        self.rules = with_live_limits(self.configured, live)
        holds = live.holds()
        if only_kinds is not None:  # kinds no free host runs are not read (planner.runnable_kinds)
            holds = replace(holds, only_kinds=tuple(sorted(only_kinds)))
        paused = any(s.paused(now) for s in self.slowdowns.values())
        if not self.rules.any and not paused and not self.crawl_delays:
            return store.lock_pending_jobs(conn, limit, browser_ok=browser_ok, holds=holds), None
        counts = self._counts(conn, now) if self.rules.any else []
        budget = RateBudget(self.rules, counts, self.slowdowns, now, self._next_starts(now))
        self._last_budget = budget
        pending = store.lock_pending_within_limits(
            conn, limit, budget.skips(free_slots), browser_ok=browser_ok, holds=holds
        )
        return pending, budget.admission(pending)

    def _counts(self, conn: Connection, now: datetime) -> list[RateCount]:
        """In-flight jobs, read every cycle; the window's use, read at most every
        RATE_WINDOW_REFRESH_S and meanwhile grown by the jobs this producer placed. That stays
        an upper bound: every attempt started since the read was queued then (counted) or
        placed since (added); a job placed but lost to a race is counted all the same."""
        self._note_placed()
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

    def _note_placed(self) -> None:
        """What the last budget placed: the window's use, and the spaced keys' last start."""
        if self._last_budget is None:
            return
        for placed in self._last_budget.taken:
            self._window[placed] += 1
            if placed[0] in self.crawl_delays:
                self._last_placed[placed[0]] = self._last_budget.now
        self._last_budget = None

    def _next_starts(self, now: datetime) -> dict[str, datetime]:
        """Each Crawl-delay key's earliest next placement; delays older than ROBOTS_TTL_S
        (no page of the site reported one since) are forgotten."""
        self._note_placed()
        fresh = timedelta(seconds=ROBOTS_TTL_S)
        self.crawl_delays = {k: v for k, v in self.crawl_delays.items() if now - v[1] < fresh}
        starts = {}
        for key, (delay_s, _learned) in self.crawl_delays.items():
            last = self._last_placed.get(key)
            starts[key] = now if last is None else last + timedelta(seconds=delay_s)
        self._last_placed = {k: v for k, v in self._last_placed.items() if k in starts}
        return starts

    def next_paced_start(self, now: datetime) -> datetime | None:
        """When the next Crawl-delay key held back now may start a job (None: none is held
        back): the producer wakes then, rather than at its next interval, so that a delay
        shorter than the interval is kept, not stretched to it."""
        self._note_placed()
        delays = {k: delay_s for k, (delay_s, _learned) in self.crawl_delays.items()}
        return next_paced_start(delays, self._last_placed, now)

    def learn(self, conn: Connection, now: datetime) -> None:
        """Slow the keys pushed back on since the last look, let the others recover, and save."""
        if self._after_event is None:  # just took the lead: carry on from the saved state
            saved = store.rate_slowdowns(conn)
            self.slowdowns = {k: capped_pause(s, now, self.max_pause_s) for k, s in saved.items()}
        seen, self._after_event = store.throttles_since(
            conn, self._after_event, recovering=bool(self.slowdowns)
        )
        for key, what in seen.items():
            if what.crawl_delay_s is not None:
                self._learn_delay(key, what.crawl_delay_s, now)
            current = self.slowdowns.get(key, NO_SLOWDOWN)
            slowed = next_slowdown(current, what, now, max_pause_s=self.max_pause_s)
            self.slowdowns[key] = slowed
            if what.throttled:
                self._warn(self._pushback_log.note(key, what.throttled, now))
        self._warn(self._pushback_log.due(now))
        self.slowdowns = {k: s for k, s in self.slowdowns.items() if not s.is_neutral(now)}
        if self._saved != self.slowdowns:
            store.save_rate_keys(conn, self.rules.keys, self.rules.default, self.slowdowns, now)
            self._saved = dict(self.slowdowns)

    def _warn(self, said: list[tuple[str, int]]) -> None:
        for key, times in said:
            limited = self.rules.for_key(key) is not None
            slowdown = self.slowdowns.get(key, NO_SLOWDOWN)
            log.warning("%s", pushback_line(key, times, slowdown, limited=limited))

    def _learn_delay(self, key: str, delay_s: float, now: datetime) -> None:
        if delay_s <= 0:
            self.crawl_delays.pop(key, None)
            return
        if key not in self.crawl_delays:
            log.info("rate key %s: its robots.txt asks %.3g s between requests", key, delay_s)
        self.crawl_delays[key] = (delay_s, now)

    def lost_lead(self) -> None:
        """Another producer may have changed the state meanwhile, or this cycle's writes were
        rolled back: read it again next time."""
        self._after_event = None
        self._saved = None
        self._window_read_at = None  # what another leader placed meanwhile is not in it
        self._last_budget = None
