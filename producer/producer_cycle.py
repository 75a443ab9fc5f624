"""One producer cycle: who leads, and what a full cycle does before it assigns.

Two kinds of cycle, run one at a time (``_cycle_lock``): a full cycle, every
``producer_interval_s``, probes the hosts, records the results and the host-state changes,
rescues stale jobs, then assigns; a wake cycle assigns only, with the probe results of the last
full cycle (producer.probes.recent_probes). A standby tries the lock at the interval only. A cycle
never raises for a database that went away: its report says so and the next one reconnects.

Apart from the daemon (producer.producer_daemon), which decides when a cycle runs, and from the
assignment step (producer.assigning.assignment_step), which is the part every cycle shares.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from scrapefleet.common import store
from scrapefleet.common.db.engines import is_connection_error, transaction
from scrapefleet.common.error_lines import first_line
from scrapefleet.common.errors import DatabaseUnavailable, ProbeError
from scrapefleet.common.reads import queries
from scrapefleet.common.runtime import metrics
from scrapefleet.common.runtime.logging_setup import fields
from scrapefleet.common.status.document import HostStatus
from scrapefleet.common.store.statuses import HostState
from scrapefleet.producer.assigning.planner import host_kinds
from scrapefleet.producer.probes.probe_writes import record_fleet_health
from scrapefleet.producer.probes.recent_probes import Probed
from scrapefleet.producer.probes.routing_probe import probe_target
from scrapefleet.producer.producer_state import ProducerBase

# One logger for every part of the producer: its lines keep the name they had.
log = logging.getLogger("scrapefleet.producer.producer_daemon")


@dataclass(frozen=True)
class CycleReport:
    leader: bool  # this producer held the lock for this cycle
    full: bool = True
    assigned: int = 0
    rescued: int = 0  # processing jobs without heartbeat sent back
    requeued: int = 0  # queued jobs of unavailable hosts sent back
    transitions: tuple[tuple[str, str, str], ...] = ()  # (host, from, to)
    duration_s: float = 0.0
    error: str | None = None  # why the cycle stopped early (it is retried next cycle)
    # When a site's Crawl-delay lets its next page start: the daemon wakes a cycle then.
    next_paced_start: datetime | None = None


class ProducerCycle(ProducerBase):
    def run_cycle(self, *, full: bool = True) -> CycleReport:
        """Run one cycle now (waiting for a running one to end). Never raises for a database
        that went away: the report says so and the next cycle reconnects."""
        with self._cycle_lock:
            return self._guarded_cycle(full)

    def _guarded_cycle(self, full: bool) -> CycleReport:
        if self.lifecycle.stopping:
            return CycleReport(leader=self.is_leader, full=full, error="stopping")
        started = time.perf_counter()
        try:
            report = self._cycle(full)
        except Exception as exc:
            error = self._cycle_failed(exc)
            report = CycleReport(leader=self.is_leader, full=full, error=error)
        duration = time.perf_counter() - started
        report = replace(report, duration_s=duration)
        if full:  # a cycle ended, however it went: the process is not hung
            self._systemd.ready()
            self._systemd.watchdog()
        self.cycles += 1
        self.last_cycle_duration_s = duration
        self.last_assigned = report.assigned
        self.total_assigned += report.assigned
        if report.leader and report.error is None and full:
            self.last_full_cycle_duration_s = duration
        if report.leader and report.error is None:
            metrics.ASSIGNMENT_CYCLE_SECONDS.labels(cycle="full" if full else "wake").observe(
                duration
            )
            metrics.JOBS_ASSIGNED_PER_CYCLE.observe(report.assigned)
            metrics.JOBS_ASSIGNED.inc(report.assigned)
        log.debug(
            "cycle full=%s leader=%s assigned=%d duration_ms=%.2f",
            full,
            report.leader,
            report.assigned,
            duration * 1000,
        )
        return report

    def _cycle_failed(self, exc: Exception) -> str:
        self._rates.lost_lead()  # what it learnt this cycle was rolled back with the cycle
        if isinstance(exc, DatabaseUnavailable) or is_connection_error(exc):
            reason = first_line(exc)
            log.warning("database connection lost mid-cycle, retrying next cycle: %s", reason)
            # The server dropped the session, and the lock with it: reconnect and retake.
            self._leader.drop()
            return reason
        # A bug or an unexpected statement error: the transaction rolled back; keep running.
        log.exception("producer cycle failed, retrying next cycle")
        return f"{type(exc).__name__}: {exc}"

    def _cycle(self, full: bool) -> CycleReport:
        # A standby tries the lock at the interval, not on every wake-up of the active producer.
        if not self._leader.is_leader:
            if not full:
                return CycleReport(leader=False, full=full)
            if not self._take_lead():
                with transaction(self._engine) as conn:
                    store.record_standby_try(conn, self.identity)
                return CycleReport(leader=False, full=full)
        report = CycleReport(leader=True, full=full)
        if full:
            with self._leader.transaction() as conn:
                snapshot = queries.fleet_snapshot(conn)
            hosts, in_flight = snapshot.hosts, snapshot.in_flight
            with self._cycle_lock_released():
                results = self._probe_hosts(hosts)
            self._probed = {
                name: Probed(result, in_flight.get(name, 0)) for name, result in results.items()
            }
            self._kinds = host_kinds(results)
            transitions = self._record_health(hosts, results)
            rescued, requeued = self._rescue()
            report = replace(report, transitions=transitions, rescued=rescued, requeued=requeued)
        assigned = self._assignment.assign(
            self._probed,
            self._kinds,
            record_cycle=full,
            full_cycle_s=self.last_full_cycle_duration_s,
        )
        if summary := self._assignments.add(assigned, self._monotonic()):
            log.info("%s", summary)
        paced = self._rates.next_paced_start(datetime.now(UTC))
        return replace(report, assigned=len(assigned), next_paced_start=paced)

    @contextlib.contextmanager
    def _cycle_lock_released(self) -> Iterator[None]:
        """Let wake cycles run while this full cycle waits for its probe round.

        A host that hangs after connect holds the round for the whole probe timeout; with the
        lock held, the healthy hosts would get no job for that long. Wake cycles meanwhile
        assign with the previous round's results, as they always do. Only the probe runs
        unlocked: it does not touch the leader connection, and another full cycle cannot start
        (the interval job has max_instances=1). Called with the lock held (from _cycle).
        """
        self._cycle_lock.release()
        try:
            yield
        finally:
            self._cycle_lock.acquire()

    def _take_lead(self) -> bool:
        if self._leader.try_acquire():
            log.info(
                "leader lock taken, this producer assigns (backend_pid=%s)",
                self._leader.backend_pid,
            )
            self._standby_logged = False
            self._start_grace.lead_taken(self._monotonic())
            return True
        if not self._standby_logged:
            log.info("another producer holds the leader lock: standing by")
            self._standby_logged = True
        return False

    # -- full-cycle steps ---------------------------------------------------------------------

    def _probe_hosts(self, hosts: list[queries.HostRow]) -> dict[str, HostStatus | ProbeError]:
        # A disabled host is out of the fleet until an operator enables it: no probing.
        targets = [probe_target(h, self.settings) for h in hosts if h.state != HostState.DISABLED]
        try:
            if not targets:
                self._probe.probe_all([])  # it closes its connections to the hosts gone
                return {}
            with metrics.PROBE_ROUND_SECONDS.time():
                return dict(self._probe.probe_all(targets))
        except Exception as exc:  # a probe bug must cost this round, not the daemon
            log.exception("probe round failed")
            failure = ProbeError(f"probe round failed: {type(exc).__name__}: {exc}")
            return {t.name: failure for t in targets}

    def _record_health(
        self, hosts: list[queries.HostRow], results: Mapping[str, HostStatus | ProbeError]
    ) -> tuple[tuple[str, str, str], ...]:
        threshold = self.settings.probe_failures_offline
        results, held = self._start_grace.counted(results, self._monotonic())
        if held:
            log.debug("start-up grace: failed probes not counted yet hosts=%s", held)
        for name in held:  # the metrics count every failed probe; only the host's record waits
            metrics.PROBES.labels(host=name).inc()
            metrics.PROBE_FAILURES.labels(host=name).inc()
        with self._leader.transaction() as conn:
            # Batched; a value the database refuses still costs that host alone.
            named = [(host.name, host.state) for host in hosts]
            return record_fleet_health(conn, named, results, threshold)

    def _rescue(self) -> tuple[int, int]:
        # Separate transactions: each sets its own audit message for the rest of its transaction.
        with self._leader.transaction() as conn:
            rescued = store.rescue_stale_processing(
                conn, self.settings.rescue_after_s, self.settings.lock_linger_s
            )
        with self._leader.transaction() as conn:
            requeued = store.requeue_from_unavailable_hosts(conn, self.settings.offline_grace_s)
        if rescued:
            with self._leader.transaction() as conn:
                hosts = queries.rescued_from(conn, rescued)
            log.warning(
                "rescued jobs without heartbeat count=%d hosts=%s ids=%s",
                len(rescued),
                ",".join(f"{host}:{n}" for host, n in hosts.items()) or "-",
                rescued[:20],
                # One host (the usual case: its consumer died): the line names it as a field.
                extra=fields(host=next(iter(hosts))) if len(hosts) == 1 else None,
            )
        if requeued:
            log.warning(
                "requeued jobs of unavailable hosts count=%d ids=%s", len(requeued), requeued[:20]
            )
        return len(rescued), len(requeued)
