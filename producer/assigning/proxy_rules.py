"""Which proxy of its pool a job's next attempt leases: pure.

A job that asks for a proxy pool (common.identities.proxy_pools) can be placed only while a
proxy of its pool can take it at ``now``: not disabled, not banned, not cooling down, and under
its pool's per-proxy cap counting the jobs holding it in the fleet and those this plan gave it.
Of those, the least recently used is leased (this plan's leases count as uses), and the proxy
its last attempt held only if no other will do: a job sent back after a block goes out through
another exit address. A job of a sticky session (``proxy_session``) goes out through its
session's proxy while the session is live, waiting while that proxy is at its cap; once the
session is retired (a block, its pool's ``session_max_uses``) or its proxy cannot take jobs,
the session starts again on the proxy the rules above choose. A proxy puts no bound on hosts:
the rules for profiles (or none) decide where the job goes, these only whether it goes now and
with which proxy.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Protocol

from scrapefleet.common.identities.proxy_pools import unavailable
from scrapefleet.producer.assigning.planner import ANY_HOST, HostChoice, Placement, PlannedJob


class ProxyFacts(Protocol):
    """What the rules read of a proxy (the store's ProxyRow)."""

    @property
    def id(self) -> int: ...
    @property
    def pool(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def cooldown_until(self) -> datetime | None: ...
    @property
    def banned_until(self) -> datetime | None: ...
    @property
    def last_used_at(self) -> datetime | None: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def cap(self) -> int: ...


class SessionFacts(Protocol):
    """What the rules read of a sticky session (the store's SessionRow)."""

    @property
    def proxy_id(self) -> int: ...
    @property
    def live(self) -> bool: ...


class ProxyPlacement:
    """The planner's Placement for proxy pools, over ``inner`` (the profiles' rules, or None):
    ``chosen`` maps each placed job of a pool to the proxy it leases."""

    def __init__(
        self,
        proxies: Iterable[ProxyFacts],
        now: datetime,
        inner: Placement | None = None,
        sessions: Mapping[tuple[str, str], SessionFacts] | None = None,
    ) -> None:
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware")
        self._now = now
        self._inner = inner
        self._by_pool: dict[str, list[ProxyFacts]] = {}
        self._by_id: dict[int, ProxyFacts] = {}
        for proxy in proxies:
            self._by_pool.setdefault(proxy.pool, []).append(proxy)
            self._by_id[proxy.id] = proxy
        # (pool, key) -> the proxy of a live session, this plan's new ones included.
        self._bound = {key: row.proxy_id for key, row in (sessions or {}).items() if row.live}
        self._leased: dict[int, int] = {}  # proxy id -> jobs this plan gave it
        self._order: dict[int, int] = {}  # proxy id -> when this plan last gave it one
        # Per pool, a heap of (recency..., id) over its proxies available at ``now`` (which a
        # plan never changes), built on first use: an entry is stale once its proxy was leased
        # again (a newer entry was pushed), and a proxy at its cap leaves for the plan (caps
        # only fill during a plan).
        self._heaps: dict[str, list[tuple[int, float, int, int]]] = {}
        self.chosen: dict[int, int] = {}
        self._picked: tuple[int, ProxyFacts | None] = (-1, None)  # (job id, its pick)

    @property
    def inner(self) -> Placement | None:
        return self._inner

    def hosts_for(self, job: PlannedJob) -> HostChoice | None:
        pool: str | None = getattr(job, "proxy_pool", None)
        if pool is not None:
            # The planner calls placed() for this job, if at all, before any other call: the
            # pick made now is the one it leases then.
            self._picked = (job.id, self._pick(job, pool))
            if self._picked[1] is None:
                return None
        if self._inner is None:
            return ANY_HOST
        return self._inner.hosts_for(job)

    def placed(self, job: PlannedJob, host: str) -> None:
        if self._inner is not None:
            self._inner.placed(job, host)
        pool: str | None = getattr(job, "proxy_pool", None)
        if pool is None:
            return
        picked_for, proxy = self._picked
        if picked_for != job.id:
            proxy = self._pick(job, pool)
        if proxy is None:  # hosts_for said there was one, and nothing took it since
            return
        self._leased[proxy.id] = self._leased.get(proxy.id, 0) + 1
        self._order[proxy.id] = len(self.chosen)
        self.chosen[job.id] = proxy.id
        if pool in self._heaps:
            heapq.heappush(self._heaps[pool], self._entry(proxy))
        session: str | None = getattr(job, "proxy_session", None)
        if session is not None:
            self._bound[pool, session] = proxy.id

    def _pick(self, job: PlannedJob, pool: str) -> ProxyFacts | None:
        session: str | None = getattr(job, "proxy_session", None)
        bound = None if session is None else self._bound.get((pool, session))
        if bound is not None and bound in self._by_id:
            proxy = self._by_id[bound]
            if not self._unavailable(proxy):
                # A live session keeps its proxy: its job waits while that one is at its cap.
                return proxy if self._under_cap(proxy) else None
            # Its proxy cannot take jobs now: the session starts again on another.
        # Never used before any used, this plan's leases after every earlier use, the least
        # recently used first; then the lowest id. The last attempt's proxy only if no other.
        heap = self._heap(pool)
        best = self._top(heap)
        last: int | None = getattr(job, "last_proxy", None)
        if best is None or best.id != last:
            return best
        held = heapq.heappop(heap)
        other = self._top(heap)
        heapq.heappush(heap, held)
        return best if other is None else other

    def _heap(self, pool: str) -> list[tuple[int, float, int, int]]:
        if pool not in self._heaps:
            available = [p for p in self._by_pool.get(pool, ()) if not self._unavailable(p)]
            self._heaps[pool] = [self._entry(p) for p in available]
            heapq.heapify(self._heaps[pool])
        return self._heaps[pool]

    def _top(self, heap: list[tuple[int, float, int, int]]) -> ProxyFacts | None:
        """The heap's best current entry's proxy under its cap; stale and full ones dropped."""
        while heap:
            entry = heap[0]
            proxy = self._by_id[entry[3]]
            if entry == self._entry(proxy) and self._under_cap(proxy):
                return proxy
            heapq.heappop(heap)
        return None

    def _entry(self, proxy: ProxyFacts) -> tuple[int, float, int, int]:
        if proxy.id in self._order:
            return (2, 0.0, self._order[proxy.id], proxy.id)
        if proxy.last_used_at is None:
            return (0, 0.0, 0, proxy.id)
        return (1, proxy.last_used_at.timestamp(), 0, proxy.id)

    def _unavailable(self, proxy: ProxyFacts) -> bool:
        return bool(unavailable(proxy.state, proxy.cooldown_until, proxy.banned_until, self._now))

    def _under_cap(self, proxy: ProxyFacts) -> bool:
        return proxy.in_flight + self._leased.get(proxy.id, 0) < proxy.cap
