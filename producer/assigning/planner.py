"""Which pending job goes to which host: a pure function of plain values, no I/O.

The daemon (producer.producer_daemon) reads the hosts, their probe results, the database's in-flight
counts, the pending jobs and the busy lock keys, and hands them here; the plan it gets back is
written by scrapefleet.common.store.assign_jobs in the same transaction.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Protocol

from scrapefleet.common.errors import ProbeError
from scrapefleet.common.reads.queries import HostRow
from scrapefleet.common.status.document import HostStatus, takes_browser_jobs


class PlannedJob(Protocol):
    """What the planner reads of a pending job (the store's PendingJob)."""

    @property
    def id(self) -> int: ...
    @property
    def lock_key(self) -> str | None: ...
    @property
    def needs_browser(self) -> bool: ...
    @property
    def kind(self) -> str: ...


@dataclass(frozen=True)
class HostChoice:
    """Where one job may go: ``allowed`` hosts only (None: any), and ``avoid`` unless no other
    allowed host has a slot."""

    allowed: frozenset[str] | None = None
    avoid: frozenset[str] = frozenset()


ANY_HOST = HostChoice()


class Placement(Protocol):
    """Rules beyond slots and lock keys on where a job goes (profiles:
    producer.assigning.profile_rules). ``hosts_for`` None: the job waits for a later cycle;
    ``placed`` hears the host chosen."""

    def hosts_for(self, job: PlannedJob) -> HostChoice | None: ...
    def placed(self, job: PlannedJob, host: str) -> None: ...


class Admission(Protocol):
    """How many more jobs of each rate key and kind may go out now (producer.assigning.rate_budget):
    ``admits``: none of the job's budgets is used up; ``take``: the job was placed."""

    def admits(self, job_id: int) -> bool: ...
    def take(self, job_id: int) -> None: ...


@dataclass(frozen=True)
class HostSlots:
    name: str
    capacity: int
    in_flight: int  # jobs the host has or will run: max(probe's running, database's count)
    free: int  # how many more jobs it may take now (0 when it must get none)
    takes_browser: bool = True  # its browser stack can take a browser job now
    # Of ``free``, how many may need a browser: the host's browser limit (fewer than its
    # capacity while it is short of CPU or memory) less its browser jobs in flight. None: free.
    browser_free: int | None = None
    # The action kinds its consumer runs; None: any (a consumer that does not say).
    kinds: frozenset[str] | None = None


def host_kinds(probes: Mapping[str, HostStatus | ProbeError]) -> dict[str, frozenset[str]]:
    """Each reporting host's kinds as a set, one shared set per distinct report: computed once
    a probe round, so that a cycle's union of them (runnable_kinds) costs a few sets, not one
    per host."""
    shared: dict[frozenset[str], frozenset[str]] = {}
    kinds = {}
    for name, probe in probes.items():
        if isinstance(probe, HostStatus) and probe.kinds is not None:
            reported = frozenset(probe.kinds)
            kinds[name] = shared.setdefault(reported, reported)
    return kinds


def runnable_kinds(hosts: Sequence[HostSlots]) -> frozenset[str] | None:
    """The kinds some host with a free slot runs; None: any kind (one of them does not say).
    The pending read leaves the others out, so that a backlog of a kind no free host runs
    never fills the batch read for the hosts that are free."""
    reported: set[frozenset[str]] = set()
    for host in hosts:
        if host.free > 0:
            if host.kinds is None:
                return None
            reported.add(host.kinds)
    return frozenset().union(*reported)


def host_slots(
    hosts: Sequence[HostRow],
    probes: Mapping[str, HostStatus | ProbeError],
    in_flight: Mapping[str, int],
    min_memory_fraction: float,
    browser_in_flight: Mapping[str, int] | None = None,
    kinds: Mapping[str, frozenset[str]] | None = None,
) -> list[HostSlots]:
    """Free slots per host: capacity - max(host's running count, database's queued+processing);
    of those, browser slots: the browser limit the host reports less its browser jobs in the
    database (queued ones too, which it has yet to claim).

    A host gets no slot unless the database says it is active AND its probe succeeded AND the
    consumer itself reports active AND it has at least ``min_memory_fraction`` of its memory
    available: any doubt means no new work, never an overfilled host. ``kinds``: what each
    host runs (host_kinds); a host not in it runs any kind.
    """
    slots = []
    for host in hosts:
        probe = probes.get(host.name)
        db_count = in_flight.get(host.name, 0)
        running = probe.running if isinstance(probe, HostStatus) else 0
        load = max(running, db_count)
        usable = (
            host.state == "active"
            and isinstance(probe, HostStatus)
            and probe.state == "active"
            and _enough_memory(probe, min_memory_fraction)
        )
        free = max(0, host.capacity - load) if usable else 0
        browser = isinstance(probe, HostStatus) and takes_browser_jobs(probe.browser)
        browser_free = None
        if isinstance(probe, HostStatus) and probe.browser_limit is not None:
            busy = (browser_in_flight or {}).get(host.name, 0)
            browser_free = min(free, max(0, probe.browser_limit - busy))
        runs = None if kinds is None else kinds.get(host.name)
        slots.append(HostSlots(host.name, host.capacity, load, free, browser, browser_free, runs))
    return slots


def _enough_memory(status: HostStatus, min_fraction: float) -> bool:
    if status.memory_total_bytes <= 0:  # the consumer could not read it: do not guess
        return True
    return status.memory_available_bytes >= min_fraction * status.memory_total_bytes


def plan_assignments(
    hosts: Sequence[HostSlots],
    pending: Sequence[PlannedJob],
    busy_lock_keys: AbstractSet[str],
    placement: Placement | None = None,
    admission: Admission | None = None,
) -> list[tuple[int, str]]:
    """(job id, host) pairs. Jobs come in priority order and are taken in that order; each goes
    to the least-loaded host with a free slot (lowest in_flight/capacity, then name) that can run
    it: a browser job only to a host whose stack takes browser jobs now, any other job to any
    host. A job whose lock key is busy in the fleet, or already taken by an earlier job of this
    plan, is skipped, and so is a browser job when no browser host has a slot left: it stays
    pending for a later cycle and never holds up the jobs behind it. ``placement`` may narrow
    a job's hosts (the least-loaded of those it allows) or hold it back; ``admission`` (the
    rate limits) may hold it back, and hears of every job placed. A job goes only to a host
    that runs its kind: with none among those with a slot, it stays pending. A job pinned to a
    host goes to that host or waits, never elsewhere."""
    slots = _Slots(hosts)
    taken_keys: set[str] = set()
    plan: list[tuple[int, str]] = []
    runners = _KindRunners(hosts)
    for job in pending:
        heap = slots.browser_heap if job.needs_browser else slots.any_heap
        if not heap:
            if not slots.any_heap:
                break
            continue
        if _held_back(job, busy_lock_keys, taken_keys, admission):
            continue
        choice = ANY_HOST if placement is None else placement.hosts_for(job)
        if choice is None:
            continue
        choice = runners.narrow(_pinned(job, choice), job.kind)
        if choice is None:
            continue
        chosen = (
            slots.pop(heap)
            if choice == ANY_HOST
            else _best_allowed(hosts, slots.free, slots.browser_free, slots.load, job, choice)
        )
        if chosen is None:
            continue
        if placement is not None:
            placement.placed(job, hosts[chosen].name)
        if admission is not None:
            admission.take(job.id)
        if job.lock_key is not None:
            taken_keys.add(job.lock_key)
        plan.append((job.id, hosts[chosen].name))
        slots.take(chosen, job)
    return plan


def _held_back(
    job: PlannedJob,
    busy_lock_keys: AbstractSet[str],
    taken_keys: set[str],
    admission: Admission | None,
) -> bool:
    """A job whose lock key is busy (in the fleet or in this plan), or that the rate limits
    do not admit now."""
    if job.lock_key is not None and (job.lock_key in busy_lock_keys or job.lock_key in taken_keys):
        return True
    return admission is not None and not admission.admits(job.id)


class _KindRunners:
    """Which hosts run each kind, worked out once per kind in a plan."""

    def __init__(self, hosts: Sequence[HostSlots]) -> None:
        self.hosts = hosts
        self._known: dict[str, frozenset[str] | None] = {}  # kind -> its hosts; None: all

    def narrow(self, choice: HostChoice, kind: str) -> HostChoice | None:
        """``choice`` kept to the hosts that run ``kind``; None when none of them does."""
        if kind not in self._known:
            names = [h.name for h in self.hosts if h.kinds is None or kind in h.kinds]
            self._known[kind] = None if len(names) == len(self.hosts) else frozenset(names)
        only = self._known[kind]
        if only is None:
            return choice
        allowed = only if choice.allowed is None else choice.allowed & only
        return HostChoice(allowed, choice.avoid) if allowed else None


class _Slots:
    """The hosts' free slots during one plan, and two heaps of (load fraction, name, index,
    version) over them: every host with a slot, and the browser-capable ones. A host's entry is
    stale once its version moved on."""

    def __init__(self, hosts: Sequence[HostSlots]) -> None:
        self.hosts = hosts
        self.free = [h.free for h in hosts]
        self.browser_free = [h.free if h.browser_free is None else h.browser_free for h in hosts]
        self.load = [h.in_flight for h in hosts]
        self.version = [0] * len(hosts)
        self.any_heap: list[tuple[float, str, int, int]] = []
        self.browser_heap: list[tuple[float, str, int, int]] = []
        for i, host in enumerate(hosts):
            if host.free > 0:
                self.push(i)

    def push(self, i: int) -> None:
        entry = (self.load[i] / self.hosts[i].capacity, self.hosts[i].name, i, self.version[i])
        heapq.heappush(self.any_heap, entry)
        if self.hosts[i].takes_browser and self.browser_free[i] > 0:
            heapq.heappush(self.browser_heap, entry)

    def pop(self, heap: list[tuple[float, str, int, int]]) -> int | None:
        browser = heap is self.browser_heap
        while heap:
            _, _, i, seen = heapq.heappop(heap)
            if (
                seen == self.version[i]
                and self.free[i] > 0
                and (not browser or self.browser_free[i] > 0)
            ):
                return i
        return None

    def take(self, chosen: int, job: PlannedJob) -> None:
        self.free[chosen] -= 1
        if job.needs_browser:
            self.browser_free[chosen] -= 1
        self.load[chosen] += 1
        self.version[chosen] += 1
        if self.free[chosen] > 0:
            self.push(chosen)


def _pinned(job: PlannedJob, choice: HostChoice) -> HostChoice:
    """A job pinned to a host (submit --host; the store's PendingJob carries it) may go there
    only, whatever else allows it: if that host has no slot now, the job waits for one."""
    pinned: str | None = getattr(job, "pinned_host", None)
    if pinned is None:
        return choice
    allowed = frozenset({pinned}) if choice.allowed is None else choice.allowed & {pinned}
    return HostChoice(allowed=allowed)


def _best_allowed(
    hosts: Sequence[HostSlots],
    free: list[int],
    browser_free: list[int],
    load: list[int],
    job: PlannedJob,
    choice: HostChoice,
) -> int | None:
    """The least-loaded host with a slot that ``choice`` allows, one it avoids only if no other
    will do. A scan, not the heaps: few jobs are narrowed, and hosts are tens, not thousands."""
    usable = [
        i
        for i, host in enumerate(hosts)
        if free[i] > 0
        and (not job.needs_browser or (host.takes_browser and browser_free[i] > 0))
        and (choice.allowed is None or host.name in choice.allowed)
    ]
    preferred = [i for i in usable if hosts[i].name not in choice.avoid] or usable
    return min(preferred, key=lambda i: (load[i] / hosts[i].capacity, hosts[i].name), default=None)
