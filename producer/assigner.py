"""The producer daemon: assigns pending jobs to consumer hosts under their caps.

Two kinds of cycle, run one at a time (``_cycle_lock``):

- a full cycle, every ``producer_interval_s`` (APScheduler interval job): probe the hosts,
  record the results and the host-state changes, rescue stale jobs, then assign;
- a wake cycle, when a consumer NOTIFYs that it finished a job: assign only, with the probe
  results of the last full cycle. It is the hot path (hundreds per second under load), so it is
  a handful of indexed queries: no probe, no host writes. Health counts failures per interval,
  so "3 failed probes" means three ticks, never three wake-ups in a burst.

Wake cycles run on the listener thread itself: a NOTIFY that arrives during a cycle stays
queued on the listening connection and starts the next cycle as soon as this one ends, so no
wake-up is lost and none piles up.

Only the holder of the advisory lock (producer.leader) writes anything; the others are hot
standbys trying the lock at each interval. The one exception is each producer's own row in
``producers`` (common.store.fleet): the leader stamps it in every full cycle's assignment
transaction, a standby at every try, so that a dead producer shows as stale rather than as
nothing at all (common.reads.producer_status).

Shutdown is the producer's common.runtime.lifecycle.Lifecycle: a warm stop lets the cycle in
progress and the background jobs finish, then releases the lock, for at most
PRODUCER_DRAIN_TIMEOUT_S; a cold stop (a second signal, or that bound passed) waits for nothing:
every change is one transaction, so an abandoned cycle rolls back, and the lock goes with the
process's session.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.constants import (
    PRODUCER_ADVISORY_LOCK_KEY,
    PRODUCER_ROWS_KEEP_S,
)
from scrapefleet.common.db.engines import describe, is_connection_error, transaction, wrapped_errors
from scrapefleet.common.errors import DatabaseUnavailable, ProbeError
from scrapefleet.common.reads import queries
from scrapefleet.common.runtime import metrics
from scrapefleet.common.runtime.lifecycle import PRODUCER_DRAIN_TIMEOUT_S, DaemonState, Lifecycle
from scrapefleet.common.runtime.logging_setup import fields
from scrapefleet.common.runtime.sd_notify import Notifier
from scrapefleet.common.settings import Settings
from scrapefleet.common.status.document import HostStatus
from scrapefleet.common.store.fleet import ProducerIdentity
from scrapefleet.common.store.statuses import HostState
from scrapefleet.producer.assignment_report import AssignmentTally
from scrapefleet.producer.host_health import record_fleet_health
from scrapefleet.producer.leader import LeaderSession
from scrapefleet.producer.operator_jobs import OperatorJobs
from scrapefleet.producer.planner import (
    host_kinds,
    host_slots,
    plan_assignments,
    runnable_kinds,
)
from scrapefleet.producer.probe import Probe
from scrapefleet.producer.probing import RoutingProbe, probe_target
from scrapefleet.producer.profile_steps import bind_assigned_profiles, profile_placement
from scrapefleet.producer.rate_steps import RateControl
from scrapefleet.producer.start_grace import StartGrace
from scrapefleet.producer.wakeup import WakeListener

log = logging.getLogger(__name__)

IDLE_CHECK_S = 0.1  # how often run(until_idle=True) looks for unfinished jobs
RUN_CHECK_S = 1.0  # run()'s sleep when not watching for idle; a stop wakes it at once


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


@dataclass(frozen=True)
class Probed:
    result: HostStatus | ProbeError
    in_flight_at_probe: int  # the database's count read just before the probe


def package_version() -> str:
    try:
        return importlib.metadata.version("scrapefleet")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        return "unknown"


class Producer:
    """``probe``: the probe for every host (tests inject one); by default local hosts read
    their status file and hosts with an address are asked over SSH. ``name``: this process in
    the ``producers`` table (default host:pid; tests running several in one process name
    them)."""

    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        probe: Probe | None = None,
        *,
        drain_timeout_s: float = PRODUCER_DRAIN_TIMEOUT_S,
        name: str | None = None,
    ) -> None:
        self.settings = settings
        host = socket.gethostname()
        self.identity = ProducerIdentity(
            name=name or f"{host}:{os.getpid()}",
            host=host,
            pid=os.getpid(),
            version=package_version(),
            interval_s=settings.producer_interval_s,
            webhook_secret_set=settings.webhook_secret is not None,
        )
        self._engine = engine
        self._probe: Probe = probe if probe is not None else RoutingProbe(settings)
        self._leader = LeaderSession(engine.url, PRODUCER_ADVISORY_LOCK_KEY, settings=settings)
        self._probed: dict[str, Probed] = {}
        self._kinds: dict[str, frozenset[str]] = {}  # what each host runs, as last probed
        self._cycle_lock = threading.Lock()
        self._stop_lock = threading.Lock()  # one stop() at a time; a second waits for the first
        self.lifecycle = Lifecycle("producer", drain_timeout_s=drain_timeout_s)
        self._scheduler: BackgroundScheduler | None = None
        self._wake: WakeListener | None = None
        self._standby_logged = False
        self._closed = False
        self._paused = False  # as last read from fleet_control, to log changes once
        self.operator_jobs = OperatorJobs(
            engine, settings, lambda: self.is_leader, self.identity.name
        )
        self._rates = RateControl(settings)
        self._assignments = AssignmentTally()  # said once a minute, not once a cycle
        self._monotonic = time.monotonic
        self._start_grace = StartGrace(settings.probe_start_grace_s)
        self._systemd = Notifier()  # READY, WATCHDOG per full cycle, STOPPING: when systemd asks
        # Figures for tests, benchmarks and the debug log.
        self.last_cycle_duration_s = 0.0
        self.last_full_cycle_duration_s: float | None = None  # the leader's, for its row
        self.last_assigned = 0
        self.total_assigned = 0
        self.cycles = 0

    @property
    def is_leader(self) -> bool:
        return self._leader.is_leader

    @property
    def listening(self) -> bool:
        """True once the wake-up listener is LISTENing (a NOTIFY before that is missed and
        covered by the next interval cycle)."""
        return self._wake is not None and self._wake.listening.is_set()

    @property
    def leader_backend_pid(self) -> int | None:
        """The server pid of the connection that holds (or tries) the lock."""
        return self._leader.backend_pid

    # -- one cycle ----------------------------------------------------------------------------

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
            reason = describe(exc)
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
        assigned = self._assign(record_cycle=full)
        if summary := self._assignments.add(assigned, self._monotonic()):
            log.info("%s", summary)
        return replace(report, assigned=len(assigned))

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

    # -- assignment (every cycle) -------------------------------------------------------------

    def _assign(self, *, record_cycle: bool = False) -> list[str]:
        """Assign what fits; the host of each job assigned."""
        with self._leader.transaction() as conn:
            if record_cycle:  # a full cycle: one upsert of this producer's row, never per wake
                store.record_leader_cycle(conn, self.identity, self.last_full_cycle_duration_s)
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
                current_probes(self._probed, in_flight),
                in_flight,
                self.settings.min_memory_available_fraction,
                snapshot.browser_in_flight,
                self._kinds,
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
            placement = profile_placement(conn, pending, now)
            plan = plan_assignments(slots, pending, busy, placement, admission)
            assigned = store.assign_jobs(conn, plan)
            if placement is not None:
                bind_assigned_profiles(conn, placement, assigned)
        hosts = [host for _, host in assigned]
        if hosts:
            log.debug("assigned jobs=%d free_slots=%d hosts=%s", len(hosts), free, hosts)
        return hosts

    def _note_pause(self, paused: bool) -> bool:
        if paused != self._paused:
            log.warning("assignment %s by operator", "paused" if paused else "resumed")
            self._paused = paused
        return paused

    # -- the daemon ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the interval job and the wake listener in background threads."""
        if self._scheduler is not None:
            return
        if not self.lifecycle.started():  # a stop came first: nothing to start
            return
        self._register()
        self._scheduler = BackgroundScheduler(logger=_quiet_scheduler_logger(), timezone=UTC)
        self._scheduler.add_job(
            self._interval_cycle,
            "interval",
            seconds=self.settings.producer_interval_s,
            id="producer-cycle",
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,
            next_run_time=datetime.now(UTC),
        )
        self.operator_jobs.start(self._scheduler)
        self._scheduler.start()
        url = self._engine.url.render_as_string(hide_password=False)
        self._wake = WakeListener(
            url,
            self._wake_cycle,
            debounce_s=self.settings.wake_debounce_s,
            retry_s=self.settings.producer_interval_s,
            stopping=self.lifecycle.stop_event,
        )
        self._wake.start()

    def _register(self) -> None:
        """This producer's row, fresh (a standby until it takes the lock), and rows of producers
        long gone pruned. Cycles upsert the row anyway: a database down now is no reason not to
        start."""
        try:
            with transaction(self._engine) as conn:
                store.register_producer(conn, self.identity)
                store.prune_producers(conn, PRODUCER_ROWS_KEEP_S)
        except Exception as exc:
            log.warning("could not register this producer, its first cycle will: %s", describe(exc))

    def _interval_cycle(self) -> None:
        self.run_cycle(full=True)

    def _wake_cycle(self) -> None:
        if self._leader.is_leader:
            self.run_cycle(full=False)

    def run(self, until_idle: bool = False) -> int:
        """Run until stopped (SIGTERM/SIGINT when the caller installed
        common.runtime.lifecycle.StopSignals) or, with ``until_idle``, until no job is pending,
        queued or processing; returns the exit code."""
        self.start()
        try:
            while self.lifecycle.is_running:
                if until_idle and self._idle():
                    log.info("no job pending, queued or processing: exiting")
                    self.lifecycle.request_stop("idle")
                    break
                self.lifecycle.wait(IDLE_CHECK_S if until_idle else RUN_CHECK_S)
        finally:
            self.stop()
        return 0

    def request_stop(self, reason: str = "stop requested") -> None:
        self.lifecycle.request_stop(reason)

    def stop(self) -> None:
        """Drain (the running cycle and background jobs finish, the lock is released) for at
        most the drain timeout, then stop cold. Idempotent; safe without start()."""
        with self._stop_lock:
            if self.lifecycle.state is DaemonState.STOPPED:
                return
            self.lifecycle.request_stop("stop requested")
            self._systemd.stopping()
            # The warm part runs in its own thread so that a cold stop can leave it behind.
            finisher = threading.Thread(target=self._wind_down, name="producer-stop", daemon=True)
            finisher.start()
            if not self.lifecycle.drain_until(lambda: not finisher.is_alive()):
                self._stop_cold()
            self.lifecycle.stopped()

    def _wind_down(self) -> None:
        try:
            if self._wake is not None:
                self._wake.join(self.lifecycle.drain_timeout_s)
            if self._scheduler is not None:
                self._scheduler.shutdown(wait=True)  # waits for the cycle and jobs in progress
            self.operator_jobs.close()
        finally:
            self.close()  # the lock is released even if a background job failed to stop

    def _stop_cold(self) -> None:
        """Not waiting for the cycle in progress: it rolls back when the process ends, and the
        server drops the advisory lock with the leader's session. In a process that goes on
        (tests), the wind-down thread still finishes in the background and releases it."""
        log.warning("producer stopped cold: the cycle in progress, if any, is abandoned")

    def close(self) -> None:
        """Release the lock and the probe (for producers driven by run_cycle alone)."""
        with self._cycle_lock:
            if self._closed:
                return
            self._closed = True
            self._leader.release()
            self._probe.close()
            self._record_stopped()
        log.info("producer stopped, leader lock released")

    def _record_stopped(self) -> None:
        """Readers then say "stopped" at once rather than waiting for the row to go stale."""
        try:
            with transaction(self._engine) as conn:
                store.record_producer_stopped(conn, self.identity.name)
        except Exception as exc:  # stopping goes on; the row goes stale instead
            log.debug("could not mark this producer stopped: %s", describe(exc))

    def _idle(self) -> bool:
        try:
            with wrapped_errors(), self._engine.connect() as conn:
                return not queries.has_unfinished_jobs(conn)
        except DatabaseUnavailable:
            return False


