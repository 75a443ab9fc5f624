"""Where a job that runs under a profile may go, and which profile of its pool it gets: pure.

A job names a profile or a pool (common.browser.profile_names). For each such job the planner asks
``hosts_for``: the profiles of its pool that no job holds (in the fleet, or earlier in this
plan) and that are not cooling down at ``now`` are its candidates; a candidate bound to a host
can only run there (its user-data-dir is there), an unbound one anywhere. No candidate: the
job waits for a later cycle. Once the planner has picked a host, ``placed`` chooses the
profile: one bound to that host first, else an unbound one (which the assignment then binds
to it). The profile the job's last try ran under comes last, so a job sent back (blocked, say)
tries another profile of its pool when there is one; and a job a site blocked avoids the host
it was blocked on while another host can take it (any job, with a profile or without).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

from scrapefleet.common.browser.profile_names import cooling
from scrapefleet.producer.assigning.planner import ANY_HOST, HostChoice, PlannedJob


class ProfileFacts(Protocol):
    """What the rules read of a profile (the store's ProfileRow)."""

    @property
    def host(self) -> str | None: ...
    @property
    def cooldown_until(self) -> datetime | None: ...
    @property
    def busy_on(self) -> str | None: ...


class ProfilePlacement:
    """The planner's Placement for profiles; ``chosen`` maps each placed job to its profile.
    ``profiles``: what is known of the pools' profiles (a name missing is unbound and free)."""

    def __init__(self, profiles: Mapping[str, ProfileFacts], now: datetime) -> None:
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware")
        self._profiles = profiles
        self._now = now
        self._taken: set[str] = set()
        self._candidates: dict[int, tuple[list[str], str | None]] = {}
        self.chosen: dict[int, str] = {}

    def hosts_for(self, job: PlannedJob) -> HostChoice | None:
        # The store's PendingJob carries these; a job without them has no profile, no block.
        pool: tuple[str, ...] = getattr(job, "profiles", ())
        blocked_on: str | None = getattr(job, "blocked_on_host", None)
        # A host still running an earlier attempt of it would hold it queued until then.
        lingering_on: str | None = getattr(job, "lingering_on_host", None)
        avoid = frozenset(h for h in (blocked_on, lingering_on) if h)
        if not pool:
            return HostChoice(avoid=avoid) if avoid else ANY_HOST
        candidates = [name for name in pool if self._usable(name)]
        if not candidates:
            return None
        self._candidates[job.id] = (candidates, getattr(job, "last_profile", None))
        hosts = {self._host(name) for name in candidates}
        if None in hosts:
            return HostChoice(avoid=avoid)
        return HostChoice(allowed=frozenset(h for h in hosts if h is not None), avoid=avoid)

    def placed(self, job: PlannedJob, host: str) -> None:
        candidates, last = self._candidates.pop(job.id, ([], None))
        here = [name for name in candidates if self._host(name) in (host, None)]
        if not here:  # the planner only picks a host one of them can run on
            return
        # The last try's profile last; then one bound here before an unbound one; then the
        # pool's order (min keeps the first of equals).
        name = min(here, key=lambda n: (n == last, self._host(n) is None))
        self._taken.add(name)
        self.chosen[job.id] = name

    def _usable(self, name: str) -> bool:
        if name in self._taken:
            return False
        facts = self._profiles.get(name)
        if facts is None:
            return True
        return facts.busy_on is None and not cooling(facts.cooldown_until, self._now)

    def _host(self, name: str) -> str | None:
        facts = self._profiles.get(name)
        return None if facts is None else facts.host
