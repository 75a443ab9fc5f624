"""The running part of one consumer: its loops, threads and in-flight jobs (see consumer.daemon
for the threads and how it stops, docs/consumer-threads.md for who owns what).

RunningConsumer wires objects named for their job, each given what it needs when it is built:
consumer.claiming.Claimer (claims, the jobs and their outcomes), consumer.attempt_endings
.AttemptEndings (timeouts, attempts given up, what the database is owed), consumer.heartbeat
(Heartbeat, AssignmentListener, StatusPublisher), consumer.stopping.Stopper (the drain and the
stop), and what they share (consumer.running_state: the host state as last learnt, the wakeup
and its inbox). What is in flight is consumer.in_flight's, under its own lock; the side threads
are started and watched by common.runtime.side_threads. Other threads never call into the main
loop: the stack supervisor posts its events to the wakeup's inbox, which the main loop drains.
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
from scrapefleet.common.runtime.lifecycle import Lifecycle
from scrapefleet.common.runtime.side_threads import SideThreads, ThreadDied
from scrapefleet.common.store import Registration
from scrapefleet.consumer.attempt_endings import AttemptEndings
from scrapefleet.consumer.attempt_lease import AttemptLease
from scrapefleet.consumer.browser.actions.artifact_janitor import ArtifactJanitor
from scrapefleet.consumer.browser.supervisor.stack_supervisor import StackSupervisor
from scrapefleet.consumer.claiming import Claimer, _built_in, time_limit_s
from scrapefleet.consumer.config import ConsumerConfig
from scrapefleet.consumer.heartbeat import (
    DB_RETRY_MAX_S,
    AssignmentListener,
    Heartbeat,
    StatusPublisher,
)
from scrapefleet.consumer.in_flight import InFlightAttempts
from scrapefleet.consumer.poll_schedule import PollSchedule
from scrapefleet.consumer.recorder import OutcomeRecorder
from scrapefleet.consumer.running_state import (
    HostStateMoved,
    HostStateView,
    Posted,
    StackCounterSet,
    Wakeup,
)
from scrapefleet.consumer.status_writer import StatusReporter, read_boot_id
from scrapefleet.consumer.stopping import OWN_DRAIN_REASON, Stopper

__all__ = ["OWN_DRAIN_REASON", "RunningConsumer", "_built_in", "time_limit_s"]

log = logging.getLogger(__name__)

DRAIN_CHECK_S = 0.05  # drain loop period while in-flight jobs finish
IDLE_POLLS_TO_EXIT = 2  # run(until_idle=True): idle for this many polls -> exit
EXIT_THREAD_DIED = 1  # the exit code of a consumer stopped by the death of a side thread


class RunningConsumer:
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
            running.status.publish()
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
        clock = time.monotonic
        self.config = config
        self.settings = settings
        self.engine = engine
        self.host = host = config.host
        self.lifecycle = lifecycle
        self.capacity = capacity = registration.capacity  # the host row's, not the setting's
        closed = threading.Event()  # set last: the heartbeat stops
        self.attempts = attempts = InFlightAttempts(
            registration.jobs_since_restart, registration.jobs_since_boot
        )
        lease = AttemptLease.for_rescue_after(settings.rescue_after_s, clock())
        # Without a LISTEN connection, claims follow a schedule (consumer.poll_schedule).
        polling = listen_url(settings, engine.url) is None
        self.wakeup = wakeup = Wakeup(
            PollSchedule(settings.consumer_poll_s) if polling else None, clock
        )
        host_state = HostStateView(registration.state)
        # Every side thread, watched: one that dies stops this consumer (cold), which then
        # exits non-zero.
        self.threads = threads = SideThreads(self._on_thread_death, lambda: lifecycle.stopping)
        # The kinds it can run, for the producer to place jobs only where their kind is.
        reporter = StatusReporter(settings.state_dir, host, boot_id, action_kinds())
        executor = ThreadPoolExecutor(capacity, thread_name_prefix=f"job-{host}")
        self.supervisor: StackSupervisor | None = None
        if config.owns_browser_stack:
            # Its thread posts what it changed of the consumer's; the main loop applies it.
            self.supervisor = StackSupervisor(
                settings,
                engine,
                host,
                capacity,
                on_host_state=lambda state: wakeup.post(HostStateMoved(state)),
                on_stack_counter=lambda count: wakeup.post(StackCounterSet(count)),
                threads=threads,
            )
        supervisor = self.supervisor
        self.status = status = StatusPublisher(
            config,
            capacity,
            lifecycle=lifecycle,
            attempts=attempts,
            host_state=host_state,
            supervisor=supervisor,
            reporter=reporter,
        )
        self._host_state = host_state
        # The claims and the batches of completions, each one statement, hundreds a second at
        # full load: on a connection held open rather than through the engine's pool.
        statements = StatementConnection(
            engine.url, settings, application_name=f"scrapefleet-consumer {host}"
        )
        self.endings = endings = AttemptEndings(
            engine, host, settings, attempts, lease, supervisor, status.publish, clock
        )

        def after_write() -> None:
            wakeup.outcomes_written(more_queued=attempts.more_queued, stopping=lifecycle.stopping)

        self.recorder = recorder = OutcomeRecorder(
            engine,
            host,
            settings,
            statements=statements,
            after_write=after_write,
            give_up=lambda: lifecycle.cold,
            written=endings.on_attempts_written,
        )
        self.claimer = Claimer(
            config,
            engine,
            capacity,
            attempts=attempts,
            recorder=recorder,
            endings=endings,
            supervisor=supervisor,
            statements=statements,
            executor=executor,
            host_state=host_state,
            lease=lease,
            wakeup=wakeup,
            publish=status.publish,
            after_write=after_write,
            clock=clock,
        )
        self.heartbeat = Heartbeat(
            settings,
            engine,
            host,
            attempts=attempts,
            lease=lease,
            endings=endings,
            host_state=host_state,
            wakeup=wakeup,
            reporter=reporter,
            publish=status.publish,
            closed=closed,
            clock=clock,
        )
        self.listener = None if polling else AssignmentListener(
            settings, engine, host, lifecycle, wakeup
        )  # fmt: skip
        self.stopper = Stopper(
            settings,
            engine,
            host,
            lifecycle=lifecycle,
            attempts=attempts,
            recorder=recorder,
            endings=endings,
            supervisor=supervisor,
            threads=threads,
            executor=executor,
            statements=statements,
            publish=status.publish,
            closed=closed,
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
        loops = [(self.heartbeat.loop, "heartbeat")]
        if self.listener is not None:
            loops.append((self.listener.loop, "listen"))
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
    def stuck(self) -> int:
        return self.attempts.stuck

    @property
    def state(self) -> str:
        return self.status.state

    # -- serving --------------------------------------------------------------------

    def serve(self, until_idle: bool) -> int:
        """Serve until stopped; the exit code: 0, or EXIT_THREAD_DIED when a side thread
        died (common.runtime.side_threads)."""
        try:
            if self.lifecycle.started():  # the document says so (_on_lifecycle_change)
                self._main_loop(until_idle)
            self.lifecycle.request_stop("idle" if until_idle else "stop requested")
            self.stopper.hand_back_queued()
            if not self.lifecycle.drain_until(self._drained, DRAIN_CHECK_S):
                self.stopper.let_go_of_in_flight()
        finally:
            self.stopper.finish()
        return EXIT_THREAD_DIED if self.threads.died is not None else 0

    def _drained(self) -> bool:
        self._apply_posted()  # the stack's thread still runs while jobs drain
        return self.stopper.drained()

    def _on_thread_death(self, died: ThreadDied) -> None:
        """A side thread died (common.runtime.side_threads logged it): a consumer without its
        heartbeat, recorder or stack thread cannot finish a drain, so it stops cold."""
        self.lifecycle.request_cold_stop(f"thread {died.name} died: {died.error}")

    def _main_loop(self, until_idle: bool) -> None:
        poll_s = self.settings.consumer_poll_s
        failures = 0
        idle_since: float | None = None
        claimer, endings = self.claimer, self.endings
        while self.lifecycle.is_running:
            self.wakeup.clear()
            self._apply_posted()
            endings.fence_if_lapsed()
            endings.expire_timed_out(self.recorder.submit)
            wait_s = poll_s
            try:
                if not self.wakeup.polling:
                    claimed = claimer.claim()
                else:
                    claimed, wait_s = claimer.claim_on_schedule()
                claimer.maintain()
                self._apply_posted()  # what the stack's thread did in that step
                self.status.publish_if_changed()
                failures = 0
                if until_idle:
                    if claimed or not claimer.looks_idle():
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
            self.wakeup.wait(min(wait_s, endings.until_next_timeout()))

    def _on_lifecycle_change(self) -> None:
        """In the thread that moved the lifecycle: the loops look again, and the producer reads
        the change (draining: no more work here) without waiting for a heartbeat."""
        self.wakeup.wake()
        self.status.publish()

    def _apply_posted(self) -> None:
        """The main thread: what other threads posted for it, in order."""
        for event in self.wakeup.take_posted():
            self._apply(event)

    def _apply(self, event: Posted) -> None:
        if isinstance(event, HostStateMoved):
            # The supervisor changed the host's state in the database (restarting,
            # disabled...): nothing more is claimed until it is active again.
            self._host_state.replace(event.state)
            self.status.publish()
            self.wakeup.claim_soon()
        else:
            self.attempts.set_since_restart(event.count)

    def _log_loop_error(self, exc: Exception, retry_in_s: float) -> None:
        if isinstance(exc, ScrapefleetError):  # database away, host row removed: one line
            log.warning("%s; retrying in %.1f s", exc, retry_in_s)
        else:
            log.exception("consumer loop error; retrying in %.1f s", retry_in_s)