class _DropMaxInstancesWarning(logging.Filter):
    """A tick that finds the previous cycle still running is expected (a slow probe round);
    coalescing already handles it, so APScheduler's warning is noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "maximum number of running instances" not in record.getMessage()


def _quiet_scheduler_logger() -> logging.Logger:
    logger = logging.getLogger("apscheduler.scheduler.producer")
    if not any(isinstance(f, _DropMaxInstancesWarning) for f in logger.filters):
        logger.addFilter(_DropMaxInstancesWarning())
    return logger


def current_probes(
    last_probes: Mapping[str, Probed], in_flight: Mapping[str, int]
) -> dict[str, HostStatus | ProbeError]:
    """The last probe results, their running counts brought up to date.

    Between probes the database's count is fresh and the probe's is not. What the probe
    adds is the jobs a host runs beyond what the database gives it (a job past its timeout
    or rescued, still running there): its ``stuck`` count. Keep that on top of today's
    count, so a slot freed since the probe is refilled now, not at the next tick. A
    consumer too old to report ``stuck``: the excess of its running count over the
    database's count at the probe.
    """
    current: dict[str, HostStatus | ProbeError] = {}
    for name, probed in last_probes.items():
        result = probed.result
        if isinstance(result, HostStatus):
            excess = (
                result.stuck
                if result.stuck is not None
                else max(0, result.running - probed.in_flight_at_probe)
            )
            result = replace(result, running=in_flight.get(name, 0) + excess)
        current[name] = result
    return current
