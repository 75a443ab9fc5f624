"""How many more jobs each rate key and kind may get now: a pure function of the settings' limits,
the database's counts and the keys' back-off, with an injected ``now``.

The producer builds a RateBudget each cycle. ``skips()`` tells the pending read what to leave
out (keys and kinds at their limit) and what to read on its own for exactly its budget (those
with a little left), so that a backlog on one key neither fills the read nor starves the
others; the planner then asks ``admission(pending)`` job by job, and every job it places uses
one unit of its key's and its kind's budget.

A site whose robots.txt asks for a Crawl-delay gets at most one job per cycle, and none before
its next start (the last placement plus the delay): its crawl's requests are that far apart
fleet-wide.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from scrapefleet.common.constants import RATE_TIGHT_MAX
from scrapefleet.common.jobs.rate_limits import (
    CRAWL_KINDS,
    NO_SLOWDOWN,
    PendingSkips,
    RateCount,
    RateLimit,
    Slowdown,
)
from scrapefleet.common.settings import Settings


class RatedJob(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def rate_key(self) -> str | None: ...
    @property
    def kind(self) -> str: ...


@dataclass(frozen=True)
class RateRules:
    """The configured limits: per named key, for every other key, per kind; and for a key
    neither names that has crawl jobs (a crawled site), ``crawled_site``."""

    keys: Mapping[str, RateLimit] = field(default_factory=dict)
    default: RateLimit | None = None
    kinds: Mapping[str, RateLimit] = field(default_factory=dict)
    crawled_site: RateLimit | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> RateRules:
        concurrency = settings.crawl_site_concurrency
        crawled = None if concurrency is None else RateLimit(concurrency=concurrency)
        return cls(settings.rate_limits, settings.rate_limit_default, settings.kind_limits, crawled)

    @property
    def any(self) -> bool:
        return bool(self.keys or self.default or self.kinds or self.crawled_site)

    @property
    def counts_starts(self) -> bool:
        """Whether any limit is per minute (the counts then need the trailing minute's starts)."""
        limits = [*self.keys.values(), *self.kinds.values(), self.default]
        return any(limit is not None and limit.per_minute is not None for limit in limits)

    def for_key(self, key: str, *, crawled: bool = False) -> RateLimit | None:
        limit = self.keys.get(key, self.default)
        return self.crawled_site if limit is None and crawled else limit


@dataclass
class _Used:
    in_flight: int = 0
    window: int = 0


def _left(limit: RateLimit, used: _Used) -> int:
    room = []
    if limit.concurrency is not None:
        room.append(limit.concurrency - used.in_flight)
    if limit.per_minute is not None:
        room.append(limit.per_minute - used.window)
    return max(0, min(room))


def _tightest(budgets: Mapping[str, int], free_slots: int) -> dict[str, int]:
    tight = sorted((n, name) for name, n in budgets.items() if 0 < n < free_slots)
    return {name: n for n, name in tight[:RATE_TIGHT_MAX]}


class RateBudget:
    def __init__(
        self,
        rules: RateRules,
        counts: Sequence[RateCount],
        slowdowns: Mapping[str, Slowdown],
        now: datetime,
        next_starts: Mapping[str, datetime] | None = None,
    ) -> None:
        by_key: dict[str, _Used] = {}
        by_kind: dict[str, _Used] = {}
        self._crawled: set[str] = set()  # keys with crawl jobs: crawled sites
        for count in counts:
            targets = [by_kind.setdefault(count.kind, _Used())]
            if count.rate_key is not None:
                targets.append(by_key.setdefault(count.rate_key, _Used()))
                if count.kind in CRAWL_KINDS:
                    self._crawled.add(count.rate_key)
            for used in targets:
                used.in_flight += count.in_flight
                used.window += count.window
        self._rules = rules
        self._slowdowns = slowdowns
        self.now = now
        # Keys spaced by a Crawl-delay: none before their time, then one per cycle.
        self._next_starts = next_starts or {}
        # Budgets of every key and kind that has one, as jobs are placed; a key never seen
        # (no count, no rule by name) gets the default's whole budget on first use.
        self._key_left: dict[str, int | None] = {}
        self._kind_left: dict[str, int | None] = {}
        self._by_key = by_key
        self.taken: list[tuple[str | None, str]] = []  # (key, kind) of every job placed
        for key in {*rules.keys, *by_key, *slowdowns, *self._next_starts}:
            self._key_left[key] = self._key_budget(key)
        for kind in rules.kinds:
            self._kind_left[kind] = _left(rules.kinds[kind], by_kind.get(kind, _Used()))

    def _key_budget(self, key: str) -> int | None:
        slowdown = self._slowdowns.get(key, NO_SLOWDOWN)
        if slowdown.paused(self.now):
            return 0
        spaced = key in self._next_starts
        if spaced and self._next_starts[key] > self.now:
            return 0
        limit = self._rules.for_key(key, crawled=key in self._crawled)
        if limit is None:
            return 1 if spaced else None
        left = _left(limit.scaled(slowdown.factor), self._by_key.get(key, _Used()))
        return min(left, 1) if spaced else left

    def key_left(self, key: str | None, kind: str | None = None) -> int | None:
        """How many more jobs ``key`` may get now (a job of ``kind`` on it); None: no limit.
        A crawl job makes its key a crawled site from then on."""
        if key is None:
            return None
        if kind in CRAWL_KINDS and key not in self._crawled:
            self._crawled.add(key)
            if self._key_left.get(key) is None:  # no budget yet, or none without the crawl
                self._key_left.pop(key, None)
        if key not in self._key_left:
            self._key_left[key] = self._key_budget(key)
        return self._key_left[key]

    def kind_left(self, kind: str) -> int | None:
        return self._kind_left.get(kind)

    def skips(self, free_slots: int) -> PendingSkips:
        """Keys and kinds at their limit, and those with less budget left than there are free
        slots (read on their own for that many): a key that may fill every free slot cannot
        hold up the others, so it stays in the main read. At most RATE_TIGHT_MAX of each, the
        smallest budgets first; any beyond are left to the planner alone."""
        keys = {k: n for k, n in self._key_left.items() if n is not None}
        kinds = {k: n for k, n in self._kind_left.items() if n is not None}
        return PendingSkips(
            saturated_keys=tuple(sorted(k for k, n in keys.items() if n == 0)),
            tight_keys=_tightest(keys, free_slots),
            saturated_kinds=tuple(sorted(k for k, n in kinds.items() if n == 0)),
            tight_kinds=_tightest(kinds, free_slots),
        )

    def admits(self, job: RatedJob) -> bool:
        return self.key_left(job.rate_key, job.kind) != 0 and self.kind_left(job.kind) != 0

    def take(self, job: RatedJob) -> None:
        """``job`` was placed: one unit of its key's and its kind's budget is used."""
        self.taken.append((job.rate_key, job.kind))
        key_left = self.key_left(job.rate_key, job.kind)
        if job.rate_key is not None and key_left is not None:
            self._key_left[job.rate_key] = key_left - 1
        kind_left = self.kind_left(job.kind)
        if kind_left is not None:
            self._kind_left[job.kind] = kind_left - 1

    def admission(self, pending: Sequence[RatedJob]) -> JobAdmission:
        """This budget as the planner asks it: by job id."""
        return JobAdmission(self, {job.id: job for job in pending})


class JobAdmission:
    def __init__(self, budget: RateBudget, jobs: Mapping[int, RatedJob]) -> None:
        self._budget = budget
        self._jobs = jobs

    def admits(self, job_id: int) -> bool:
        job = self._jobs.get(job_id)
        return job is None or self._budget.admits(job)

    def take(self, job_id: int) -> None:
        job = self._jobs.get(job_id)
        if job is not None:
            self._budget.take(job)
