"""The producer daemon: assigns pending jobs to consumer hosts under their caps.

Producer is put together from its parts (producer.producer_state declares what they share):
producer.producer_cycle runs one cycle, full (probe, health, rescue, then assign) or wake
(assign only), and producer.assigning.assignment_step is the assignment every cycle ends with. This
module is the daemon around them: when cycles run, how it starts, and how it stops.

- Full cycles run every ``producer_interval_s`` (APScheduler interval job). Wake cycles run
  when a consumer NOTIFYs that it finished a job: the hot path (hundreds per second under load),
  a handful of indexed queries, no probe, no host writes. Health counts failures per interval,
  so "3 failed probes" means three ticks, never three wake-ups in a burst.
- Wake cycles run on the listener thread itself: a NOTIFY that arrives during a cycle stays
  queued on the listening connection and starts the next cycle as soon as this one ends, so no
  wake-up is lost and none piles up.

Only the holder of the advisory lock (producer.leader) writes anything; the others are hot
standbys trying the lock at each interval. The one exception is each producer's own row in
``producers`` (common.store.producing.fleet): the leader stamps it in every full cycle's assignment
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
from datetime import UTC, datetime

from apscheduler.schedulers import SchedulerNotRunningError
from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.constants import (
    PRODUCER_ADVISORY_LOCK_KEY,
    PRODUCER_ROWS_KEEP_S,
)
from scrapefleet.common.db.engines import transaction, wrapped_errors
from scrapefleet.common.error_lines import first_line
from scrapefleet.common.errors import DatabaseUnavailable
from scrapefleet.common.reads import queries
from scrapefleet.common.runtime.lifecycle import PRODUCER_DRAIN_TIMEOUT_S, DaemonState, Lifecycle
from scrapefleet.common.runtime.sd_notify import Notifier
from scrapefleet.common.settings import Settings
from scrapefleet.common.store.producing.fleet import ProducerIdentity
from scrapefleet.producer.assigning.assignment_report import AssignmentTally
from scrapefleet.producer.assigning.assignment_step import AssignmentStep
from scrapefleet.producer.assigning.rate_steps import RateControl
from scrapefleet.producer.background.background_jobs import OperatorJobs
from scrapefleet.producer.leader import LeaderSession
from scrapefleet.producer.probes.local_probe import Probe
from scrapefleet.producer.probes.recent_probes import Probed
from scrapefleet.producer.probes.routing_probe import RoutingProbe
from scrapefleet.producer.probes.start_grace import StartGrace
from scrapefleet.producer.producer_cycle import CycleReport, ProducerCycle
from scrapefleet.producer.wakeup import WakeListener

log = logging.getLogger(__name__)

IDLE_CHECK_S = 0.1  # how often run(until_idle=True) looks for unfinished jobs
RUN_CHECK_S = 1.0  # run()'s sleep when not watching for idle; a stop wakes it at once


def package_version() -> str:
    try:
        return importlib.metadata.version("scrapefleet")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        return "unknown"


class Producer(ProducerCycle):
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
        self._probe = probe if probe is not None else RoutingProbe(settings)
        self._leader = LeaderSession(engine.url, PRODUCER_ADVISORY_LOCK_KEY, settings=settings)
        self._probed: dict[str, Probed] = {}
        self._kinds: dict[str, frozenset[str]] = {}
        self._cycle_lock = threading.Lock()
        self._stop_lock = threading.Lock()  # one stop() at a time; a second waits for the first
        self.lifecycle = Lifecycle("producer", drain_timeout_s=drain_timeout_s)
        self._scheduler: BackgroundScheduler | None = None
        self._wake: WakeListener | None = None
        self._standby_logged = False
        self._closed = False
        self.operator_jobs = OperatorJobs(
            engine, settings, lambda: self.is_leader, self.identity.name
        )
        self._rates = RateControl(settings)
        self._assignment = AssignmentStep(settings, self.identity, self._leader, self._rates)
        self._assignments = AssignmentTally()
        self._monotonic = time.monotonic
        self._start_grace = StartGrace(settings.probe_start_grace_s)
        self._systemd = Notifier()
        self.last_cycle_duration_s = 0.0
        self.last_full_cycle_duration_s = None
        self.last_assigned = 0
        self.total_assigned = 0
        self.cycles = 0

    @property
    def listening(self) -> bool:
        """True once the wake-up listener is LISTENing (a NOTIFY before that is missed and
        covered by the next interval cycle)."""
        return self._wake is not None and self._wake.listening.is_set()

    @property
    def leader_backend_pid(self) -> int | None:
        """The server pid of the connection that holds (or tries) the lock."""
        return self._leader.backend_pid

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
                spawn_limit = self.settings.spawn_per_host_per_minute
                store.save_fleet_limits(conn, spawn_per_host_per_minute=spawn_limit)
        except Exception as exc:
            log.warning(
                "could not register this producer, its first cycle will: %s", first_line(exc)
            )

    def _interval_cycle(self) -> None:
        self._pace(self.run_cycle(full=True))

    def _wake_cycle(self) -> None:
        if self._leader.is_leader:
            self._pace(self.run_cycle(full=False))

    def _pace(self, report: CycleReport) -> None:
        """Wake a cycle when a site's Crawl-delay lets its next page start: a delay shorter
        than producer_interval_s is kept, where waiting for the next interval stretched every
        gap to the interval. One pending wake-up, the earliest (each cycle reschedules it)."""
        when = report.next_paced_start
        if when is None or self._scheduler is None or not self.lifecycle.is_running:
            return
        with contextlib.suppress(SchedulerNotRunningError):  # stopping meanwhile
            self._scheduler.add_job(
                self._wake_cycle,
                "date",
                run_date=when,
                id="paced-wake",
                replace_existing=True,
                misfire_grace_time=None,
            )

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
            log.debug("could not mark this producer stopped: %s", first_line(exc))

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
