"""Which pending job goes to which host: a pure function of plain values, no I/O.

The daemon (producer.daemon) reads the hosts, their probe results, the database's in-flight
counts, the pending jobs and the busy lock keys, and hands them here; the plan it gets back is
written by scrapefleet.common.store.assign_jobs in the same transaction.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from scrapefleet.common.errors import ProbeError
from scrapefleet.common.host_status import HostStatus
from scrapefleet.common.queries import HostRow
from scrapefleet.common.store import PendingJob


@dataclass(frozen=True)
class HostSlots:
    name: str
    capacity: int
    in_flight: int  # jobs the host has or will run: max(probe's running, database's count)
    free: int  # how many more jobs it may take now (0 when it must get none)


def host_slots(
    hosts: Sequence[HostRow],
    probes: Mapping[str, HostStatus | ProbeError],
    in_flight: Mapping[str, int],
    min_memory_fraction: float,
) -> list[HostSlots]:
    """Free slots per host: capacity - max(host's running count, database's queued+processing).

    A host gets no slot unless the database says it is active AND its probe succeeded AND the
    consumer itself reports active AND it has at least ``min_memory_fraction`` of its memory
    available: any doubt means no new work, never an overfilled host.
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
        slots.append(HostSlots(host.name, host.capacity, load, free))
    return slots


def _enough_memory(status: HostStatus, min_fraction: float) -> bool:
    if status.memory_total_bytes <= 0:  # the consumer could not read it: do not guess
        return True
    return status.memory_available_bytes >= min_fraction * status.memory_total_bytes


def plan_assignments(
    hosts: Sequence[HostSlots],
    pending: Sequence[PendingJob],
    busy_lock_keys: AbstractSet[str],
) -> list[tuple[int, str]]:
    """(job id, host) pairs. Jobs come in priority order and are taken in that order; each goes
    to the least-loaded host with a free slot (lowest in_flight/capacity, then name). A job whose
    lock key is busy in the fleet, or already taken by an earlier job of this plan, is skipped
    (it stays pending for a later cycle)."""
    # Heap of (load fraction, name, index); a host leaves the heap when its slots run out.
    free = [h.free for h in hosts]
    load = [h.in_flight for h in hosts]
    heap = [(load[i] / h.capacity, h.name, i) for i, h in enumerate(hosts) if h.free > 0]
    heapq.heapify(heap)
    taken_keys: set[str] = set()
    plan: list[tuple[int, str]] = []
    for job in pending:
        if not heap:
            break
        if job.lock_key is not None:
            if job.lock_key in busy_lock_keys or job.lock_key in taken_keys:
                continue
            taken_keys.add(job.lock_key)
        _, name, i = heapq.heappop(heap)
        plan.append((job.id, name))
        free[i] -= 1
        load[i] += 1
        if free[i] > 0:
            heapq.heappush(heap, (load[i] / hosts[i].capacity, name, i))
    return plan
