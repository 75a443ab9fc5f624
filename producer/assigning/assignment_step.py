"""The assignment step every cycle ends with, full or wake: what fits, assigned.

In one transaction on the leader's connection: the fleet's snapshot (and an operator's pause),
the rate limits learnt from the last attempts, each host's free slots from the recent probes
(producer.probes.recent_probes) and the database's counts, the pending jobs that may run, then the
plan (producer.assigning.planner, a pure function) written by common.store. Apart from the cycle
because it is the hot path: a wake cycle is this step alone, a handful of indexed queries.
AssignmentStep is the cycle's (one at a time, under the producer's cycle lock); it is given what
it reads when it is built, and the last probes with each call.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime

from scrapefleet.common import store, tracing_jobs
from scrapefleet.common.reads import queries
from scrapefleet.common.settings import Settings
from scrapefleet.common.store.producing.fleet import ProducerIdentity
from scrapefleet.producer.assigning.planner import host_slots, plan_assignments, runnable_kinds
from scrapefleet.producer.assigning.profile_steps import profile_placement
from scrapefleet.producer.assigning.proxy_steps import lease_assigned, proxy_placement
from scrapefleet.producer.assigning.rate_steps import RateControl
from scrapefleet.producer.leader import LeaderSession
from scrapefleet.producer.probes.recent_probes import Probed, current_probes

# One logger for every part of the producer: its lines keep the name they had.
log = logging.getLogger("scrapefleet.producer.producer_daemon")


class AssignmentStep:
    def __init__(
        self,
        settings: Settings,
        identity: ProducerIdentity,
        leader: LeaderSession,
        rates: RateControl,
    ) -> None:
        self.settings = settings
        self.identity = identity
        self._leader = leader
        self._rates = rates
        self._paused = False  # as last read from fleet_control, to log changes once

    def assign(
        self,
        probed: Mapping[str, Probed],
        kinds: Mapping[str, frozenset[str]],
        *,
        record_cycle: bool = False,
        full_cycle_s: float | None = None,
    ) -> list[str]:
        """Assign what fits, by the last full cycle's probes (``probed``, and the kinds each
        host runs); the host of each job assigned. ``record_cycle``: a full cycle, which
        records this producer's row with ``full_cycle_s``."""
        with self._leader.transaction() as conn:
            if record_cycle:  # a full cycle: one upsert of this producer's row, never per wake
                store.record_leader_cycle(conn, self.identity, full_cycle_s)
            # An operator's fleet-wide pause (dashboard), read every cycle with the hosts.
            snapshot = queries.fleet_snapshot(conn)
            if self._note_pause(snapshot.paused):
                return []
            now = datetime.now(UTC)
            # A site's push-back slows its key from this very cycle: the attempt that got it
            # woke us. One read of the audit rows since the last cycle's.
            self._rates.learn(conn, now)
            in_flight = snapshot.in_flight
            slots = host_slots(
                snapshot.hosts,
                current_probes(dict(probed), in_flight),
                in_flight,
                self.settings.min_memory_available_fraction,
                snapshot.browser_in_flight,
                dict(kinds),
            )
            free = sum(s.free for s in slots)
            if free == 0:
                return []
            browser_ok = any(s.free and s.takes_browser and s.browser_free != 0 for s in slots)
            pending, admission = self._rates.lock_pending(
                conn, free, browser_ok=browser_ok, now=now, only_kinds=runnable_kinds(slots)
            )
            if not pending:
                return []
            # The pending query already leaves out busy keys; this read is the planner's
            # second guard and is skipped when no candidate has a key at all.
            busy = queries.busy_lock_keys(conn) if any(p.lock_key for p in pending) else set()
            placement = proxy_placement(conn, pending, now, profile_placement(conn, pending, now))
            plan = plan_assignments(slots, pending, busy, placement, admission)
            assigned = store.assign_jobs(conn, plan)
            tracing_jobs.assigned_read(conn, assigned)
            if placement is not None:
                lease_assigned(conn, placement, assigned)
        hosts = [host for _, host in assigned]
        if hosts:
            log.debug("assigned jobs=%d free_slots=%d hosts=%s", len(hosts), free, hosts)
        return hosts

    def _note_pause(self, paused: bool) -> bool:
        if paused != self._paused:
            log.warning("assignment %s by operator", "paused" if paused else "resumed")
            self._paused = paused
        return paused
