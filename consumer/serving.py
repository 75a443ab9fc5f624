"""The running part of one consumer: its loops, threads and in-flight jobs (see consumer.daemon
for the threads and how it stops, docs/consumer-threads.md for who owns what).

RunningConsumer is put together from parts named for their job: consumer.claiming (claims, the
jobs and their outcomes), consumer.attempt_endings (timeouts, attempts given up, what the
database is owed), consumer.heartbeat (heartbeat, LISTEN, status document), consumer.stopping
(the drain and the stop). What is in flight is consumer.in_flight's, under its own lock; the
side threads are started and watched by common.runtime.side_threads.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.actions.registry import action_kinds, load_user_actions
from scrapefleet.common.db.engines import transaction
from scrapefleet.common.db.pooler import listen_url
from scrapefleet.common.db.statement_connection import StatementConnection
from scrapefleet.common.errors import ScrapefleetError
from scrapefleet.common.runtime import metrics
from scrapefleet.common.runtime.lifecycle import DaemonState, Lifecycle
from scrapefleet.common.runtime.side_threads import SideThreads, ThreadDied
from scrapefleet.common.status.document import HOST_STATES
from scrapefleet.common.store import Registration
from scrapefleet.common.store.statuses import HostState
from scrapefleet.consumer.attempt_endings import AttemptEndings
from scrapefleet.consumer.attempt_lease import AttemptLease
from scrapefleet.consumer.browser.artifact_janitor import ArtifactJanitor
from scrapefleet.consumer.browser.block_detection import BlockRules
from scrapefleet.consumer.browser.stack_supervisor import StackSupervisor
from scrapefleet.consumer.claiming import (
    NOT_CLAIMING_STATES,
    Claiming,
    _built_in,
    time_limit_s,
)
from scrapefleet.consumer.config import ConsumerConfig
from scrapefleet.consumer.heartbeat import DB_RETRY_MAX_S, Heartbeat
from scrapefleet.consumer.in_flight import InFlightAttempts
from scrapefleet.consumer.poll_schedule import PollSchedule
from scrapefleet.consumer.recorder import OutcomeRecorder
from scrapefleet.consumer.status_writer import StatusReporter, read_boot_id
from scrapefleet.consumer.stopping import OWN_DRAIN_REASON, Stopping

__all__ = ["OWN_DRAIN_REASON", "RunningConsumer", "_built_in", "time_limit_s"]

log = logging.getLogger(__name__)

DRAIN_CHECK_S = 0.05  # drain loop period while in-flight jobs finish
IDLE_POLLS_TO_EXIT = 2  # run(until_idle=True): idle for this many polls -> exit
EXIT_THREAD_DIED = 1  # the exit code of a consumer stopped by the death of a side thread


class RunningConsumer(Claiming, AttemptEndings, Heartbeat, Stopping):
    """The running part of one consumer, built by ``open`` once its host is registered."""

    @classmethod
    def open(cls, config: ConsumerConfig, engine: Engine, lifecycle: Lifecycle) -> RunningConsumer:
        load_user_actions(config.settings.actions)
        boot_id = read_boot_id(config.settings.boot_id_file)
        with transaction(engine) as conn:
            store.reactivate_after_own_drain(conn, config.host, OWN_DRAIN_REASON)
            registration = store.register_consumer(
                conn, config.host, config.settings.capacity, boot_id
            )
            recovered = store.recover_host_jobs(conn, config.host)
            # Whatever an earlier process of this host was still running has ended with it.
            store.attempts_ended(conn, config.host, None)
            running = cls(config, engine, lifecycle, registration, boot_id)
            # The host turns active when this transaction commits: its status document is
            # fresh before that, so the producer never probes an active host and finds the
            # document of its last run (a stale one is a failed probe: a false offline).
            running._publish_status()
        running._start_threads()
        log.info(
            "consumer %s started: capacity %d, state %s, %d interrupted job(s) recovered",
            config.host,
            running.capacity,
            registration.state,
            len(recovered),
        )
        return running

    def __init__(
        self,
        config: ConsumerConfig,
        engine: Engine,
        lifecycle: Lifecycle,
        registration: Registration,
        boot_id: str,
    ) -> None:
        settings = config.settings
        self.config = config
        self.settings = settings
        self._block_rules = BlockRules.from_settings(settings)  # compiled once, not per job
        self.engine = engine
        self.host = config.host
        self.lifecycle = lifecycle
        self.capacity = registration.capacity  # the host row's, not the setting's
        self._wake = threading.Event()
        self._closed = threading.Event()  # set last: the heartbeat stops
        self.attempts = InFlightAttempts(
            registration.jobs_since_restart, registration.jobs_since_boot
        )
        self._lease = AttemptLease.for_rescue_after(settings.rescue_after_s, time.monotonic())
        # Without a LISTEN connection, claims follow a schedule (consumer.poll_schedule).
        polling = listen_url(settings, engine.url) is None
        self._poll = PollSchedule(settings.consumer_poll_s) if polling else None
        self._poll_lock = threading.Lock()
        self._db_state = registration.state
        self._db_state_lock = threading.Lock()
        self._published = None
        self._slow_light_kinds: set[str] = set()
        # Every side thread, watched: one that dies stops this consumer (cold), which then
        # exits non-zero.
        self.threads = SideThreads(self._on_thread_death, lambda: lifecycle.stopping)
        # The kinds it can run, for the producer to place jobs only where their kind is.
        self.reporter = StatusReporter(settings.state_dir, self.host, boot_id, action_kinds())
        self.executor = ThreadPoolExecutor(self.capacity, thread_name_prefix=f"job-{self.host}")
        self.supervisor: StackSupervisor | None = None
        if config.owns_browser_stack:
            self.supervisor = StackSupervisor(
                settings,
                engine,
                self.host,
                self.capacity,
                on_host_state=self._set_own_state,
                on_stack_counter=self.attempts.set_since_restart,
                threads=self.threads,
            )
        # The claims and the batches of completions, each one statement, hundreds a second at
        # full load: on a connection held open rather than through the engine's pool.
        self._statements = StatementConnection(
            engine.url, settings, application_name=f"scrapefleet-consumer {self.host}"
        )
        self.recorder = OutcomeRecorder(
            engine,
            self.host,
            settings,
            statements=self._statements,
            after_write=self._on_outcomes_written,
            give_up=lambda: lifecycle.cold,
            written=self._on_attempts_written,
        )
        self.janitor = ArtifactJanitor(settings, lifecycle.stop_event)
        lifecycle.on_change(self._on_lifecycle_change)

    def _start_threads(self) -> None:
        if self.supervisor is not None:
            self.supervisor.clean_leftovers()
            metrics.track_browser_memory(self.host, self.supervisor.memory_pss_bytes)
            supervisor = self.supervisor
            metrics.track_browser_limit(self.host, lambda: supervisor.browser_limit()[0])
            supervisor.start()
        self.janitor.start(self.threads)
        self.recorder.start(self.threads)
        loops = [(self._heartbeat_loop, "heartbeat")]
        if self._poll is None:
            loops.append((self._listen_loop, "listen"))
        else:  # polling by choice, or a transaction pooler (it never delivers a NOTIFY)
            log.info(
                "no LISTEN connection (consumer_wakeup=%s, database_pooler=%s): claims every %g s",
                self.settings.consumer_wakeup,
                self.settings.database_pooler,
                self.settings.consumer_poll_s,
            )
        for target, name in loops:
            self.threads.start(f"{name}-{self.host}", target)

    # -- what it reports ------------------------------------------------------------

    @property
    def running(self) -> int:
        return self.attempts.running

    @property
    def state(self) -> str:
        if self.lifecycle.state is DaemonState.STOPPED:
            return HostState.OFFLINE
        if self.lifecycle.stopping:
            return HostState.DRAINING
        db_state = self._db_state
        # 'offline' in the database is the producer's verdict on reachability; this consumer is
        # alive and serving, which is what its own document says.
        if db_state == HostState.OFFLINE or db_state not in HOST_STATES:
            return HostState.ACTIVE
        if self.supervisor is not None and db_state not in NOT_CLAIMING_STATES:
            return self.supervisor.maintenance_state or db_state
        return db_state

    # -- serving --------------------------------------------------------------------

    def serve(self, until_idle: bool) -> int:
        """Serve until stopped; the exit code: 0, or EXIT_THREAD_DIED when a side thread
        died (common.runtime.side_threads)."""
        try:
            if self.lifecycle.started():  # the document says so (_on_lifecycle_change)
                self._main_loop(until_idle)
            self.lifecycle.request_stop("idle" if until_idle else "stop requested")
            self._hand_back_queued()
            if not self.lifecycle.drain_until(self._drained, DRAIN_CHECK_S):
                self._let_go_of_in_flight()
        finally:
            self._finish()
        return EXIT_THREAD_DIED if self.threads.died is not None else 0

    def _on_thread_death(self, died: ThreadDied) -> None:
        """A side thread died (common.runtime.side_threads logged it): a consumer without its
        heartbeat, recorder or stack thread cannot finish a drain, so it stops cold."""
        self.lifecycle.request_cold_stop(f"thread {died.name} died: {died.error}")

    def _main_loop(self, until_idle: bool) -> None:
        poll_s = self.settings.consumer_poll_s
        failures = 0
        idle_since: float | None = None
        while self.lifecycle.is_running:
            self._wake.clear()
            self._fence_if_lapsed()
            self._expire_timed_out()
            wait_s = poll_s
            try:
                if self._poll is None:
                    claimed = self._claim()
                else:
                    claimed, wait_s = self._claim_on_schedule()
                self._maintain()
                self._publish_if_changed()
                failures = 0
                if until_idle:
                    if claimed or not self._looks_idle():
                        idle_since = None
                    elif idle_since is None:
                        idle_since = time.monotonic()
                    elif time.monotonic() - idle_since >= IDLE_POLLS_TO_EXIT * poll_s:
                        return
            except Exception as exc:
                failures += 1
                wait_s = min(poll_s * 2**failures, DB_RETRY_MAX_S)
                self._log_loop_error(exc, wait_s)
            if self.supervisor is not None:
                wait_s = min(wait_s, self.supervisor.next_check_s())
            self._wake.wait(min(wait_s, self._until_next_timeout()))

    def _on_lifecycle_change(self) -> None:
        """In the thread that moved the lifecycle: the loops look again, and the producer reads
        the change (draining: no more work here) without waiting for a heartbeat."""
        self._wake.set()
        self._publish_status()

    def _set_own_state(self, state: str) -> None:
        """The supervisor changed the host's state in the database (restarting, disabled...)."""
        with self._db_state_lock:
            self._db_state = state
        self._publish_status()
        self._claim_soon()

    def _log_loop_error(self, exc: Exception, retry_in_s: float) -> None:
        if isinstance(exc, ScrapefleetError):  # database away, host row removed: one line
            log.warning("%s; retrying in %.1f s", exc, retry_in_s)
        else:
            log.exception("consumer loop error; retrying in %.1f s", retry_in_s)
